"""Paragraph selector (the "Select" of Select+Answer): a cross-encoder scoring one `question SEP paragraph` text."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torchmetrics import Metric

from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.metrics import support_scores
from musique_models.evaluation.torchmetric import state_table
from musique_models.models.backbone import BackboneSpec, load_encoder, pool
from musique_models.models.base import QAModule


class ParagraphSelector(QAModule):
    """Scores each paragraph's relevance to the question with a linear head on the pooled encoder states
    (the backbone's pre-training pooling: first token, or mean for sentence-transformers checkpoints).

    Trained with binary cross-entropy on batches of whole questions, each with its gold supporting paragraphs and
    as many random other paragraphs; validated on every paragraph (unbalanced), reporting recall@K and rank F1 of
    the ranking.

    Args:
        backbone: the encoder.
        vocab_size: the tokenizer's size (with the paragraph marker).
        top_k: the K the answerer reads; `val/recall_at_k` is logged for it (and for 2, 3, 5, 7).
        rows_per_forward: split each training batch into forward passes of at most this many rows, sorted by
            length, each padded to its own longest row: a batch of whole questions mixes short and long
            paragraphs (padded batches held 1.6x their real tokens on the MuSiQue sample); this spares that compute on CPU. The loss, a mean
            over all the batch's rows, and its gradient are the same. None: one forward pass per batch.
    """

    def __init__(
        self,
        backbone: BackboneSpec,
        vocab_size: int,
        top_k: int = 7,
        lr: float = 2e-5,
        weight_decay: float = 0.0,
        warmup_ratio: float = 0.1,
        schedule: str = "linear",
        rows_per_forward: int | None = None,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, schedule=schedule)
        self.save_hyperparameters()
        self.rows_per_forward = rows_per_forward
        self.encoder = load_encoder(backbone, vocab_size)
        self.score_head = nn.Linear(self.encoder.config.hidden_size, 1)
        self.pooling = backbone.pooling
        self.top_k = top_k
        self.val_ranking = RankingMetric(ks=sorted({2, 3, 5, 7, top_k}))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Relevance logits, shape (batch,)."""
        hidden = self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state  # (batch, tokens, hidden)
        return self.score_head(pool(hidden, attention_mask, self.pooling)).squeeze(-1)

    def _logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self(batch["input_ids"], batch["attention_mask"], batch.get("token_type_ids"))

    def _chunked_logits(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """`_logits` computed in length-sorted chunks of `rows_per_forward` rows, each cut to its longest row."""
        lengths = batch["attention_mask"].sum(dim=1)  # (B,)
        order = lengths.argsort()
        segments = batch.get("token_type_ids")
        chunks = []
        for rows in order.split(self.rows_per_forward):
            longest = int(lengths[rows].max())
            chunks.append(
                self(
                    batch["input_ids"][rows, :longest],
                    batch["attention_mask"][rows, :longest],
                    None if segments is None else segments[rows, :longest],
                )
            )
        return torch.cat(chunks)[order.argsort()]  # back in batch order

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        logits = self._chunked_logits(batch) if self.rows_per_forward else self._logits(batch)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, batch["label"])
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["label"]))
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        logits = self._logits(batch)
        loss = nn.functional.binary_cross_entropy_with_logits(logits, batch["label"])
        self.log("val/loss", loss, sync_dist=True, batch_size=len(logits))
        self.val_ranking.update(batch["example_row"], batch["paragraph_idx"], logits, batch["label"])

    def on_validation_epoch_end(self) -> None:
        metrics = self.val_ranking.compute()  # gathered from every rank: identical on all of them
        self.val_ranking.reset()
        for name, value in metrics.items():
            self.log(f"val/{name}", value, sync_dist=True)
        self.log("val/recall_at_k", metrics[f"recall_at_{self.top_k}"], prog_bar=True, sync_dist=True)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {
            "example_row": batch["example_row"],
            "paragraph_idx": batch["paragraph_idx"],
            "score": self._logits(batch).float(),
            "label": batch["label"],
        }


def load_selector(checkpoint: str) -> ParagraphSelector:
    """A trained selector from a checkpoint file; a missing file or another stage's checkpoint (an answerer's) is
    refused with a line saying what it holds."""
    if not Path(checkpoint).is_file():
        raise MusiqueModelsError(f"selector checkpoint {checkpoint}: no such file")
    try:
        return ParagraphSelector.load_from_checkpoint(checkpoint, map_location="cpu")
    except (TypeError, RuntimeError, KeyError) as error:
        stored = torch.load(checkpoint, map_location="cpu", weights_only=False, mmap=True)
        heads = sorted({key.split(".")[0] for key in stored.get("state_dict", {}) if not key.startswith("encoder.")})
        raise MusiqueModelsError(
            f"{checkpoint} is not a paragraph selector's checkpoint (its heads: "
            f"{', '.join(heads) or 'none'}; a selector has score_head). Pass "
            "<run>/selector/checkpoints/best.ckpt as model.selector_checkpoint"
        ) from error


def rank_paragraphs(
    rows: Sequence[int], paragraph_idxs: Sequence[int], scores: Sequence[float]
) -> dict[int, list[int]]:
    """Paragraph idx of each example row, best score first (ties: lower idx first)."""
    by_row: dict[int, list[tuple[float, int]]] = {}
    for row, idx, score in zip(rows, paragraph_idxs, scores):
        by_row.setdefault(int(row), []).append((-float(score), int(idx)))
    return {row: [idx for _, idx in sorted(pairs)] for row, pairs in by_row.items()}


class RankingMetric(Metric):
    """recall@K and rank F1 of per-question paragraph rankings; DDP-safe (rows gathered, repeats dropped).

    recall@K: share of a question's gold supporting paragraphs among its top K. rank F1: F1 of the top-n
    paragraphs against the gold set, n = the number of gold paragraphs. Both averaged over questions with
    at least one gold paragraph.
    """

    full_state_update = False

    def __init__(self, ks: Sequence[int], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ks = list(ks)
        self.add_state("rows", default=[], dist_reduce_fx="cat")  # (n, 4): row, idx, score, label

    def update(
        self, rows: torch.Tensor, paragraph_idxs: torch.Tensor, scores: torch.Tensor, labels: torch.Tensor
    ) -> None:
        self.rows.append(
            torch.stack([rows.double(), paragraph_idxs.double(), scores.detach().double(), labels.double()], dim=1)
        )

    def compute(self) -> dict[str, torch.Tensor]:
        unique: dict[tuple[int, int], tuple[float, bool]] = {}
        for row, idx, score, label in state_table(self.rows, 4).tolist():
            unique.setdefault((int(row), int(idx)), (score, label > 0.5))
        rankings = rank_paragraphs([k[0] for k in unique], [k[1] for k in unique], [v[0] for v in unique.values()])
        gold: dict[int, set[int]] = {row: set() for row in rankings}
        for (row, idx), (_, label) in unique.items():
            if label:
                gold[row].add(idx)
        scored = [row for row in rankings if gold[row]]
        metrics = {}
        for k in self.ks:
            recalls = [len(set(rankings[row][:k]) & gold[row]) / len(gold[row]) for row in scored]
            metrics[f"recall_at_{k}"] = sum(recalls) / len(recalls) if recalls else 0.0
        f1s = [support_scores(rankings[row][: len(gold[row])], gold[row]).f1 for row in scored]
        metrics["rank_f1"] = sum(f1s) / len(f1s) if f1s else 0.0
        return {name: torch.tensor(value) for name, value in metrics.items()}
