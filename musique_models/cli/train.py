"""The body of `train.py`: load the data, run the configured recipe, write official predictions and metrics."""

from __future__ import annotations

import io
import logging
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from musique_models.data.schema import Example
from musique_models.data.source import DatasetSource
from musique_models.data.summary import print_summary
from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.evaluator import evaluate_predictions, metrics_table
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import write_predictions
from musique_models.io import atomic_open, write_json
from musique_models.recipes.base import Recipe, RunContext
from musique_models.training.loggers import close_run_loggers, log_run_results, run_loggers
from musique_models.training.malloc import keep_freed_memory

log = logging.getLogger(__name__)

STATUS_FILE = "status.json"
CONFIG_FILE = "config.yaml"
# Keys that may differ between a run and its resumption (`ckpt_path=last`): where files are, how progress is shown
# and logged, when resume points are written. Everything else (data, model, optimisation, the best-checkpoint and
# early-stopping callbacks) must match.
RESUME_SAFE_KEYS = (
    "ckpt_path",
    "paths",
    "callbacks",
    "logger",
    "trainer.enable_progress_bar",
    "trainer.threads",
    "model.num_workers",
    "model.eval_batch_size",
)
# ... except these, which decide what a stage keeps and when it stops.
RESUME_CHECKED_KEYS = ("callbacks.model_checkpoint", "callbacks.early_stopping")


class RunConfigError(MusiqueModelsError):
    """The run's configuration cannot be carried out as asked (resume, split, device)."""


