"""Experiment loggers: every entry of the `logger` config group (any `_target_`: a user's `conf/logger/<name>.yaml`
works as is).

File loggers (CSV, TensorBoard) are made per stage and write into the stage's folder; every other logger (wandb,
or a user's) is made once per run and shared by its stages. Each stage logs through a `StageLogger`, which prefixes
the stage's keys (`selector/train/loss`, `answerer/lr-AdamW/pg1`) and continues the step count where the previous
stage stopped, so that one chart never mixes two stages and the step never goes back. The wandb run id is kept in
the run folder, so that `ckpt_path=last` continues the same wandb run. At the end of a run, wandb also gets the
per-hop metrics as a table and the run's predictions and metrics files as an artifact (`log_run_results`).
"""

from __future__ import annotations

import uuid
from argparse import Namespace
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import Logger, WandbLogger

from musique_models.run_files import WANDB_ID_FILE

# The wandb summary key of the per-hop metrics table, and the type of the artifact holding a run's result files.
PER_HOP_TABLE_KEY = "test/per_hop"
RESULTS_ARTIFACT_TYPE = "predictions"
HOP_SUFFIXES = {"all": "", "2hop": "_2hop", "3hop": "_3hop", "4hop": "_4hop"}


FILE_LOGGERS = ("CSVLogger", "TensorBoardLogger")


def _logger_configs(cfg: DictConfig, per_stage: bool) -> list[DictConfig]:
    configs = [c for c in (cfg.get("logger") or {}).values() if c is not None and "_target_" in c]
    return [c for c in configs if str(c._target_).endswith(FILE_LOGGERS) == per_stage]


def run_loggers(cfg: DictConfig, run_dir: Path, provenance: dict[str, Any] | None = None) -> list[Logger]:
    """The run-wide loggers (every entry of `cfg.logger` but the file loggers), each with the run's
    hyperparameters (the resolved config, and its `provenance` under that key). A `WandbLogger` gets the run id
    kept in the run folder (new runs draw one), `resume="allow"` and the run folder as `save_dir`."""
    loggers: list[Logger] = []
    for logger_cfg in _logger_configs(cfg, per_stage=False):
        overrides: dict[str, Any] = {}
        if _is_wandb(logger_cfg):
            id_file = run_dir / WANDB_ID_FILE
            run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
            id_file.parent.mkdir(parents=True, exist_ok=True)
            id_file.write_text(run_id)
            overrides.update(id=run_id, resume="allow", save_dir=str(run_dir))
        logger = instantiate(logger_cfg, **overrides)
        hyperparameters = OmegaConf.to_container(cfg, resolve=True)
        if provenance is not None:
            hyperparameters["provenance"] = provenance
        logger.log_hyperparams(hyperparameters)
        loggers.append(logger)
    return loggers


def close_run_loggers(loggers: list[Logger], status: str) -> None:
    """Finalise the run-wide loggers with `status` ("success" or "failed"), and end the wandb run, so that the next
    run in this process (a Hydra multirun job) starts a run of its own."""
    for logger in loggers:
        logger.finalize(status)
        if isinstance(logger, WandbLogger) and logger._experiment is not None:
            logger.experiment.finish(exit_code=0 if status == "success" else 1)


def per_hop_rows(metrics: dict[str, float]) -> list[list[Any]]:
    """One row per metric (the evaluator's keys without a hop suffix): its name, then its value over all questions
    and over the 2-, 3- and 4-hop ones (None where the run has none), as `metrics_table` shows them."""
    hop_suffixes = tuple(suffix for suffix in HOP_SUFFIXES.values() if suffix)
    names = [name for name in metrics if not name.endswith(hop_suffixes)]
    return [[name, *(metrics.get(name + suffix) for suffix in HOP_SUFFIXES.values())] for name in names]


def log_run_results(loggers: list[Logger], metrics: dict[str, float], files: list[Path]) -> None:
    """What each wandb logger gets at the end of a run, besides the final metrics that `log_metrics` already left in
    the run's summary (`test/<metric>`): the per-hop metrics as a table (`test/per_hop`: metric, all, 2hop, 3hop,
    4hop) and the existing `files` (predictions.jsonl, metrics.json, metrics.per_question.jsonl) as an artifact of type `predictions` named
    `predictions-<run id>`. Offline runs keep all of it in their folder (`wandb sync` uploads it). Other loggers
    get nothing more."""
    wandb_loggers = [logger for logger in loggers if isinstance(logger, WandbLogger)]
    if not wandb_loggers:
        return
    import wandb

    rows = per_hop_rows(metrics)
    existing = [Path(path) for path in files if Path(path).is_file()]
    for logger in wandb_loggers:
        run = logger.experiment
        if rows:
            run.log({PER_HOP_TABLE_KEY: wandb.Table(columns=["metric", *HOP_SUFFIXES], data=rows)})
        if existing:
            artifact = wandb.Artifact(f"predictions-{run.id}", type=RESULTS_ARTIFACT_TYPE)
            for path in existing:
                artifact.add_file(str(path), name=path.name)
            run.log_artifact(artifact)


def stage_file_loggers(cfg: DictConfig, stage_dir: Path) -> list[Logger]:
    """The file loggers (CSV, TensorBoard) of one stage, writing under the stage's folder."""
    return [instantiate(logger_cfg, save_dir=str(stage_dir)) for logger_cfg in _logger_configs(cfg, per_stage=True)]


def _is_wandb(logger_cfg: DictConfig) -> bool:
    return str(logger_cfg.get("_target_", "")).endswith("WandbLogger")


class StageLogger(Logger):
    """A logger seen by one stage: keys prefixed with the stage's name, steps shifted by `step_offset`.

    Lightning finalises a stage's loggers when its fit ends: a run-wide logger is only saved then (the run
    finalises it when it ends), unless the stage failed. File loggers are the stage's own: `own=True`.
    """

    def __init__(self, logger: Logger, stage: str, step_offset: int, own: bool = False) -> None:
        super().__init__()
        self.logger = logger
        self.own = own
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
        if self.own or status != "success":
            self.logger.finalize(status)
        else:
            self.logger.save()
