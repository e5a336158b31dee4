"""Golden tests: every number below is computed by hand from the official definitions."""

from __future__ import annotations

import pytest

from musique_models.evaluation.evaluator import degenerate_predictions
from musique_models.evaluation.gold import GoldInstance
from musique_models.evaluation.metrics import (
    InstanceResult,
    Scores,
    aggregate,
    aggregate_dire,
    answer_scores,
    dire_answer_scores,
    dire_question_result,
    normalize_answer,
    support_scores,
)
from musique_models.evaluation.predictions import Prediction


def test_normalisation_matches_squad() -> None:
    assert normalize_answer("The  Cat's, a dog!") == "cats dog"
    assert normalize_answer("An apple-pie.") == "applepie"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert normalize_answer("  A  ") == ""


def test_answer_f1_partial_overlap() -> None:
    scores = answer_scores("the cat sat", ["cat sat on mat"])  # common 2, pred 2 tokens, gold 4
    assert scores == Scores(precision=1.0, recall=0.5, f1=pytest.approx(2 / 3), em=0.0)


def test_answer_max_over_aliases_and_repeated_tokens() -> None:
    assert answer_scores("NYC", ["New York City", "nyc."]).f1 == 1.0
    assert answer_scores("NYC", ["New York City", "nyc."]).em == 1.0
    # Counter intersection: pred "a b b" -> [b, b] after dropping 'a'; gold "b c" -> common 1
    scores = answer_scores("a b b", ["b c"])
    assert (scores.precision, scores.recall, scores.f1) == (0.5, 0.5, 0.5)


@pytest.mark.parametrize(
    ("prediction", "gold", "f1", "em"),
    [
        ("", "the", 1.0, 1.0),  # both normalise to no tokens
        ("a", "cat", 0.0, 0.0),  # prediction empty after normalisation, gold not
        ("cat", "", 0.0, 0.0),
        ("", "", 1.0, 1.0),
    ],
)
def test_answer_empty_cases(prediction: str, gold: str, f1: float, em: float) -> None:
    scores = answer_scores(prediction, [gold])
    assert (scores.f1, scores.em) == (f1, em)


def test_support_scores() -> None:
    assert support_scores([1, 2, 3], [2, 3]) == Scores(pytest.approx(2 / 3), 1.0, pytest.approx(0.8), 0.0)
    assert support_scores([3, 2, 2], [2, 3]) == Scores(1.0, 1.0, 1.0, 1.0)
    assert support_scores([], []) == Scores(1.0, 1.0, 1.0, 1.0)
    assert support_scores([], [1]) == Scores(0.0, 0.0, 0.0, 0.0)
    assert support_scores([4], [1]) == Scores(0.0, 0.0, 0.0, 0.0)


def _result(
    row: int,
    question_id: str,
    hops: int,
    gold: bool,
    predicted: bool,
    answer_f1: float,
    support_f1: float,
    answer_em: float = 0.0,
    support_em: float = 0.0,
) -> InstanceResult:
    return InstanceResult(
        row,
        question_id,
        hops,
        gold,
        predicted,
        Scores(0, 0, answer_f1, answer_em),
        Scores(0, 0, support_f1, support_em),
    )


def test_answerable_only_dataset_means_and_per_hop() -> None:
    results = [
        _result(0, "a", 2, True, True, 1.0, 0.5, 1.0),
        _result(1, "b", 3, True, False, 0.5, 1.0, 0.0, 1.0),
        _result(2, "c", 4, True, True, 0.0, 0.0),
    ]
    metrics = aggregate(results)
    assert metrics["answer_f1"] == pytest.approx(0.5) and metrics["answer_em"] == pytest.approx(1 / 3)
    assert metrics["support_f1"] == pytest.approx(0.5) and metrics["support_em"] == pytest.approx(1 / 3)
    assert metrics["answer_f1_2hop"] == 1.0 and metrics["answer_f1_3hop"] == 0.5 and metrics["answer_f1_4hop"] == 0.0
    assert "group_answer_sufficiency_f1" not in metrics and "sufficiency_accuracy" not in metrics


def test_paired_full_metrics() -> None:
    results = [
        _result(0, "A", 2, True, True, 0.5, 1.0, 0.0, 1.0),  # answerable, predicted answerable: right
        _result(1, "A", 2, False, False, 0.9, 0.3),  # unanswerable, predicted unanswerable: right
        _result(2, "B", 3, True, True, 1.0, 0.5, 1.0, 0.0),  # right
        _result(3, "B", 3, False, True, 0.0, 0.0),  # unanswerable predicted answerable: wrong
    ]
    metrics = aggregate(results)
    assert metrics["answer_f1"] == 0.75  # answerable rows only: (0.5 + 1.0) / 2
    assert metrics["support_f1"] == 0.75
    assert metrics["group_answer_sufficiency_f1"] == 0.25  # (0.5 + 0) / 2
    assert metrics["group_answer_sufficiency_em"] == 0.0
    assert metrics["group_support_sufficiency_f1"] == 0.5  # (1.0 + 0) / 2
    assert metrics["group_support_sufficiency_em"] == 0.5
    assert metrics["sufficiency_accuracy"] == 0.75
    assert metrics["sufficiency_f1"] == pytest.approx(0.8)  # tp 2, predicted positive 3, gold positive 2
    assert metrics["group_answer_sufficiency_f1_2hop"] == 0.5 and metrics["group_answer_sufficiency_f1_3hop"] == 0.0


