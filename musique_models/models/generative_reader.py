"""Generative reader: a seq2seq model (T5, FLAN-T5, BART, BERT2BERT) or a decoder-only language model (Llama, Qwen,
SmolLM) that reads the question and its paragraphs, each tagged `[idx]`, and generates ONE target holding the answer,
the supporting paragraphs and, on MuSiQue-Full, answerability: `answer: ... | support: 3, 7 | answerable: yes`
(`musique_models.features.generative`).

Training: token-averaged cross-entropy on the target tokens alone (a decoder-only model's prompt positions are
labelled -100), optionally label-smoothed; all weights are trained (`finetune: full`), or LoRA adapters through
`peft` (`finetune: lora`, rank `lora_r` on `lora_target_modules`) with the pretrained weights frozen.

Generation: greedy (`num_beams: 1`) or beam search ranking beams by summed log-probability, at most
`max_target_tokens` tokens. A decoder-only model generates from its prompts left-padded (the collator pads right:
`left_padded` moves each prompt to the right edge), with the KV cache; a seq2seq model from its decoder's start
token. The confidence of a generation is its probability: exp of the summed log-probabilities of its tokens, the
end token included. Validation generates, parses and scores with the evaluator's metrics.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import LogitsProcessorList

from musique_models.errors import MusiqueModelsError, check_choice
from musique_models.evaluation.gold import ValidationGold
from musique_models.evaluation.torchmetric import MultihopQAMetric
from musique_models.features.generative import parse_generation
from musique_models.models.backbone import BackboneSpec, load_causal_lm, load_seq2seq, load_tokenizer
from musique_models.models.base import QAModule, log_validation_scores, require_validation_gold
from musique_models.models.decoding import decode_answers, generated_log_prob
from musique_models.models.guided import TargetFormatGuide

FINETUNE_MODES = ("full", "lora")


def left_padded(
    input_ids: torch.Tensor, prompt_lengths: torch.Tensor, pad_token_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's first `prompt_lengths[row]` ids moved to the right edge of a (B, P) batch, P the longest prompt,
    padding on the left; and its attention mask. Shapes: input_ids (B, T), prompt_lengths (B,)."""
    width = int(prompt_lengths.max())
    positions = torch.arange(width, device=input_ids.device)[None, :]  # (1, P)
    shift = width - prompt_lengths[:, None]  # (B, 1): padding before each prompt
    mask = positions >= shift  # (B, P)
    source = (positions - shift).clamp(min=0)  # (B, P): where each position's id comes from
    prompts = input_ids.gather(1, source).masked_fill(~mask, pad_token_id)
    return prompts, mask.long()


