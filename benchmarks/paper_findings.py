"""The paper's findings, checked on real held-out questions at the scale this machine allows, with 95% intervals.

Trains each system of the paper and its artifact baselines on real training questions and scores them on other real
questions (the shipped samples and `data/heldout/`; no question, and no MuSiQue single-hop sub-question, on both
sides, checked before any run), the paper's own method at small scale. Then each of the paper's findings that this
scale can check is one row: the claim with its figures from the paper (`musique_models/report/paper_results.yaml`),
what was measured with its interval, and a verdict: holds (the measured difference's 95% interval excludes 0 in the
claimed direction), does not hold (it excludes 0 the other way) or inconclusive at this scale. Nothing is tuned
toward a verdict: the settings are `benchmarks/paper_findings.yaml`, written before any run.

Parts (`--only PART[,PART]`, each on its own; the whole runs them in this order):
- `systems`: SA, C-only, Q-only and 1-Para on the real MiniLM, on MuSiQue-Ans, HotpotQA and 2Wiki; `end2end`:
  End2End on MuSiQue-Ans (the paper's findings that use it are MuSiQue-Ans's);
- `beam`: Beam SA on MuSiQue-Ans; `llm`: the prompted SmolLM2 over SA's selector (needs `systems`);
- `dire`: SA's DiRe probes; `full`: SA on MuSiQue-Full pairs made from the real MuSiQue-Ans questions, then on the
  real (unpaired) MuSiQue-Full dev questions;
- `curves`: SA against training size; `findings`: reads every finished run and writes the results.

    python benchmarks/paper_findings.py                          # everything (measured: about 2 h 50 min on 2 cores)
    python benchmarks/paper_findings.py --only systems,findings --out logs/paper_findings/main
    python benchmarks/paper_findings.py --only findings --out DIR  # the results again from DIR's finished runs
    python benchmarks/paper_findings.py --seeds 42,43,44         # three training seeds a run

Writes to `--out` (default `logs/paper_findings/<time>`): `data/` (each side as an official-format file, and
`splits.json`: sources, counts, folds, the overlap check), `runs/<dataset>/<system>-n<train size>-s<seed>/` (normal
`train.py` run folders), `results.md`, `results.json`, `findings.png`, `curves.png` and `timings.json` (each part's
wall time). Called again with the same `--out`, finished runs are read, not run again; an unfinished one resumes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from musique_models import PROJECT_ROOT
from musique_models.data.contrast import write_full_style_file
from musique_models.data.formats import MUSIQUE, get_format
from musique_models.data.heldout import check_disjoint, dev_folds, overlap, read_side, sharing_groups, without
from musique_models.data.schema import Example
from musique_models.evaluation.chance import random_support_f1, ranking_support_f1
from musique_models.evaluation.intervals import (
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    Interval,
    metric_intervals_over_seeds,
    resampled_statistic,
    result_from_row,
)
from musique_models.evaluation.metrics import HOP_BUCKETS, hop_bucket, pair_scores, twin_pairs
from musique_models.io import write_json
from musique_models.report.paper import load_paper_results
from musique_models.report.uncertainty import read_per_question
from musique_models.run_files import CONFIG_FILE as RUN_CONFIG_FILE
from musique_models.run_files import (
    EVALUATIONS_FOLDER,
    METRICS_FILE,
    PER_QUESTION_FILE,
    RANKING_FILE,
    STATUS_FILE,
    is_finished,
)
from musique_models.systems import run_system

CONFIG_FILE = Path(__file__).with_suffix(".yaml")
PARTS = ("systems", "end2end", "beam", "llm", "dire", "full", "curves", "findings")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "offline"}
# The paper's rows (its `paper_results.yaml` system keys) of the systems this benchmark trains.
PAPER_SYSTEMS = {"SA": "SA", "EE": "EE", "C-only": "C-only", "1-Para": "1-Para", "Q-only": "Q-only"}
DATASET_LABELS = {"musique_ans": "MuSiQue-Ans", "hotpotqa_20k": "HotpotQA", "2wiki_20k": "2Wiki"}
# Where the MuSiQue-Full run's scores of the real (unpaired) MuSiQue-Full questions go, in its evaluations/.
REAL_FULL_FOLDER = "musique_full-real-unpaired"
HOLDS, DOES_NOT_HOLD, INCONCLUSIVE = "holds", "does not hold", "inconclusive at this scale"
NOT_CHECKED = "not checked"


# ---------------------------------------------------------------------------------------------------------- data


@dataclass
class Sides:
    """One dataset's files: the training side and the scored (held-out) side, in the dataset's official layout."""

    dataset: str
    data_format: str
    train: Path
    evaluation: Path
    counts: dict[str, Any] = field(default_factory=dict)


def _write_side(data_format: str, examples: Sequence[Example], path: Path) -> Path:
    fmt = get_format(data_format)
    path = path.with_suffix(fmt.file_suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    fmt.write(path, [fmt.record(example) for example in examples])
    return path


def prepare_data(config: dict[str, Any], out: Path) -> dict[str, Sides]:
    """Write each dataset's two sides (and MuSiQue-Full's) under `out/data`, after checking that they share no
    question; `out/data/splits.json` says where each came from and how many questions each side holds."""
    sides: dict[str, Sides] = {}
    examples: dict[str, tuple[list[Example], list[Example]]] = {}
    for dataset, spec in config["datasets"].items():
        train, train_dropped = read_side([PROJECT_ROOT / p for p in spec["train"]], spec["format"], dataset)
        heldout, heldout_dropped = read_side([PROJECT_ROOT / p for p in spec["heldout"]], spec["format"], dataset)
        heldout = without(heldout, train)  # a held-out question seen in training is no longer held out
        folds = dev_folds(heldout, spec["folds"], config["fold_seed"])
        evaluation, official_train = folds[0], len(train)
        train = train + [example for fold in folds[1:] for example in fold]
        check_disjoint(train, evaluation, dataset)
        examples[dataset] = (train, evaluation)
        folder = out / "data" / dataset
        sides[dataset] = Sides(
            dataset,
            spec["format"],
            _write_side(spec["format"], train, folder / "train"),
            _write_side(spec["format"], evaluation, folder / "eval"),
            {
                "train": len(train),
                "evaluation": len(evaluation),
                "heldout_folds": spec["folds"],
                "heldout_questions_moved_to_training": len(train) - official_train,
                "repeated_questions_dropped": train_dropped + heldout_dropped,
                "train_files": spec["train"],
                "heldout_files": spec["heldout"],
                "overlap": {kind: len(values) for kind, values in overlap(train, evaluation).items()},
            },
        )
    full = config.get("musique_full")
    if full:
        train, evaluation = examples[full["from"]]
        folder = out / "data" / "musique_full"
        folder.mkdir(parents=True, exist_ok=True)
        seed, source = full["contrast_seed"], f"the {full['from']} sides of benchmarks/paper_findings.py"
        train_rows = write_full_style_file(train, folder / "train.jsonl", seed, f"{source} (train)")
        eval_rows = write_full_style_file(evaluation, folder / "eval.jsonl", seed, f"{source} (evaluation)")
        real, _ = read_side([PROJECT_ROOT / p for p in full["real_unpaired"]], "musique", "musique_full")
        real_kept = without(real, train)
        check_disjoint(train, real_kept, "musique_full (real, unpaired)")
        real_path = folder / "real_unpaired.jsonl"
        MUSIQUE.write(real_path, [MUSIQUE.record(example) for example in real_kept])
        sides["musique_full"] = Sides(
            "musique_full",
            "musique",
            folder / "train.jsonl",
            folder / "eval.jsonl",
            {
                "train": train_rows,
                "evaluation": eval_rows,
                "pairs_made_from": full["from"],
                "real_unpaired": str(real_path.relative_to(out)),
                "real_unpaired_questions": len(real_kept),
                "real_unpaired_left_out_as_seen_in_training": len(real) - len(real_kept),
                "real_unpaired_answerable": sum(example.answerable for example in real_kept),
            },
        )
    write_json(
        out / "data" / "splits.json",
        {
            name: {"train": str(s.train.relative_to(out)), "evaluation": str(s.evaluation.relative_to(out)), **s.counts}
            for name, s in sides.items()
        },
    )
    return sides


# ---------------------------------------------------------------------------------------------------------- runs


@dataclass
class Job:
    """One command of the benchmark (a `train.py` run or an `evaluate.py run=` scoring) and what it waits for."""

    key: str
    command: list[str]
    output: Path
    done: Callable[[], bool]
    after: list[str] = field(default_factory=list)
    log_name: str = "run.log"


def slug(name: str) -> str:
    """A folder name for a system name: `SmolLM2 (0-shot, SA's top 5)` -> `smollm2-0-shot-sa-s-top-5`."""
    return "-".join("".join(c if c.isalnum() else " " for c in name.lower()).split())


def run_folder(out: Path, dataset: str, system: str, train_size: int, seed: int) -> Path:
    """`out/runs/<dataset>/<system>-n<train size>-s<seed>`: one run's folder."""
    return out / "runs" / dataset / f"{slug(system)}-n{train_size}-s{seed}"


