"""The End2End recipe (`model=end2end`) and the C-only baseline (`model=c_only`): featurise every paragraph in
dataset order into one long input, fit the Longformer reader (`musique_models.models.end2end.End2EndReader`),
predict.

C-only (the paper's context-only artifact baseline) is the same recipe with an empty question: global attention
on the markers only. What it scores is what a dataset gives away without its question.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.context import ContextBuilder
from musique_models.features.end2end import GLOBAL_ATTENTION, featurize_end2end
from musique_models.models.backbone import BackboneSpec, load_tokenizer
from musique_models.models.decoding import DecodedQuestion
from musique_models.models.end2end import End2EndReader
from musique_models.recipes.base import RunContext, decoded_predictions
from musique_models.recipes.end2end_settings import ReaderSettings
from musique_models.recipes.fitting import StageInputs, fit_stage
from musique_models.recipes.planning import PlanSplits, StagePlan, reader_stages
from musique_models.recipes.reader import (
    YES_NO_MODES,
    FittedReader,
    ReaderPredictor,
    reader_kwargs,
    reader_monitor,
    single_input_settings,
    yes_no_setup,
)
from musique_models.settings import dataset_setting
from musique_models.training.stage import finished_checkpoint


class End2EndPredictor:
    """A trained End2End reader, placed once: it reads every paragraph of a row in dataset order."""

    def __init__(self, fitted: FittedReader, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.reader = ReaderPredictor(fitted, cfg, batch_size)
        self.extra_metrics: dict[str, float | int] = {}

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        """Every row of `table` decoded (Step Execution's single-hop executor calls this per hop)."""
        return self.reader.read(in_dataset_order(table))

    def predict(self, table: datasets.Dataset, output_dir: Path) -> list[Prediction]:
        return decoded_predictions(table["id"], self.answer(table))


class End2End:
    """The End2End recipe (`model=end2end`, and `model=c_only` with `empty_question`): featurise, fit, predict.

    `reader` holds the stage settings (lr, schedule, clipping caps, batch, epochs); `max_paragraph_tokens` comes
    from the dataset (250 MuSiQue, 300 HotpotQA, 500 2Wiki). `yes_no`: `prefix` (official) or `head`, see
    `yes_no_setup`.
    """

    def __init__(
        self,
        reader: DictConfig,
        yes_no: str = "prefix",
        empty_question: bool = False,
        eval_batch_size: int = 2,
        num_workers: int = 0,
        name: str = "end2end",
    ) -> None:
        self.name = name
        self.reader_cfg = reader
        self.empty_question = empty_question
        self.yes_no = yes_no
        check_choice("model.yes_no", yes_no, YES_NO_MODES)
        check_choice(  # a run saved before the setting existed reads the default
            "model.reader.global_attention",
            reader.get("global_attention", ReaderSettings.global_attention),
            GLOBAL_ATTENTION,
        )
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def _reading(self, cfg: DictConfig, backbone: BackboneSpec) -> tuple[dict[str, Any], bool, str]:
        """(featuriser settings, include_title, context prefix) of the reader under the run's config `cfg`."""
        include_title = bool(dataset_setting(cfg.dataset, "include_title"))
        prefix, _ = yes_no_setup(cfg, self.yes_no)
        settings = single_input_settings(self.reader_cfg, backbone, include_title, prefix, self.empty_question)
        return settings, include_title, prefix

    def _fitted(self, cfg: DictConfig, reader: End2EndReader, tokenizer: object) -> FittedReader:
        """`reader` with the tokenizer and featuriser settings that feed it under the run's config `cfg`."""
        settings, include_title, prefix = self._reading(cfg, reader.hparams.backbone)
        return FittedReader(reader, tokenizer, featurize_end2end, settings, include_title, prefix)

    def fit(self, context: RunContext, name: str | None = None) -> End2EndPredictor:
        """Fit the reader as stage `name` (the recipe's name by default) on `context`'s splits, validated on its
        evaluation split when the stage validates; the best reader, placed for prediction."""
        cfg = context.cfg
        backbone: BackboneSpec = instantiate(self.reader_cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        settings, include_title, prefix = self._reading(cfg, backbone)
        eval_table = in_dataset_order(context.evaluation)
        _, answer_type_head = yes_no_setup(cfg, self.yes_no)
        reader = End2EndReader(
            backbone,
            len(tokenizer),
            gradient_checkpointing=self.reader_cfg.gradient_checkpointing,
            answerability_head=context.has_unanswerable,
            answer_type_head=answer_type_head,
            single_support=self.reader_cfg.single_support,
            validation=context.validation_gold(ContextBuilder(eval_table, include_title, prefix)),
            **reader_kwargs(self.reader_cfg),
        )
        inputs = StageInputs(tokenizer, featurize_end2end, settings, in_dataset_order(context.train), eval_table)
        monitor = reader_monitor(reader.answerability_head, context.eval_paired)
        best = fit_stage(
            context, name or self.name, reader, self.reader_cfg, inputs, monitor, self.eval_batch_size, self.num_workers
        )
        return End2EndPredictor(self._fitted(cfg, best, tokenizer), cfg, self.eval_batch_size)

    def load(self, cfg: DictConfig, run_dir: Path, name: str | None = None) -> End2EndPredictor:
        """The best reader of stage `name` of the finished run in `run_dir` (`cfg`: its config); never trains."""
        reader = End2EndReader.load_from_checkpoint(finished_checkpoint(run_dir, name or self.name), map_location="cpu")
        fitted = self._fitted(cfg, reader, load_tokenizer(reader.hparams.backbone))
        return End2EndPredictor(fitted, cfg, self.eval_batch_size)

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run (End2End and C-only): one reader over every paragraph, as stage `<model name>`."""
        paragraphs = (splits.paragraphs, splits.paragraphs)
        return reader_stages(cfg, cfg.model.reader, splits, str(cfg.model.name), paragraphs)


def in_dataset_order(table: datasets.Dataset) -> datasets.Dataset:
    """The table with `selected_idxs` = every paragraph in dataset order (EE reads them all)."""
    return table.add_column(
        "selected_idxs", [[paragraph["idx"] for paragraph in paragraphs] for paragraphs in table["paragraphs"]]
    )
