"""Question decomposer: a seq2seq model writing a multihop question's single-hop steps (the official BART
question translator, `translation_type: decompose`).

Input: the question's tokens with the tokenizer's special tokens. Target: the steps in the official step-token
format (`musique_models.features.decomposition`) between the tokenizer's start and end tokens, e.g.
`[CLS] [[CQS]] 0 [[CQE]] Brand >> author [[CQS]] 1 [[CQE]] [[RQS]] 0 [[RQE]] >> country of citizenship [SEP]`.
The target's first token is the decoder's start token: the decoder reads target[:-1] and predicts target[1:],
trained with token-averaged cross-entropy with label smoothing (0.1, as the official model). Decoding is beam search
(10 beams, as the official config) ranking beams by summed log-probability, as AllenNLP's beam search. Validation
scores the generated ids against the gold ones: corpus BLEU over token ids and exact match.
"""

from __future__ import annotations

from typing import Any

import sacrebleu
import torch
from torch import nn
from torchmetrics import Metric
from transformers import PreTrainedTokenizerFast

from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.torchmetric import state_table
from musique_models.features.decomposer import add_decomposition_tokens
from musique_models.models.backbone import BackboneSpec, load_seq2seq, load_tokenizer
from musique_models.models.base import QAModule


def load_decomposer_tokenizer(backbone: BackboneSpec) -> PreTrainedTokenizerFast:
    """The backbone's tokenizer (with the paragraph marker) plus the ten step tokens: what the decomposer's features
    are built with."""
    tokenizer = load_tokenizer(backbone)
    add_decomposition_tokens(tokenizer)
    return tokenizer


def decomposition_scores(predicted: list[list[int]], gold: list[list[int]], excluded: set[int]) -> dict[str, float]:
    """Corpus BLEU (0..100) and exact match (0..1) of predicted token-id sequences against gold ones, the ids in
    `excluded` (start, end, padding) and negative ones (the labels' -100 padding) removed from both.

    BLEU is the official model's (AllenNLP's over token ids): 4-gram, brevity penalty, no smoothing, each id one
    word (sacrebleu with `tokenize="none"` on the ids written out); AllenNLP reports it in 0..1.
    """
    if len(predicted) != len(gold):
        raise ValueError(f"{len(predicted)} predicted sequences for {len(gold)} gold ones")
    if not gold:
        return {"bleu": 0.0, "exact_match": 0.0}
    predicted = [[token for token in sequence if token >= 0 and token not in excluded] for sequence in predicted]
    gold = [[token for token in sequence if token >= 0 and token not in excluded] for sequence in gold]
    bleu = sacrebleu.corpus_bleu(
        [" ".join(map(str, sequence)) for sequence in predicted],
        [[" ".join(map(str, sequence)) for sequence in gold]],
        tokenize="none",
        smooth_method="none",
    )
    exact = sum(guess == truth for guess, truth in zip(predicted, gold)) / len(gold)
    return {"bleu": float(bleu.score), "exact_match": exact}


