"""Bootstrap intervals over questions: they hold the mean, shrink as questions are added, cover the true mean at
about their confidence, are reproducible from the seed, and a paired difference sees what two unpaired intervals
cannot."""

from __future__ import annotations

import random

import pytest

from musique_models.evaluation.evaluator import dire_report, evaluate_predictions
from musique_models.evaluation.gold import GoldInstance
from musique_models.evaluation.intervals import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    Interval,
    bootstrap_interval,
    metric_intervals,
    metric_intervals_over_seeds,
    paired_difference,
    paired_metric_tests,
)
from musique_models.evaluation.predictions import Prediction, ProbePrediction


def test_the_interval_holds_the_mean_and_narrows_with_more_questions() -> None:
    draw = random.Random(1)
    few = [draw.random() for _ in range(25)]
    many = few * 16
    small, large = bootstrap_interval(few), bootstrap_interval(many)
    assert small.low < small.mean < small.high and small.mean == pytest.approx(sum(few) / 25)
    assert large.high - large.low < (small.high - small.low) / 2.5  # ~1/sqrt(16) as wide
    assert bootstrap_interval(few, seed=3) == bootstrap_interval(few, seed=3)
    assert bootstrap_interval([0.5] * 10).text() == "50.0 [50.0, 50.0]"


def test_95_percent_intervals_cover_the_true_mean_about_95_times_in_100() -> None:
    draw = random.Random(7)
    covered = 0
    for trial in range(200):
        scores = [float(draw.random() < 0.3) for _ in range(100)]  # an F1 of 0 or 1, true mean 0.3
        interval = bootstrap_interval(scores, resamples=400, seed=trial)
        covered += interval.low <= 0.3 <= interval.high
    assert 0.88 <= covered / 200 <= 0.99


def test_a_paired_difference_finds_a_small_consistent_gain_that_unpaired_intervals_overlap() -> None:
    draw = random.Random(2)
    base = [draw.random() for _ in range(100)]
    better = [min(1.0, score + 0.03) for score in base]
    alone = bootstrap_interval(base), bootstrap_interval(better)
    assert alone[0].high > alone[1].low  # the two intervals overlap
    gain = paired_difference(better, base)
    assert gain.excludes_zero() and 0.02 < gain.mean < 0.031
    assert not paired_difference(base, base).excludes_zero()
    with pytest.raises(ValueError, match="same questions"):
        paired_difference(base, base[:-1])


# Per-question rows as `metrics.per_question.jsonl` holds them, scored by the evaluator from hand-made golds.


def _gold(row: int, question_id: str, answerable: bool, hops: int = 2) -> GoldInstance:
    return GoldInstance(row, question_id, ("red apple",), (0, 1), range(6), answerable, hops)


def _rows(answers: list[str], paired: bool = True, answerability: list[bool] | None = None) -> list[dict]:
    """MuSiQue-Full rows: one twin pair per answer (the answerable row first), hops 2, 3, 4 in turn; the predicted
    answerability of each row from `answerability` (default: right for every row)."""
    golds, predictions = [], []
    for index, answer in enumerate(answers):
        for answerable in (True, False):
            golds.append(_gold(len(golds), f"q{index}", answerable, hops=2 + index % 3))
            judged = answerability[len(predictions)] if answerability else answerable
            predictions.append(Prediction(f"q{index}", answer, [0, index % 6], judged))
    return evaluate_predictions(golds, predictions, paired=paired).per_question


def _answerable_rows(scores: list[float]) -> list[dict]:
    """Rows of answerable questions whose answer F1 (and EM) are `scores` (0 or 1)."""
    golds = [_gold(index, f"q{index}", True) for index in range(len(scores))]
    predictions = [Prediction(f"q{i}", "red apple" if s else "pear", [0, 1], True) for i, s in enumerate(scores)]
    return evaluate_predictions(golds, predictions).per_question


def test_a_hand_computation_two_questions_scoring_0_and_1() -> None:
    # the resampled mean is 0, 0.5 or 1 with probability 1/4, 1/2, 1/4: the 95% interval is [0, 1]; the 20th
    # percentile (a 60% interval) is still 0 and the 30th (a 40% interval) is 0.5
    rows = _answerable_rows([0.0, 1.0])
    assert metric_intervals(rows)["answer_f1"] == Interval(0.5, 0.0, 1.0, 2, 0.95)
    assert metric_intervals(rows, confidence=0.6)["answer_f1"] == Interval(0.5, 0.0, 1.0, 2, 0.6)
    assert metric_intervals(rows, confidence=0.4)["answer_f1"] == Interval(0.5, 0.5, 0.5, 2, 0.4)
    # a constant column has no width; support F1 is 1 on every question here
    assert metric_intervals(rows)["support_f1"] == Interval(1.0, 1.0, 1.0, 2, 0.95)
    assert (BOOTSTRAP_SEED, BOOTSTRAP_RESAMPLES) == (0, 2000)


