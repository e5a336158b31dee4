"""The contract between the training entry point and a recipe."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import datasets
from omegaconf import DictConfig
from pytorch_lightning.loggers import Logger

from musique_models.data.source import DatasetSource
from musique_models.evaluation.gold import GoldInstance
from musique_models.evaluation.predictions import Prediction


@dataclass
class RunContext:
    """What a recipe gets: the config, the data, the evaluation split's gold, the run folder and the run's loggers."""

    cfg: DictConfig
    source: DatasetSource
    train: datasets.Dataset
    evaluation: datasets.Dataset
    eval_golds: list[GoldInstance]
    run_dir: Path
    loggers: list[Logger]
    # whether the evaluation split's unanswerable rows come in twins (MuSiQue-Full), scored with paired metrics
    eval_paired: bool = True

    @property
    def has_unanswerable(self) -> bool:
        """Whether the data holds unanswerable questions (MuSiQue-Full): readers then get an answerability head."""
        return not all(self.evaluation["answerable"]) or not all(self.train["answerable"])


@runtime_checkable
class Recipe(Protocol):
    """What `model=<name>` instantiates: `run` trains every stage and returns one official prediction per row of
    the evaluation split, in order (None for a recipe that predicts no answers: the decomposer alone, whose
    `extra_metrics` are the run's metrics)."""

    name: str

    def run(self, context: RunContext) -> list[Prediction] | None: ...


def extra_metrics(recipe: Recipe) -> dict[str, float]:
    """What a recipe adds to `metrics.json` beside the evaluator's keys (its `extra_metrics` attribute, if any:
    Step Execution's `invalid_decompositions`)."""
    return dict(getattr(recipe, "extra_metrics", None) or {})