class QuestionDecomposer(QAModule):
    """Seq2seq decomposer (see the module docstring) on a `load_seq2seq` backbone.

    The model's start, end and padding ids come from the backbone's tokenizer with the step tokens
    (`load_decomposer_tokenizer`), rebuilt from `backbone` on construction, so a checkpoint loads with
    `QuestionDecomposer.load_from_checkpoint(path)` alone; `vocab_size` and `pad_token_id` (those of the tokenizer
    the features were built with) are checked against it.

    Args:
        backbone: the seq2seq backbone (bart_large, minilm_bert2bert, tiny_bart).
        vocab_size: the tokenizer's size (with the paragraph marker and the step tokens).
        pad_token_id: the tokenizer's padding id.
        label_smoothing: of the training cross-entropy.
        num_beams: beam size of generation.
        max_target_tokens: most tokens generated after the start token (the features' target clip).
    """

    def __init__(
        self,
        backbone: BackboneSpec,
        vocab_size: int,
        pad_token_id: int,
        lr: float = 3e-5,
        warmup_ratio: float = 0.1,
        schedule: str = "linear",
        weight_decay: float = 0.0,
        label_smoothing: float = 0.1,
        num_beams: int = 10,
        max_target_tokens: int = 100,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, schedule=schedule)
        self.save_hyperparameters()
        tokenizer = load_decomposer_tokenizer(backbone)
        if (len(tokenizer), tokenizer.pad_token_id) != (vocab_size, pad_token_id):
            raise MusiqueModelsError(
                f"backbone {backbone.name!r}: its tokenizer with the step tokens has {len(tokenizer)} ids and pads "
                f"with {tokenizer.pad_token_id}, not vocab_size={vocab_size}, pad_token_id={pad_token_id}: build "
                "the features with load_decomposer_tokenizer(backbone)"
            )
        self.model = load_seq2seq(backbone, vocab_size, tokenizer)
        self.pad_token_id = pad_token_id
        # left out of BLEU and exact match, as the official metrics exclude start, end and padding
        self.excluded_ids = {
            token
            for token in (
                tokenizer.bos_token_id,
                tokenizer.eos_token_id,
                tokenizer.cls_token_id,
                tokenizer.sep_token_id,
                pad_token_id,
            )
            if token is not None
        }
        self.label_smoothing = label_smoothing
        self.num_beams = num_beams
        self.max_target_tokens = max_target_tokens
        self.val_sequences = SequenceCollector(width=max_target_tokens + 1)

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Token-averaged, label-smoothed cross-entropy of predicting labels[1:] from labels[:-1]."""
        labels = batch["labels"]  # (B, L): start token, target, end token, then -100
        decoder_inputs = labels[:, :-1]  # (B, L-1)
        decoder_mask = decoder_inputs != -100
        logits = self.model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_inputs.masked_fill(~decoder_mask, self.pad_token_id),
            decoder_attention_mask=decoder_mask.long(),
            use_cache=False,
        ).logits  # (B, L-1, V)
        return nn.functional.cross_entropy(
            logits.flatten(0, 1).float(),
            labels[:, 1:].flatten(),
            ignore_index=-100,
            label_smoothing=self.label_smoothing,
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def generate_ids(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Beam-searched ids (B, L), starting with the start token, padded with the padding id after the end token."""
        return self.model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            num_beams=self.num_beams,
            max_new_tokens=self.max_target_tokens,
            early_stopping=True,
            length_penalty=0.0,  # beams ranked by summed log-probability (AllenNLP), not its per-token mean
        )

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch), sync_dist=True, batch_size=len(batch["labels"]))
        self.val_sequences.update(batch["feature_row"], self.generate_ids(batch), batch["labels"])

    def on_validation_epoch_end(self) -> None:
        predicted, gold = self.val_sequences.compute()  # gathered from every rank: identical on all of them
        self.val_sequences.reset()
        scores = decomposition_scores(predicted, gold, self.excluded_ids)
        self.log("val/bleu", scores["bleu"], prog_bar=True, sync_dist=True)
        self.log("val/exact_match", scores["exact_match"], sync_dist=True)

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"example_row": batch["example_row"], "ids": self.generate_ids(batch)}


class SequenceCollector(Metric):
    """Gathers (predicted, gold) id sequences from every rank, one per feature row, repeats (DDP padding) dropped.

    Each row is kept as one line of a table: feature row, then the predicted and the gold ids, each padded with -1
    to `width` (a longer sequence is refused).
    """

    full_state_update = False

    def __init__(self, width: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.width = width
        self.add_state("rows", default=[], dist_reduce_fx="cat")  # (n, 1 + 2 * width)

    def _padded(self, ids: torch.Tensor, name: str) -> torch.Tensor:
        if ids.shape[1] > self.width:
            raise ValueError(
                f"{name} sequences of {ids.shape[1]} tokens; at most {self.width} are kept (max_target_tokens + 1): "
                "build the features with the decomposer's max_target_tokens"
            )
        ids = ids.masked_fill(ids < 0, -1)  # labels' -100 padding
        return nn.functional.pad(ids, (0, self.width - ids.shape[1]), value=-1)

    def update(self, feature_rows: torch.Tensor, predicted: torch.Tensor, gold: torch.Tensor) -> None:
        """`feature_rows` (B,), `predicted` (B, P) and `gold` (B, G) ids; negative ids are padding."""
        self.rows.append(
            torch.cat(
                [feature_rows[:, None].long(), self._padded(predicted, "predicted"), self._padded(gold, "gold")],
                dim=1,
            )
        )

    def compute(self) -> tuple[list[list[int]], list[list[int]]]:
        """The predicted and the gold sequences (padding removed), in feature-row order."""
        unique: dict[int, list[int]] = {}
        for row in state_table(self.rows, 1 + 2 * self.width).long().tolist():
            unique.setdefault(row[0], row[1:])
        predicted, gold = [], []
        for row in sorted(unique):
            ids = unique[row]
            predicted.append([token for token in ids[: self.width] if token >= 0])
            gold.append([token for token in ids[self.width :] if token >= 0])
        return predicted, gold