def log_name(out: Path, run_dir: Path, kind: str) -> str:
    """`<dataset>-<run>.<kind>.log`: a job's log, unique for every run and kind whatever the length of `out`."""
    return "-".join(run_dir.relative_to(out / "runs").parts) + f".{kind}.log"


def system_spec(config: dict[str, Any], system: str) -> tuple[list[str], list[str]]:
    """A system's overrides and the systems whose runs it reads."""
    spec = config["systems"][system]
    if isinstance(spec, list):
        return list(spec), []
    after = spec.get("after") or []
    return list(spec["overrides"]), [after] if isinstance(after, str) else list(after)


def train_job(
    config: dict[str, Any], out: Path, sides: Sides, system: str, seed: int, train_size: int | None = None
) -> Job:
    """The `train.py` run of `system` on `sides` with `train_size` training questions (None: the dataset's own
    `train_size`, else all) and `seed`."""
    size = min(train_size, sides.counts["train"]) if train_size else _own_size(config, sides)
    run_dir = run_folder(out, sides.dataset, system, size, seed)
    overrides, after = system_spec(config, system)
    read_runs = {name: run_folder(out, sides.dataset, name, _own_size(config, sides), seed) for name in after}
    for name, folder in read_runs.items():
        overrides = [item.replace(f"{{run:{name}}}", str(folder)) for item in overrides]
    command = [
        sys.executable,
        str(PROJECT_ROOT / "train.py"),
        *config["common"],
        *overrides,
        f"dataset={sides.dataset}",
        f"dataset.sample_files.train={sides.train}",
        f"dataset.sample_files.dev={sides.evaluation}",
        f"dataset.train_size={size}",
        f"seed={seed}",
        f"++trainer.threads={config['threads']}",
        f"hydra.run.dir={run_dir}",
    ]
    if (run_dir / STATUS_FILE).is_file() and not is_finished(run_dir):
        command.append("ckpt_path=last")  # an interrupted run resumes where it stopped
    return Job(
        str(run_dir),
        command,
        run_dir,
        lambda: is_finished(run_dir),
        [str(folder) for folder in read_runs.values()],
        log_name(out, run_dir, "train"),
    )


def _own_size(config: dict[str, Any], sides: Sides) -> int:
    """The training size of a dataset's main runs."""
    return min(
        config["datasets"].get(sides.dataset, {}).get("train_size") or sides.counts["train"], sides.counts["train"]
    )


def dire_output(run_dir: Path, dataset: str) -> Path:
    """Where `evaluate.py run=RUN mode=dire` writes SA's DiRe scores of its evaluation questions."""
    return (
        run_dir
        / EVALUATIONS_FOLDER
        / (f"{dataset}-dev-dire-half" + ("-min5paragraphs" if dataset == "hotpotqa_20k" else ""))
    )


def dire_job(config: dict[str, Any], out: Path, sides: Sides, seed: int) -> Job:
    """SA's DiRe probes of its evaluation questions; on HotpotQA without questions of fewer than 5 paragraphs (as
    DiRe's official conversion)."""
    run_dir = run_folder(out, sides.dataset, "SA", _own_size(config, sides), seed)
    output = dire_output(run_dir, sides.dataset)
    options = ["mode=dire", *(["dire_min_paragraphs=5"] if sides.dataset == "hotpotqa_20k" else [])]
    return scoring_job(config, out, run_dir, output, "dire", options)


def scoring_job(config: dict[str, Any], out: Path, run_dir: Path, output: Path, kind: str, options: list[str]) -> Job:
    """An `evaluate.py run=RUN_DIR` scoring of a finished run into `output` (its `kind` names its key and log)."""
    command = [
        sys.executable,
        str(PROJECT_ROOT / "evaluate.py"),
        f"run={run_dir}",
        *options,
        f"threads={config['threads']}",
    ]
    return Job(
        f"{kind}:{run_dir}",
        command,
        output,
        lambda: (output / METRICS_FILE).is_file(),
        [str(run_dir)],
        log_name(out, run_dir, kind),
    )


def real_full_job(config: dict[str, Any], out: Path, sides: Sides, system: str, seed: int) -> Job:
    """The MuSiQue-Full run scored on the real MuSiQue-Full dev questions, which come unpaired."""
    run_dir = run_folder(out, "musique_full", system, _own_size(config, sides), seed)
    output = run_dir / EVALUATIONS_FOLDER / REAL_FULL_FOLDER
    options = [
        "dataset=musique_full",
        "dataset.sample=true",
        f"dataset.sample_files.dev={out / sides.counts['real_unpaired']}",
        "dataset.paired=false",
        "split=dev",
        f"output={output}",
    ]
    return scoring_job(config, out, run_dir, output, "real-full", options)


def part_jobs(part: str, config: dict[str, Any], out: Path, sides: dict[str, Sides], seeds: Sequence[int]) -> list[Job]:
    """The jobs of one part."""
    spec = config["parts"][part] or {}
    jobs: list[Job] = []
    for seed in seeds:
        if part in ("systems", "end2end", "beam", "llm"):
            jobs += [
                train_job(config, out, sides[dataset], system, seed)
                for dataset in spec["datasets"]
                for system in spec["systems"]
            ]
        elif part == "dire":
            jobs += [dire_job(config, out, sides[dataset], seed) for dataset in spec["datasets"]]
        elif part == "full":
            for system in spec["systems"]:
                jobs.append(train_job(config, out, sides["musique_full"], system, seed))
                jobs.append(real_full_job(config, out, sides["musique_full"], system, seed))
        elif part == "curves":
            for dataset, sizes in spec.items():
                jobs += [train_job(config, out, sides[dataset], "SA", seed, size) for size in sizes]
    unique: dict[str, Job] = {}
    for job in jobs:
        unique.setdefault(job.key, job)  # a curve's point that is a main run is one run
    return list(unique.values())


class BenchmarkError(RuntimeError):
    """A run failed, or a part needs another part's runs first."""


