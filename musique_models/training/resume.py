"""Resume points, and what a run does when it is asked to stop (Ctrl-C, a scheduler's SIGTERM, SLURM's requeue).

Every stage writes one resume point, `<stage>/checkpoints/last.ckpt` (weights, optimizer, scheduler, RNG and loader
states): at the end of every epoch, every `every_n_minutes` of training (at an optimizer step, so that no
accumulated gradient is lost) and when the run is asked to stop. The file is written beside the old one and renamed
over it, so a kill at any moment leaves a whole resume point.

A stop request (SIGINT, SIGTERM; on SLURM also SIGUSR1 and SIGUSR2, the signals sent before a time limit or a
pre-emption) is honoured where nothing is lost: while a stage trains, at its next optimizer step (after the current
validation, when one runs), where the stage writes a resume point and stops; between stages, at once (finished
stages are recorded). A second signal stops at once. The run is then `interrupted`, not `failed`
(`musique_models.runs.train` prints the command that resumes it, and on SLURM requeues the job).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any
from weakref import proxy

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint, ModelCheckpoint

from musique_models.run_files import RESUME_FILE, STOP_FILE
from musique_models.training.stop import STOP, RunInterrupted

log = logging.getLogger(__name__)


class ResumePoints(Checkpoint):
    """Writes the stage's resume point `dirpath/last.ckpt`: at the end of every epoch but the last (the stage is
    recorded as finished then), every `every_n_minutes` of training (null: never) or `every_n_train_steps`
    optimizer steps (null: never), and when the run is asked to stop (then it raises `RunInterrupted`). Mid-epoch
    points are written only right after an optimizer step, never on an epoch's last batch (the epoch's own point
    follows)."""

    def __init__(
        self, dirpath: str | None = None, every_n_minutes: float | None = 30.0, every_n_train_steps: int | None = None
    ) -> None:
        self.dirpath = dirpath
        self.every_n_minutes = every_n_minutes
        self.every_n_train_steps = every_n_train_steps
        self._last_saved = time.monotonic()
        self._step_at_batch_start = -1
        self._point: dict[str, Any] | None = None
        self._owns_handlers: Any = None

    @property
    def path(self) -> Path:
        """The stage's resume point."""
        return Path(self.dirpath or ".") / RESUME_FILE

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage == "fit" and not STOP.installed:  # a DDP worker process: record signals, the main process decides
            self._owns_handlers = STOP.handling(slurm="SLURM_JOB_ID" in os.environ, main=False)
            self._owns_handlers.__enter__()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._owns_handlers is not None:
            self._owns_handlers.__exit__(None, None, None)
            self._owns_handlers = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_saved = time.monotonic()
        STOP.reclaim()
        # A SIGTERM since Lightning took the signal at the start of the fit was recorded by both; this callback honours
        # it at the next optimizer step, where Lightning's own flag would stop the stage at the next batch, unsaved.
        connector = getattr(trainer, "_signal_connector", None)
        if connector is not None:
            connector.received_sigterm = False

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if trainer.global_step == self._step_at_batch_start:
            return  # gradients are still being accumulated: a point written now would lose them
        last_batch = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch or (
            batch_idx + 1 >= trainer.num_training_batches
        )
        if last_batch:
            return
        due = (
            self.every_n_minutes is not None and time.monotonic() - self._last_saved >= 60 * self.every_n_minutes
        ) or (bool(self.every_n_train_steps) and trainer.global_step % self.every_n_train_steps == 0)
        stop, due = _on_any_rank(trainer, STOP.pending_in(Path(trainer.default_root_dir)), due)
        if stop or due:
            self._save(trainer, f"on {STOP.signal_name or 'a stop request'}" if stop else "on schedule")
        if stop:
            self._stopping(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        max_epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs >= 0 else None
        if trainer.should_stop or (max_epochs is not None and trainer.current_epoch + 1 >= max_epochs):
            return  # the stage ends now: it is recorded as finished, then a pending stop is honoured
        self._save(trainer, "at the end of the epoch", end_of_epoch=True)
        (stop,) = _on_any_rank(trainer, STOP.pending_in(Path(trainer.default_root_dir)))
        if stop:
            self._stopping(trainer)

    def _stopping(self, trainer: pl.Trainer) -> None:
        """Stop the stage (every rank raises); a rank that received the signal leaves its name in `STOP_FILE` for the
        main process, which may not have received it (a DDP worker signalled alone)."""
        stop_file = Path(trainer.default_root_dir) / STOP_FILE
        if STOP.requested and not stop_file.exists():
            stop_file.write_text(STOP.signal_name + "\n")
        raise RunInterrupted(f"{STOP.signal_name or 'a stop request'}: the stage wrote its resume point and stopped")

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._point is not None:
            checkpoint["resume_point"] = dict(self._point)

    def _save(self, trainer: pl.Trainer, reason: str, end_of_epoch: bool = False) -> None:
        progress = trainer.fit_loop.epoch_loop.batch_progress.current
        self._point = {
            "reason": reason,
            "epoch": trainer.current_epoch,
            "global_step": trainer.global_step,
            "end_of_epoch": end_of_epoch,
            "batches_done": int(progress.processed),  # this batch included (completed counts it after the hooks)
        }
        try:
            save_atomically(trainer, self.path, weights_only=False)
        finally:
            self._point = None
        for logger in trainer.loggers:  # the curves up to the point reach the disk with it (CSV rows are buffered)
            logger.save()
        self._last_saved = time.monotonic()
        log.debug(
            "resume point %s written %s (epoch %d, step %d)",
            self.path,
            reason,
            trainer.current_epoch,
            trainer.global_step,
        )


def partial_path(path: str | Path) -> Path:
    """Where `save_atomically` writes `path` before renaming it: `.<name>.partial` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.partial")


def save_atomically(trainer: pl.Trainer, path: str | Path, weights_only: bool) -> None:
    """`trainer.save_checkpoint` into `partial_path(path)` (every rank takes part; rank 0 writes), flushed to the disk,
    then renamed onto `path`: a kill at any moment leaves the previous whole file or the new one. (Lightning's own
    write goes through a temporary file in the system's temporary folder, whose move onto another file system is a
    copy that a kill can cut short.)"""
    partial = partial_path(path)
    trainer.save_checkpoint(partial, weights_only=weights_only)
    if trainer.is_global_zero:
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(partial, path)


class BestCheckpoint(ModelCheckpoint):
    """Lightning's `ModelCheckpoint` (the stage's best weights, `best.ckpt`) whose every write is `save_atomically`'s:
    a kill while it writes never leaves a cut `best.ckpt`."""

    @property
    def state_key(self) -> str:
        # ModelCheckpoint's key, as checkpoints written before this class existed hold it: they still resume
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def _save_checkpoint(self, trainer: pl.Trainer, filepath: str) -> None:
        save_atomically(trainer, filepath, self.save_weights_only)
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = filepath
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.after_save_checkpoint(proxy(self))


def _on_any_rank(trainer: pl.Trainer, *flags: bool) -> tuple[bool, ...]:
    """Each flag, true on every rank if it is true on any (one collective under DDP; the flags as given alone)."""
    if trainer.world_size <= 1:
        return tuple(flags)
    values = torch.tensor([float(flag) for flag in flags], device=trainer.strategy.root_device)
    reduced = trainer.strategy.reduce(values, reduce_op="max")
    return tuple(bool(value > 0) for value in reduced.tolist())


def describe_resume_point(path: Path) -> str:
    """One line on where a resume point is in its stage: `written at the end of epoch 0 (step 12)`, or
    `written in epoch 1 after 5 batches (step 17), on SIGINT`."""
    checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    point = checkpoint.get("resume_point") or {}
    epoch, step = checkpoint.get("epoch", 0), checkpoint.get("global_step", 0)
    if point.get("end_of_epoch", True):
        return f"written at the end of epoch {epoch} (step {step}): training goes on with epoch {epoch + 1}"
    return (
        f"written in epoch {epoch} after {point.get('batches_done', '?')} batches (step {step}), "
        f"{point.get('reason', '')}: training goes on from there"
    )