def test_paired_metrics_need_two_rows_per_id() -> None:
    with pytest.raises(ValueError, match="one answerable and one unanswerable"):
        aggregate([_result(0, "A", 2, True, True, 1, 1), _result(1, "B", 2, False, False, 0, 0)])


def test_unpaired_unanswerable_rows_get_answerability_and_the_official_average_not_paired_metrics() -> None:
    # single-hop questions: unanswerable rows without twins (the ids need not pair)
    results = [
        _result(0, "A/1", 1, True, True, 0.5, 1.0),
        _result(1, "A/2", 1, False, False, 0.0, 0.0),
        _result(2, "B/1", 1, True, False, 1.0, 1.0),
    ]
    metrics = aggregate(results, paired=False)
    assert metrics["answer_f1"] == 0.75 and metrics["sufficiency_accuracy"] == pytest.approx(2 / 3)
    assert metrics["sufficiency_f1"] == pytest.approx(2 / 3)  # tp 1, predicted positive 1, gold positive 2
    assert metrics["avg_answer_sufficiency_f1"] == pytest.approx((0.75 + 2 / 3) / 2)
    assert not any(name.startswith("group_") for name in metrics)
    with pytest.raises(ValueError, match="one answerable and one unanswerable"):
        aggregate(results)  # paired (the default) refuses them


def test_dire_probe_choice_min_with_original_and_joint() -> None:
    original_answer, original_support = answer_scores("Paris", ["Paris"]), support_scores([3, 7], [3, 7])
    # probe 0 is more confident and wrong: the probe answer is its answer
    result = dire_question_result(
        "q",
        2,
        [3, 7],
        original_answer,
        original_support,
        probe_answers=[answer_scores("London", ["Paris"]), answer_scores("Paris", ["Paris"])],
        probe_confidences=[0.9, 0.2],
        probe_supports=[[3], [7]],
    )
    assert result.answer.f1 == 0.0 and result.support == Scores(1.0, 1.0, 1.0, 1.0)
    assert result.joint.f1 == 0.0 and result.joint.em == 0.0
    # a tie takes the first listed (the official scorer takes the second only when it is strictly more confident)
    tie = dire_question_result(
        "q",
        2,
        [3, 7],
        original_answer,
        original_support,
        probe_answers=[answer_scores("Paris", ["Paris"]), answer_scores("London", ["Paris"])],
        probe_confidences=[0.5, 0.5],
        probe_supports=[[3], [1]],
    )
    assert tie.answer.f1 == 1.0
    assert (tie.support.precision, tie.support.recall, tie.support.f1) == (0.5, 0.5, 0.5)  # union {1, 3} vs {3, 7}
    assert tie.joint.f1 == 0.5  # precision 1 * 0.5, recall 1 * 0.5
    # the original prediction caps the probe score
    capped = dire_question_result(
        "q",
        2,
        [3, 7],
        answer_scores("Paris Texas", ["Paris"]),
        original_support,
        probe_answers=[answer_scores("Paris", ["Paris"])] * 2,
        probe_confidences=[1, 0],
        probe_supports=[[3], [7]],
    )
    assert capped.answer.f1 == pytest.approx(2 / 3) and capped.answer.precision == 0.5 and capped.answer.recall == 1.0
    # joint: precision 0.5 * 1, recall 1 * 1 -> f1 2/3
    assert capped.joint.f1 == pytest.approx(2 / 3)
    metrics = aggregate_dire([result, tie, capped])
    assert metrics["dire_answer_f1"] == pytest.approx((0 + 1 + 2 / 3) / 3)
    assert metrics["dire_support_f1"] == pytest.approx((1 + 0.5 + 1) / 3)
    assert metrics["dire_joint_f1"] == pytest.approx((0 + 0.5 + 2 / 3) / 3)
    assert metrics["dire_count_2hop"] == 3.0


def test_dire_confidence_tie_takes_the_first_listed_probe() -> None:
    def probe_answer_f1(answers: list[str], confidences: list[float]) -> float:
        return dire_question_result(
            "q",
            2,
            [3, 7],
            answer_scores("Paris", ["Paris"]),
            support_scores([3, 7], [3, 7]),
            probe_answers=[answer_scores(answer, ["Paris"]) for answer in answers],
            probe_confidences=confidences,
            probe_supports=[[3], [7]],
        ).answer.f1

    # a tie: the first listed, whichever it is
    assert probe_answer_f1(["Paris", "London"], [0.5, 0.5]) == 1.0
    assert probe_answer_f1(["London", "Paris"], [0.5, 0.5]) == 0.0
    # otherwise the more confident
    assert probe_answer_f1(["London", "Paris"], [0.5, 0.6]) == 1.0
    assert probe_answer_f1(["London", "Paris"], [0.6, 0.5]) == 0.0


