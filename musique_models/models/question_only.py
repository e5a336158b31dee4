"""Q-only answerer: the paper's question-only artifact baseline. A seq2seq model generates the answer from the
question ALONE (no paragraph reaches it); it never predicts support.

Input: the question's tokens (`musique_models.features.question_only`). Target: the answer between the tokenizer's
start and end tokens; the decoder reads target[:-1] and predicts target[1:], trained with token-averaged
cross-entropy with label smoothing (the decomposer's loss). Unanswerable rows (MuSiQue-Full) have no target tokens
(labels -100): the average runs over the batch's target tokens, and a batch without any gives 0 (the decoder stays
in the graph, weighted by 0, so DDP sees a gradient for every parameter).

Answerability (datasets with unanswerable questions, `answerability_head`): one logit from the encoder's last
hidden states mean-pooled over the question's tokens (B, H) -> (B,), binary cross-entropy, answerable when
p > 0.5. The head reads the states through a stop-gradient: a probe on the answer generator's encoder, which only
the answers train. On MuSiQue-Full both twins have the same question, so nothing in a question tells answerability
and the head's gradient into the encoder would only be noise; jointly trained, a tiny BART learning a separable
labelling stopped memorising answers (4 answers, 60 steps: exact match 0.25-0.5 over 4 seeds; 1.0 in all 4 with
the stop-gradient).

Generation: greedy (`num_beams=1`) or beam search ranking beams by summed log-probability (length penalty 0), at
most `max_answer_tokens` answer tokens plus the end token. Confidence of a generated answer: exp of the summed
log-probabilities of its generated tokens, the end token included (the start token is given, not generated).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.modeling_outputs import BaseModelOutput

from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.gold import ValidationGold
from musique_models.evaluation.torchmetric import MultihopQAMetric
from musique_models.models.backbone import BackboneSpec, load_seq2seq, load_tokenizer, pool
from musique_models.models.base import QAModule, log_validation_scores, require_validation_gold
from musique_models.models.decoding import decode_answers, generated_log_prob


class QuestionOnlyAnswerer(QAModule):
    """Seq2seq answer generator reading the question alone, with an optional answerability head (see the module
    docstring), on a `load_seq2seq` backbone.

    The tokenizer is rebuilt from `backbone` on construction (`load_tokenizer`), so a checkpoint loads with
    `QuestionOnlyAnswerer.load_from_checkpoint(path)` alone; `vocab_size` and `pad_token_id` (the tokenizer the
    features were built with) are checked against it.

    Args:
        backbone: the seq2seq backbone (bart_large, minilm_bert2bert, tiny_bart).
        vocab_size: the tokenizer's size (with the paragraph marker).
        pad_token_id: the tokenizer's padding id.
        answerability_head: train and use the answerability head (datasets with unanswerable questions).
        label_smoothing: of the training cross-entropy.
        num_beams: beam size of generation (1: greedy).
        max_answer_tokens: most answer tokens generated (the end token comes on top; the features' target clip).
        validation: the evaluation split's gold its validation epochs are scored against with the evaluator's metrics
            (needed when the stage validates; never saved in a checkpoint).
    """

    def __init__(
        self,
        backbone: BackboneSpec,
        vocab_size: int,
        pad_token_id: int,
        answerability_head: bool = False,
        lr: float = 3e-5,
        warmup_ratio: float = 0.1,
        schedule: str = "linear",
        weight_decay: float = 0.0,
        label_smoothing: float = 0.1,
        num_beams: int = 1,
        max_answer_tokens: int = 30,
        validation: ValidationGold | None = None,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, schedule=schedule)
        self.save_hyperparameters(ignore=["validation"])
        self.validation = validation
        self.tokenizer = load_tokenizer(backbone)
        if (len(self.tokenizer), self.tokenizer.pad_token_id) != (vocab_size, pad_token_id):
            raise MusiqueModelsError(
                f"backbone {backbone.name!r}: its tokenizer has {len(self.tokenizer)} ids and pads with "
                f"{self.tokenizer.pad_token_id}, not vocab_size={vocab_size}, pad_token_id={pad_token_id}: build the "
                "features with load_tokenizer(backbone)"
            )
        self.model = load_seq2seq(backbone, vocab_size, self.tokenizer)
        self.pad_token_id = pad_token_id
        self.end_token_id = int(self.model.generation_config.eos_token_id)
        hidden = self.model.get_encoder().config.hidden_size
        # only when the data has unanswerable questions (DDP requires every parameter to receive a gradient)
        self.answerable_head = nn.Linear(hidden, 1) if answerability_head else None
        self.answerability_head = answerability_head
        self.label_smoothing = label_smoothing
        self.num_beams = num_beams
        self.max_answer_tokens = max_answer_tokens
        self.val_metric = MultihopQAMetric([])

    def encode(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The encoder's last hidden states (B, T, H) of the questions."""
        return self.model.get_encoder()(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).last_hidden_state

    def answerable_logit(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor | None:
        """The answerability logit (B,) from the mean-pooled states (B, T, H), no gradient into the encoder; None
        without the head."""
        if self.answerable_head is None:
            return None
        return self.answerable_head(pool(hidden.detach(), attention_mask, "mean")).squeeze(-1)

    def loss(self, batch: dict[str, torch.Tensor], hidden: torch.Tensor | None = None) -> torch.Tensor:
        """Token-averaged, label-smoothed cross-entropy of predicting labels[1:] from labels[:-1] (0 without target
        tokens), plus the answerability head's binary cross-entropy. `hidden`: the batch's encoder states, if
        already computed."""
        hidden = self.encode(batch) if hidden is None else hidden  # (B, T, H)
        labels = batch["labels"]  # (B, L): start token, answer, end token, then -100; all -100 without a target
        decoder_inputs = labels[:, :-1]  # (B, L-1)
        # right padding: the causal mask keeps every target position off the padding, so no decoder mask is needed
        logits = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
            attention_mask=batch["attention_mask"],
            decoder_input_ids=decoder_inputs.masked_fill(decoder_inputs < 0, self.pad_token_id),
            use_cache=False,
        ).logits  # (B, L-1, V)
        targets = labels[:, 1:].flatten()  # (B * (L-1),)
        token_losses = nn.functional.cross_entropy(
            logits.flatten(0, 1).float(),
            targets,
            ignore_index=-100,
            label_smoothing=self.label_smoothing,
            reduction="none",
        )  # (B * (L-1),): 0 at ignored positions
        loss = token_losses.sum() / (targets != -100).sum().clamp(min=1)
        logit = self.answerable_logit(hidden, batch["attention_mask"])
        if logit is not None:
            loss = loss + nn.functional.binary_cross_entropy_with_logits(logit.float(), batch["answerable"].float())
        return loss

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def generate_answers(
        self, batch: dict[str, torch.Tensor], hidden: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """Generated `ids` (B, L) (start token first, padding after the end token), their `confidence` (B,) and
        `answerable_prob` (B,) (1.0 without the head). The encoder runs once, on the question tokens alone."""
        hidden = self.encode(batch) if hidden is None else hidden  # (B, T, H)
        logit = self.answerable_logit(hidden, batch["attention_mask"])
        answerable_prob = torch.sigmoid(logit.float()) if logit is not None else hidden.new_ones(len(hidden)).float()
        beam_settings = {"early_stopping": True, "length_penalty": 0.0} if self.num_beams > 1 else {}
        output = self.model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            # a fresh container: generation expands it in place for beams
            encoder_outputs=BaseModelOutput(last_hidden_state=hidden),
            num_beams=self.num_beams,
            max_new_tokens=self.max_answer_tokens + 1,
            output_scores=True,
            return_dict_in_generate=True,
            **beam_settings,  # beams ranked by summed log-probability (length penalty 0)
        )
        ids = output.sequences  # (B, 1 + S)
        if self.num_beams > 1:
            summed = output.sequences_scores.float()  # (B,): summed log-probabilities (length penalty 0)
        else:
            # the start token is given, not generated
            summed = generated_log_prob(output.scores, ids[:, 1:], self.end_token_id)  # (B,)
        # float64: exp of a long unlikely answer's log-probability (-300 for an untrained model) underflows float32
        return {"ids": ids, "confidence": summed.double().exp(), "answerable_prob": answerable_prob}

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        hidden = self.encode(batch)
        self.log("val/loss", self.loss(batch, hidden), sync_dist=True, batch_size=len(batch["input_ids"]))
        generated = self.generate_answers(batch, hidden)
        self.val_metric.update(
            batch["example_row"].tolist(),
            decode_answers(self.tokenizer, generated["ids"]),
            [[] for _ in range(len(hidden))],
            (generated["answerable_prob"] > 0.5).tolist(),
        )

    def on_validation_epoch_start(self) -> None:
        self.val_metric.golds = list(require_validation_gold(self, self.validation).golds)

    def on_validation_epoch_end(self) -> None:
        log_validation_scores(self, self.val_metric, require_validation_gold(self, self.validation))

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"example_row": batch["example_row"], **self.generate_answers(batch)}
