"""The names of the files and folders in a run folder, in one place: every module that writes or reads a run folder
takes them from here (docs/training.md, *The run folder*, describes each).

    <run>/config.yaml, status.json, provenance.json, predictions.jsonl, metrics.json, train.log,
          subsample_train_ids.json, wandb_run_id.txt, evaluations/<dataset>-<split>[-dire-<name>]/, errors.html
    <run>/<stage>/stage.json, checkpoints/{best,last}.ckpt, csv/version_<n>/metrics.csv
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from musique_models.errors import EvaluateConfigError

# The run
CONFIG_FILE = "config.yaml"  # the resolved configuration (what a resume is checked against)
STATUS_FILE = "status.json"
PROVENANCE_FILE = "provenance.json"
PREDICTIONS_FILE = "predictions.jsonl"  # official MuSiQue prediction format
METRICS_FILE = "metrics.json"
PER_QUESTION_FILE = "metrics.per_question.jsonl"  # beside it: each question's scores (intervals, error analysis)
LOG_FILE = "train.log"  # Hydra's job log (`hydra.job.name` is `train`)
WANDB_ID_FILE = "wandb_run_id.txt"
EVALUATIONS_FOLDER = "evaluations"  # `evaluate.py run=...` writes one folder per split and mode here
SCORING_FILE = "scoring.json"  # in each evaluations/ folder: what it predicted (dataset, split, sample, size, mode)
PAGE_FILE = "errors.html"  # the error browser

# A stage of the run, in `<run>/<stage>/`
STAGE_FILE = "stage.json"
CHECKPOINTS_FOLDER = "checkpoints"
BEST_FILE = "best.ckpt"  # the stage's best weights (weights only)
RESUME_FILE = "last.ckpt"  # the stage's resume point while it trains
# Written into the training stage's folder by the main process, read by every training process: under DDP the
# worker processes may not receive the signal themselves.
STOP_FILE = "stop_requested"

# What recipes write beside the predictions
RANKING_FILE = "selector_ranking.json"  # Select+Answer: the selector's ranking of the evaluation split
STEPS_FILE = "steps.jsonl"  # Step Execution: every executed step
DECOMPOSITIONS_FILE = "decompositions.jsonl"  # the decomposer's sub-questions
GENERATIONS_FILE = "generations.jsonl"  # generative readers: each row's raw generation and what its parse missed
GENERATION_SPEED_FILE = "generation_speed.json"  # generative readers: questions, tokens and seconds of the generation
EXEMPLARS_FILE = "prompt_exemplars.json"  # model=llm_prompt: the k-shot exemplars the run's prompts hold
EXPORT_FILE = "export.json"  # an export (python -m musique_models.export): what it holds, the version that wrote it
SIDE_FILES = "side_files.json"  # the row-by-row side files a predictor declared (the error browser shows them)


def subsample_ids_file(split: str) -> str:
    """The file of the ids a split's subsample kept (`subsample_train_ids.json`)."""
    return f"subsample_{split}_ids.json"


def stage_ranking_file(split: str) -> str:
    """A selector stage's ranking of a split it ranked for its answerer (`ranking_train.json`)."""
    return f"ranking_{split}.json"


# This attempt at a run (`begin_attempt`): its id, in the `status.json` it writes (a status written by another
# attempt is an earlier start), and when it began (a run folder made before then is not this attempt's).
ATTEMPT = uuid.uuid4().hex
ATTEMPT_START = time.time()


def begin_attempt() -> None:
    """Start a new attempt at a run in this process: a new `ATTEMPT` id and `ATTEMPT_START` (train.py does so first
    thing; a process forked from one that ran an attempt would otherwise share its id)."""
    global ATTEMPT, ATTEMPT_START
    ATTEMPT, ATTEMPT_START = uuid.uuid4().hex, time.time()


# What Hydra writes into a run's folder before the run starts: its config copies and the log file.
HYDRA_FILES = frozenset({".hydra", LOG_FILE})


def current_attempt() -> str:
    """This attempt's id (`ATTEMPT`, read at call time: `begin_attempt` replaces it)."""
    return ATTEMPT


def run_status(run_dir: str | Path) -> dict[str, Any] | None:
    """The run folder's `status.json`, or None when it has none (or none that can be read)."""
    try:
        status = json.loads((Path(run_dir) / STATUS_FILE).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) else None