def test_hotpotqa_answer_rules_give_yes_no_no_partial_credit() -> None:
    # standard (SQuAD / official MuSiQue evaluator): common 1 token, precision 1/3, recall 1 -> F1 0.5
    assert answer_scores("yes it is", ["yes"]) == Scores(precision=pytest.approx(1 / 3), recall=1.0, f1=0.5, em=0.0)
    # HotpotQA's f1_score: the gold is "yes" and the prediction differs -> 0, 0, 0
    assert answer_scores("yes it is", ["yes"], hotpotqa_rules=True) == Scores(0.0, 0.0, 0.0, 0.0)
    assert answer_scores("no", ["no way"], hotpotqa_rules=True) == Scores(0.0, 0.0, 0.0, 0.0)  # prediction "no"
    assert answer_scores("noanswer", ["noanswer given"], hotpotqa_rules=True).f1 == 0.0
    assert answer_scores("No.", ["no"], hotpotqa_rules=True) == Scores(1.0, 1.0, 1.0, 1.0)  # equal once normalised
    # any other answer: the standard scores
    assert answer_scores("the cat sat", ["cat sat on mat"], hotpotqa_rules=True) == answer_scores(
        "the cat sat", ["cat sat on mat"]
    )
    # no shared token: 0 under HotpotQA's rules even for two empty answers (EM stays 1)
    assert answer_scores("the", ["a"]) == Scores(1.0, 1.0, 1.0, 1.0)
    assert answer_scores("the", ["a"], hotpotqa_rules=True) == Scores(0.0, 0.0, 0.0, 1.0)
    # DiRe uses them for the HotpotQA format only
    assert dire_answer_scores("yes it is", ["yes"], "hotpotqa").f1 == 0.0
    assert dire_answer_scores("yes it is", ["yes"], "musique").f1 == 0.5
    assert dire_answer_scores("yes it is", ["yes"], "2wiki").f1 == 0.5
    assert dire_answer_scores("yes it is", ["yes"], None).f1 == 0.5


def test_dire_caps_with_the_hotpotqa_answer_rules_on_the_original_too() -> None:
    # gold "yes": the probe says "yes" (1.0), the original "yes it is" (HotpotQA: 0, standard: 0.5); the cap follows
    def dire_answer_f1(data_format: str) -> float:
        return dire_question_result(
            "q",
            2,
            [3, 7],
            dire_answer_scores("yes it is", ["yes"], data_format),
            support_scores([3, 7], [3, 7]),
            probe_answers=[dire_answer_scores("yes", ["yes"], data_format)] * 2,
            probe_confidences=[0.5, 0.5],
            probe_supports=[[3], [7]],
        ).answer.f1

    assert dire_answer_f1("hotpotqa") == 0.0
    assert dire_answer_f1("musique") == 0.5


def _gold(question_id: str, answerable: bool = True) -> GoldInstance:
    return GoldInstance(
        row=0,
        id=question_id,
        answers=("Paris",),
        support_idxs=(1,),
        paragraph_idxs=range(3),
        answerable=answerable,
        num_hops=2,
    )


def test_predictions_that_are_the_same_for_every_question_are_said() -> None:
    golds = [_gold(f"q{i}") for i in range(6)]
    no_support = [Prediction(f"q{i}", f"answer {i}", [], True) for i in range(6)]
    assert degenerate_predictions(golds, no_support) == [
        "the model predicted no supporting paragraph for any of the 6 questions (Sp is 0)"
    ]
    same = [Prediction(f"q{i}", "the", [1], True) for i in range(6)]
    assert degenerate_predictions(golds, same) == ["the model gave the same answer ('the') to all 6 questions"]
    empty = [Prediction(f"q{i}", "", [], True) for i in range(6)]
    assert degenerate_predictions(golds, empty)[1] == "the model gave an empty answer to all 6 questions"
    varied = [Prediction(f"q{i}", f"answer {i}", [i % 3], True) for i in range(6)]
    assert degenerate_predictions(golds, varied) == []
    assert degenerate_predictions(golds[:3], same[:3]) == []  # too few questions to mean anything
    full = [gold for i in range(6) for gold in (_gold(f"q{i}"), _gold(f"q{i}", answerable=False))]
    all_answerable = [Prediction(g.id, f"a {i}", [1], True) for i, g in enumerate(full)]
    assert degenerate_predictions(full, all_answerable) == [
        "the model judged all 12 rows answerable (the paired metrics then score 0)"
    ]
