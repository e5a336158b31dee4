"""Test-only logger and callback, instantiated from configs as a user's own would be."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.loggers import Logger


class RecordingLogger(Logger):
    """Keeps every (step, metrics) call and the final status in class-level lists, for the test to read."""

    calls: list[tuple[int | None, dict[str, float]]] = []
    statuses: list[str] = []

    def __init__(self, save_dir: str | None = None) -> None:
        super().__init__()
        self._save_dir = save_dir
        RecordingLogger.calls, RecordingLogger.statuses = [], []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> str:
        return "0"

    @property
    def save_dir(self) -> str | None:
        return self._save_dir

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        RecordingLogger.calls.append((step, dict(metrics)))

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def finalize(self, status: str) -> None:
        RecordingLogger.statuses.append(status)


class FailAtStep(pl.Callback):
    """Raises at a given training step of the stage writing under `stage`."""

    def __init__(self, step: int, stage: str) -> None:
        self.step = step
        self.stage = stage

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step and trainer.default_root_dir.endswith(self.stage):
            raise RuntimeError("injected failure")
