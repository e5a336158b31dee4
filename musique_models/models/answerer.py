"""Multi-paragraph answerer (the "Answer" of Select+Answer): reads the selector's top-K paragraphs with markers.

Heads on the encoder's token states (shapes: B windows, T tokens, M markers, H hidden):
- span: start/end logits per token (B, T); cross-entropy over the context tokens to the answer's first and last
  tokens. A window of a
  windowed question that does not hold the answer points at its first token (as HF `run_qa`); a single-input
  question whose answer is not in the input has the label (-1, -1) and no span loss (as the official reader);
- support: one logit per paragraph marker (B, M); binary cross-entropy, predicted when p > 0.5 (or, with
  `single_support`, a softmax over the markers with cross-entropy to the gold one, the argmax predicted: for
  single-hop use, where exactly one paragraph supports);
- answerability (MuSiQue-Full): one logit on the first token (B,); binary cross-entropy;
- answer type (optional, `answer_type_head`): span / yes / no logits on the first token (B, 3). By default
  yes/no answers are spans of the `( yes | no )` prefix that opens the context, as in the official code.
Datasets without unanswerable questions (or without the answer-type option) get no such head; its output is then
a constant. Unanswerable questions get no span loss and a support loss with every label 0 (as the official model;
with `single_support`, no support loss); with the answer-type head, yes/no questions get no span loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torchmetrics import Metric

from musique_models.evaluation.evaluator import evaluate_predictions
from musique_models.evaluation.gold import GoldInstance, ValidationGold
from musique_models.evaluation.predictions import Prediction
from musique_models.evaluation.torchmetric import state_table
from musique_models.models.backbone import BackboneSpec, load_encoder
from musique_models.models.base import QAModule, require_validation_gold
from musique_models.models.decoding import (
    MARKER_COLUMNS,
    WINDOW_COLUMNS,
    DecodedQuestion,
    decode_predictions,
    decode_questions,
    window_outputs,
)


class MultiParagraphAnswerer(QAModule):
    """Span, support, answerability and answer-type heads over a windowed multi-paragraph context.

    Args:
        backbone: the encoder.
        vocab_size: the tokenizer's size (with the paragraph marker).
        answerability_head: train and use the answerability head (datasets with unanswerable questions).
        answer_type_head: train and use the yes/no answer-type head (HotpotQA, 2Wiki).
        max_answer_tokens: longest answer span considered when decoding; None (the official default): no cap.
        support_threshold: a paragraph is predicted supporting when its probability exceeds this.
        single_support: exactly one supporting paragraph per question (softmax over markers, argmax predicted).
        validation: the evaluation split's gold and contexts its validation epochs are scored against with the
            evaluator's metrics (needed when the stage validates; never saved in a checkpoint).
    """

    def __init__(
        self,
        backbone: BackboneSpec,
        vocab_size: int,
        answerability_head: bool = False,
        answer_type_head: bool = False,
        max_answer_tokens: int | None = None,
        support_threshold: float = 0.5,
        lr: float = 2e-5,
        weight_decay: float = 0.0,
        warmup_ratio: float = 0.1,
        single_support: bool = False,
        schedule: str = "linear",
        validation: ValidationGold | None = None,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, schedule=schedule)
        self.save_hyperparameters(ignore=["validation"])
        self.validation = validation
        self.encoder = load_encoder(backbone, vocab_size)
        hidden = self.encoder.config.hidden_size
        self.span_head = nn.Linear(hidden, 2)
        self.support_head = nn.Linear(hidden, 1)
        # only the heads the dataset needs exist (DDP requires every parameter to receive a gradient)
        self.answerable_head = nn.Linear(hidden, 1) if answerability_head else None
        self.type_head = nn.Linear(hidden, 3) if answer_type_head else None
        self.answerability_head = answerability_head
        self.answer_type_head = answer_type_head
        self.max_answer_tokens = max_answer_tokens
        self.support_threshold = support_threshold
        self.single_support = single_support
        self.val_outputs = WindowOutputCollector()

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        **_: torch.Tensor,
    ) -> torch.Tensor:
        """Token states (B, T, H)."""
        return self.encoder(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        marker_positions: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        hidden = self.encode(
            input_ids, attention_mask, token_type_ids=token_type_ids, global_attention_mask=global_attention_mask
        )  # (B, T, H)
        start_logits, end_logits = self.span_head(hidden).unbind(dim=-1)  # (B, T) each
        markers = hidden.gather(1, marker_positions[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, M, H)
        first = hidden[:, 0]  # (B, H)
        answerable_logit = (
            self.answerable_head(first).squeeze(-1)
            if self.answerable_head is not None
            else first.new_full((len(first),), 10.0)
        )  # (B,): always answerable
        type_logits = (
            self.type_head(first)
            if self.type_head is not None
            else first.new_tensor([10.0, 0.0, 0.0]).expand(len(first), 3)
        )  # (B, 3): always a span
        return {
            "start_logits": start_logits,
            "end_logits": end_logits,
            "support_logits": self.support_head(markers).squeeze(-1),  # (B, M)
            "answerable_logit": answerable_logit,
            "type_logits": type_logits,
        }

    def batch_outputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The heads' outputs (see `forward`) for a collated batch."""
        return self(
            batch["input_ids"],
            batch["attention_mask"],
            batch["marker_positions"],
            batch.get("token_type_ids"),
            batch.get("global_attention_mask"),
        )

    def loss(self, batch: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Sum of the head losses (`head_losses`), as the official model sums its heads' losses."""
        return _total(self.head_losses(batch, outputs))

    def head_losses(self, batch: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each head's loss (`span`, `support`, and `answerability` / `answer_type` where the head exists), masked
        as the module docstring says.

        Masked means weighted by 0, never skipped: every head stays in the graph, so that under DDP every rank
        produces a gradient for every parameter even when its batch holds no answerable window.
        """
        answerable = batch["answerable"].bool()
        span_rows = answerable & (batch["start_position"] >= 0)  # (B,): -1 = the answer is not in the input
        if self.answer_type_head:
            span_rows &= batch["answer_type"] == 0
        cross_entropy = nn.functional.cross_entropy
        # the softmax runs over the context tokens only, as the official model masks everything outside its
        # context span; the first token stays a candidate for windows labelled there (HF `run_qa`'s "not here")
        candidates = batch["offset_mapping"][..., 0] >= 0  # (B, T)
        candidates[:, 0] |= batch["start_position"] == 0
        span = (
            cross_entropy(
                outputs["start_logits"].masked_fill(~candidates, -1e4),
                batch["start_position"],
                reduction="none",
                ignore_index=-1,
            )
            + cross_entropy(
                outputs["end_logits"].masked_fill(~candidates, -1e4),
                batch["end_position"],
                reduction="none",
                ignore_index=-1,
            )
        ) / 2  # (B,)
        losses = {"span": _masked_mean(span, span_rows.float())}
        if self.single_support:
            logits = outputs["support_logits"].masked_fill(~batch["marker_mask"], float("-inf"))  # (B, M)
            has_gold = answerable & (batch["support_labels"].sum(dim=1) > 0)  # (B,)
            support = cross_entropy(
                logits.masked_fill(~has_gold[:, None], 0.0), batch["support_labels"].argmax(dim=1), reduction="none"
            )  # (B,)
            losses["support"] = _masked_mean(support, has_gold.float())
        else:
            # as the official model: unanswerable questions are supervised too, with every label 0 (no paragraph
            # supports an answer that is not there)
            labels = batch["support_labels"] * answerable[:, None]  # (B, M)
            support = nn.functional.binary_cross_entropy_with_logits(
                outputs["support_logits"], labels, reduction="none"
            )  # (B, M)
            losses["support"] = _masked_mean(support, batch["marker_mask"].float())
        if self.answerability_head:
            losses["answerability"] = nn.functional.binary_cross_entropy_with_logits(
                outputs["answerable_logit"], batch["answerable"].float()
            )
        if self.answer_type_head:
            types = cross_entropy(outputs["type_logits"], batch["answer_type"], reduction="none")  # (B,)
            losses["answer_type"] = _masked_mean(types, answerable.float())
        return losses

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        losses = self.head_losses(batch, self.batch_outputs(batch))
        loss = _total(losses)
        size = len(batch["input_ids"])
        self.log("train/loss", loss, prog_bar=True, batch_size=size)
        for head, value in losses.items():
            self.log(f"train/{head}_loss", value, batch_size=size)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        outputs = self.batch_outputs(batch)
        self.log("val/loss", self.loss(batch, outputs), sync_dist=True, batch_size=len(batch["input_ids"]))
        self.val_outputs.update(*window_outputs(batch, outputs, self.max_answer_tokens, self.single_support))

    def on_validation_epoch_end(self) -> None:
        windows, markers = self.val_outputs.compute()  # every rank's windows: all ranks decode the same
        self.val_outputs.reset()
        validation = require_validation_gold(self, self.validation, needs_context=True)
        golds, context_of = validation.golds, validation.context_of
        metrics = evaluate_predictions(
            golds, self.decode(windows, markers, golds, context_of), validation.paired
        ).metrics
        for name, value in metrics.items():
            if not name.startswith("count"):
                # identical on every rank; sync_dist (a mean of equal values) says so to Lightning
                self.log(f"val/{name}", value, prog_bar=name == "answer_f1", sync_dist=True)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> tuple[torch.Tensor, torch.Tensor]:
        return window_outputs(batch, self.batch_outputs(batch), self.max_answer_tokens, self.single_support)

    def decode(
        self,
        windows: torch.Tensor,
        markers: torch.Tensor,
        golds: Sequence[GoldInstance],
        context_of: Callable[[int], str],
    ) -> list[Prediction]:
        """Official predictions, one per gold row, from gathered window tables."""
        return decode_predictions(windows, markers, [gold.id for gold in golds], context_of, **self._decoding())

    def decode_questions(
        self, windows: torch.Tensor, markers: torch.Tensor, count: int, context_of: Callable[[int], str]
    ) -> list[DecodedQuestion]:
        """Rows 0..`count`-1 decoded with their confidences and support probabilities (Step Execution's steps)."""
        return decode_questions(windows, markers, count, context_of, **self._decoding())

    def _decoding(self) -> dict[str, Any]:
        return {
            "support_threshold": self.support_threshold,
            "single_support": self.single_support,
            "use_answerability": self.answerability_head,
            "use_answer_type": self.answer_type_head,
        }


def _total(losses: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.stack(list(losses.values())).sum()


def _masked_mean(values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean of `values` over the entries with weight 1 (0 when there are none), keeping `values` in the graph."""
    return (values * weights).sum() / weights.sum().clamp(min=1.0)


class WindowOutputCollector(Metric):
    """Gathers the per-window and per-marker tables from every rank (decoding needs all windows of a question)."""

    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("windows", default=[], dist_reduce_fx="cat")
        self.add_state("markers", default=[], dist_reduce_fx="cat")

    def update(self, windows: torch.Tensor, markers: torch.Tensor) -> None:
        self.windows.append(windows)
        self.markers.append(markers)

    def compute(self) -> tuple[torch.Tensor, torch.Tensor]:
        return state_table(self.windows, len(WINDOW_COLUMNS)), state_table(self.markers, len(MARKER_COLUMNS))
