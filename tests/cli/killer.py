"""A test-only callback: SIGKILL this process at the start of a given training step of a given stage."""

from __future__ import annotations

import os
import signal

import pytorch_lightning as pl


class KillAtStep(pl.Callback):
    """Kills the process (a real SIGKILL, no cleanup) when the stage writing under `stage` reaches `step`.

    It runs at the start of the step, so the checkpoint of the previous step has been written completely.
    """

    def __init__(self, step: int, stage: str) -> None:
        self.step = step
        self.stage = stage

    def on_train_batch_start(self, trainer: pl.Trainer, *args) -> None:
        if trainer.global_step == self.step and trainer.default_root_dir.endswith(self.stage):
            os.kill(os.getpid(), signal.SIGKILL)
