"""Confidence intervals over questions and paired tests between two systems scored on the same questions.

A figure on 100 sample questions is one draw of many; its interval says how far another 100 questions could move
it. Every interval is a percentile bootstrap: `resamples` times, draw as many resampling units as there are, with
replacement, and recompute the metric on the draw; the interval at 95% runs from the 2.5th to the 97.5th
percentile of the recomputed values (2,000 resamples: 50 left out on each side). The draws come from a seeded
generator (numpy's PCG64, `BOOTSTRAP_SEED`), so an interval is reproducible.

The resampling unit keeps together what a metric scores together (`metric_intervals`): the answerable question for
answer and support scores (per hop: within the bucket), MuSiQue-Full's twin pair for every metric of a paired file
(the paired metrics score both rows at once; answerability F1 is recomputed from the pairs drawn), the question
with its two probes for DiRe's scores, and the row for the answerability metrics of an unpaired file with
unanswerable rows. Point estimates are the metrics module's own (`aggregate`, `aggregate_dire`), not recomputed.

A paired test (`paired_metric_tests`) draws the same units for both systems: its difference interval is the
percentile interval of the resampled differences, and its two-sided p-value is the paired-bootstrap one,
`2 * min(k_le + 1, k_ge + 1) / (R + 1)` clipped to 1, where `k_le` and `k_ge` count the resampled differences at or
below 0 and at or above 0 among the `R` resamples (never exactly 0; p < 0.05 goes with a 95% interval that leaves
0 out, up to a resample or two).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from musique_models.evaluation.metrics import (
    ANSWER_SUPPORT_METRICS,
    HOP_BUCKETS,
    PAIR_METRICS,
    AnswerabilityCounts,
    InstanceResult,
    Scores,
    aggregate,
    answerability_counts,
    answerability_f1,
    average_answer_sufficiency_f1,
    hop_bucket,
    mean_score,
    pair_scores,
    question_scores,
    twin_pairs,
)

BOOTSTRAP_SEED = 0
BOOTSTRAP_RESAMPLES = 2000
CONFIDENCE = 0.95
# The DiRe scores a per-question row carries (`dire_report`); their means are `aggregate_dire`'s.
DIRE_ROW_METRICS = ("dire_answer_f1", "dire_support_f1", "dire_joint_f1")
# Resample weights are made this many (resamples x units) cells at a time: memory stays small on big dev sets.
_CELLS_PER_CHUNK = 1_000_000


@dataclass(frozen=True)
class Interval:
    """A mean and its percentile-bootstrap interval at `confidence`, over `count` resampling units (questions;
    MuSiQue-Full: twin pairs)."""

    mean: float
    low: float
    high: float
    count: int
    confidence: float

    def text(self, scale: float = 100.0, digits: int = 1) -> str:
        """`12.3 [8.1, 16.9]` (scaled: percentages by default)."""
        return f"{self.mean * scale:.{digits}f} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


@dataclass(frozen=True)
class PairedTest:
    """First minus second on the same questions: the difference and its paired-bootstrap interval, the two-sided
    paired-bootstrap p-value, and the number of resampling units."""

    difference: Interval
    p_value: float
    count: int


# What a printed table of intervals says of them (evaluate.py, evaluate.py run=)
BOOTSTRAP_NOTE = (
    "[low, high]: {confidence:.0%} percentile-bootstrap interval over questions (MuSiQue-Full: twin pairs; DiRe: "
    "questions with their probes), {resamples} resamples, seed {seed}"
)
PER_HOP_NOTE = "; the per-hop ones are in the intervals file"


def bootstrap_settings(
    confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> dict[str, Any]:
    """What an output that shows intervals records of how they were made."""
    return {"method": "percentile bootstrap", "confidence": confidence, "resamples": resamples, "seed": seed}


def bootstrap_interval(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """The mean of `values` (one score a question) and its percentile-bootstrap interval."""
    if not values:
        raise ValueError("no scores to bootstrap")
    units = _UnitSet([_mean_statistic(sum(map(float, values)) / len(values), values)])
    [replicates] = _replicates([units], resamples, seed)
    return _interval(units.point("mean"), replicates["mean"], len(values), confidence)


def paired_difference(
    first: Sequence[float],
    second: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """The mean of `first - second` (two systems' scores on the same questions, in the same order) and its paired
    percentile-bootstrap interval: an interval that excludes 0 says the systems differ on such questions."""
    if len(first) != len(second):
        raise ValueError(f"paired scores need the same questions: {len(first)} and {len(second)} scores")
    return bootstrap_interval(
        [float(a) - float(b) for a, b in zip(first, second, strict=True)], confidence, resamples, seed
    )


def metric_intervals(
    rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[str] | None = None,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Interval]:
    """metric -> its point estimate (exactly `aggregate`'s / `aggregate_dire`'s) and bootstrap interval, from the
    per-question rows of one scoring (`metrics.per_question.jsonl`); `metrics` picks some (default: every metric
    the rows allow; metrics without rows are left out). See the module docstring for the resampling units."""
    return metric_intervals_over_seeds([rows], metrics, confidence, resamples, seed)


def metric_intervals_over_seeds(
    runs: Sequence[Sequence[Mapping[str, Any]]],
    metrics: Sequence[str] | None = None,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, Interval]:
    """As `metric_intervals`, for several runs (seeds) scored on the same questions: the point is the mean of the
    runs' metrics and the interval is over questions of that mean (each resample draws the same units for every
    run), so that it holds the questions' variation and not the seeds' (report the seeds' spread beside it)."""
    intervals: dict[str, Interval] = {}
    aligned, order = _aligned_unit_sets(runs, metrics)
    for per_run, names in aligned:
        replicates = _replicates(per_run, resamples, seed)
        for name in names:
            point = _mean_of([run.point(name) for run in per_run])
            resampled = np.mean([values[name] for values in replicates], axis=0)
            intervals[name] = _interval(point, resampled, per_run[0].count, confidence)
    return _in_order(intervals, metrics or order)


def paired_metric_tests(
    first_rows: Sequence[Mapping[str, Any]],
    second_rows: Sequence[Mapping[str, Any]],
    metrics: Sequence[str] | None = None,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, PairedTest]:
    """metric -> the paired test of the first system's rows against the second's (the same questions: rows aligned
    by id, and answerability for MuSiQue-Full's twins; a ValueError naming the ids otherwise)."""
    return paired_metric_tests_over_seeds([first_rows], [second_rows], metrics, confidence, resamples, seed)


def paired_metric_tests_over_seeds(
    first_runs: Sequence[Sequence[Mapping[str, Any]]],
    second_runs: Sequence[Sequence[Mapping[str, Any]]],
    metrics: Sequence[str] | None = None,
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, PairedTest]:
    """As `paired_metric_tests` for two groups of runs (seeds) on the same questions: the difference of the groups'
    mean metrics, every run's metric recomputed on the same resampled units."""
    if not first_runs or not second_runs:
        raise ValueError("a paired test needs rows of both systems")
    split = len(first_runs)
    tests: dict[str, PairedTest] = {}
    aligned, order = _aligned_unit_sets([*first_runs, *second_runs], metrics)
    for per_run, names in aligned:
        replicates = _replicates(per_run, resamples, seed)
        count = per_run[0].count
        for name in names:
            points = [run.point(name) for run in per_run]
            resampled = [values[name] for values in replicates]
            difference = _mean_of(points[:split]) - _mean_of(points[split:])
            differences = np.mean(resampled[:split], axis=0) - np.mean(resampled[split:], axis=0)
            at_or_below, at_or_above = int(np.sum(differences <= 0)), int(np.sum(differences >= 0))
            p_value = min(1.0, 2 * (min(at_or_below, at_or_above) + 1) / (resamples + 1))
            tests[name] = PairedTest(_interval(difference, differences, count, confidence), p_value, count)
    return _in_order(tests, metrics or order)


def _in_order(by_metric: dict[str, Any], order: Sequence[str]) -> dict[str, Any]:
    return {name: by_metric[name] for name in order if name in by_metric}


def _mean_of(points: Sequence[float]) -> float:
    return points[0] if len(points) == 1 else math.fsum(points) / len(points)


@dataclass(frozen=True)
class _Statistic:
    """A metric as a function of per-unit components summed over the units drawn: `components` (units x k), and
    `combine`, the metric from the summed components of each resample (resamples x k -> resamples)."""

    name: str
    point: float
    components: np.ndarray
    combine: Callable[[np.ndarray], np.ndarray]


@dataclass
class _UnitSet:
    """The statistics of one set of resampling units, every one's components in the order of `keys`."""

    statistics: list[_Statistic]
    keys: list[Hashable] | None = None

    @property
    def count(self) -> int:
        return len(self.statistics[0].components)

    @property
    def names(self) -> list[str]:
        return [statistic.name for statistic in self.statistics]

    def point(self, name: str) -> float:
        return next(statistic.point for statistic in self.statistics if statistic.name == name)

    def reordered(self, keys: list[Hashable]) -> _UnitSet:
        """The same statistics with their units in the order of `keys` (the same units)."""
        position = {key: index for index, key in enumerate(self.keys or [])}
        order = [position[key] for key in keys]
        return _UnitSet([replace(s, components=s.components[order]) for s in self.statistics], keys)


def _mean_statistic(point: float, values: Sequence[float], name: str = "mean") -> _Statistic:
    count = len(values)
    return _Statistic(name, point, np.asarray(values, dtype=float)[:, None], lambda sums: sums[:, 0] / count)


def _per_resample(function: Callable[[np.ndarray], float]) -> Callable[[np.ndarray], np.ndarray]:
    """A metric of one resample's summed components, applied to every resample (the metrics module's own
    function, called as it is, for the metrics that are not a mean)."""
    return lambda sums: np.array([function(row) for row in sums])


def _answerability_f1(sums: np.ndarray) -> float:
    return answerability_f1(AnswerabilityCounts(*map(float, sums[:3])))


def result_from_row(row: Mapping[str, Any]) -> InstanceResult:
    """A per-question row as the `InstanceResult` it was written from (precision and recall, never averaged, are
    not in the row: NaN)."""
    return InstanceResult(
        row=int(row.get("row", 0)),
        id=str(row["id"]),
        num_hops=int(row["num_hops"]),
        gold_answerable=bool(row["answerable"]),
        predicted_answerable=bool(row["predicted_answerable"]),
        answer=Scores(math.nan, math.nan, float(row["answer_f1"]), float(row["answer_em"])),
        support=Scores(math.nan, math.nan, float(row["support_f1"]), float(row["support_em"])),
    )


def _is_paired(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Whether rows with unanswerable ones were scored in twin pairs (`counts_toward` says `pair`; rows written
    before `counts_toward` existed were, as `aggregate`'s default)."""
    return any("pair" in row.get("counts_toward", ["pair"]) for row in rows)


def _buckets(units: Sequence[Any], hops: Callable[[Any], int]) -> Iterator[tuple[str, list[Any]]]:
    """("", every unit), then ("_2hop", the 2-hop units), ... for the buckets that have units."""
    if units:
        yield "", list(units)
    for bucket in HOP_BUCKETS:
        members = [unit for unit in units if hop_bucket(hops(unit)) == bucket]
        if members:
            yield f"_{bucket}hop", members


def _unit_sets(rows: Sequence[Mapping[str, Any]]) -> tuple[dict[str, _UnitSet], list[str]]:
    """The rows' resampling units by unit set (`pairs`, `pairs_2hop`, `questions`, `rows`, `dire`, ...), and the
    metric names in the order `aggregate` and `aggregate_dire` list them."""
    results = [result_from_row(row) for row in rows]
    has_unanswerable = any(not result.gold_answerable for result in results)
    paired = has_unanswerable and _is_paired(rows)
    points = aggregate(results, paired) if results else {}
    sets: dict[str, _UnitSet] = {}
    if paired:
        pairs = list(twin_pairs(results).values())
        for suffix, members in _buckets(pairs, lambda pair: pair[0].num_hops):
            answerable = [next(r for r in pair if r.gold_answerable) for pair in members]
            statistics = _means(points, suffix, [question_scores(r) for r in answerable], ANSWER_SUPPORT_METRICS)
            statistics += _means(points, suffix, [pair_scores(pair) for pair in members], PAIR_METRICS)
            if not suffix:
                statistics += _answerability_statistics(points, members, with_answer=False)
            sets[f"pairs{suffix}"] = _UnitSet(statistics, [pair[0].id for pair in members])
    else:
        answerable = [result for result in results if result.gold_answerable]
        for suffix, members in _buckets(answerable, lambda result: result.num_hops):
            statistics = _means(points, suffix, [question_scores(r) for r in members], ANSWER_SUPPORT_METRICS)
            sets[f"questions{suffix}"] = _UnitSet(statistics, [(r.id, True) for r in members])
        if has_unanswerable:
            statistics = _answerability_statistics(points, [[result] for result in results], with_answer=True)
            sets["rows"] = _UnitSet(statistics, [(r.id, r.gold_answerable) for r in results])
    scored = [row for row in rows if "dire_answer_f1" in row]
    for suffix, members in _buckets(scored, lambda row: int(row["num_hops"])):
        statistics = [
            _mean_statistic(
                mean_score([float(row[name]) for row in members]), [row[name] for row in members], name + suffix
            )
            for name in DIRE_ROW_METRICS
        ]
        sets[f"dire{suffix}"] = _UnitSet(statistics, [str(row["id"]) for row in members])
    return sets, [
        *points,
        *(statistic.name for name, units in sets.items() if name.startswith("dire") for statistic in units.statistics),
    ]


def _means(
    points: Mapping[str, float], suffix: str, scores: Sequence[Mapping[str, float]], names: Sequence[str]
) -> list[_Statistic]:
    """Mean statistics of per-unit `scores`, each with `aggregate`'s point estimate."""
    return [_mean_statistic(points[name + suffix], [unit[name] for unit in scores], name + suffix) for name in names]


def _answerability_statistics(
    points: Mapping[str, float], units: Sequence[Sequence[InstanceResult]], with_answer: bool
) -> list[_Statistic]:
    """sufficiency_accuracy, sufficiency_f1 (and, `with_answer`, avg_answer_sufficiency_f1) over `units`, each a
    pair or a single row: answerability F1 is recomputed from the counts of the units drawn."""
    counts = [answerability_counts(unit) for unit in units]
    counted = np.array([[c.true_positive, c.predicted_positive, c.gold_positive] for c in counts], dtype=float)
    correct = np.array([[sum(r.sufficiency_correct for r in unit), len(unit)] for unit in units], dtype=float)
    statistics = [
        _Statistic("sufficiency_accuracy", points["sufficiency_accuracy"], correct, lambda s: s[:, 0] / s[:, 1]),
        _Statistic("sufficiency_f1", points["sufficiency_f1"], counted, _per_resample(_answerability_f1)),
    ]
    if with_answer:
        answer = np.array(
            [
                [sum(r.answer.f1 for r in unit if r.gold_answerable), sum(r.gold_answerable for r in unit)]
                for unit in units
            ],
            dtype=float,
        )

        def average(sums: np.ndarray) -> float:
            answer_f1 = sums[3] / sums[4] if sums[4] else 0.0  # `mean_score` of the answerable rows drawn
            return average_answer_sufficiency_f1(answer_f1, _answerability_f1(sums))

        statistics.append(
            _Statistic(
                "avg_answer_sufficiency_f1",
                points["avg_answer_sufficiency_f1"],
                np.hstack([counted, answer]),
                _per_resample(average),
            )
        )
    return statistics


def _aligned_unit_sets(
    runs: Sequence[Sequence[Mapping[str, Any]]], metrics: Sequence[str] | None
) -> tuple[list[tuple[list[_UnitSet], list[str]]], list[str]]:
    """Per unit set: every run's units in the first run's order, and the metrics of it that every run has (and
    `metrics` asks for); then the metrics' order (`_unit_sets`). A ValueError naming the ids when the runs are not
    the same questions."""
    if not runs:
        raise ValueError("no rows")
    _check_same_questions(runs)
    scored = [_unit_sets(rows) for rows in runs]
    per_run = [sets for sets, _ in scored]
    aligned = []
    for set_name, first in per_run[0].items():
        if not all(set_name in sets for sets in per_run):
            continue
        keys = first.keys or []
        if len(runs) > 1 and len(set(keys)) != len(keys):
            raise ValueError(
                f"the rows repeat a question ({set_name}): the runs cannot be aligned question by question"
            )
        ordered = [first]
        for sets in per_run[1:]:
            _check_same_keys(keys, sets[set_name].keys or [], set_name)
            ordered.append(sets[set_name].reordered(keys))
        names = [
            name
            for name in first.names
            if (metrics is None or name in metrics) and all(name in run.names for run in ordered)
        ]
        if names:
            aligned.append((ordered, names))
    return aligned, scored[0][1]


def _check_same_questions(runs: Sequence[Sequence[Mapping[str, Any]]]) -> None:
    """Every run's rows are the same questions: the same (id, answerable) rows."""
    first = Counter((str(row["id"]), bool(row["answerable"])) for row in runs[0])
    for rows in runs[1:]:
        other = Counter((str(row["id"]), bool(row["answerable"])) for row in rows)
        if other != first:
            _refuse(sorted({i for i, _ in first - other}), sorted({i for i, _ in other - first}), "rows")


def _check_same_keys(first: list[Hashable], other: list[Hashable], set_name: str) -> None:
    def ids(keys: Counter[Hashable]) -> list[str]:
        return sorted({str(key[0] if isinstance(key, tuple) else key) for key in keys})

    if Counter(first) != Counter(other):
        _refuse(ids(Counter(first) - Counter(other)), ids(Counter(other) - Counter(first)), set_name)


def _refuse(only_first: list[str], only_other: list[str], what: str) -> None:
    def listed(ids: list[str]) -> str:
        shown = ", ".join(repr(i) for i in ids[:5])
        return (shown + f" and {len(ids) - 5} more") if len(ids) > 5 else (shown or "none")

    raise ValueError(
        f"the {what} are not of the same questions (a paired test or a seed average needs the same ones): "
        f"only in the first: {listed(only_first)}; only in the other: {listed(only_other)}"
    )


def _resample_weights(count: int, resamples: int, seed: int) -> Iterator[np.ndarray]:
    """How many times each of `count` units is drawn in each resample (resamples x count, a chunk at a time)."""
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, got {resamples}")
    draw = np.random.default_rng(seed)
    chunk = max(1, min(resamples, _CELLS_PER_CHUNK // max(count, 1)))
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        drawn = draw.integers(0, count, size=(size, count)) + count * np.arange(size)[:, None]
        yield np.bincount(drawn.ravel(), minlength=size * count).reshape(size, count).astype(float)


def _replicates(per_run: Sequence[_UnitSet], resamples: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Each run's resampled values of each statistic (run -> statistic name -> resamples), every run on the same
    resampled units."""
    statistics = [statistic for run in per_run for statistic in run.statistics]
    stacked = np.hstack([statistic.components for statistic in statistics])  # one product per chunk for them all
    ends = np.cumsum([statistic.components.shape[1] for statistic in statistics])
    values: list[list[np.ndarray]] = [[] for _ in statistics]
    for weights in _resample_weights(per_run[0].count, resamples, seed):
        sums = weights @ stacked
        for index, statistic in enumerate(statistics):
            width = statistic.components.shape[1]
            values[index].append(statistic.combine(sums[:, ends[index] - width : ends[index]]))
    per_statistic = iter(np.concatenate(chunks) for chunks in values)
    return [{statistic.name: next(per_statistic) for statistic in run.statistics} for run in per_run]


def _interval(point: float, replicates: np.ndarray, count: int, confidence: float) -> Interval:
    """`point` and the percentile interval of its `replicates`."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not between 0 and 1")
    ordered = np.sort(replicates)
    # as many resampled values left out below the interval as above it (2,000 resamples at 95%: 50 each side)
    outside = int((1 - confidence) / 2 * len(ordered))
    return Interval(point, float(ordered[outside]), float(ordered[len(ordered) - 1 - outside]), count, confidence)


def resampled_statistic(
    samples: Sequence[Sequence[Sequence[float]]],
    statistic: Callable[[Sequence[np.ndarray]], float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Interval:
    """`statistic` of the column means of independent `samples`, and its percentile-bootstrap interval.

    Each sample is a list of units, a unit one question's values (its scores in two systems stay together), and is
    resampled on its own, by unit; `statistic` gets each sample's column means (a ratio of two systems' means on one
    dataset minus the same on another). A statistic undefined on a resample (NaN: a ratio to a zero mean) leaves
    the interval unbounded. `count` is the units of the smallest sample."""
    arrays = [np.asarray(sample, dtype=float) for sample in samples]
    if not arrays or any(array.ndim != 2 or not len(array) for array in arrays):
        raise ValueError("resampled_statistic needs samples of units, each a list of values")
    resampled = [
        np.concatenate([weights @ array / len(array) for weights in _resample_weights(len(array), resamples, seed + i)])
        for i, array in enumerate(arrays)
    ]
    replicates = np.array([statistic([means[r] for means in resampled]) for r in range(resamples)], dtype=float)
    point = float(statistic([array.mean(axis=0) for array in arrays]))
    count = min(len(array) for array in arrays)
    if math.isnan(point) or np.isnan(replicates).any():
        return Interval(point, -math.inf, math.inf, count, confidence)
    return _interval(point, replicates, count, confidence)