def run_jobs(jobs: Sequence[Job], parallel: int, log_dir: Path) -> dict[str, float]:
    """Run the unfinished jobs, `parallel` at a time, each when what it waits for has finished; returns each run
    job's wall seconds. A failed job stops the benchmark (after the running ones end) naming its log."""
    keys = {job.key for job in jobs}
    pending = [job for job in jobs if not job.done()]
    for job in pending:
        missing = [key for key in job.after if key not in keys and not is_finished(key)]
        if missing:
            raise BenchmarkError(f"{job.key} reads {', '.join(missing)}, which has not run: run its part first")
    log_dir.mkdir(parents=True, exist_ok=True)
    walls: dict[str, float] = {}
    failures: list[str] = []
    running: dict[Future[tuple[float, int]], Job] = {}
    environment = {**os.environ, **OFFLINE}
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        while (pending and not failures) or running:
            done_keys = {job.key for job in jobs if job.done()}
            ready = [job for job in pending if all(key in done_keys or key not in keys for key in job.after)]
            for job in ready[: parallel - len(running)]:
                pending.remove(job)
                print(f"start: {shlex.join(job.command)}", flush=True)
                running[pool.submit(_run, job.command, log_dir / job.log_name, environment)] = job
            if not running:
                raise BenchmarkError(f"nothing can start: {', '.join(job.key for job in pending)} wait on failed runs")
            finished_now, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in finished_now:
                job = running.pop(future)
                walls[job.key], returncode = future.result()
                if returncode != 0 or not job.done():
                    failures.append(f"{job.key} failed with exit status {returncode} (log: {log_dir / job.log_name})")
                else:
                    print(f"done in {walls[job.key]:.0f} s: {job.key}", flush=True)
    if failures:
        raise BenchmarkError("; ".join(failures))
    return walls


def _run(command: list[str], log: Path, environment: dict[str, str]) -> tuple[float, int]:
    """Run `command` into `log`; its wall seconds and exit status."""
    start = time.perf_counter()
    with log.open("w") as handle:
        done = subprocess.run(
            command, cwd=PROJECT_ROOT, env=environment, stdout=handle, stderr=subprocess.STDOUT, check=False
        )
    return time.perf_counter() - start, done.returncode


# ------------------------------------------------------------------------------------------------------ figures


def question_values(rows: Iterable[Mapping[str, Any]], name: str, family: str = "answer") -> dict[str, float]:
    """`name` of each row that counts toward `family` (`answer`: the answerable questions; `dire`), by id."""
    return {row["id"]: float(row[name]) for row in rows if family in row["counts_toward"]}


def seed_mean(per_seed: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each question's value averaged over the seeds' runs (which scored the same questions)."""
    ids = per_seed[0].keys()
    if any(values.keys() != ids for values in per_seed):
        raise BenchmarkError("the seeds' runs scored different questions")
    return {key: statistics.fmean(values[key] for values in per_seed) for key in ids}


@dataclass
class RunSet:
    """The runs of one system on one dataset and training size, one a seed (each finished)."""

    folders: list[Path]

    def rows(self, relative: str = PER_QUESTION_FILE) -> list[tuple[dict[str, Any], ...]]:
        return [read_per_question(str(folder / relative)) for folder in self.folders]

    def values(self, name: str, family: str = "answer", relative: str = PER_QUESTION_FILE) -> dict[str, float]:
        """Per-question `name`, averaged over the seeds."""
        return seed_mean([question_values(rows, name, family) for rows in self.rows(relative)])

    def predicts_support(self) -> bool:
        """Whether the runs' model names supporting paragraphs (the registry's `predicts_support`)."""
        entry = run_system(yaml.safe_load((self.folders[0] / RUN_CONFIG_FILE).read_text()))
        return entry is None or entry.predicts_support

    def names_no_support(self) -> bool:
        """Whether the runs named no supporting paragraph for any question (a support head that says no to every
        paragraph: its Sp of 0 is then no measurement of what the system could find)."""
        return not any(row["predicted_support_idxs"] for rows in self.rows() for row in rows)

    def spread(self, name: str) -> float | None:
        """The standard deviation over seeds of the metric `name` (None for one seed)."""
        values = [json.loads((folder / METRICS_FILE).read_text())[name] for folder in self.folders]
        return statistics.stdev(values) if len(values) > 1 else None


def silent_support_note(system: str, runs: Sequence[RunSet]) -> str:
    """`; C-only named no supporting paragraph for any question` when none of `runs` named one (else ''): a verdict
    on its Sp then says only that its support head stayed silent at these settings."""
    if not all(run_set.names_no_support() for run_set in runs):
        return ""
    return f"; {system} named no supporting paragraph for any question (its support head stayed silent)"


def as_dict(interval: Interval) -> dict[str, Any]:
    """An interval as results.json holds it (F1 x 100); a statistic undefined on some resample (a ratio to a mean
    that can be 0) has no bounds: `unbounded`, and null where the point itself is undefined."""
    bounded = math.isfinite(interval.low) and math.isfinite(interval.high)
    return {
        "mean": 100 * interval.mean if math.isfinite(interval.mean) else None,
        "low": 100 * interval.low if bounded else None,
        "high": 100 * interval.high if bounded else None,
        "n": interval.count,
        **({} if bounded else {"unbounded": True}),
    }


def verdict(difference: Interval | None, direction: int) -> str:
    """`holds` when the difference's interval lies on the claimed side of 0 (`direction` +1: above, -1: below),
    `does not hold` when it lies on the other side, else inconclusive at this scale; `not checked` without one."""
    if difference is None:
        return NOT_CHECKED
    low, high = sorted((difference.low * direction, difference.high * direction))
    if low > 0:
        return HOLDS
    if high < 0:
        return DOES_NOT_HOLD
    return INCONCLUSIVE


@dataclass
class Finding:
    """One checked claim: the paper's statement and figures, what was measured, the difference tested, the
    verdict (`difference` None: not checked, `measured` says why)."""

    claim: str
    paper: str
    measured: str
    tested: str
    difference: Interval | None
    direction: int

    @property
    def verdict(self) -> str:
        return verdict(self.difference, self.direction)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "paper": self.paper,
            "measured": self.measured,
            "tested": self.tested,
            "difference": as_dict(self.difference) if self.difference else None,
            "direction": "above 0" if self.direction > 0 else "below 0",
            "verdict": self.verdict,
        }


def not_checked(claim: str, paper: str, why: str) -> Finding:
    """A claim this run could not check (its runs are missing, or it has no questions to compare)."""
    return Finding(claim, paper, f"not checked: {why}", "–", None, 1)


def ratio(means: Any) -> float:
    """mean(first column) / mean(second column) of one sample's resampled means (NaN when the second is 0)."""
    return float(means[0] / means[1]) if means[1] else math.nan


class MissingRuns(LookupError):
    """A finding's runs have not finished (the message names them)."""


