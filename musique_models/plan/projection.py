"""A plan's cost from measured step times: a throughput file (`benchmarks/gpu_check.py`'s JSON: a step time and a
peak memory per component) times each stage's steps gives its GPU-hours; a job's hours are its stages' sum, its
memory the largest peak of its components; the grid's hours are its jobs' sum.

    hours of a stage = steps x (median step time of its component) / 3600

A training step is one micro-batch's forward, backward and optimizer step (with gradient accumulation the optimizer
steps less often: an upper bound by the optimizer step's share); a prediction step is one batch's forward pass
(seq2seq: its generation).
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from musique_models.errors import DataFormatError, MusiqueModelsError
from musique_models.plan.jobs import TRAIN, JobPlan, StagePlan

GPU_CHECK = "python benchmarks/gpu_check.py --device cuda"


@dataclass(frozen=True)
class Measurement:
    """One component's measured median step time (`step_s`; None when it was not measured: `stopped` says why)
    and peak memory (GiB; None on CPU)."""

    step_s: float | None
    peak_memory_gib: float | None = None
    stopped: str | None = None


@dataclass(frozen=True)
class Throughput:
    """Measured components by key (`Component.key`), from `sources` (files), on `device`; `tiny`: measured at
    tiny shapes (`gpu_check.py --tiny`: a smoke test, not the real models)."""

    measurements: dict[str, Measurement]
    device: str
    tiny: bool = False
    sources: tuple[str, ...] = ()


def parse_throughput(data: Any, source: str) -> Throughput:
    """A throughput file's content (already parsed JSON) checked field by field; `DataFormatError` naming
    `source` and the field otherwise."""
    if not isinstance(data, dict):
        raise DataFormatError("expected a JSON object (benchmarks/gpu_check.py's result)", path=source)
    components = data.get("components")
    if not isinstance(components, dict):
        raise DataFormatError(
            "missing or not an object: not a benchmarks/gpu_check.py result", path=source, field="components"
        )
    measurements = {}
    for key, entry in components.items():
        field = f"components.{key}"
        if not isinstance(entry, dict):
            raise DataFormatError("expected an object", path=source, field=field)
        step_s = _number(entry.get("step_s"), source, f"{field}.step_s", positive=True)
        peak = _number(entry.get("peak_memory_gib"), source, f"{field}.peak_memory_gib", positive=False)
        stopped = entry.get("stopped")
        measurements[key] = Measurement(step_s, peak, None if stopped is None else str(stopped))
    return Throughput(measurements, str(data.get("device") or "unknown device"), bool(data.get("tiny")), (source,))


def _number(value: Any, source: str, field: str, positive: bool) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DataFormatError(f"expected a number, got {value!r}", path=source, field=field)
    if value < 0 or (positive and value == 0):
        raise DataFormatError(
            f"expected a {'positive' if positive else 'non-negative'} number, got {value!r}", path=source, field=field
        )
    return float(value)


def load_throughput(path: str | Path) -> Throughput:
    """Read and check a throughput file (one line naming the file, and the field, when it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise MusiqueModelsError(
            f"{path}: no such throughput file (measure one on a GPU: {GPU_CHECK} --json {shlex.quote(str(path))})"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DataFormatError(f"not JSON ({error})", path=path) from None
    return parse_throughput(data, str(path))


def merge_throughputs(throughputs: Sequence[Throughput]) -> Throughput:
    """One throughput from several (a later file's measurement of a component replaces an earlier one's, unless
    the later one was stopped before measuring it)."""
    measurements: dict[str, Measurement] = {}
    for throughput in throughputs:
        for key, measurement in throughput.measurements.items():
            if measurement.step_s is not None or key not in measurements:
                measurements[key] = measurement
    devices = dict.fromkeys(throughput.device for throughput in throughputs)
    return Throughput(
        measurements,
        " + ".join(devices),
        any(throughput.tiny for throughput in throughputs),
        tuple(source for throughput in throughputs for source in throughput.sources),
    )


@dataclass(frozen=True)
class StageCost:
    """A stage's work and its measured step time (None: not measured)."""

    stage: StagePlan
    step_s: float | None

    @property
    def hours(self) -> float | None:
        """steps x step time / 3600 (None without a measurement)."""
        return None if self.step_s is None else self.stage.steps * self.step_s / 3600


@dataclass(frozen=True)
class JobCost:
    """A job's stages with their costs, and the largest peak memory of its measured components."""

    job: JobPlan
    stages: tuple[StageCost, ...]
    peak_memory_gib: float | None

    @property
    def missing(self) -> list[str]:
        """Keys of the job's components without a measurement, in order."""
        return list(dict.fromkeys(cost.stage.component.key for cost in self.stages if cost.step_s is None))

    @property
    def hours(self) -> float | None:
        """The sum of the stages' hours (None when a stage lacks a measurement)."""
        hours = [cost.hours for cost in self.stages]
        return None if any(value is None for value in hours) else sum(hours)

    @property
    def measured_hours(self) -> float:
        """The sum of the measured stages' hours (a lower bound when some lack a measurement)."""
        return sum(cost.hours for cost in self.stages if cost.hours is not None)


@dataclass(frozen=True)
class Projection:
    """Every job's cost under one throughput (None: no measurement at all)."""

    jobs: tuple[JobCost, ...]
    throughput: Throughput | None

    @property
    def hours(self) -> float | None:
        """The jobs' total GPU-hours (None when a job lacks a measurement)."""
        hours = [job.hours for job in self.jobs]
        return None if any(value is None for value in hours) else sum(hours)

    @property
    def missing(self) -> dict[str, list[str]]:
        """Each component without a measurement, with the jobs that need it."""
        needed: dict[str, list[str]] = {}
        for job in self.jobs:
            for key in job.missing:
                needed.setdefault(key, []).append(job.job.name)
        return needed

    def as_dict(self, stages: bool = True) -> dict[str, Any]:
        """The projection (JSON): the total, what is missing, each job's steps, hours and peak memory, and with
        `stages` its stages' plan and hours."""
        throughput = self.throughput
        jobs = []
        for cost in self.jobs:
            job = cost.job.as_dict()
            if stages:
                for stage, stage_cost in zip(job["stages"], cost.stages):
                    stage["gpu_hours"] = stage_cost.hours
            else:
                del job["stages"]
            jobs.append(
                {
                    **job,
                    "gpu_hours": cost.hours,
                    "measured_gpu_hours": cost.measured_hours,
                    "peak_memory_gib": cost.peak_memory_gib,
                }
            )
        return {
            "throughput": None
            if throughput is None
            else {"device": throughput.device, "tiny": throughput.tiny, "files": list(throughput.sources)},
            "gpu_hours": self.hours,
            "missing": self.missing,
            "jobs": jobs,
        }


def project(jobs: Iterable[JobPlan], throughput: Throughput | None) -> Projection:
    """The cost of each job's stages under `throughput` (None: nothing measured)."""
    measurements = throughput.measurements if throughput is not None else {}
    costs = []
    for job in jobs:
        stages = []
        peaks = []
        for stage in job.stages:
            measurement = measurements.get(stage.component.key)
            stages.append(StageCost(stage, None if measurement is None else measurement.step_s))
            if measurement is not None and measurement.peak_memory_gib is not None:
                peaks.append(measurement.peak_memory_gib)
        costs.append(JobCost(job, tuple(stages), max(peaks) if peaks else None))
    return Projection(tuple(costs), throughput)


# ---- tables ---------------------------------------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool = False) -> str:
    """Rows as a text table (columns aligned; numbers right-aligned) or a markdown table."""
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    numeric = [all(_numeric(row[i]) for row in rows) and bool(rows) for i in range(len(headers))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.rjust(width) if right else cell.ljust(width) for cell, width, right in zip(cells, widths, numeric)
        ).rstrip()

    return "\n".join([line(headers), *(line(row) for row in rows)])


def _numeric(cell: str) -> bool:
    return cell in ("-", "") or cell.replace(",", "").replace(".", "", 1).replace("~", "").isdigit()


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}" if value < 100 else f"{value:,.0f}"


def _memory(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def job_rows(projection: Projection) -> list[list[str]]:
    """One row per job (job, system, dataset, train steps, predict steps, GPU-hours, peak GiB) and a total row."""
    rows = []
    for cost in projection.jobs:
        job = cost.job
        rows.append(
            [
                job.name,
                job.system or "-",
                job.dataset,
                f"{job.steps(TRAIN):,}",
                f"{job.steps('predict'):,}",
                _hours(cost.hours),
                _memory(cost.peak_memory_gib),
            ]
        )
    total_train = sum(cost.job.steps(TRAIN) for cost in projection.jobs)
    total_predict = sum(cost.job.steps("predict") for cost in projection.jobs)
    peaks = [cost.peak_memory_gib for cost in projection.jobs if cost.peak_memory_gib is not None]
    rows.append(
        [
            f"total ({len(projection.jobs)} job{'s' * (len(projection.jobs) != 1)})",
            "",
            "",
            f"{total_train:,}",
            f"{total_predict:,}",
            _hours(projection.hours),
            _memory(max(peaks) if peaks else None),
        ]
    )
    return rows


JOB_HEADERS = ("job", "system", "dataset", "train steps", "predict steps", "GPU-hours", "peak GiB")
STAGE_HEADERS = (
    "job",
    "stage",
    "work",
    "component",
    "examples",
    "of",
    "batch",
    "passes",
    "steps",
    "step s",
    "GPU-hours",
)


def stage_rows(projection: Projection) -> list[list[str]]:
    """One row per stage of every job: its work, component, examples (and what one is), batch, passes (epochs,
    validations), steps, step time, hours."""
    return [
        [
            cost.job.name,
            stage.stage.stage,
            stage.stage.work,
            stage.stage.component.key,
            f"{stage.stage.examples:,}",
            stage.stage.unit,
            str(stage.stage.batch),
            str(stage.stage.repeats),
            f"{stage.stage.steps:,}",
            "-" if stage.step_s is None else f"{stage.step_s:.4g}",
            _hours(stage.hours),
        ]
        for cost in projection.jobs
        for stage in cost.stages
    ]


def missing_lines(projection: Projection, overrides: Sequence[str]) -> list[str]:
    """What the projection lacks, each component with the jobs that need it, and the command that measures them."""
    missing = projection.missing
    if not missing:
        return []
    stopped = projection.throughput.measurements if projection.throughput is not None else {}
    why = "no throughput file given" if projection.throughput is None else "not in the throughput file"
    lines = [f"missing measurements ({len(missing)} component{'s' * (len(missing) != 1)}; {why}):"]
    for key, jobs in missing.items():
        reason = stopped[key].stopped if key in stopped and stopped[key].stopped else None
        named = ", ".join(jobs[:3]) + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")
        lines.append(f"  {key}  ({'stopped: ' + reason + '; ' if reason else ''}needed by {named})")
    given = [shlex.quote(override) for override in overrides]
    if projection.throughput is None:
        lines.append("measure them on a GPU (under 8 minutes): " + _command(GPU_CHECK, "--json gpu_check.json", *given))
        lines.append("then: " + _command("python -m musique_models.plan", *given, "--throughput gpu_check.json"))
    else:
        measure = _command(GPU_CHECK, "--json gpu_check_more.json", *given, "--only", *missing)
        lines.append(f"measure them on a GPU: {measure}")
        given_files = " ".join(f"--throughput {shlex.quote(source)}" for source in projection.throughput.sources)
        lines.append(f"then pass them all: {given_files or '--throughput FILE'} --throughput gpu_check_more.json")
    return lines


def _command(*parts: str) -> str:
    return " ".join(part for part in parts if part)
