"""The reader stage every reading recipe shares: fit on featurised rows, predict with the best checkpoint, decode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from omegaconf import DictConfig

from musique_models.errors import check_choice
from musique_models.evaluation.predictions import Prediction
from musique_models.features.context import YES_NO_PREFIX
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneSpec
from musique_models.recipes.base import RunContext
from musique_models.training.datamodule import QADataModule
from musique_models.training.stage import predict, run_stage

YES_NO_MODES = ("prefix", "head")


def yes_no_setup(cfg: DictConfig, mode: str) -> tuple[str, bool]:
    """(context prefix, answer-type head) for the run's dataset: on datasets with yes/no answers (HotpotQA, 2Wiki),
    `prefix` opens every context with `( yes | no )` and reads yes/no as spans (the official way), `head` adds the
    answer-type head instead; other datasets get neither."""
    check_choice("model.yes_no", mode, YES_NO_MODES)
    if not cfg.dataset.get("yes_no_answers", False):
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
    }


def reader_kwargs(stage_cfg: DictConfig) -> dict[str, Any]:
    """The reader module's optimisation and decoding settings from a stage's config."""
    return {
        "lr": stage_cfg.lr,
        "warmup_ratio": stage_cfg.warmup_ratio,
        "schedule": stage_cfg.get("schedule", "linear"),
        "max_answer_tokens": stage_cfg.get("max_answer_tokens"),
    }


def reader_monitor(answerability: bool) -> str:
    """The metric a reader's best checkpoint and early stopping follow, the official configs' `validation_metric`:
    answer F1 (`+answer_text_f1`), or with unanswerable questions the paired An+Sf F1 (`+answer_sufficiency_f1`)."""
    return "val/group_answer_sufficiency_f1" if answerability else "val/answer_f1"


def fit_and_predict_reader(
    name: str,
    reader: MultiParagraphAnswerer,
    data: QADataModule,
    context: RunContext,
    stage_cfg: DictConfig,
    context_of: Callable[[int], str],
) -> list[Prediction]:
    """Fit `reader` as stage `name` (validated with the evaluator's metrics: answer F1, or the paired An+Sf F1
    when the data has unanswerable questions), then predict the evaluation split with the best checkpoint and
    decode one official prediction per question. `context_of(row)` rebuilds an evaluation row's context."""
    reader.eval_golds, reader.eval_context_of = context.eval_golds, context_of
    monitor = reader_monitor(reader.answerability_head)
    result = run_stage(
        name, reader, data, context.cfg, stage_cfg, context.run_dir, monitor=monitor, shared_loggers=context.loggers
    )
    best = type(reader).load_from_checkpoint(result.best_checkpoint, map_location="cpu")
    outputs = predict(best, data, context.cfg)
    windows = torch.cat([output[0] for output in outputs])
    markers = torch.cat([output[1] for output in outputs])
    return best.decode(windows, markers, context.eval_golds, context_of)