class Results:
    """Every finished run of the benchmark under `out`, read into figures and findings.

    Intervals resample clusters of questions, not questions: MuSiQue questions that share a single-hop
    sub-question (`musique_models.data.heldout.sharing_groups`) are one unit, as their scores are not independent;
    every other question is a unit of its own."""

    def __init__(self, config: dict[str, Any], out: Path, sides: dict[str, Sides], seeds: Sequence[int]) -> None:
        self.config, self.out, self.sides, self.seeds = config, out, sides, list(seeds)
        self.paper = load_paper_results()
        self.bootstrap = {
            "confidence": config["bootstrap"]["confidence"],
            "resamples": BOOTSTRAP_RESAMPLES,
            "seed": BOOTSTRAP_SEED,
        }

    def runs(self, dataset: str, system: str, train_size: int | None = None) -> RunSet:
        """The finished runs of `system` on `dataset` (every seed); `MissingRuns` naming those not finished."""
        if dataset not in self.sides:
            raise MissingRuns(f"no {dataset} data")
        sides = self.sides[dataset]
        size = min(train_size, sides.counts["train"]) if train_size else _own_size(self.config, sides)
        folders = [run_folder(self.out, dataset, system, size, seed) for seed in self.seeds]
        missing = [str(folder.relative_to(self.out)) for folder in folders if not is_finished(folder)]
        if missing:
            raise MissingRuns(f"no finished run {', '.join(missing)}")
        return RunSet(folders)

    # --- intervals over clusters of questions

    def units(self, columns: Sequence[dict[str, float]]) -> list[list[float]]:
        """One unit a cluster of questions (those sharing a MuSiQue sub-question): the sums of each column over the
        cluster's questions, and the count."""
        ids = list(columns[0])
        cluster_of = {ids[index]: group[0] for group in sharing_groups(ids) for index in group}
        sums: dict[int, list[float]] = {}
        for key in ids:
            unit = sums.setdefault(cluster_of[key], [0.0] * (len(columns) + 1))
            for index, column in enumerate(columns):
                unit[index] += column[key]
            unit[-1] += 1
        return list(sums.values())

    def mean(self, values: dict[str, float]) -> Interval:
        """The mean over questions and its interval."""
        if not values:
            raise ValueError("no questions")
        return resampled_statistic([self.units([values])], lambda means: ratio(means[0]), **self.bootstrap)

    def paired(self, first: dict[str, float], second: dict[str, float]) -> Interval:
        """mean(first - second) over the same questions, with its paired interval."""
        if first.keys() != second.keys():
            raise BenchmarkError("a paired difference needs the same questions on both sides")
        return self.mean({key: first[key] - second[key] for key in first})

    def difference(self, first: dict[str, float], second: dict[str, float]) -> Interval:
        """mean(first) - mean(second) of two sets of other questions (two datasets, two hop buckets), each
        resampled on its own."""
        if not first or not second:
            raise ValueError("no questions on one side")
        samples = [self.units([first]), self.units([second])]
        return resampled_statistic(samples, lambda means: ratio(means[0]) - ratio(means[1]), **self.bootstrap)

    def ratio_difference(self, pairs: Sequence[tuple[dict[str, float], dict[str, float]]]) -> Interval:
        """mean(a) / mean(b) on the first dataset minus the same on the second (`pairs`: (a, b) a dataset, on one
        dataset's questions), each dataset's questions resampled on their own, a question's two scores together."""
        samples = [[unit[:2] for unit in self.units([a, b])] for a, b in pairs]
        return resampled_statistic(samples, lambda means: ratio(means[0]) - ratio(means[1]), **self.bootstrap)

    def metric(self, runs: RunSet, name: str, family: str = "answer", relative: str = PER_QUESTION_FILE) -> Interval:
        """A per-question metric (answer_f1, support_f1, dire_*) over the questions, seeds averaged per question."""
        return self.mean(runs.values(name, family, relative))

    # --- per-question figures

    def support_chance(self, runs: RunSet) -> dict[str, float]:
        """Per question: the expected support F1 of as many paragraphs as the run predicted, drawn at random
        (seeds averaged)."""
        counts = self.paragraph_counts(runs)
        return seed_mean(
            [
                {
                    row["id"]: random_support_f1(
                        len(row["gold_support_idxs"]), counts[row["id"]], len(set(row["predicted_support_idxs"]))
                    )
                    for row in rows
                    if "answer" in row["counts_toward"]
                }
                for rows in runs.rows()
            ]
        )

    def paragraph_counts(self, runs: RunSet) -> dict[str, int]:
        """Each scored question's paragraph count, from the side the runs scored."""
        dataset = runs.folders[0].parent.name
        sides = self.sides[dataset]
        fmt = get_format(sides.data_format)
        return {example.id: len(example.paragraphs) for example in fmt.read(sides.evaluation, dataset)}

    def selector(self, runs: RunSet) -> dict[str, dict[str, float]]:
        """Per question: the support F1 of the selector's top |gold| paragraphs (seeds averaged), and a random
        ranking's (|gold| / n)."""
        gold = {row["id"]: row["gold_support_idxs"] for row in runs.rows()[0] if "answer" in row["counts_toward"]}
        per_seed, chance = [], {}
        for folder in runs.folders:
            rankings = [r for r in json.loads((folder / RANKING_FILE).read_text())["rankings"] if r["id"] in gold]
            if len({r["id"] for r in rankings}) != len(rankings):
                raise BenchmarkError(f"{folder}: a question is ranked twice (a MuSiQue-Full run?)")
            per_seed.append({r["id"]: ranking_support_f1(r["ranking"], gold[r["id"]]) for r in rankings})
            chance = {r["id"]: random_support_f1(len(gold[r["id"]]), len(r["ranking"])) for r in rankings}
        return {"ranked": seed_mean(per_seed), "chance": chance}

    def paper_figure(self, system: str, dataset: str, metric: str) -> float | None:
        """The paper's dev figure of `system` (Table 4, else the repository's dev scores), or None."""
        figure = self.paper.main(system, dataset, metric)
        return None if figure is None else figure.value

    # --- findings

    def findings(self) -> list[Finding]:
        """Every claim this scale can check; those whose runs have not finished say so."""
        found: list[Finding] = []
        for check in (
            self.artifact_findings,
            self.musique_findings,
            self.full_findings,
            self.hop_findings,
            self.dire_findings,
            self.selector_findings,
        ):
            found += check()
        return found

    def artifact_findings(self) -> list[Finding]:
        """The artifact baselines, relative to SA, are far stronger on HotpotQA and 2Wiki than on MuSiQue-Ans."""
        found = []
        for baseline, name, label in (
            ("C-only", "support_f1", "Sp"),
            ("1-Para", "answer_f1", "An"),
            ("Q-only", "answer_f1", "An"),
        ):
            for dataset in ("hotpotqa_20k", "2wiki_20k"):
                figures = {
                    (system, ds): self.paper_figure(system, ds, label)
                    for ds in (dataset, "musique_ans")
                    for system in (baseline, "SA")
                }
                paper = " and ".join(
                    f"{figures[baseline, ds]} / {figures['SA', ds]} = {figures[baseline, ds] / figures['SA', ds]:.2f}"
                    f" on {DATASET_LABELS[ds]}"
                    for ds in (dataset, "musique_ans")
                )
                claim = f"{baseline}'s {label}, relative to SA's, is far higher on {DATASET_LABELS[dataset]} than on MuSiQue-Ans"
                paper = f"{baseline} / SA {label}: {paper} (Table 4, dev)"
                try:
                    runs = {ds: (self.runs(ds, baseline), self.runs(ds, "SA")) for ds in (dataset, "musique_ans")}
                except MissingRuns as missing:
                    found.append(not_checked(claim, paper, str(missing)))
                    continue
                values = {ds: (b.values(name), s.values(name)) for ds, (b, s) in runs.items()}
                measured = "; ".join(
                    f"{DATASET_LABELS[ds]}: {baseline} {self.mean(b).text()}, SA {self.mean(s).text()} "
                    f"(ratio {ratio_text(b, s)})"
                    for ds, (b, s) in values.items()
                )
                if name == "support_f1":
                    measured += silent_support_note(baseline, [r for r, _ in runs.values()])
                found.append(
                    Finding(
                        claim=claim,
                        paper=paper,
                        measured=measured,
                        tested=f"ratio on {DATASET_LABELS[dataset]} minus ratio on MuSiQue-Ans (x100)",
                        difference=self.ratio_difference([values[dataset], values["musique_ans"]]),
                        direction=1,
                    )
                )
        return found

    def musique_findings(self) -> list[Finding]:
        """SA above the artifact baselines and above End2End on MuSiQue-Ans (the same questions: paired)."""
        found = []
        for other, name, label in (
            ("1-Para", "answer_f1", "An"),
            ("Q-only", "answer_f1", "An"),
            ("C-only", "support_f1", "Sp"),
            ("EE", "answer_f1", "An"),
            ("EE", "support_f1", "Sp"),
        ):
            claim = f"SA's {label} is above {other}'s on MuSiQue-Ans"
            paper = (
                f"SA {self.paper_figure('SA', 'musique_ans', label)}, "
                f"{other} {self.paper_figure(other, 'musique_ans', label)} (Table 4, dev)"
            )
            try:
                sa, runs = self.runs("musique_ans", "SA"), self.runs("musique_ans", other)
            except MissingRuns as missing:
                found.append(not_checked(claim, paper, str(missing)))
                continue
            found.append(
                Finding(
                    claim=claim,
                    paper=paper,
                    measured=f"SA {self.metric(sa, name).text()}, {other} {self.metric(runs, name).text()}"
                    + (silent_support_note(other, [runs]) if name == "support_f1" else ""),
                    tested=f"SA minus {other}, paired over the same questions",
                    difference=self.paired(sa.values(name), runs.values(name)),
                    direction=1,
                )
            )
        return found

    def full_values(self, runs: RunSet, name: str) -> dict[str, float]:
        """Each twin pair's paired score (`answer_f1`: An+Sf, `support_f1`: Sp+Sf), by id, seeds averaged."""
        metric = {"answer_f1": "group_answer_sufficiency_f1", "support_f1": "group_support_sufficiency_f1"}[name]
        per_seed = []
        for rows in runs.rows():
            pairs = twin_pairs([result_from_row(row) for row in rows])
            per_seed.append({key: pair_scores(pair)[metric] for key, pair in pairs.items()})
        return seed_mean(per_seed)

    def full_findings(self) -> list[Finding]:
        """MuSiQue-Full's paired metrics fall below the MuSiQue-Ans ones (SA on each, the same questions)."""
        found = []
        for name, label, paired_label in (("answer_f1", "An", "An+Sf"), ("support_f1", "Sp", "Sp+Sf")):
            claim = f"SA's {paired_label} on MuSiQue-Full falls below its {label} on MuSiQue-Ans"
            paper = (
                f"SA {label} {self.paper_figure('SA', 'musique_ans', label)} (Table 4, dev); "
                f"{paired_label} {self.paper_figure('SA', 'musique_full', paired_label)} (repository, dev)"
            )
            try:
                ans, full = self.runs("musique_ans", "SA"), self.runs("musique_full", "SA")
            except MissingRuns as missing:
                found.append(not_checked(claim, paper, str(missing)))
                continue
            pairs, questions = self.full_values(full, name), ans.values(name)
            judged = {row["predicted_answerable"] for rows in full.rows() for row in rows}
            constant = (
                f"; the model judged every row {'answerable' if judged.pop() else 'unanswerable'}, so every pair "
                "scores 0"
                if len(judged) == 1
                else ""
            )
            found.append(
                Finding(
                    claim=claim,
                    paper=paper,
                    measured=(
                        f"{paired_label} {self.mean(pairs).text()} over {len(pairs)} pairs made from the held-out "
                        f"questions; {label} {self.mean(questions).text()}{constant}"
                    ),
                    tested=f"{paired_label} (SA trained on Full pairs) minus {label} (SA trained on Ans), paired by question",
                    difference=self.paired(pairs, questions),
                    direction=-1,
                )
            )
        return found

    def hop_findings(self) -> list[Finding]:
        """Answers get harder with hops: SA on MuSiQue-Ans, 2-hop against 3- and 4-hop questions. (The paper's
        per-hop figures are EX(SA)'s; End2End, it says, stays about flat, so it is no test of this claim.)"""
        paper = self.paper.per_hop("EX(SA)", "musique_ans")
        claim = "SA's An falls as hops rise on MuSiQue-Ans"
        paper_text = (
            "EX(SA) An " + " / ".join(f"{paper[h].value} ({h}-hop)" for h in sorted(paper)) + " (text, dev; SA's "
            "per-hop figures are not given)"
        )
        try:
            runs = self.runs("musique_ans", "SA")
        except MissingRuns as missing:
            return [not_checked(claim, paper_text, str(missing))]
        hops = {row["id"]: hop_bucket(row["num_hops"]) for row in runs.rows()[0]}
        values = runs.values("answer_f1")
        two = {key: value for key, value in values.items() if hops[key] == 2}
        more = {key: value for key, value in values.items() if hops[key] > 2}
        if not two or not more:
            return [not_checked(claim, paper_text, "no question on one side of the comparison")]
        return [
            Finding(
                claim=claim,
                paper=paper_text,
                measured=f"2-hop {self.mean(two).text()} ({len(two)}), 3- and 4-hop {self.mean(more).text()} ({len(more)})",
                tested="2-hop minus 3- and 4-hop (other questions: each side resampled on its own)",
                difference=self.difference(two, more),
                direction=1,
            )
        ]

    def dire_values(self, runs: RunSet, dataset: str, name: str) -> dict[str, float]:
        """Per question with probes: `name` (`dire_answer_f1`, `answer_f1`, ...) of the DiRe scoring's file, whose
        standard scores are the ones DiRe's are capped by."""
        relative = str(dire_output(runs.folders[0], dataset).relative_to(runs.folders[0]) / PER_QUESTION_FILE)
        if not all((folder / relative).is_file() for folder in runs.folders):
            raise MissingRuns(f"no DiRe scoring {relative} (part dire)")
        return runs.values(name, "dire", relative)

    def dire_findings(self) -> list[Finding]:
        """SA's DiRe scores: below its standard scores on each dataset (by construction they cannot be above; the
        question is by how much), and far higher on HotpotQA and 2Wiki than on MuSiQue-Ans (Table 4's row)."""
        found = []
        for dataset in self.config["parts"]["dire"]["datasets"]:
            for name, label in (("answer_f1", "An"), ("support_f1", "Sp")):
                claim = f"SA's DiRe {label} falls below its {label} on {DATASET_LABELS[dataset]}"
                paper = (
                    f"DiRe {label} {self.paper_figure('SA', dataset, f'DiRe {label}')}, "
                    f"{label} {self.paper_figure('SA', dataset, label)} (Table 4, dev)"
                )
                try:
                    runs = self.runs(dataset, "SA")
                    dire, standard = (
                        self.dire_values(runs, dataset, f"dire_{name}"),
                        self.dire_values(runs, dataset, name),
                    )
                except MissingRuns as missing:
                    found.append(not_checked(claim, paper, str(missing)))
                    continue
                found.append(
                    Finding(
                        claim=claim,
                        paper=paper,
                        measured=(
                            f"DiRe {self.mean(dire).text()}, standard {self.mean(standard).text()} "
                            f"({len(dire)} questions with probes)"
                        ),
                        tested="DiRe minus standard, paired (each DiRe score is capped by the standard one, so the "
                        "difference is never above 0: the test is whether it is below)",
                        difference=self.paired(dire, standard),
                        direction=-1,
                    )
                )
        for dataset in ("hotpotqa_20k", "2wiki_20k"):
            claim = f"SA's DiRe An is far higher on {DATASET_LABELS[dataset]} than on MuSiQue-Ans"
            paper = (
                f"DiRe An {self.paper_figure('SA', dataset, 'DiRe An')} on {DATASET_LABELS[dataset]}, "
                f"{self.paper_figure('SA', 'musique_ans', 'DiRe An')} on MuSiQue-Ans (Table 4, dev)"
            )
            try:
                values = {
                    ds: self.dire_values(self.runs(ds, "SA"), ds, "dire_answer_f1") for ds in (dataset, "musique_ans")
                }
            except MissingRuns as missing:
                found.append(not_checked(claim, paper, str(missing)))
                continue
            found.append(
                Finding(
                    claim=claim,
                    paper=paper,
                    measured=f"{DATASET_LABELS[dataset]} {self.mean(values[dataset]).text()}, MuSiQue-Ans "
                    f"{self.mean(values['musique_ans']).text()}",
                    tested=f"{DATASET_LABELS[dataset]} minus MuSiQue-Ans (other questions: each resampled on its own)",
                    difference=self.difference(values[dataset], values["musique_ans"]),
                    direction=1,
                )
            )
        return found

    def selector_findings(self) -> list[Finding]:
        """SA's selector ranks the supporting paragraphs above chance on held-out questions."""
        found = []
        for dataset in self.config["parts"]["systems"]["datasets"]:
            claim = f"SA's selector ranks the supporting paragraphs above chance on {DATASET_LABELS[dataset]}"
            paper = (
                f"context: SA's Sp {self.paper_figure('SA', dataset, 'Sp')} (Table 4, dev; its answerer's support "
                "after 20K training questions, not the selector's ranking)"
            )
            try:
                selector = self.selector(self.runs(dataset, "SA"))
            except MissingRuns as missing:
                found.append(not_checked(claim, paper, str(missing)))
                continue
            found.append(
                Finding(
                    claim=claim,
                    paper=paper,
                    measured=(
                        f"support F1 of its top |gold| {self.mean(selector['ranked']).text()}; "
                        f"a random ranking's {100 * statistics.fmean(selector['chance'].values()):.1f}"
                    ),
                    tested="selector minus chance, paired over the same questions",
                    difference=self.paired(selector["ranked"], selector["chance"]),
                    direction=1,
                )
            )
        return found

    # --- tables

    def finished_runs(self, dataset: str, system: str, train_size: int | None = None) -> RunSet | None:
        """`runs`, or None when they have not finished (the tables leave the row out)."""
        try:
            return self.runs(dataset, system, train_size)
        except MissingRuns:
            return None

    def system_rows(self, dataset: str) -> list[dict[str, Any]]:
        """Each system's An and Sp on `dataset`'s held-out questions, with intervals and the chance support F1 of
        as many paragraphs as it named."""
        rows = []
        planned = {
            system
            for part, spec in self.config["parts"].items()
            if part in ("systems", "end2end", "beam", "llm") and dataset in spec["datasets"]
            for system in spec["systems"]
        }
        for system in self.config["systems"]:
            try:
                runs = self.runs(dataset, system)
            except MissingRuns as missing:
                if system in planned:
                    rows.append({"system": system, "not_run": str(missing)})
                continue
            answer = self.metric(runs, "answer_f1")
            support = self.metric(runs, "support_f1") if runs.predicts_support() else None
            rows.append(
                {
                    "system": system,
                    "train_questions": _own_size(self.config, self.sides[dataset]),
                    "questions": len(runs.values("answer_f1")),
                    "answer_f1": as_dict(answer),
                    "support_f1": as_dict(support) if support else None,
                    "chance_support_f1": 100 * statistics.fmean(self.support_chance(runs).values())
                    if support
                    else None,
                    "seed_spread": {n: runs.spread(n) for n in ("answer_f1", "support_f1")}
                    if len(self.seeds) > 1
                    else None,
                    "runs": [str(folder.relative_to(self.out)) for folder in runs.folders],
                }
            )
        return rows

    def per_hop_rows(self, dataset: str = "musique_ans") -> list[dict[str, Any]]:
        """Each system's An on `dataset`'s 2-, 3- and 4-hop questions."""
        rows = []
        for system in self.config["systems"]:
            runs = self.finished_runs(dataset, system)
            if runs is None:
                continue
            hops = {row["id"]: hop_bucket(row["num_hops"]) for row in runs.rows()[0]}
            values = runs.values("answer_f1")
            buckets = {h: {k: v for k, v in values.items() if hops[k] == h} for h in HOP_BUCKETS}
            rows.append({"system": system, **{f"{h}hop": as_dict(self.mean(b)) for h, b in buckets.items() if b}})
        return rows

    def full_rows(self) -> dict[str, Any]:
        """SA on MuSiQue-Full: on the pairs made from the real held-out questions, and on the real unpaired ones
        (several seeds: every seed on the same resampled units, averaged; resampling units: pairs, rows)."""
        runs = self.finished_runs("musique_full", "SA")
        if runs is None:
            return {}
        figures: dict[str, Any] = {
            "pairs": {n: as_dict(i) for n, i in metric_intervals_over_seeds(runs.rows(), **self.bootstrap).items()}
        }
        real = str(Path(EVALUATIONS_FOLDER) / REAL_FULL_FOLDER / PER_QUESTION_FILE)
        if all((folder / real).is_file() for folder in runs.folders):
            intervals = metric_intervals_over_seeds(runs.rows(real), **self.bootstrap)
            figures["real_unpaired"] = {n: as_dict(i) for n, i in intervals.items()}
        return figures

    def curve_rows(self) -> dict[str, dict[str, Any]]:
        """SA against training size on each curve's dataset: An, Sp and its selector's top-|gold| support F1, with
        a random ranking's and C-only's support F1 (its main run) beside them."""
        curves: dict[str, dict[str, Any]] = {}
        for dataset, sizes in self.config["parts"]["curves"].items():
            points = []
            for size in sizes:
                runs = self.finished_runs(dataset, "SA", size)
                if runs is None:
                    continue
                selector = self.selector(runs)
                points.append(
                    {
                        "train_questions": min(size, self.sides[dataset].counts["train"]),
                        "answer_f1": as_dict(self.metric(runs, "answer_f1")),
                        "support_f1": as_dict(self.metric(runs, "support_f1")),
                        "selector_support_f1": as_dict(self.mean(selector["ranked"])),
                        "chance_selector_support_f1": 100 * statistics.fmean(selector["chance"].values()),
                    }
                )
            c_only = self.finished_runs(dataset, "C-only")
            curves[dataset] = {
                "points": points,
                "c_only_support_f1": as_dict(self.metric(c_only, "support_f1")) if c_only else None,
            }
        return curves


