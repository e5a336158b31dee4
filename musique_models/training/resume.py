"""Resume points, and what a run does when it is asked to stop (Ctrl-C, a scheduler's SIGTERM, SLURM's requeue).

Every stage writes one resume point, `<stage>/checkpoints/last.ckpt` (weights, optimizer, scheduler, RNG and loader
states): at the end of every epoch, every `every_n_minutes` of training (at an optimizer step, so that no
accumulated gradient is lost) and when the run is asked to stop. The file is written beside the old one and renamed
over it, so a kill at any moment leaves a whole resume point.

A stop request (SIGINT, SIGTERM; on SLURM also SIGUSR1 and SIGUSR2, the signals sent before a time limit or a
pre-emption) is honoured where nothing is lost: while a stage trains, at its next optimizer step (after the current
validation, when one runs), where the stage writes a resume point and stops; between stages, at once (finished
stages are recorded). A second signal stops at once. The run is then `interrupted`, not `failed`
(`musique_models.cli.train` prints the command that resumes it, and on SLURM requeues the job).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import Checkpoint

from musique_models.run_files import RESUME_FILE, STOP_FILE

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# SLURM sends these before a time limit (`--signal=USR1@120`) or a pre-emption; submitit uses SIGUSR2.
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


class RunInterrupted(BaseException):
    """The run stopped because it was asked to (a signal); its resume points are in place.

    A `BaseException`, as `KeyboardInterrupt` is: it is raised from a signal handler at any point, and no
    `except Exception` on the way may swallow it. (Not a `KeyboardInterrupt`: Lightning turns that into
    `sys.exit(1)`.)"""


class StopRequest:
    """This process's record of a stop signal (one per process: `STOP`).

    `handling()` installs the handlers for a run and restores the previous ones after it; `deferred(stage_dir)`
    marks the span in which a training stage honours the request itself (at its next optimizer step). Outside that
    span a signal raises `RunInterrupted` at once; inside it the request is recorded and written to
    `stage_dir/STOP_FILE` for the stage's other processes. A second signal raises at once anywhere.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.installed = False
        self.previous: dict[int, Any] = {}
        self._stage_dir: Path | None = None
        self._main = True
        self._pid = os.getpid()

    @property
    def requested(self) -> bool:
        """Whether a stop signal was received since `handling()` began."""
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        """The received signal's name (`SIGINT`), empty when none was."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def requeue(self) -> bool:
        """Whether the signal asks for the job to be requeued (SLURM's time-limit or pre-emption warning)."""
        return self.signum in REQUEUE_SIGNALS

    @contextmanager
    def handling(self, slurm: bool = False, main: bool = True) -> Iterator[StopRequest]:
        """Install the stop handlers for SIGINT and SIGTERM (and SIGUSR1/SIGUSR2 with `slurm`) until the block
        ends. `main=False` (a DDP worker process) only records signals: the main process decides when to stop."""
        signals = STOP_SIGNALS + (REQUEUE_SIGNALS if slurm else ())
        if self.installed or threading.current_thread() is not threading.main_thread():
            yield self
            return
        self.signum, self.installed, self._main, self._pid = None, True, main, os.getpid()
        self.previous = {signum: signal.signal(signum, self._handle) for signum in signals}
        try:
            yield self
        finally:
            for signum, handler in self.previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self.installed = False

    def reclaim(self) -> None:
        """Put this object's handler back on SIGTERM (Lightning puts its own there at the start of every fit)."""
        if self.installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    @contextmanager
    def deferred(self, stage_dir: Path | None) -> Iterator[None]:
        """While the block runs, a training stage in `stage_dir` honours a stop request at its next optimizer step
        (None: no stage writes resume points, so a signal stops at once)."""
        self._stage_dir = stage_dir
        if stage_dir is not None:
            (stage_dir / STOP_FILE).unlink(missing_ok=True)
        try:
            yield
        except BaseException as error:
            stop_file = stage_dir / STOP_FILE if stage_dir is not None else None
            if isinstance(error, RunInterrupted) or stop_file is None or not stop_file.exists():
                raise
            # the stage's DDP worker processes stopped on a request (theirs alone, perhaps): so does this process
            if not self.requested:
                self.signum = signal.Signals[stop_file.read_text().strip()]
            raise RunInterrupted(f"{self.signal_name}: the stage's processes stopped at a resume point") from error
        finally:
            self._stage_dir = None
            if stage_dir is not None:
                (stage_dir / STOP_FILE).unlink(missing_ok=True)

    def pending_in(self, stage_dir: Path) -> bool:
        """Whether a stop was requested in this process or, through `STOP_FILE`, in the run's main process."""
        return self.requested or (stage_dir / STOP_FILE).exists()

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            return  # a forked child (a DataLoader worker) inherited the handler: the process that installed it acts
        first = self.signum is None
        if first:
            self.signum = signum
        if not self._main:
            return  # a DDP worker: the request is acted on at the next optimizer step, together with every rank
        name = signal.Signals(signum).name
        if not first:
            for child in multiprocessing.active_children():  # DDP workers, DataLoader workers: they stop too
                child.kill()
            raise RunInterrupted(f"{name} received again: stopped at once")
        if self._stage_dir is None:
            raise RunInterrupted(f"{name} received")
        self._stage_dir.mkdir(parents=True, exist_ok=True)
        (self._stage_dir / STOP_FILE).write_text(name + "\n")
        log.warning(
            "%s received: the stage writes a resume point at its next optimizer step (after the current validation, "
            "if one runs) and stops; send it again to stop at once",
            name,
        )


STOP = StopRequest()


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
        partial = self.path.with_name(f".{RESUME_FILE}.partial")
        try:
            trainer.save_checkpoint(partial, weights_only=False)  # every rank takes part; rank 0 writes
        finally:
            self._point = None
        if trainer.is_global_zero:
            os.replace(partial, self.path)
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


def requeue_slurm_job(signum: int | None, previous_handler: Any) -> None:
    """Requeue this SLURM job after a time-limit or pre-emption signal, as Lightning's SLURM support does: through
    the launcher's own handler of that signal when it has one (submitit requeues the job and exits), else with
    `scontrol requeue <job>` (an array task as `<array job>_<task>`)."""
    if callable(previous_handler):
        previous_handler(signum, None)
        return
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ.get("SLURM_JOB_ID", "")
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        log.error("cannot requeue SLURM job %s: scontrol is not on PATH", job)
        return
    if result.returncode == 0:
        log.warning("requeued SLURM job %s: it resumes this run when it starts again", job)
    else:
        log.error("scontrol requeue %s failed (%d): %s", job, result.returncode, result.stderr.strip())
