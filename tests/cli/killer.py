"""A test-only callback: send a signal to this process at the start of a given training step of a given stage."""

from __future__ import annotations

import os
import signal

import pytorch_lightning as pl


class SignalAtStep(pl.Callback):
    """Sends `signal` (a name: SIGKILL, a real kill with no cleanup; SIGINT, SIGTERM, SIGUSR1) to this process when
    the stage writing under `stage` starts optimizer step `step` (once: the micro-batches of one step share it).

    At the start of the step, the work of the steps before is complete. A resumed stage starts past `step`, so the
    callback never fires twice in one stage.
    """

    def __init__(self, step: int, stage: str, signal: str = "SIGKILL", rank: int | None = None) -> None:
        self.step = step
        self.stage = stage
        self.signal = signal
        self.rank = rank  # under DDP: only this rank's process gets the signal (None: every rank's)
        self.sent = False

    def on_train_batch_start(self, trainer: pl.Trainer, *args) -> None:
        if self.sent or (self.rank is not None and trainer.global_rank != self.rank):
            return
        if trainer.global_step == self.step and trainer.default_root_dir.endswith(self.stage):
            self.sent = True
            os.kill(os.getpid(), getattr(signal, self.signal))
