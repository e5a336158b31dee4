"""What the span-reading recipes share: the fitted reader with what feeds it, its settings, its validation metric, and
reading any table with the best weights (the stage itself is fitted by `recipes.fitting.fit_stage`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import datasets
import torch
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.features.context import YES_NO_PREFIX, ContextBuilder
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneSpec
from musique_models.models.decoding import DecodedQuestion
from musique_models.settings import SingleInputSettings, dataset_setting
from musique_models.training.datamodule import featurize
from musique_models.training.inference import BatchPredictor

YES_NO_MODES = ("prefix", "head")


@dataclass
class FittedReader:
    """A trained reader with the tokenizer, featuriser and settings that feed it (`featurize(table, featurizer,
    tokenizer, ..., **settings)` on a table with `selected_idxs`)."""

    reader: MultiParagraphAnswerer
    tokenizer: Any
    featurizer: Callable[..., Any]
    settings: dict[str, Any]
    include_title: bool
    prefix: str

    def context_builder(self, table: datasets.Dataset) -> ContextBuilder:
        """Rebuilds the context the reader read for each row of `table`."""
        return ContextBuilder(table, self.include_title, self.prefix)

    def predictor(self, cfg: DictConfig, batch_size: int) -> ReaderPredictor:
        """The reader placed for prediction."""
        return ReaderPredictor(self, cfg, batch_size)


class TableReader(Protocol):
    """A trained reader placed once: `read(table)` decodes every row of a table whose `selected_idxs` say which
    paragraphs (in which order) it reads; `finish(output_dir)` writes the last read's side files into
    `output_dir` and returns what it adds to `metrics.json` (a generative reader's `unparsed_generations`)."""

    def read(self, table: datasets.Dataset) -> list[DecodedQuestion]: ...

    def finish(self, output_dir: Path) -> dict[str, float | int]: ...


class FittedAnswerer(Protocol):
    """A trained reader with what feeds it (`FittedReader`, a generative reader's `FittedGenerativeReader`)."""

    def predictor(self, cfg: DictConfig, batch_size: int) -> TableReader: ...


def yes_no_setup(cfg: DictConfig, mode: str) -> tuple[str, bool]:
    """(context prefix, answer-type head) for the run's dataset: on datasets with yes/no answers (HotpotQA, 2Wiki),
    `prefix` opens every context with `( yes | no )` and reads yes/no as spans (the official way), `head` adds the
    answer-type head instead; other datasets get neither."""
    check_choice("model.yes_no", mode, YES_NO_MODES)
    if not dataset_setting(cfg.dataset, "yes_no_answers"):
        return "", False
    return (YES_NO_PREFIX, False) if mode == "prefix" else ("", True)


def single_input_settings(
    stage_cfg: DictConfig, backbone: BackboneSpec, include_title: bool, prefix: str, empty_question: bool = False
) -> dict[str, Any]:
    """`featurize_end2end` settings of a stage that reads all its paragraphs as one input (End2End, or a Longformer
    answerer): the stage's question, paragraph and document token caps, the last bounded by the backbone."""
    return {
        "max_question_tokens": stage_cfg.max_question_tokens,
        "max_paragraph_tokens": stage_cfg.max_paragraph_tokens,
        "max_length": min(stage_cfg.max_document_tokens, backbone.max_length),
        "include_title": include_title,
        "prefix": prefix,
        "empty_question": empty_question,
        "global_attention": stage_cfg.get(
            "global_attention", SingleInputSettings.global_attention
        ),  # older runs lack it
    }


def reader_kwargs(stage_cfg: DictConfig) -> dict[str, Any]:
    """The reader module's optimisation and decoding settings from a stage's config."""
    return {
        "lr": stage_cfg.lr,
        "warmup_ratio": stage_cfg.warmup_ratio,
        "schedule": stage_cfg.schedule,
        "max_answer_tokens": stage_cfg.get("max_answer_tokens"),
    }


def reader_monitor(answerability: bool, paired: bool = True) -> str:
    """The metric a reader's best checkpoint and early stopping follow, the official configs' `validation_metric`:
    answer F1 (`+answer_text_f1`), with unanswerable questions in twins the paired An+Sf F1
    (`+answer_sufficiency_f1`), with unpaired unanswerable questions (single-hop) the mean of answer and
    answerability F1 (`+avg_answer_answerability_f1`)."""
    if not answerability:
        return "val/answer_f1"
    return "val/group_answer_sufficiency_f1" if paired else "val/avg_answer_sufficiency_f1"


class ReaderPredictor:
    """A trained reader placed once (`BatchPredictor`): `read(table)` decodes every row of a table whose
    `selected_idxs` say which paragraphs (and in which order) the reader reads."""

    def __init__(self, fitted: FittedReader, cfg: DictConfig, batch_size: int) -> None:
        self.fitted = fitted
        self.batches = BatchPredictor(fitted.reader, fitted.tokenizer, cfg, batch_size)

    def read(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        """The decoded question of every row of `table` (featurised in memory: any table, labelled or not)."""
        fitted = self.fitted
        rows = featurize(table, fitted.featurizer, fitted.tokenizer, None, "read", **fitted.settings)
        outputs = self.batches.outputs(rows)
        windows = torch.cat([output[0] for output in outputs])
        markers = torch.cat([output[1] for output in outputs])
        return fitted.reader.decode_questions(windows, markers, len(table), fitted.context_builder(table))

    def finish(self, output_dir: Path) -> dict[str, float | int]:
        """A span reader writes no side files and adds no metrics."""
        return {}