def check_run_folder(run_dir: str | Path) -> Path:
    """`run_dir` if it holds a finished train.py run, else `EvaluateConfigError` in one line: no such folder, not a
    run folder, or a run that did not finish (with the command that resumes it). Reads two small files: it answers
    before torch loads."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise EvaluateConfigError(f"run={run_dir}: no such folder")
    status = run_status(run_dir)
    if status is None or not (run_dir / CONFIG_FILE).exists():
        raise EvaluateConfigError(f"run={run_dir}: not a train.py run folder (no {STATUS_FILE} and {CONFIG_FILE})")
    if status.get("status") != "finished":
        command = status.get("resume_command") or (
            f"python train.py ckpt_path=last hydra.run.dir={run_dir} with its own arguments"
        )
        raise EvaluateConfigError(
            f"run={run_dir}: the run is {status.get('status')}, not finished; resume it ({command}), then predict"
        )
    return run_dir


def has_trained(output_dir: Path) -> bool:
    """Whether any stage of the run in `output_dir` started training (it has checkpoints or a stage record)."""
    return any(output_dir.glob(f"*/{CHECKPOINTS_FOLDER}")) or any(output_dir.glob(f"*/{STAGE_FILE}"))


def is_finished(run_dir: str | Path) -> bool:
    """Whether the run in `run_dir` finished: its status says so and its metrics are written."""
    status = run_status(run_dir)
    return status is not None and status.get("status") == "finished" and (Path(run_dir) / METRICS_FILE).exists()


def mark_run_start(run_dir: str | Path) -> None:
    """Give a run folder that holds nothing but Hydra's files the status `starting` (with this attempt's id), the
    moment `train.py` starts: a folder left by an attempt killed in its first seconds is then known as a run's start
    (`ckpt_path=last` starts it afresh there), never taken for a mistyped folder. A folder of Hydra's files made
    before this process began (an attempt killed before it marked its start: Hydra adds no entry to it on a rerun)
    is marked an `earlier_start`."""
    from musique_models.io import write_json

    run_dir = Path(run_dir)
    if run_dir.is_dir() and set(os.listdir(run_dir)) <= HYDRA_FILES:
        earlier = run_dir.stat().st_mtime < ATTEMPT_START
        status = {"status": "starting", "pid": os.getpid(), "attempt": current_attempt(), "earlier_start": earlier}
        write_json(run_dir / STATUS_FILE, status)


def holds_only_this_start(run_dir: str | Path) -> bool:
    """Whether `run_dir` holds nothing but what Hydra and this attempt's start wrote (so it may be removed if the
    run stops before it does anything): never a folder holding another run, another attempt's start, or a user's
    files. True for a folder that does not exist."""
    run_dir = Path(run_dir)
    if not run_dir.exists():
        return True
    entries = set(os.listdir(run_dir))
    if STATUS_FILE in entries:
        status = run_status(run_dir)
        if status is None or status.get("attempt") != current_attempt() or status.get("status") != "starting":
            return False
    return entries - {STATUS_FILE} <= HYDRA_FILES


def discard_unstarted_run(run_dir: str | Path) -> bool:
    """Remove `run_dir` if it holds only this attempt's start (`holds_only_this_start`); whether it did."""
    import shutil

    if Path(run_dir).exists() and holds_only_this_start(run_dir):
        shutil.rmtree(run_dir, ignore_errors=True)
        return True
    return False


def write_side_file(output_dir: str | Path, name: str, title: str, records: list[dict[str, Any]]) -> Path:
    """Write a predictor's row-by-row side file `<output_dir>/<name>` (JSON lines; each record names the predicted
    `row` and its `id`) and declare it in `side_files.json` under `title`: the error browser shows each row's
    records under that title, field by field, with no code of its own for the file. Both files are written
    atomically; declaring a file again replaces its entry."""
    from musique_models.io import write_json, write_jsonl

    for position, record in enumerate(records):
        if not isinstance(record.get("row"), int) or "id" not in record:
            raise ValueError(f"{name}: record {position} has no `row` (int) and `id`")
    output_dir = Path(output_dir)
    path = output_dir / name
    write_jsonl(path, records)
    declared = [entry for entry in declared_side_files(output_dir) if entry["file"] != name]
    write_json(output_dir / SIDE_FILES, {"side_files": [*declared, {"file": name, "title": title}]})
    return path


def declared_side_files(run_dir: str | Path) -> list[dict[str, str]]:
    """The side files declared in a run's (or an evaluation's) folder, in the order declared: `file` and `title`. A
    folder written before side files were declared has no `side_files.json`: its generative reader's
    `generations.jsonl`, the one row-by-row file of that time, stands declared."""
    path = Path(run_dir) / SIDE_FILES
    if not path.exists():
        legacy = Path(run_dir) / GENERATIONS_FILE
        return [{"file": GENERATIONS_FILE, "title": "raw generation"}] if legacy.exists() else []
    return list(json.loads(path.read_text(encoding="utf-8")).get("side_files", []))