def test_a_known_case_a_proportion_of_one_half_over_100_questions() -> None:
    # the standard error of a proportion p over n questions is sqrt(p (1 - p) / n) = 0.05: 0.5 ± 1.96 * 0.05
    interval = metric_intervals(_answerable_rows([1.0] * 50 + [0.0] * 50))["answer_em"]
    assert interval.mean == 0.5 and interval.count == 100
    assert interval.low == pytest.approx(0.5 - 1.96 * 0.05, abs=0.015)
    assert interval.high == pytest.approx(0.5 + 1.96 * 0.05, abs=0.015)
    assert metric_intervals(_answerable_rows([1.0] * 50 + [0.0] * 50), seed=1) != interval  # the seed is used


def test_musique_full_resamples_twin_pairs_and_keeps_aggregates_point_estimates() -> None:
    answers = ["red apple", "apple", "pear", "red apple"] * 15
    # pairs judged right on both rows or wrong on both: row resampling would halve the variance of the accuracy
    answerability = [flag for index in range(60) for flag in ((True, False) if index % 2 else (False, True))]
    rows = _rows(answers, answerability=answerability)
    golds = [_gold(row["row"], row["id"], row["answerable"], row["num_hops"]) for row in rows]
    predictions = [
        Prediction(r["id"], r["predicted_answer"], r["predicted_support_idxs"], r["predicted_answerable"]) for r in rows
    ]
    metrics = evaluate_predictions(golds, predictions).metrics
    intervals = metric_intervals(rows)
    expected = [name for name in metrics if not name.startswith("count")]
    assert list(intervals) == expected  # every metric, in aggregate's order, and nothing else
    assert all(intervals[name].mean == metrics[name] for name in expected)  # exactly, not approximately
    assert {intervals[name].count for name in expected if "hop" not in name} == {60}  # 60 pairs, not 120 rows
    assert intervals["answer_f1_2hop"].count == 20
    # the unit is the pair: a paired metric's interval is the bootstrap of its per-pair scores, drawn as they are
    pairs = [row for row in rows if row["answerable"]]
    both_right = [float(index % 2 == 1) for index in range(60)]
    per_pair = [right * row["answer_f1"] for right, row in zip(both_right, pairs, strict=True)]
    assert intervals["group_answer_sufficiency_f1"] == bootstrap_interval(per_pair)
    accuracy = intervals["sufficiency_accuracy"]
    assert accuracy.mean == 0.5 and accuracy.high - accuracy.low > 0.17  # pairs: ±1.96 sqrt(.25 / 60) = ±0.127
    # answerability F1 is no mean of row scores: recomputed from each resample's pairs, it still holds its point
    assert intervals["sufficiency_f1"].low < metrics["sufficiency_f1"] < intervals["sufficiency_f1"].high


def test_unpaired_rows_with_unanswerable_ones_resample_rows() -> None:
    rows = _rows(["red apple", "pear", "apple"] * 10, paired=False, answerability=[True] * 60)
    intervals = metric_intervals(rows)
    assert "group_answer_sufficiency_f1" not in intervals
    accuracy = intervals["sufficiency_accuracy"]  # every row judged answerable: right on half of the 60 rows
    assert (accuracy.mean, accuracy.count) == (0.5, 60)
    assert accuracy.high - accuracy.low == pytest.approx(2 * 1.96 * (0.25 / 60) ** 0.5, abs=0.03)
    assert intervals["sufficiency_f1"].count == 60 and intervals["answer_f1"].count == 30
    assert intervals["avg_answer_sufficiency_f1"].mean == pytest.approx((intervals["answer_f1"].mean + 2 / 3) / 2)
    assert list(metric_intervals(rows, metrics=["sufficiency_f1", "answer_f1", "unknown"])) == [
        "sufficiency_f1",
        "answer_f1",
    ]


