"""One training stage: build the Trainer from the configs, fit (or resume), keep the best weights; and find a
finished stage's best weights again."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar
from pytorch_lightning.loggers import Logger

from musique_models.errors import MusiqueModelsError
from musique_models.io import checkpoint_problem, write_json
from musique_models.models.numerics import ThreadStableTraining
from musique_models.run_files import BEST_FILE, CHECKPOINTS_FOLDER, RESUME_FILE, STAGE_FILE
from musique_models.training.loggers import StageLogger, stage_file_loggers
from musique_models.training.progress import StageClock
from musique_models.training.resume import ResumePoints, describe_resume_point, partial_path, save_atomically
from musique_models.training.stop import STOP, RunInterrupted
from musique_models.training.threads import choose_threads

log = logging.getLogger(__name__)

# Keys of the `trainer` config that are this project's, not the Lightning Trainer's.
PROJECT_TRAINER_KEYS = ("threads",)


@dataclass
class StageResult:
    """What a finished stage leaves: its best weights (a weights-only checkpoint)."""

    best_checkpoint: str


def stage_callbacks(
    cfg: DictConfig,
    checkpoint_dir: Path,
    monitor: str | None,
    mode: str,
    has_loggers: bool,
    stage_cfg: DictConfig | None = None,
) -> list[pl.Callback]:
    """Every entry of the `callbacks` group, instantiated for one stage (a user's extra callback works as is).

    Per stage: an entry with a `dirpath` key writes under the stage's `checkpoints/` folder (its own value, when
    set, is a subfolder); an entry with a non-null `monitor` watches the stage's validation metric, and is left
    out when the stage does not validate; an entry with a `patience` key takes the stage's `patience` (early
    stopping as the official configs: 2 for the MuSiQue selector, 3 elsewhere). Learning-rate monitors need a logger and progress bars an enabled bar:
    they are left out otherwise.
    """
    callbacks = []
    for callback_cfg in (cfg.get("callbacks") or {}).values():
        if callback_cfg is None or "_target_" not in callback_cfg:
            continue
        overrides: dict[str, Any] = {}
        if "dirpath" in callback_cfg:
            subfolder = callback_cfg.get("dirpath")
            overrides["dirpath"] = str(checkpoint_dir / subfolder if subfolder else checkpoint_dir)
        if callback_cfg.get("monitor") is not None:
            if monitor is None:
                continue
            overrides.update(monitor=monitor, mode=mode)
        if "patience" in callback_cfg and stage_cfg is not None and stage_cfg.get("patience") is not None:
            overrides["patience"] = stage_cfg.patience
        callback = instantiate(callback_cfg, **overrides)
        if isinstance(callback, LearningRateMonitor) and not has_loggers:
            log.debug("no logger: the learning-rate monitor is left out")
            continue
        if isinstance(callback, ProgressBar) and not cfg.trainer.get("enable_progress_bar", True):
            continue
        callbacks.append(callback)
    return callbacks


def lightning_trainer_kwargs(cfg: DictConfig) -> dict[str, Any]:
    """`cfg.trainer` without this project's own keys (`threads`)."""
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    for key in PROJECT_TRAINER_KEYS:
        trainer_cfg.pop(key, None)
    return trainer_cfg


def build_trainer(
    cfg: DictConfig, stage_cfg: DictConfig, callbacks: list[pl.Callback], loggers: list[Logger], stage_dir: Path
) -> pl.Trainer:
    """The Trainer of `cfg.trainer` with this stage's epochs, gradient accumulation, validation interval and
    gradient clipping (`validate: false` in the stage config: no validation at all; `batches_per_epoch`: epochs of
    that many optimizer steps, the official `batches_per_epoch`)."""
    overrides: dict[str, Any] = {
        key: stage_cfg[key]
        for key in (
            "max_epochs",
            "accumulate_grad_batches",
            "check_val_every_n_epoch",
            "gradient_clip_algorithm",
            "gradient_clip_val",
        )
        if stage_cfg.get(key)
    }
    if not stage_cfg.get("validate", True):
        overrides["limit_val_batches"] = 0
    if stage_cfg.get("batches_per_epoch"):
        overrides["limit_train_batches"] = stage_cfg.batches_per_epoch * (stage_cfg.get("accumulate_grad_batches") or 1)
    return instantiate(
        lightning_trainer_kwargs(cfg),
        callbacks=callbacks,
        logger=loggers or False,
        default_root_dir=str(stage_dir),
        **overrides,
    )