def ratio_text(first: dict[str, float], second: dict[str, float]) -> str:
    """mean(first) / mean(second), or `undefined` when the second mean is 0."""
    denominator = statistics.fmean(second.values())
    return f"{statistics.fmean(first.values()) / denominator:.2f}" if denominator else "undefined (SA's mean is 0)"


# ------------------------------------------------------------------------------------------------------ outputs


def cell(figure: dict[str, Any] | None) -> str:
    """`12.3 [8.1, 16.9]` from a results.json interval; `–` for none; `undefined` / `[unbounded]` where a ratio's
    denominator can be 0."""
    if not figure:
        return "–"
    mean = "undefined" if figure["mean"] is None else one_decimal(figure["mean"])
    if figure.get("unbounded"):
        return f"{mean} [unbounded: a resample's SA mean is 0]"
    return f"{mean} [{one_decimal(figure['low'])}, {one_decimal(figure['high'])}]"


def one_decimal(value: float) -> str:
    """`12.3`; never `-0.0`."""
    return f"{round(value, 1) + 0.0:.1f}"


def collect(results: Results, timings: dict[str, Any]) -> dict[str, Any]:
    """Everything results.json holds."""
    datasets = [d for d in results.config["parts"]["systems"]["datasets"]]
    return {
        "settings": {
            "seeds": results.seeds,
            "bootstrap": {**results.bootstrap, "unit": "question (MuSiQue-Full pairs: the twin pair)"},
            "config": results.config,
        },
        "data": json.loads((results.out / "data" / "splits.json").read_text()),
        "findings": [finding.to_dict() for finding in results.findings()],
        "train_sizes": {dataset: _own_size(results.config, results.sides[dataset]) for dataset in datasets},
        "systems": {dataset: results.system_rows(dataset) for dataset in datasets},
        "per_hop": results.per_hop_rows(),
        "musique_full": results.full_rows(),
        "curves": results.curve_rows(),
        "timings_s": timings,
    }