def test_dire_resamples_the_questions_with_their_probes() -> None:
    golds = [_gold(index, f"q{index}", True, hops=2 + index % 2) for index in range(6)]
    golds.append(GoldInstance(6, "q6", ("red apple",), (0, 1), range(3), True, 2))  # 3 paragraphs: not in DiRe
    predictions = [Prediction(gold.id, "red apple", [0, 1], True) for gold in golds]
    # the probes of q0-q2 find the answer, q3-q5's do not; each probe names one supporting paragraph
    probes = [
        (2 * index + probe, ProbePrediction(f"q{index}", probe, "red apple" if index < 3 else "pear", 0.5, [probe]))
        for index in range(6)
        for probe in (0, 1)
    ]
    report = dire_report(golds, predictions, probes, "probes.jsonl", min_paragraphs=5)
    intervals = metric_intervals(report.per_question)
    for name in ("dire_answer_f1", "dire_support_f1", "dire_joint_f1", "dire_answer_f1_2hop", "dire_joint_f1_3hop"):
        assert intervals[name].mean == report.metrics[name], name
    assert intervals["dire_answer_f1"].mean == 0.5 and intervals["dire_answer_f1"].count == 6
    assert intervals["dire_answer_f1_2hop"].count == 3 and intervals["answer_f1"].count == 7
    dire_scores = [row["dire_answer_f1"] for row in report.per_question if "dire_answer_f1" in row]
    assert intervals["dire_answer_f1"] == bootstrap_interval(dire_scores)


def test_identical_systems_differ_by_zero_with_p_one() -> None:
    rows = _rows(["red apple", "apple", "pear"] * 10, answerability=[True, False, True, True] * 15)
    tests = paired_metric_tests(rows, rows)
    assert set(tests) == set(metric_intervals(rows))
    for name, test in tests.items():
        assert test.difference == Interval(0.0, 0.0, 0.0, test.count, 0.95) and test.p_value == 1.0, name


def test_a_system_better_on_every_question_is_found_so() -> None:
    better, worse = _answerable_rows([1.0] * 30), _answerable_rows([0.0] * 30)
    test = paired_metric_tests(better, list(reversed(worse)))["answer_f1"]  # aligned by id, not by position
    assert test.difference == Interval(1.0, 1.0, 1.0, 30, 0.95)
    assert test.p_value == 2 / (BOOTSTRAP_RESAMPLES + 1) and test.count == 30
    draw = random.Random(3)
    base = [float(draw.random() < 0.5) for _ in range(200)]
    gain = [1.0 if score == 0 and index % 4 == 0 else score for index, score in enumerate(base)]  # +~12 points
    found = paired_metric_tests(_answerable_rows(gain), _answerable_rows(base))["answer_f1"]
    assert found.difference.excludes_zero() and found.p_value < 0.01
    unchanged = paired_metric_tests(_answerable_rows(base), _answerable_rows(base[1:] + base[:1]))["answer_f1"]
    assert not unchanged.difference.excludes_zero() and unchanged.p_value > 0.05  # a shuffle: no difference


def test_rows_of_other_questions_are_refused_naming_the_ids() -> None:
    rows = _answerable_rows([1.0, 0.0, 1.0])
    other = [dict(row, id="x9") if row["id"] == "q1" else row for row in rows]
    with pytest.raises(ValueError, match=r"only in the first: 'q1'; only in the other: 'x9'"):
        paired_metric_tests(rows, other)
    with pytest.raises(ValueError, match="not of the same questions"):
        paired_metric_tests(rows, rows[:2])
    full = _rows(["red apple", "pear"])
    swapped = [dict(row, answerable=not row["answerable"]) if row["id"] == "q1" else row for row in full]
    with pytest.raises(ValueError, match="'q1'"):  # MuSiQue-Full rows align by id and answerability
        paired_metric_tests(full, swapped[:3])


def test_seeds_are_averaged_per_question_and_resampled_together() -> None:
    first, second = [1.0, 0.0, 1.0, 1.0, 0.0] * 4, [1.0, 1.0, 0.0, 1.0, 0.0] * 4
    averaged = metric_intervals_over_seeds([_answerable_rows(first), _answerable_rows(second)])["answer_f1"]
    by_hand = bootstrap_interval([(a + b) / 2 for a, b in zip(first, second, strict=True)])
    assert averaged.mean == pytest.approx(0.6) and averaged.count == 20
    assert (averaged.low, averaged.high) == pytest.approx((by_hand.low, by_hand.high))