class GenerativeReader(QAModule):
    """Seq2seq or decoder-only reader generating the target format (see the module docstring). The architecture is
    the backbone's: `backbone.causal` true loads a decoder-only model (`load_causal_lm`), else an encoder-decoder
    (`load_seq2seq`).

    The tokenizer is rebuilt from `backbone` on construction (`load_tokenizer(backbone, paragraph_marker=False)`),
    so a checkpoint loads with `GenerativeReader.load_from_checkpoint(path)` alone; `vocab_size` and
    `pad_token_id` (those of the tokenizer the features were built with) are checked against it.

    Args:
        backbone: the seq2seq (t5_large, flan_t5_large, minilm_bert2bert, tiny_t5) or decoder-only (tiny_llama,
            smollm2_360m_instruct, qwen2_5_1_5b_instruct, ...) backbone.
        vocab_size: the tokenizer's size.
        pad_token_id: the tokenizer's padding id.
        with_answerability: the target has the `answerable` field (data with unanswerable questions).
        finetune: `full` (every weight) or `lora` (adapters of rank `lora_r`, scaled by `lora_alpha`, with dropout
            `lora_dropout`, on `lora_target_modules`: `all-linear` or a list of module names; the modules named in
            `lora_modules_to_save`, e.g. `[lm_head]`, train whole).
        label_smoothing: of the training cross-entropy.
        num_beams: beam size of generation (1: greedy).
        max_target_tokens: most tokens generated (the end token included; the features' target clip).
        guided_format: a decoder-only reader's decoding is held to the target format, the model filling its fields
            (`musique_models.models.guided.TargetFormatGuide`): a small prompted LLM then writes a generation the
            parser reads.
        validation: the evaluation split's gold its validation epochs are scored against (needed when the stage
            validates; never saved in a checkpoint).
    """

    def __init__(
        self,
        backbone: BackboneSpec,
        vocab_size: int,
        pad_token_id: int,
        with_answerability: bool = False,
        finetune: str = "full",
        lora_r: int = 16,
        lora_alpha: int = 32,
        lora_dropout: float = 0.05,
        lora_target_modules: Any = "all-linear",
        lora_modules_to_save: Any = None,
        lr: float = 1e-4,
        warmup_ratio: float = 0.1,
        schedule: str = "linear",
        weight_decay: float = 0.0,
        label_smoothing: float = 0.0,
        num_beams: int = 1,
        max_target_tokens: int = 64,
        guided_format: bool = False,
        validation: ValidationGold | None = None,
    ) -> None:
        super().__init__(lr=lr, weight_decay=weight_decay, warmup_ratio=warmup_ratio, schedule=schedule)
        check_choice("finetune", finetune, FINETUNE_MODES)
        self.save_hyperparameters(ignore=["validation"])
        self.validation = validation
        self.tokenizer = load_tokenizer(backbone, paragraph_marker=False)
        if (len(self.tokenizer), self.tokenizer.pad_token_id) != (vocab_size, pad_token_id):
            raise MusiqueModelsError(
                f"backbone {backbone.name!r}: its tokenizer has {len(self.tokenizer)} ids and pads with "
                f"{self.tokenizer.pad_token_id}, not vocab_size={vocab_size}, pad_token_id={pad_token_id}: build the "
                "features with load_tokenizer(backbone, paragraph_marker=False)"
            )
        self.causal = backbone.causal
        loader = load_causal_lm if self.causal else load_seq2seq
        model = loader(backbone, vocab_size, self.tokenizer)
        if finetune == "lora":
            model = _with_lora(
                model, self.causal, lora_r, lora_alpha, lora_dropout, lora_target_modules, lora_modules_to_save
            )
        self.model = model
        self.pad_token_id = pad_token_id
        self.end_token_id = int(model.generation_config.eos_token_id)
        self.with_answerability = with_answerability
        self.label_smoothing = label_smoothing
        self.num_beams = num_beams
        self.max_target_tokens = max_target_tokens
        if guided_format and not self.causal:
            raise MusiqueModelsError(f"backbone {backbone.name!r}: guided_format needs a decoder-only backbone")
        self.guide = (
            TargetFormatGuide(self.tokenizer, self.end_token_id, 0, with_answerability) if guided_format else None
        )
        self.val_metric = MultihopQAMetric([])

    def loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Token-averaged cross-entropy of the target tokens (labels other than -100)."""
        labels = batch["labels"]
        if self.causal:
            # (B, T): prompt positions and padding are -100; position t predicts the id at t + 1. Only the positions
            # that predict a target token get logits: the last T - min(prompt_length) + 1 (a prompt's logits over
            # the vocabulary would cost far more memory than the model itself)
            keep = labels.shape[1] - int(batch["prompt_length"].min()) + 1
            logits = self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                use_cache=False,
                logits_to_keep=keep,
            ).logits[:, :-1]  # (B, keep-1, V): positions T-keep .. T-2
            targets = labels[:, labels.shape[1] - keep + 1 :]  # (B, keep-1): the ids at T-keep+1 .. T-1
        else:
            # (B, L): the decoder's start token, the target, the end token, then -100
            decoder_inputs = labels[:, :-1]  # (B, L-1)
            logits = self.model(
                input_ids=batch["input_ids"],
                attention_mask=batch["attention_mask"],
                decoder_input_ids=decoder_inputs.masked_fill(decoder_inputs < 0, self.pad_token_id),
                use_cache=False,
            ).logits  # (B, L-1, V); right padding: the causal mask keeps every target position off it
            targets = labels[:, 1:]  # (B, L-1)
        return nn.functional.cross_entropy(
            logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, label_smoothing=self.label_smoothing
        )

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train/loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def generation_inputs(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """What `generate` is given: a decoder-only model's prompts, left-padded (B, P), or a seq2seq model's inputs
        (B, T); and their attention mask."""
        if self.causal:
            return left_padded(batch["input_ids"], batch["prompt_length"], self.pad_token_id)
        return batch["input_ids"], batch["attention_mask"]

    def generate(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Generated `ids` (B, S) (the generated tokens alone, padding after the end token) and their
        `confidence` (B,), the probability of the generated sequence."""
        input_ids, attention_mask = self.generation_inputs(batch)
        settings: dict[str, Any] = {"early_stopping": True, "length_penalty": 0.0} if self.num_beams > 1 else {}
        if self.guide is not None:
            self.guide.prompt_width = input_ids.shape[1]
            read = batch.get("read_idxs")
            self.guide.valid_idxs = (
                None
                if read is None
                else [{str(idx) for idx in row.tolist() if idx >= 0} for row in read for _ in range(self.num_beams)]
            )
            settings["logits_processor"] = LogitsProcessorList([self.guide])
        output = self.model.generate(
            input_ids=input_ids,
            attention_mask=attention_mask,
            num_beams=self.num_beams,
            do_sample=False,
            max_new_tokens=self.max_target_tokens,
            output_scores=True,
            return_dict_in_generate=True,
            use_cache=True,
            **settings,  # beams ranked by summed log-probability (length penalty 0); the format guide
        )
        # a decoder-only model returns the prompt first; a seq2seq one its decoder's start token
        generated = output.sequences[:, input_ids.shape[1] if self.causal else 1 :]  # (B, S)
        if self.num_beams > 1:
            summed = output.sequences_scores.float()  # (B,): summed log-probabilities (length penalty 0)
        else:
            summed = generated_log_prob(output.scores, generated, self.end_token_id)  # (B,)
        # float64: exp of a long unlikely target's log-probability underflows float32
        return {"ids": generated, "confidence": summed.double().exp()}

    def texts(self, ids: torch.Tensor) -> list[str]:
        """The generated texts of id rows (special tokens and padding dropped)."""
        return decode_answers(self.tokenizer, ids)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self.loss(batch), sync_dist=True, batch_size=len(batch["input_ids"]))
        parsed = [
            parse_generation(text, None, self.with_answerability) for text in self.texts(self.generate(batch)["ids"])
        ]
        self.val_metric.update(
            batch["example_row"].tolist(),
            [generation.answer for generation in parsed],
            [generation.support for generation in parsed],
            [generation.answerable for generation in parsed],
        )

    def on_validation_epoch_start(self) -> None:
        self.val_metric.golds = list(require_validation_gold(self, self.validation).golds)

    def on_validation_epoch_end(self) -> None:
        log_validation_scores(self, self.val_metric, require_validation_gold(self, self.validation))

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> dict[str, torch.Tensor]:
        return {"example_row": batch["example_row"], **self.generate(batch)}


def _with_lora(
    model: nn.Module,
    causal: bool,
    rank: int,
    alpha: int,
    dropout: float,
    target_modules: Any,
    modules_to_save: Any = None,
) -> nn.Module:
    """`model` with LoRA adapters (`peft`); only the adapters train, and the modules named in `modules_to_save`
    (e.g. `lm_head`), which train whole."""
    from peft import LoraConfig, TaskType, get_peft_model

    config = LoraConfig(
        task_type=TaskType.CAUSAL_LM if causal else TaskType.SEQ_2_SEQ_LM,
        r=rank,
        lora_alpha=alpha,
        lora_dropout=dropout,
        target_modules=target_modules if isinstance(target_modules, str) else list(target_modules),
        modules_to_save=list(modules_to_save) if modules_to_save else None,
    )
    return get_peft_model(model, config)