def markdown(data: dict[str, Any]) -> str:
    """results.md: the findings with their verdicts first, then the figures behind them."""
    boot = data["settings"]["bootstrap"]
    lines = [
        "# The paper's findings on real held-out questions",
        "",
        f"Every figure is F1 x 100 with its {100 * boot['confidence']:.0f}% percentile-bootstrap interval over the "
        f"held-out questions (`mean [low, high]`; {boot['resamples']} resamples, seed {boot['seed']}; MuSiQue-Full: "
        f"over twin pairs); training seeds {', '.join(map(str, data['settings']['seeds']))}. The resampling unit is "
        "the question, except that MuSiQue questions sharing a single-hop sub-question are resampled together "
        "(their scores are not independent). A verdict holds when the tested difference's interval lies on the "
        "claimed side of 0, does not hold when it lies on the other, and is inconclusive at this scale otherwise; "
        "a row is not checked when a run or scoring it needs is missing (the row names it). Chance Sp: the expected "
        "support F1 of naming, at random, as many paragraphs as the system named. Two cautions: with one training "
        "seed a verdict is about one trained model per system (`--seeds` adds more), and with "
        f"{sum(f['verdict'] != NOT_CHECKED for f in data['findings'])} checked rows at 95% each, about one verdict "
        "in twenty can come out wrong by chance alone.",
        "",
        "## Findings",
        "",
        "| claim | the paper | measured here | tested difference | verdict |",
        "|---|---|---|---|---|",
    ]
    for finding in data["findings"]:
        lines.append(
            f"| {finding['claim']} | {finding['paper']} | {finding['measured']} | "
            + (f"{finding['tested']}: {cell(finding['difference'])}" if finding["difference"] else "–")
            + f" | **{finding['verdict']}** |"
        )
    lines += ["", "## Systems", ""]
    for dataset, rows in data["systems"].items():
        counts = data["data"][dataset]
        trained = data["train_sizes"][dataset]
        lines += [
            f"### {DATASET_LABELS.get(dataset, dataset)}: trained on {trained} of its {counts['train']} training "
            f"questions, scored on {counts['evaluation']} held-out ones"
            + (f" ({counts['heldout_folds']} folds: see Data)" if counts["heldout_folds"] > 1 else ""),
            "",
            "| system | An | Sp | chance Sp | questions (resampling units) |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            if row.get("not_run"):
                lines.append(f"| {row['system']} | not run: {row['not_run']} | | | |")
                continue
            chance = "–" if row["chance_support_f1"] is None else f"{row['chance_support_f1']:.1f}"
            spread = ""
            if row["seed_spread"]:
                spread = (
                    " (seed std: "
                    + ", ".join(f"{n} {100 * v:.1f}" for n, v in row["seed_spread"].items() if v is not None)
                    + ")"
                )
            lines.append(
                f"| {row['system']}{spread} | {cell(row['answer_f1'])} | {cell(row['support_f1'])} | {chance} | {row['questions']} ({row['answer_f1']['n']}) |"
            )
        lines.append("")
    if data["per_hop"]:
        lines += ["## MuSiQue-Ans answer F1 by hops", "", "| system | 2-hop | 3-hop | 4-hop |", "|---|---|---|---|"]
        for row in data["per_hop"]:
            lines.append(f"| {row['system']} | " + " | ".join(cell(row.get(f"{h}hop")) for h in (2, 3, 4)) + " |")
        lines.append("")
    full = data["musique_full"]
    if full:
        names = (
            "answer_f1",
            "support_f1",
            "sufficiency_f1",
            "group_answer_sufficiency_f1",
            "group_support_sufficiency_f1",
        )
        lines += [
            "## MuSiQue-Full (SA)",
            "",
            "| questions | An | Sp | Sf | An+Sf | Sp+Sf |",
            "|---|---|---|---|---|---|",
            f"| {data['data']['musique_full']['evaluation']} rows: pairs made from the held-out MuSiQue-Ans questions | "
            + " | ".join(cell(full["pairs"].get(n)) for n in names)
            + " |",
        ]
        if "real_unpaired" in full:
            lines.append(
                f"| {data['data']['musique_full']['real_unpaired_questions']} real MuSiQue-Full dev questions (unpaired: no An+Sf, Sp+Sf) | "
                + " | ".join(cell(full["real_unpaired"].get(n)) for n in names)
                + " |"
            )
        lines.append("")
    for dataset, curve in data["curves"].items():
        if not curve["points"]:
            continue
        lines += [
            f"## Learning curve: SA on {DATASET_LABELS.get(dataset, dataset)}",
            "",
            "| training questions | An | Sp | selector top-gold support F1 | random ranking |",
            "|---|---|---|---|---|",
        ]
        for point in curve["points"]:
            lines.append(
                f"| {point['train_questions']} | {cell(point['answer_f1'])} | {cell(point['support_f1'])} | "
                f"{cell(point['selector_support_f1'])} | {point['chance_selector_support_f1']:.1f} |"
            )
        if curve["c_only_support_f1"]:
            lines.append(f"\nC-only's Sp (its main run): {cell(curve['c_only_support_f1'])}.")
        lines.append("")
    lines += [
        "## Data",
        "",
        "`train`: the training side's questions (each run draws at most its dataset's `train_size` of them, the "
        "learning curve fewer); `evaluation`: the scored side; MuSiQue-Full counts rows, two a question (its pair). "
        "`shared`: what the training and the scored side have in common: ids, question texts and MuSiQue "
        "single-hop sub-questions, checked to be none before any run, and supporting paragraphs (one Wikipedia "
        "paragraph can support two different questions: reported, not refused).",
        "",
        "| side | train | evaluation | held-out folds | notes |",
        "|---|---|---|---|---|",
    ]
    for name, counts in data["data"].items():
        notes = []
        if counts.get("heldout_questions_moved_to_training"):
            notes.append(
                f"{counts['heldout_questions_moved_to_training']} held-out questions (the folds not scored) train"
            )
        if counts.get("real_unpaired_questions") is not None:
            notes.append(
                f"{counts['real_unpaired_questions']} real unpaired questions scored, "
                f"{counts['real_unpaired_left_out_as_seen_in_training']} left out as seen in training"
            )
        if "overlap" in counts:
            notes.append("shared: " + ", ".join(f"{v} {k}" for k, v in counts["overlap"].items()))
        lines.append(
            f"| {name} | {counts['train']} | {counts['evaluation']} | {counts.get('heldout_folds', '–')} | {'; '.join(notes)} |"
        )
    if data["timings_s"]:
        lines += [
            "",
            "## Time",
            "",
            "`runs_wall`: the wall time of all the runs, `jobs` at a time (every call on this output folder added up: "
            "an interrupted benchmark resumed counts each attempt); `<part>_run_time`: the part's runs' own wall "
            "times added up (they ran beside others); `data`, `findings`: preparing the sides, reading the results "
            "(the last call's). Each run's own time: `run_walls` in timings.json.",
            "",
            "| what | seconds | minutes |",
            "|---|---|---|",
        ]
        lines += [
            f"| {part} | {seconds:.0f} | {seconds / 60:.1f} |"
            for part, seconds in data["timings_s"].items()
            if isinstance(seconds, int | float)
        ]
    return "\n".join(lines) + "\n"


def plot_systems(data: dict[str, Any], path: Path) -> None:
    """findings.png: each system's An and Sp on each dataset's held-out questions, their intervals as error bars,
    each value written on its bar, and each system's chance Sp (as many paragraphs as it named, drawn at random) as
    a black tick over its Sp bar; `n/a` where a system names no support."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = {d: [row for row in rows if not row.get("not_run")] for d, rows in data["systems"].items()}
    panels = {d: rows for d, rows in panels.items() if rows}
    width = 0.38
    figure, axes = plt.subplots(1, max(len(panels), 1), figsize=(5.4 * max(len(panels), 1), 4.4), squeeze=False)
    for axis, (dataset, rows) in zip(axes[0], panels.items(), strict=False):
        for offset, (name, label, colour) in enumerate(
            (("answer_f1", "An", "tab:blue"), ("support_f1", "Sp", "tab:orange"))
        ):
            for index, row in enumerate(rows):
                x = index + (offset - 0.5) * width
                figure_ = row[name]
                if not figure_:
                    axis.text(x, 1, "n/a", ha="center", va="bottom", fontsize=7, rotation=90)
                    continue
                error = [[figure_["mean"] - figure_["low"]], [figure_["high"] - figure_["mean"]]]
                axis.bar(
                    x,
                    max(figure_["mean"], 0.4),
                    width=width,
                    yerr=error,
                    capsize=3,
                    color=colour,
                    label=label if index == 0 else None,
                )
                axis.text(x, figure_["high"] + 1, one_decimal(figure_["mean"]), ha="center", va="bottom", fontsize=7)
                if name == "support_f1" and row["chance_support_f1"] is not None:
                    axis.hlines(
                        row["chance_support_f1"],
                        x - width / 2,
                        x + width / 2,
                        colors="black",
                        label="chance Sp" if index == 0 else None,
                    )
        axis.set_xticks(range(len(rows)), [row["system"].split(" (")[0] for row in rows], rotation=30, ha="right")
        counts = data["data"][dataset]
        axis.set_title(
            f"{DATASET_LABELS.get(dataset, dataset)}: {data['train_sizes'][dataset]} train / "
            f"{counts['evaluation']} held out",
            fontsize=10,
        )
        axis.set_ylim(0, 100)
        axis.set_ylabel("F1 x 100 (95% interval)")
        axis.legend(loc="upper right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def plot_curves(data: dict[str, Any], path: Path) -> None:
    """curves.png: SA's An, Sp and selector support F1 against training size, with a random ranking's and
    C-only's support F1."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = {d: c for d, c in data["curves"].items() if c["points"]}
    figure, axes = plt.subplots(1, max(len(curves), 1), figsize=(5.5 * max(len(curves), 1), 4.2), squeeze=False)
    for axis, (dataset, curve) in zip(axes[0], curves.items(), strict=False):
        sizes = [p["train_questions"] for p in curve["points"]]
        for name, label in (
            ("answer_f1", "SA An"),
            ("support_f1", "SA Sp"),
            ("selector_support_f1", "selector top-|gold| F1"),
        ):
            figures = [p[name] for p in curve["points"]]
            axis.errorbar(
                sizes,
                [f["mean"] for f in figures],
                yerr=[[f["mean"] - f["low"] for f in figures], [f["high"] - f["mean"] for f in figures]],
                marker="o",
                capsize=3,
                label=label,
            )
        axis.plot(sizes, [p["chance_selector_support_f1"] for p in curve["points"]], "k--", label="random ranking")
        if curve["c_only_support_f1"]:
            axis.axhline(curve["c_only_support_f1"]["mean"], color="tab:red", linestyle=":", label="C-only Sp")
        axis.set_xscale("log")
        axis.minorticks_off()
        axis.set_xticks(sizes, [str(s) for s in sizes])
        axis.set_xlabel("training questions")
        axis.set_ylabel("F1 (95% interval)")
        axis.set_ylim(0, 100)
        axis.set_title(f"SA on {DATASET_LABELS.get(dataset, dataset)}")
        axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def write_results(results: Results, timings: dict[str, Any]) -> dict[str, Any]:
    """results.json, results.md, findings.png and curves.png under the output folder."""
    data = collect(results, timings)
    if not any(row for rows in data["systems"].values() for row in rows if not row.get("not_run")):
        raise BenchmarkError(
            f"{results.out} holds no finished run for seeds {', '.join(map(str, results.seeds))}: nothing to report "
            "(results left as they were)"
        )
    write_json(results.out / "results.json", data)
    (results.out / "results.md").write_text(markdown(data))
    plot_systems(data, results.out / "findings.png")
    plot_curves(data, results.out / "curves.png")
    return data


# --------------------------------------------------------------------------------------------------------- main


# The settings a finished run depends on: an output folder made with others is refused.
RUN_SETTINGS = ("datasets", "musique_full", "fold_seed", "common", "systems", "threads")


def check_same_settings(config: dict[str, Any], out: Path, sides: dict[str, Sides]) -> None:
    """Record in `out/settings.json` the settings the runs depend on and the sides' sha256; refuse (naming what
    changed) an output folder whose runs were made with other ones, whose finished runs would be read as if not."""
    recorded = {
        "settings": {key: config.get(key) for key in RUN_SETTINGS},
        "sides": {
            name: {
                side: hashlib.sha256(path.read_bytes()).hexdigest()
                for side, path in (("train", s.train), ("evaluation", s.evaluation))
            }
            for name, s in sides.items()
        },
    }
    path = out / "settings.json"
    if path.is_file():
        before = json.loads(path.read_text())
        changed = [key for key in RUN_SETTINGS if before["settings"].get(key) != recorded["settings"][key]]
        changed += [
            f"the {name} sides" for name in recorded["sides"] if before["sides"].get(name) != recorded["sides"][name]
        ]
        if changed:
            raise BenchmarkError(
                f"{out} holds runs made with other settings ({', '.join(changed)} changed): give another --out"
            )
    write_json(path, recorded)


def load_config(path: str | Path = CONFIG_FILE) -> dict[str, Any]:
    config = yaml.safe_load(Path(path).read_text())
    unknown = set(config["parts"]) - set(PARTS)
    if unknown:
        raise BenchmarkError(f"{path}: unknown parts {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    return config


def parse_parts(only: str | None) -> list[str]:
    if not only:
        return list(PARTS)
    parts = [part.strip() for part in only.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise BenchmarkError(f"--only: unknown part(s) {', '.join(unknown)}; choose among {', '.join(PARTS)}")
    return [part for part in PARTS if part in parts]


def add_run_times(timings: dict[str, Any], walls: Mapping[str, float], part_of: Mapping[str, str], wall: float) -> None:
    """Add one call's run times to `timings` (timings.json), so that a benchmark resumed over several calls reports
    what all of them took: `runs_wall` (the calls' run phases, `jobs` runs at a time), `run_walls` (each run's own
    wall time, its attempts added up), `run_parts` (the part each run belongs to) and `<part>_run_time` (the part's
    runs' wall times added up: they ran beside others)."""
    timings["runs_wall"] = round(timings.get("runs_wall", 0.0) + wall, 1)
    run_walls, run_parts = timings.setdefault("run_walls", {}), timings.setdefault("run_parts", {})
    for key, seconds in walls.items():
        run_walls[key] = round(run_walls.get(key, 0.0) + seconds, 1)
        run_parts[key] = part_of.get(key, run_parts.get(key, "?"))
    for part in dict.fromkeys(run_parts.values()):
        timings[f"{part}_run_time"] = round(sum(run_walls[k] for k, owner in run_parts.items() if owner == part), 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", help=f"parts to run, comma-separated ({', '.join(PARTS)}); default: all")
    parser.add_argument(
        "--out", type=Path, help="output folder (default logs/paper_findings/<time>); reused: finished runs are read"
    )
    parser.add_argument("--seeds", help="training seeds, comma-separated (default: the config's)")
    parser.add_argument("--jobs", type=int, help="runs at a time (default: the config's)")
    parser.add_argument(
        "--config", type=Path, default=CONFIG_FILE, help="the settings file (default benchmarks/paper_findings.yaml)"
    )
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
        parts = parse_parts(args.only)
    except BenchmarkError as error:
        parser.error(str(error))
    seeds = [int(seed) for seed in args.seeds.split(",")] if args.seeds else list(config["seeds"])
    out = (
        args.out or PROJECT_ROOT / "logs" / "paper_findings" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    ).resolve()
    out.mkdir(parents=True, exist_ok=True)
    timings_path = out / "timings.json"
    timings: dict[str, Any] = json.loads(timings_path.read_text()) if timings_path.is_file() else {}
    start = time.perf_counter()
    sides = prepare_data(config, out)
    try:
        check_same_settings(config, out, sides)
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    timings["data"] = round(time.perf_counter() - start, 1)
    # Every part's runs in one queue (a run waits only for the runs it reads), so that no core idles at the end of a
    # part; a run two parts share (a curve's point that is a main run) runs once, counted in the first part.
    jobs: dict[str, Job] = {}
    part_of: dict[str, str] = {}
    for part in parts:
        if part != "findings":
            for job in part_jobs(part, config, out, sides, seeds):
                part_of.setdefault(job.key, part)
                jobs.setdefault(job.key, job)
    start = time.perf_counter()
    try:
        walls = run_jobs(list(jobs.values()), args.jobs or config["jobs"], out / "logs")
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if walls:
        add_run_times(timings, walls, part_of, time.perf_counter() - start)
        write_json(timings_path, timings)
        print(f"runs: {timings['runs_wall'] / 60:.1f} min (every call on this folder)", flush=True)
    if "findings" in parts:
        start = time.perf_counter()
        try:
            data = write_results(Results(config, out, sides, seeds), timings)
        except BenchmarkError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        timings["findings"] = round(time.perf_counter() - start, 1)
        write_json(timings_path, timings)
        for finding in data["findings"]:
            print(f"{finding['verdict']:>27}: {finding['claim']}")
        print(f"results: {out / 'results.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