def resume_point(ckpt_path: str | None, checkpoint_dir: Path, name: str = "") -> Path | None:
    """The stage's resume point when the run resumes (`ckpt_path=last`) and the stage has a whole one, else None.

    A resume point that is not whole (a copy cut short, a disk that filled up), or whose stage's best checkpoint so
    far is not, is said in one line and set aside (`<file>.damaged`): the stage then starts afresh."""
    if ckpt_path != "last":
        return None
    path = checkpoint_dir / RESUME_FILE
    if not path.exists():
        return None
    problem = checkpoint_problem(path)
    damaged = path
    if problem is None:
        best = tracked_best_checkpoint(path, checkpoint_dir)
        problem = checkpoint_problem(best) if best is not None and best.exists() else None
        damaged = best if problem is not None else path
    if problem is None:
        return path
    set_aside(damaged, f"stage {name}: {damaged} is {problem}", "the stage starts afresh")
    return None


def set_aside(path: Path, what: str, then: str) -> None:
    """Say in one warning that a checkpoint cannot be used (`what`, naming it and why) and what happens `then`, and
    rename it to `<name>.damaged` (kept for the user to look at; nothing reads it again)."""
    log.warning("%s: it is set aside as %s.damaged and %s", what, path.name, then)
    if path.exists():
        os.replace(path, path.with_name(f"{path.name}.damaged"))


def remove_resume_point(checkpoint_dir: Path) -> None:
    """Delete a finished stage's resume point and its partial write: nothing resumes the stage any more."""
    for leftover in (checkpoint_dir / RESUME_FILE, partial_path(checkpoint_dir / RESUME_FILE)):
        leftover.unlink(missing_ok=True)


def tracked_best_checkpoint(point: Path, checkpoint_dir: Path) -> Path | None:
    """The best checkpoint so far that the resume point `point` names (its `ModelCheckpoint` state), in
    `checkpoint_dir` (a run folder moved mid-stage keeps the file's name, not its old absolute path); None when it
    names none."""
    import torch

    state = torch.load(point, map_location="cpu", mmap=True, weights_only=False).get("callbacks", {})
    for value in state.values():
        if isinstance(value, dict) and value.get("best_model_path"):
            return checkpoint_dir / Path(value["best_model_path"]).name
    return None


def clear_checkpoints(checkpoint_dir: Path) -> None:
    """Delete what an earlier attempt of a stage that starts afresh left in its checkpoints folder (a best checkpoint
    nothing tracks, a partial resume point): nothing resumes from them, and a stale `best.ckpt` would make the
    stage's own best `best-v1.ckpt`. Files set aside as `.damaged` stay for the user to look at."""
    if not checkpoint_dir.is_dir():
        return
    for path in checkpoint_dir.iterdir():
        if path.is_file() and not path.name.endswith(".damaged"):
            path.unlink()


def finished_stage(run_dir: Path, name: str) -> dict[str, Any] | None:
    """The record of stage `name` if it finished in `run_dir` (its paths made absolute again), else None."""
    marker = run_dir / name / STAGE_FILE
    if not marker.exists():
        return None
    record = json.loads(marker.read_text())
    record["best_checkpoint"] = str(run_dir / record["best_checkpoint"])
    return record


class StageNotFinishedError(MusiqueModelsError):
    """A trained run lacks a finished stage, or its best checkpoint, that prediction needs."""


def finished_checkpoint(run_dir: Path, name: str) -> str:
    """The best checkpoint of stage `name` of the finished run in `run_dir`; `StageNotFinishedError` (one line)
    when the stage never finished there or its checkpoint is gone."""
    finished = finished_stage(Path(run_dir), name)
    if finished is None:
        raise StageNotFinishedError(
            f"{run_dir} has no finished stage {name!r} ({Path(run_dir) / name / STAGE_FILE} is missing): the run did "
            "not finish; resume it (train.py ckpt_path=last hydra.run.dir=RUN_DIR with its own arguments)"
        )
    problem = checkpoint_problem(finished["best_checkpoint"])
    if problem is not None:
        raise StageNotFinishedError(
            f"stage {name!r} of {run_dir}: its best checkpoint {finished['best_checkpoint']} is {problem}; resume the "
            "run (train.py ckpt_path=last hydra.run.dir=RUN_DIR with its own arguments) to train the stage again"
        )
    return finished["best_checkpoint"]


