"""What a training stage tells about its time: the seconds a step takes once the first steps are measured, and after
every epoch how long it took and what is left, in the log (`train.log`) and on the console."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)

# Epochs shorter than this are not reported (a test's tiny run): only the time of real work is worth a line.
QUIET_SECONDS = 5.0
# The first optimizer step of an attempt warms up (allocations, lazy initialisation): the rate is measured after it,
# over at least this many steps or seconds, whichever comes last.
MEASURED_STEPS = 3
MEASURED_SECONDS = 10.0


def format_duration(seconds: float) -> str:
    """`42 s`, `3 min 5 s`, `1 h 2 min`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60} min"


class StageClock(pl.Callback):
    """Logs a stage's pace: once its first steps are measured, the seconds a step takes and the training time left;
    after each epoch, the epoch's time (with its validation) and the stage's time left at that pace. Rank zero only."""

    def __init__(self, stage: str) -> None:
        self.stage = stage
        self._rate_said = False
        self._first_step: tuple[int, float] | None = None
        self._step_at_batch_start = -1
        self._epoch_started = 0.0
        self._validation_started: float | None = None
        self._validation_seconds = 0.0

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_started = time.monotonic()  # a resumed epoch starts here: no epoch-start hook is called for it

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch_started = time.monotonic()
        self._validation_seconds = 0.0

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._step_at_batch_start = trainer.global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self._rate_said or trainer.global_step == self._step_at_batch_start or not trainer.is_global_zero:
            return
        now = time.monotonic()
        if self._first_step is None:  # the end of the attempt's first step: the clock starts here
            self._first_step = (trainer.global_step, now)
            return
        steps, seconds = trainer.global_step - self._first_step[0], now - self._first_step[1]
        if steps < MEASURED_STEPS or seconds < MEASURED_SECONDS:
            return
        self._rate_said = True
        per_step = seconds / steps
        left = max(int(trainer.estimated_stepping_batches) - trainer.global_step, 0)
        log.info(
            "stage %s: %.2f s a training step with %d CPU thread(s); %d steps left: about %s of training "
            "(validation and prediction come on top)",
            self.stage,
            per_step,
            torch.get_num_threads(),
            left,
            format_duration(per_step * left),
        )

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validation_started = time.monotonic()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._validation_started is not None:
            self._validation_seconds += time.monotonic() - self._validation_started
            self._validation_started = None

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        took = time.monotonic() - self._epoch_started
        if not trainer.is_global_zero or took < QUIET_SECONDS:
            return
        epochs = trainer.max_epochs if trainer.max_epochs is not None and trainer.max_epochs > 0 else None
        epoch = trainer.current_epoch  # counted from 0, as Lightning's progress bar and the resume messages count
        validation = f" (validation {format_duration(self._validation_seconds)})" if self._validation_seconds else ""
        of = f" ({epoch + 1} of {epochs})" if epochs is not None else ""
        line = f"stage {self.stage}: epoch {epoch}{of} done in {format_duration(took)}{validation}"
        if epochs is not None and epoch + 1 < epochs:
            line += f"; about {format_duration(took * (epochs - epoch - 1))} left at that pace"
            if trainer.early_stopping_callback is not None:
                line += " (early stopping may end it sooner)"
        log.info("%s", line)
