"""The contract between the entry points and a recipe: `fit` trains every stage and returns a `Predictor`; `load`
rebuilds the same `Predictor` from a finished run's best checkpoints without training; the predictor then predicts
any table of schema rows (the evaluation split, another dataset's split, a DiRe probe, an unlabelled test file)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

import datasets
from omegaconf import DictConfig
from pytorch_lightning.loggers import Logger

from musique_models.data.source import DatasetSource
from musique_models.evaluation.gold import GoldInstance, ValidationGold
from musique_models.evaluation.predictions import Prediction
from musique_models.models.decoding import DecodedQuestion


@dataclass
class RunContext:
    """What a recipe's `fit` gets: the config, the data, the evaluation split's gold, the run folder and the run's
    loggers."""

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

    def validation_gold(self, context_of: Callable[[int], str] | None = None) -> ValidationGold:
        """The evaluation split's gold for a module that scores its validation epochs (`context_of(row)`: the text a
        span reader read for each row)."""
        return ValidationGold(self.eval_golds, self.eval_paired, context_of)


@runtime_checkable
class Predictor(Protocol):
    """A trained recipe, its models placed once. `predict(table, output_dir)` returns one official prediction per
    row of `table` (schema rows, labelled or not), in order, each with `predicted_answer_confidence`, and writes
    the recipe's side files (rankings, decompositions, executed steps) into `output_dir`; None for a recipe that
    predicts no answers (the decomposer alone). `extra_metrics`: what the last `predict` adds to `metrics.json`
    beside the evaluator's keys (Step Execution's `invalid_decompositions`; empty for most): a count is an `int`, which
    every table and the error browser show as it is (`is_count_metric`), a score a `float`."""

    extra_metrics: dict[str, float | int]

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction] | None: ...


@runtime_checkable
class Recipe(Protocol):
    """What `model=<name>` instantiates.

    `fit(context)` trains every stage on `context`'s splits (resuming or skipping finished stages as `ckpt_path`
    says) and returns the trained `Predictor`; `load(cfg, run_dir)` returns the same predictor from the finished
    stages of the run in `run_dir` (its best checkpoints; `cfg` is the run's own config) and never trains: an
    unfinished stage raises `StageNotFinishedError`.

    A recipe whose `load` builds a network from its config instead of reading a stage (a prompted LLM) also offers
    `untrained_modules(cfg, run_dir) -> {stage: module}`: an export saves them as stages, and `load` reads such a
    stage when the folder holds one, so that an export needs no package or hub."""

    name: str

    def fit(self, context: RunContext) -> Predictor: ...

    def load(self, cfg: DictConfig, run_dir: Path) -> Predictor: ...


def decoded_predictions(
    ids: list[str], decoded: list[DecodedQuestion], support: list[list[int]] | None = None
) -> list[Prediction]:
    """Official predictions (with the answer's confidence) of decoded questions, in order; `support` replaces the
    decoded support (1-Para: the paragraph read)."""
    return [
        Prediction(
            id=question_id,
            predicted_answer=question.answer,
            predicted_support_idxs=question.support if support is None else support[row],
            predicted_answerable=question.answerable,
            predicted_answer_confidence=question.confidence,
        )
        for row, (question_id, question) in enumerate(zip(ids, decoded, strict=True))
    ]
