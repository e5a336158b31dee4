"""The report's intervals and paired tests, from the runs' per-question scores (`metrics.per_question.jsonl`;
`musique_models.evaluation.intervals` computes them).

A group's interval is over questions of its metric averaged over its seeds: every resample draws the same questions
for every seed (so the seeds must have scored the same questions). A paired test between two groups draws the same
questions for every run of both. Runs without per-question scores (older runs, wandb runs) get no interval; an
interval whose point does not match the run's `metrics.json` (a per-question file of other questions) is dropped.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from musique_models.data.jsonio import iter_json_records
from musique_models.evaluation.intervals import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CONFIDENCE,
    Interval,
    PairedTest,
    metric_intervals_over_seeds,
    paired_metric_tests_over_seeds,
)
from musique_models.report.groups import RunGroup

# How close an interval's point must be to the mean of the runs' metrics.json values to be shown with it.
POINT_TOLERANCE = 1e-9

INTERVAL_CONVENTION = (
    f"A cell `47.3 [45.4, 49.2]` is the mean and its {CONFIDENCE:.0%} percentile-bootstrap interval over questions "
    "(resampling unit: the answerable question; MuSiQue-Full: the twin pair, so that paired metrics stay paired; "
    f"DiRe: the question with its probes; {BOOTSTRAP_RESAMPLES} resamples, seed {BOOTSTRAP_SEED}); with several "
    "seeds, `47.3 [45.4, 49.2] ± 1.2 (n=3)`: the mean over seeds, the interval over questions of the per-question "
    "scores averaged over the seeds, and the seeds' sample std (n = seeds). Runs without per-question scores (older "
    "runs, wandb runs) show the mean (± std) alone."
)


def read_per_question(path: str) -> tuple[dict[str, Any], ...]:
    """The rows of a per-question file (read once a process while the file stays as it is)."""
    return _read(*_version(path))


def _version(path: str) -> tuple[str, int, int]:
    """A file and what tells a rewritten one apart: its modification time and size."""
    status = Path(path).stat()
    return path, status.st_mtime_ns, status.st_size


@lru_cache(maxsize=256)
def _read(path: str, _modified: int, _size: int) -> tuple[dict[str, Any], ...]:
    return tuple(record for _, record in iter_json_records(path))


def per_question_files(group: RunGroup, dire: bool = False) -> tuple[str, ...] | None:
    """Each run's per-question file (with `dire`: of the runs scored with DiRe, their DiRe scoring's), or None
    when a run has none."""
    runs = [run for run in group.runs if run.dire_metrics] if dire else group.runs
    paths = [run.dire_per_question_file if dire else run.per_question_file for run in runs]
    if not paths or any(path is None for path in paths):
        return None
    return tuple(str(path) for path in paths)


def group_intervals(group: RunGroup, dire: bool = False) -> dict[str, Interval]:
    """metric -> the group's interval (its DiRe scorings' with `dire`), for the metrics whose point matches the
    mean of the runs' own values; empty when a run has no per-question scores or the seeds scored other
    questions."""
    paths = per_question_files(group, dire)
    intervals = _intervals(tuple(map(_version, paths))) if paths else {}
    return {name: interval for name, interval in intervals.items() if _matches(group, name, interval.mean, dire)}


@lru_cache(maxsize=128)
def _intervals(files: tuple[tuple[str, int, int], ...]) -> dict[str, Interval]:
    try:
        return metric_intervals_over_seeds([_read(*file) for file in files])
    except ValueError:  # the seeds scored other questions
        return {}


def _matches(group: RunGroup, name: str, point: float, dire: bool) -> bool:
    values = group.values(name, dire=dire)
    return bool(values) and abs(statistics.fmean(values) - point) <= POINT_TOLERANCE


def group_tests(first: RunGroup, second: RunGroup, metrics: Sequence[str]) -> dict[str, PairedTest] | str:
    """metric -> the paired test of `first` against `second` (the difference of their means over seeds), or why
    they cannot be compared: a run without per-question scores, or runs on other questions."""
    first_files, second_files = per_question_files(first), per_question_files(second)
    missing = [group.row_label for group, files in ((first, first_files), (second, second_files)) if files is None]
    if first_files is None or second_files is None:
        return f"no per-question scores for {' and '.join(missing)} (older runs, wandb runs)"
    first_runs, second_runs = list(map(read_per_question, first_files)), list(map(read_per_question, second_files))
    try:
        return paired_metric_tests_over_seeds(first_runs, second_runs, metrics)
    except ValueError:
        first_ids, second_ids = _ids(first_runs), _ids(second_runs)
        return (
            f"scored on other questions ({len(first_ids)} and {len(second_ids)} questions, "
            f"{len(first_ids & second_ids)} in common)"
        )


def _ids(runs: Sequence[Sequence[dict[str, Any]]]) -> set[str]:
    return {str(row["id"]) for rows in runs for row in rows}
