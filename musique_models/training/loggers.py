"""Experiment loggers: every entry of the `logger` config group, instantiated once per run and shared by its stages.

Each stage logs through a `StageLogger`, which prefixes the stage's keys (`selector/train/loss`,
`answerer/lr-AdamW/pg1`) and continues the step count where the previous stage stopped, so that one wandb or
TensorBoard chart never mixes two stages and the step never goes back. The wandb run id is kept in the run folder,
so that `ckpt_path=last` continues the same wandb run.
"""

from __future__ import annotations

import uuid
from argparse import Namespace
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import Logger

WANDB_ID_FILE = "wandb_run_id.txt"


def run_loggers(cfg: DictConfig, run_dir: Path) -> list[Logger]:
    """One logger per entry of `cfg.logger` (any `_target_`: a user's `conf/logger/<name>.yaml` works as is), each
    with the run's hyperparameters. Loggers that take a `save_dir` write into the run folder; a `WandbLogger`
    gets the run id kept in the run folder (new runs draw one) and `resume="allow"`."""
    loggers: list[Logger] = []
    for name, logger_cfg in (cfg.get("logger") or {}).items():
        if logger_cfg is None or "_target_" not in logger_cfg:
            continue
        overrides: dict[str, Any] = {}
        if logger_cfg.get("save_dir", "absent") is None:
            overrides["save_dir"] = str(run_dir)
        if _is_wandb(logger_cfg):
            id_file = run_dir / WANDB_ID_FILE
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
            id_file.parent.mkdir(parents=True, exist_ok=True)
            id_file.write_text(run_id)
            overrides.update(id=run_id, resume="allow", save_dir=str(run_dir))
        logger = instantiate(logger_cfg, **overrides)
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        loggers.append(logger)
    return loggers


def _is_wandb(logger_cfg: DictConfig) -> bool:
    return str(logger_cfg.get("_target_", "")).endswith("WandbLogger")


class StageLogger(Logger):
    """A run-wide logger seen by one stage: keys prefixed with the stage's name, steps shifted by `step_offset`.

    Lightning finalises a stage's loggers when its fit ends; the run-wide logger is finalised by the run instead.
    """

    def __init__(self, logger: Logger, stage: str, step_offset: int) -> None:
        super().__init__()
        self.logger = logger
        self.stage = stage
        self.step_offset = step_offset

    @property
    def name(self) -> str | None:
        return self.logger.name

    @property
    def version(self) -> int | str | None:
        return self.logger.version

    @property
    def save_dir(self) -> str | None:
        return self.logger.save_dir

    @property
    def log_dir(self) -> str | None:
        return getattr(self.logger, "log_dir", self.logger.save_dir)

    @property
    def experiment(self) -> Any:
        return self.logger.experiment

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        prefixed = {f"{self.stage}/{key}": value for key, value in metrics.items()}
        self.logger.log_metrics(prefixed, None if step is None else step + self.step_offset)

    def log_hyperparams(self, params: dict[str, Any] | Namespace, *args: Any, **kwargs: Any) -> None:
        pass  # the run's hyperparameters are logged once, by `run_loggers`

    def after_save_checkpoint(self, checkpoint_callback: Any) -> None:
        self.logger.after_save_checkpoint(checkpoint_callback)

    def save(self) -> None:
        self.logger.save()

    def finalize(self, status: str) -> None:
        self.logger.save()
