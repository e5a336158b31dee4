"""Lexical SA (`model=lexical_select_answer`): Select+Answer whose first stage is BM25 instead of a trained selector.

Stage `selector` ranks each question's own paragraphs by their BM25 score for the question
(`features/lexical.py`); it trains nothing and keeps no checkpoint, so a finished run's `selector/` folder holds
only its ranking files. Stage `answerer` is Select+Answer's, trained on BM25's own top K over the training split.
Everything else is Select+Answer's (`recipes/select_answer.py`): the ranking files with recall@K against the gold
support, the load of a finished run, the predicted support (the answerer's).

BM25 is the lexical baseline of retrieval (Robertson and Zaragoza, 2009); over a question's 20 paragraphs it tells
how far word overlap goes in picking the supporting ones, the question the selector's learned ranking answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
import torch
from omegaconf import DictConfig

from musique_models.errors import MusiqueModelsError, check_choice
from musique_models.features.lexical import BM25_METHODS, bm25_ranking
from musique_models.recipes.base import RunContext
from musique_models.recipes.planning import PlanSplits, StagePlan, reader_stages
from musique_models.recipes.select_answer import SelectAnswer, ranking_record


@dataclass
class LexicalRanker:
    """BM25 with its settings (`LexicalRankerSettings`): a first stage of Select+Answer with no encoder and no
    tokenizer, already placed (`ranker` returns itself)."""

    settings: dict[str, Any]
    backbone: None = None
    tokenizer: None = None

    def ranker(self, cfg: DictConfig, batch_size: int) -> LexicalRanker:
        """Itself: BM25 needs no placing."""
        return self

    def rank(
        self, table: datasets.Dataset, cache_dir: str | None = None, name: str = "rank"
    ) -> tuple[list[list[int]], dict[str, torch.Tensor]]:
        """Each row's paragraph idx, best BM25 score first, and the scored pairs (`example_row`, `paragraph_idx`,
        `score`, `label`: whether the paragraph supports the answer) that `ranking_record` scores."""
        rankings, columns = [], {"example_row": [], "paragraph_idx": [], "score": [], "label": []}
        for row, (question, paragraphs) in enumerate(zip(table["question"], table["paragraphs"], strict=True)):
            ranking, scores = bm25_ranking(question, paragraphs, **self.settings)
            rankings.append(ranking)
            for paragraph, score in zip(paragraphs, scores, strict=True):
                columns["example_row"].append(row)
                columns["paragraph_idx"].append(paragraph["idx"])
                columns["score"].append(score)
                columns["label"].append(float(paragraph["is_supporting"]))
        tensors = {
            "example_row": torch.tensor(columns["example_row"], dtype=torch.long),
            "paragraph_idx": torch.tensor(columns["paragraph_idx"], dtype=torch.long),
            "score": torch.tensor(columns["score"], dtype=torch.float),
            "label": torch.tensor(columns["label"], dtype=torch.float),
        }
        return rankings, tensors

    def record(
        self, table: datasets.Dataset, rankings: list[list[int]], details: dict[str, torch.Tensor], top_k: int | None
    ) -> dict[str, Any]:
        """A ranking file's content (`ranking_record`: recall@K and rank F1 when the rows have gold support)."""
        return ranking_record(table, rankings, details, top_k)


class LexicalSelectAnswer(SelectAnswer):
    """See the module docstring. `selector` holds BM25's settings (`stage_settings/lexical_ranker`); the rest is
    Select+Answer's, but for `selector_checkpoint`, which a ranker that trains nothing has no use for."""

    def __init__(self, selector: DictConfig, answerer: DictConfig, top_k: int | None, **kwargs: Any) -> None:
        if kwargs.get("selector_checkpoint"):
            raise MusiqueModelsError(
                f"model.selector_checkpoint={kwargs['selector_checkpoint']}: Lexical SA's first stage is BM25, which "
                "has no checkpoint (model=select_answer reuses a trained selector)"
            )
        check_choice("model.selector.method", selector.method, BM25_METHODS)
        super().__init__(selector, answerer, top_k, **kwargs)

    def _ranker(self) -> LexicalRanker:
        settings = {
            "k1": float(self.selector_cfg.k1),
            "b": float(self.selector_cfg.b),
            "method": str(self.selector_cfg.method),
            "include_title": bool(self.selector_cfg.include_title),
        }
        return LexicalRanker(settings)

    def _fit_selector(self, context: RunContext, stage: str) -> LexicalRanker:
        """Stage 1: nothing to train."""
        return self._ranker()

    def _load_selector(self, run_dir: Path, stage: str) -> LexicalRanker:
        """Stage 1 of a finished run: BM25 with the run's settings (no checkpoint to read)."""
        return self._ranker()

    @classmethod
    def plan(cls, cfg: DictConfig, splits: PlanSplits) -> list[StagePlan]:
        """The stages of a run that need an accelerator: the answerer on BM25's top K (BM25 itself is a CPU pass)."""
        return reader_stages(cfg, cfg.model.answerer, splits, "answerer")
