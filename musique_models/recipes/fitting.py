"""The one way a recipe fits a stage: featurise its tables (cached on disk), build the datamodule, run the stage
(`training.stage.run_stage`: fit, resume from its resume point, or reuse it when it already finished) and return
the module with the stage's best weights, on the CPU. Every recipe's stages go through `fit_stage`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import datasets
import pytorch_lightning as pl
from omegaconf import DictConfig

from musique_models.recipes.base import RunContext
from musique_models.training.datamodule import QADataModule, featurize
from musique_models.training.loaders import BalancedNegatives
from musique_models.training.stage import run_stage

Module = TypeVar("Module", bound=pl.LightningModule)


@dataclass
class StageInputs:
    """What a stage reads: `featurizer(rows, tokenizer=tokenizer, **settings)` over the schema tables `train` and
    `evaluation` (the latter only when the stage validates)."""

    tokenizer: Any
    featurizer: Callable[..., dict[str, Any]]
    settings: dict[str, Any]
    train: datasets.Dataset
    evaluation: datasets.Dataset | None = None

    def rows(self, table: datasets.Dataset, cache_dir: str | None, name: str) -> datasets.Dataset:
        """`table` featurised for the stage (cached under `cache_dir` as `name`; None: in memory)."""
        return featurize(table, self.featurizer, self.tokenizer, cache_dir, name, **self.settings)


def features_cache(context: RunContext) -> str:
    """The folder where stages cache their featurised tables (`paths.cache_dir`/features)."""
    return f"{context.cfg.paths.cache_dir}/features"


def fit_stage(
    context: RunContext,
    name: str,
    module: Module,
    stage_cfg: DictConfig,
    inputs: StageInputs,
    monitor: str | None,
    eval_batch_size: int,
    num_workers: int = 0,
    train_subset: Callable[[datasets.Dataset], BalancedNegatives] | None = None,
) -> Module:
    """Fit `module` as stage `name` of the run (settings `stage_cfg`: batch, epochs, rate, `validate`, ...) on
    `inputs`, its best checkpoint and early stopping following `monitor`; `train_subset(train_rows)` draws each
    epoch's training rows (the selector's balanced negatives). Returns the best weights' module on the CPU."""
    cache = features_cache(context)
    train_rows = inputs.rows(inputs.train, cache, f"{name}-train")
    eval_rows = None
    if inputs.evaluation is not None and stage_cfg.get("validate", True):
        eval_rows = inputs.rows(inputs.evaluation, cache, f"{name}-eval")
    data = QADataModule.for_tokenizer(
        inputs.tokenizer,
        train_rows,
        eval_rows,
        batch_size=stage_cfg.micro_batch_size,
        eval_batch_size=eval_batch_size,
        num_workers=num_workers,
        seed=context.cfg.seed,
        train_subset=train_subset(train_rows) if train_subset is not None else None,
    )
    result = run_stage(
        name, module, data, context.cfg, stage_cfg, context.run_dir, monitor=monitor, shared_loggers=context.loggers
    )
    return type(module).load_from_checkpoint(result.best_checkpoint, map_location="cpu")
