"""One training stage: build the Trainer from the configs, fit (or resume), test the best checkpoint, predict."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.callbacks import ModelCheckpoint, ProgressBar
from pytorch_lightning.loggers import Logger

from musique_models.io import write_json

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    """What a finished stage leaves: its best checkpoint."""

    best_checkpoint: str


def _callbacks(cfg: DictConfig, checkpoint_dir: Path, monitor: str | None, mode: str) -> list[pl.Callback]:
    """The configured callbacks for one stage. Without a `monitor` (a stage that does not validate) the
    checkpoint keeps the final weights and early stopping is left out."""
    callbacks = []
    for name, callback_cfg in (cfg.get("callbacks") or {}).items():
        if callback_cfg is None:
            continue
        overrides: dict[str, Any] = {}
        if callback_cfg.get("monitor") is not None:
            if monitor is None and name != "model_checkpoint":
                continue
            overrides.update(monitor=monitor, mode=mode)
        if name == "model_checkpoint":
            overrides["dirpath"] = str(checkpoint_dir)
        if name == "step_checkpoint":
            if not callback_cfg.get("every_n_train_steps"):
                continue
            overrides["dirpath"] = str(checkpoint_dir / "steps")
        callback = instantiate(callback_cfg, **overrides)
        if isinstance(callback, ProgressBar) and not cfg.trainer.get("enable_progress_bar", True):
            continue
        callbacks.append(callback)
    return callbacks


def _loggers(cfg: DictConfig, stage_dir: Path, shared: list[Logger]) -> list[Logger]:
    loggers = list(shared)
    for name, logger_cfg in (cfg.get("logger") or {}).items():
        if logger_cfg is not None and name == "csv":
            loggers.append(instantiate(logger_cfg, save_dir=str(stage_dir), name="csv"))
    return loggers


def resolve_resume_path(ckpt_path: str | None, checkpoint_dir: Path) -> str | None:
    """`last` -> the newer of the stage's last.ckpt (written at validation) and steps/last.ckpt (every N steps),
    or None to start fresh when neither exists; a path is used as given."""
    if ckpt_path is None:
        return None
    if ckpt_path == "last":
        candidates = [path for path in (checkpoint_dir / "last.ckpt", checkpoint_dir / "steps" / "last.ckpt")
                      if path.exists()]
        return str(max(candidates, key=lambda path: path.stat().st_mtime_ns)) if candidates else None
    return ckpt_path


def build_trainer(cfg: DictConfig, stage_cfg: DictConfig, callbacks: list[pl.Callback], loggers: list[Logger],
                  stage_dir: Path) -> pl.Trainer:
    """The Trainer of `cfg.trainer` with this stage's epochs, gradient accumulation and validation interval
    (`validate: false` in the stage config: no validation at all)."""
    overrides: dict[str, Any] = {key: stage_cfg[key] for key in ("max_epochs", "accumulate_grad_batches",
                                                                 "check_val_every_n_epoch") if stage_cfg.get(key)}
    if not stage_cfg.get("validate", True):
        overrides["limit_val_batches"] = 0
    return instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False, default_root_dir=str(stage_dir),
                       **overrides)


def run_stage(name: str, module: pl.LightningModule, datamodule: pl.LightningDataModule, cfg: DictConfig,
              stage_cfg: DictConfig, run_dir: Path, monitor: str, mode: str = "max",
              shared_loggers: list[Logger] = ()) -> StageResult:
    """Fit `module` as stage `name` in `run_dir/name`, resuming when `cfg.ckpt_path` says so; return the best
    checkpoint. (Each recipe then tests it by predicting the evaluation split with it and scoring the
    predictions with the evaluator.) A finished stage writes `stage.json`; `ckpt_path=last` skips it. A stage
    with `validate: false` never validates and its "best" checkpoint holds the final weights."""
    stage_dir = run_dir / name
    marker = stage_dir / "stage.json"
    if cfg.get("ckpt_path") and marker.exists():
        finished = json.loads(marker.read_text())
        log.info("stage %s already finished in %s: reusing %s", name, stage_dir, finished["best_checkpoint"])
        return StageResult(finished["best_checkpoint"])
    checkpoint_dir = stage_dir / "checkpoints"
    callbacks = _callbacks(cfg, checkpoint_dir, monitor if stage_cfg.get("validate", True) else None, mode)
    trainer = build_trainer(cfg, stage_cfg, callbacks, _loggers(cfg, stage_dir, list(shared_loggers)), stage_dir)
    trainer.fit(module, datamodule=datamodule, ckpt_path=resolve_resume_path(cfg.get("ckpt_path"), checkpoint_dir))
    checkpoint = next((c for c in callbacks if isinstance(c, ModelCheckpoint) and c.monitor is not None), None)
    best = (checkpoint.best_model_path or checkpoint.last_model_path) if checkpoint else ""
    if not best:
        best = str(checkpoint_dir / "final.ckpt")
        trainer.save_checkpoint(best)
    write_json(marker, {"best_checkpoint": best})
    return StageResult(best)


def predict(module: pl.LightningModule, datamodule: pl.LightningDataModule, cfg: DictConfig) -> list[Any]:
    """Run prediction in this process on one device (the loaders cover the whole split, so nothing is lost)."""
    trainer_cfg = OmegaConf.to_container(cfg.trainer, resolve=True)
    trainer = pl.Trainer(accelerator=trainer_cfg.get("accelerator", "auto"), devices=1,
                         precision=trainer_cfg.get("precision", "32-true"), logger=False,
                         enable_progress_bar=bool(trainer_cfg.get("enable_progress_bar", True)),
                         enable_model_summary=False)
    return trainer.predict(module, datamodule=datamodule)
