"""The reader stage every reading recipe shares: fit on featurised rows, predict with the best checkpoint, decode."""

from __future__ import annotations

from collections.abc import Callable

import torch
from omegaconf import DictConfig

from musique_models.evaluation.predictions import Prediction
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.recipes.base import RunContext
from musique_models.training.datamodule import QADataModule
from musique_models.training.stage import predict, run_stage


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
    monitor = "val/group_answer_sufficiency_f1" if reader.answerability_head else "val/answer_f1"
    result = run_stage(
        name, reader, data, context.cfg, stage_cfg, context.run_dir, monitor=monitor, shared_loggers=context.loggers
    )
    best = type(reader).load_from_checkpoint(result.best_checkpoint, map_location="cpu")
    outputs = predict(best, data, context.cfg)
    windows = torch.cat([output[0] for output in outputs])
    markers = torch.cat([output[1] for output in outputs])
    return best.decode(windows, markers, context.eval_golds, context_of)