def logged_steps_before(run_dir: Path, name: str) -> int:
    """Logger steps taken by the run's other finished stages: where stage `name`'s steps start."""
    return sum(
        json.loads(marker.read_text()).get("logged_steps", 0)
        for marker in run_dir.glob(f"*/{STAGE_FILE}")
        if marker.parent.name != name
    )


def run_stage(
    name: str,
    module: pl.LightningModule,
    datamodule: pl.LightningDataModule,
    cfg: DictConfig,
    stage_cfg: DictConfig,
    run_dir: Path,
    monitor: str | None,
    mode: str = "max",
    shared_loggers: list[Logger] = (),
) -> StageResult:
    """Fit `module` as stage `name` in `run_dir/name`, resuming when `cfg.ckpt_path` says so; return its best
    weights.

    A finished stage keeps only `checkpoints/best.ckpt` (weights, no optimizer state: the best validation epoch,
    or the final weights of a stage with `validate: false`) and writes `stage.json` (paths relative to the run
    folder, so a moved folder still resumes); `ckpt_path=last` then skips it. The resume point (`last.ckpt`, with
    optimizer, scheduler, RNG and loader states; `musique_models.training.resume`) exists only while the stage runs.
    A stop requested while the stage trains is honoured at its next optimizer step (`RunInterrupted`), or, when the
    stage ends first, right after it is recorded.
    """
    finished = finished_stage(run_dir, name)
    resuming = cfg.get("ckpt_path") == "last"
    stage_dir = run_dir / name
    checkpoint_dir = stage_dir / CHECKPOINTS_FOLDER
    if resuming and finished is not None:
        best = Path(finished["best_checkpoint"])
        problem = checkpoint_problem(best)
        if problem is None:
            log.info("stage %s already finished in %s: reusing %s", name, stage_dir, best)
            remove_resume_point(checkpoint_dir)  # a kill after the stage was recorded, before it was deleted
            return StageResult(str(best))
        set_aside(best, f"stage {name}: its best checkpoint {best} is {problem}", "the stage is trained again")
        (stage_dir / STAGE_FILE).unlink()
    validates = bool(stage_cfg.get("validate", True))
    offset = logged_steps_before(run_dir, name)
    loggers = [StageLogger(logger, name, offset) for logger in shared_loggers]
    loggers += [StageLogger(logger, name, offset, own=True) for logger in stage_file_loggers(cfg, stage_dir)]
    callbacks = stage_callbacks(cfg, checkpoint_dir, monitor if validates else None, mode, bool(loggers), stage_cfg)
    callbacks += [StageClock(name), ThreadStableTraining()]  # ThreadStableTraining: the same with any thread count
    trainer = build_trainer(cfg, stage_cfg, callbacks, loggers, stage_dir)
    had_a_point = (checkpoint_dir / RESUME_FILE).exists()
    resume_from = resume_point(cfg.get("ckpt_path"), checkpoint_dir, name)
    if resume_from is not None:
        log.info("stage %s resumes from %s, %s", name, resume_from, describe_resume_point(resume_from))
    else:
        if resuming and not had_a_point:  # a damaged point was said and set aside by `resume_point`
            log.info("stage %s has no resume point in %s: it starts afresh", name, checkpoint_dir)
        clear_checkpoints(checkpoint_dir)
    choose_threads(cfg.trainer.get("threads"), f"stage {name}")
    writes_resume_points = any(isinstance(callback, ResumePoints) for callback in callbacks)
    with STOP.deferred(stage_dir if writes_resume_points else None):
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(resume_from) if resume_from else None)
    best_callback = next((c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor is not None), None)
    best = best_callback.best_model_path if best_callback is not None else ""
    if best and not Path(best).resolve().is_relative_to(checkpoint_dir.resolve()):
        # a run folder moved mid-stage: Lightning restores the old absolute path; the file is here under its name
        best = str(checkpoint_dir / Path(best).name)
    if not best or not Path(best).exists():  # no validation (or fast_dev_run): the final weights are the best
        best = str(checkpoint_dir / BEST_FILE)
        save_atomically(trainer, best, weights_only=True)
    logged = trainer.fit_loop.epoch_loop._batches_that_stepped
    write_json(
        stage_dir / STAGE_FILE,
        {
            "best_checkpoint": os.path.relpath(Path(best).resolve(), run_dir.resolve()),
            "logged_steps": int(logged) + 1,
            "global_step": trainer.global_step,
        },
    )
    remove_resume_point(checkpoint_dir)  # only now that the stage is recorded as finished
    if STOP.requested:
        raise RunInterrupted(f"{STOP.signal_name}: stopped after stage {name} finished")
    return StageResult(best)