def run_dir(cfg: DictConfig) -> Path:
    """The run folder: Hydra's output folder when run through Hydra, else `paths.output_dir`."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.paths.output_dir)


def train(cfg: DictConfig) -> float | None:
    """Load the dataset, train the configured recipe, predict the evaluation split and score it.

    Writes into the run folder `config.yaml`, `status.json` (running / finished / failed, with the error),
    `predictions.jsonl` (official format) and `metrics.json` (the evaluator's keys); returns
    `cfg.optimized_metric` for Hydra sweepers (None when no model is configured).
    """
    output_dir = run_dir(cfg)
    console = Console()
    console.print(f"run folder: {output_dir}")
    write_to_log_file(f"run folder: {output_dir}")
    try:
        check_run_config(cfg, output_dir)
    except RunConfigError as error:
        log.error("refused: %s", error)
        if not (output_dir / CONFIG_FILE).exists():  # never overwrite the status of the run that is there
            write_json(output_dir / STATUS_FILE, {"status": "refused", "error": str(error)})
        raise
    write_json(output_dir / STATUS_FILE, {"status": "running", "pid": os.getpid()})
    try:
        result = _train(cfg, output_dir, console)
    except BaseException as error:
        message = f"{type(error).__name__}: {error}"
        log.error("run failed: %s", message)
        write_json(output_dir / STATUS_FILE, {"status": "failed", "error": message})
        raise
    write_json(output_dir / STATUS_FILE, {"status": "finished"})
    return result


def check_run_config(cfg: DictConfig, output_dir: Path) -> None:
    """Refuse, before anything is loaded, what cannot be done as asked: a resume of another run's config, a new
    run over a finished one, an unknown evaluation split, `eval_size` <= 0, a GPU trainer without a GPU."""
    saved = output_dir / CONFIG_FILE
    if cfg.get("ckpt_path") not in (None, "last"):
        raise RunConfigError(
            f"ckpt_path={cfg.ckpt_path}: ckpt_path takes `last` (resume the run in hydra.run.dir); "
            "to reuse a trained selector pass model.selector_checkpoint=PATH"
        )
    if cfg.get("ckpt_path") == "last":
        if not saved.exists():
            raise RunConfigError(
                f"ckpt_path=last resumes the run in hydra.run.dir=<run folder>, but {output_dir} "
                "holds no run (pass hydra.run.dir=logs/train/runs/<time> of the run to resume)"
            )
        differing = config_differences(OmegaConf.load(saved), cfg)
        if differing:
            raise RunConfigError(
                f"{output_dir} holds a run with another configuration; resuming it would mix the "
                f"two. Differing keys: {', '.join(differing)}"
            )
    elif saved.exists():
        raise RunConfigError(
            f"{output_dir} already holds a run; resume it with ckpt_path=last (same arguments) or "
            "choose another hydra.run.dir"
        )
    splits = list(cfg.dataset.sample_files if cfg.dataset.get("sample") else cfg.dataset.files)
    if cfg.eval_split not in splits:
        raise RunConfigError(
            f"eval_split={cfg.eval_split}: {cfg.dataset.name} has no such split here "
            f"(choose one of {', '.join(splits)})"
        )
    if cfg.eval_split in (cfg.dataset.get("unlabelled_splits") or []):
        raise RunConfigError(
            f"eval_split={cfg.eval_split}: {cfg.dataset.name}'s {cfg.eval_split} split is unlabelled and cannot be "
            f"scored; train with eval_split=dev, then predict it: python evaluate.py run=RUN_DIR split={cfg.eval_split}"
        )
    if cfg.get("eval_size") is not None and int(cfg.eval_size) <= 0:
        raise RunConfigError(
            f"eval_size={cfg.eval_size}: give a positive number of questions, or eval_size=null for the whole split"
        )
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not torch.cuda.is_available():
        raise RunConfigError(
            f"trainer accelerator={accelerator}, but this machine has no usable GPU "
            "(use trainer=cpu, or trainer=default to pick the device automatically)"
        )


def config_differences(saved: DictConfig, current: DictConfig) -> list[str]:
    """Keys whose resolved values differ between a saved run config and `current`, leaving out the resume-safe
    keys. `current` is resolved with the saved run's `paths`, so a moved run folder (or repository) still resumes
    while a changed data file (`dataset.files.train=...`) is caught."""
    saved_values = _flatten(OmegaConf.to_container(saved, resolve=False))
    probe = OmegaConf.to_container(current, resolve=False)
    probe["paths"] = OmegaConf.to_container(saved, resolve=False).get("paths", probe.get("paths"))
    current_values = _flatten(OmegaConf.to_container(OmegaConf.create(probe), resolve=True))
    differing = []
    for key in sorted(set(current_values) | set(saved_values)):
        checked = any(key == kept or key.startswith(f"{kept}.") for kept in RESUME_CHECKED_KEYS)
        if not checked and any(key == safe or key.startswith(f"{safe}.") for safe in RESUME_SAFE_KEYS):
            continue
        if current_values.get(key, "<absent>") != saved_values.get(key, "<absent>"):
            differing.append(key)
    return differing


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def _train(cfg: DictConfig, output_dir: Path, console: Console) -> float | None:
    quiet_libraries()
    set_threads(cfg.trainer.get("threads"))
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    keep_freed_memory()
    if not (output_dir / CONFIG_FILE).exists():
        with atomic_open(output_dir / CONFIG_FILE) as handle:
            handle.write(OmegaConf.to_yaml(cfg, resolve=True))
    source: DatasetSource = instantiate(cfg.dataset)
    splits = {split: source.load(split, run_dir=output_dir) for split in dict.fromkeys(["train", cfg.eval_split])}
    if cfg.get("eval_size"):
        splits[cfg.eval_split] = first_questions(splits[cfg.eval_split], cfg.eval_size)
    show(console, lambda target: print_summary(source, splits, target))
    if cfg.get("model") is None:
        log.warning(
            "No model is configured (~model): nothing was trained. Choose one with model=<name> (see conf/model/)."
        )
        return None
    loggers = run_loggers(cfg, output_dir)
    try:
        return _run_recipe(cfg, output_dir, console, source, splits, loggers)
    except BaseException:
        close_run_loggers(loggers, "failed")
        raise


def _run_recipe(
    cfg: DictConfig,
    output_dir: Path,
    console: Console,
    source: DatasetSource,
    splits: dict[str, Any],
    loggers: list[Any],
) -> float | None:
    """Run the configured recipe on the loaded splits; write, log and show its predictions' scores."""
    evaluation = splits[cfg.eval_split]
    context = RunContext(
        cfg=cfg,
        source=source,
        train=splits["train"],
        evaluation=evaluation,
        eval_golds=[gold_from_example(Example.from_dict(row), i) for i, row in enumerate(evaluation)],
        run_dir=output_dir,
        loggers=loggers,
    )
    recipe = instantiate_recipe(cfg)
    predictor = recipe.fit(context)
    predictions = predictor.predict(evaluation, output_dir)
    # a recipe that answers nothing (the decomposer alone) predicts None: its metrics are its own
    metrics = evaluate_predictions(context.eval_golds, predictions).metrics if predictions is not None else {}
    metrics.update(predictor.extra_metrics)
    if predictions is not None:
        write_predictions(output_dir / "predictions.jsonl", predictions)
    write_json(output_dir / "metrics.json", metrics)
    for logger in loggers:
        logger.log_metrics({f"test/{key}": value for key, value in metrics.items()})
    log_run_results(loggers, metrics, [output_dir / "predictions.jsonl", output_dir / "metrics.json"])
    close_run_loggers(loggers, "success")
    title = f"{cfg.model_name} on {source.name} {cfg.eval_split}"
    show(console, lambda target: target.print(metrics_table(metrics, title=title)))
    log.info("metrics: %s", output_dir / "metrics.json")
    if predictions is not None:
        log.info("predictions: %s", output_dir / "predictions.jsonl")
    log.info("disk used by the run folder: %.1f MB", folder_megabytes(output_dir))
    return metrics.get(cfg.optimized_metric)


def instantiate_recipe(cfg: DictConfig) -> Recipe:
    """The recipe `cfg.model` configures (`model=<name>`)."""
    recipe = instantiate(cfg.model, _recursive_=False)
    if not isinstance(recipe, Recipe):
        raise RunConfigError(f"model={cfg.model_name}: {cfg.model._target_} is not a recipe (needs name, fit and load)")
    return recipe


def first_questions(table: Any, count: int) -> Any:
    """The rows of the first `count` distinct question ids (MuSiQue-Full twins stay together)."""
    kept = set(list(dict.fromkeys(table["id"]))[:count])
    return table.select([row for row, question_id in enumerate(table["id"]) if question_id in kept])


def folder_megabytes(folder: Path) -> float:
    """Bytes of every file under `folder`, in MB."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


def show(console: Console, render: Any) -> None:
    """Print a rich table on the console and write the same text into the run's log file (`train.log`)."""
    recorder = Console(record=True, width=console.width, file=io.StringIO())
    render(recorder)
    render(console)
    write_to_log_file("\n" + recorder.export_text().rstrip())


def write_to_log_file(text: str) -> None:
    """Write `text` as an INFO record into the run's log files only (what the console already shows)."""
    record = logging.LogRecord(log.name, logging.INFO, __file__, 0, "%s", (text,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(record)


def set_threads(threads: int | str | None) -> None:
    """torch's CPU threads (`trainer.threads`): a number; `auto`, the cores other processes leave free right now
    (at least 1; measured over 0.2 s from /proc/stat); or null, torch's default (one per core)."""
    if threads == "auto":
        threads = free_cores()
    if threads is not None:
        torch.set_num_threads(int(threads))
    log.info("torch CPU threads: %d", torch.get_num_threads())


def free_cores(interval: float = 0.2) -> int | None:
    """Cores of this process's CPU set that other processes leave free, measured over `interval` s while this
    process waits (Linux's /proc/stat; None elsewhere). See `cores_left_free`."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = set(os.sched_getaffinity(0))
    try:
        before = cpu_busy_and_total(Path("/proc/stat").read_text(), allowed)
        time.sleep(interval)
        after = cpu_busy_and_total(Path("/proc/stat").read_text(), allowed)
    except (OSError, ValueError, IndexError):
        return None
    return cores_left_free(before, after, len(allowed), cpu_quota(len(allowed)))


def cpu_busy_and_total(stat: str, allowed: set[int]) -> tuple[int, int]:
    """Busy and total time (jiffies) of the `allowed` CPUs, summed from the `cpuN` lines of /proc/stat."""
    busy = total = 0
    for line in stat.splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in allowed:
            continue
        counts = [int(value) for value in values]
        idle = counts[3] + (counts[4] if len(counts) > 4 else 0)  # idle + iowait
        busy, total = busy + sum(counts) - idle, total + sum(counts)
    return busy, total


def cores_left_free(before: tuple[int, int], after: tuple[int, int], cores: int, quota: int) -> int | None:
    """`cores` minus the cores kept busy between two (busy, total) readings, capped by `quota`, at least 1."""
    (busy_before, total_before), (busy_after, total_after) = before, after
    if total_after <= total_before:
        return None
    busy_cores = (busy_after - busy_before) / (total_after - total_before) * cores
    return max(1, min(quota, round(cores - busy_cores)))


def cpu_quota(cores: int) -> int:
    """The cgroup (v2) CPU quota in whole cores (`cpu.max`), or `cores` when there is none."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else max(1, min(cores, int(int(quota) / int(period))))


# Warnings that say nothing actionable about a run: library deprecations, and Lightning's advice on workers, custom
# batch samplers (ours covers every row) and logging intervals longer than a tiny epoch. Literal message starts.
QUIET_WARNINGS = (
    "`isinstance(treespec",  # ", LeafSpec)` is deprecated" (a comma would break PYTHONWARNINGS)
    "The number of training batches",
    "You are using a custom batch sampler",
    "The '",  # "The 'train_dataloader' does not have many workers"
    "Total length of `list` across ranks is zero",  # a stage that does not validate has no validation loader
)


def quiet_libraries() -> None:
    """Route warnings into the log, keep known noise out (here and in DDP worker processes, through
    PYTHONWARNINGS), and keep libraries' advertising and notices out of the console."""
    logging.captureWarnings(True)
    for name in (
        "pytorch_lightning.utilities.rank_zero",
        "lightning.pytorch.utilities.rank_zero",
        "lightning_fabric.utilities.rank_zero",
        "lightning.fabric.utilities.rank_zero",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message))
    inherited = [os.environ["PYTHONWARNINGS"]] if os.environ.get("PYTHONWARNINGS") else []
    os.environ["PYTHONWARNINGS"] = ",".join(
        inherited + [f"ignore:{message}" for message in QUIET_WARNINGS if "," not in message and ":" not in message]
    )
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading weights" bars: the weights are local and load at once
