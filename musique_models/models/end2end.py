"""End2End (EE, Trivedi et al., 2022): one Longformer reads the question and all paragraphs at once.

Input (`musique_models.features.end2end`): `<s> question </s></s> [[PP]] paragraph_1 [[PP]] paragraph_2 ... </s>`,
every paragraph in dataset order, clipped per dataset, markers never clipped. Global attention on every question
token and every marker. The heads are the multi-paragraph answerer's (span over the context, support per marker,
answerability on the first token for MuSiQue-Full, answer type for yes/no datasets), so decoding and metrics are
shared; the input is one window per question. Gradient checkpointing is on by default (4,000-token inputs).

C-only (`model=c_only`, the paper's context-only artifact baseline) is this model with an empty question: global
attention on the markers only.
"""

from __future__ import annotations

import logging
from typing import Any

import datasets
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.evaluation.predictions import Prediction
from musique_models.features.context import ContextBuilder
from musique_models.features.end2end import featurize_end2end
from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneError, BackboneSpec, load_tokenizer
from musique_models.training.datamodule import QADataModule, featurize
from musique_models.training.reader import fit_and_predict_reader, has_unanswerable

log = logging.getLogger(__name__)


class End2EndReader(MultiParagraphAnswerer):
    """The multi-paragraph answerer's heads on a Longformer that gives the question tokens and the paragraph
    markers global attention (`global_attention_mask`, built by the collator from the features'
    `global_positions`). Args as `MultiParagraphAnswerer`, plus `gradient_checkpointing`."""

    def __init__(self, backbone: BackboneSpec, vocab_size: int, gradient_checkpointing: bool = True,
                 **kwargs: Any) -> None:
        super().__init__(backbone, vocab_size, **kwargs)
        if self.encoder.config.model_type != "longformer":
            raise BackboneError(f"End2End needs a Longformer backbone (longformer_base, longformer_large, "
                                f"minilm_long, tiny_longformer); {backbone.name!r} is a {self.encoder.config.model_type}")
        if gradient_checkpointing:
            # non-reentrant checkpointing works with DDP and with inputs that need no gradient
            self.encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None,
               global_attention_mask: torch.Tensor | None = None, **_: torch.Tensor) -> torch.Tensor:
        """Token states (B, T, H); `global_attention_mask` (B, T) is 1 on the question tokens and markers."""
        if global_attention_mask is None:
            raise ValueError("End2EndReader needs a global_attention_mask (features from featurize_end2end)")
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                            global_attention_mask=global_attention_mask).last_hidden_state


class End2End:
    """The End2End recipe (`model=end2end`, and `model=c_only` with `empty_question`): featurise, fit, predict.

    `reader` holds the stage settings (lr, warmup, clipping caps, batch, epochs); `max_paragraph_tokens` comes
    from the dataset (250 MuSiQue, 300 HotpotQA, 500 2Wiki).
    """

    def __init__(self, reader: DictConfig, empty_question: bool = False, eval_batch_size: int = 2,
                 num_workers: int = 0, name: str = "end2end") -> None:
        self.name = name
        self.reader_cfg = reader
        self.empty_question = empty_question
        self.eval_batch_size = eval_batch_size
        self.num_workers = num_workers

    def run(self, context: Any) -> list[Prediction]:
        cfg = context.cfg
        backbone: BackboneSpec = instantiate(cfg.backbone)
        tokenizer = load_tokenizer(backbone)
        include_title = bool(cfg.dataset.get("include_title", False))
        settings = {"max_question_tokens": self.reader_cfg.max_question_tokens,
                    "max_paragraph_tokens": self.reader_cfg.max_paragraph_tokens,
                    "max_length": min(self.reader_cfg.max_length, backbone.max_length),
                    "include_title": include_title, "empty_question": self.empty_question}
        cache = f"{cfg.paths.cache_dir}/features"
        train_table, eval_table = _in_dataset_order(context.train), _in_dataset_order(context.evaluation)
        train_rows = featurize(train_table, featurize_end2end, tokenizer, cache, f"{self.name}-train", **settings)
        eval_rows = featurize(eval_table, featurize_end2end, tokenizer, cache, f"{self.name}-eval", **settings)
        reader = End2EndReader(
            backbone, len(tokenizer), gradient_checkpointing=self.reader_cfg.gradient_checkpointing,
            answerability_head=has_unanswerable(context),
            answer_type_head=bool(cfg.dataset.get("yes_no_answers", False)), lr=self.reader_cfg.lr,
            warmup_ratio=self.reader_cfg.warmup_ratio, max_answer_tokens=self.reader_cfg.max_answer_tokens,
            single_support=self.reader_cfg.single_support)
        data = QADataModule.for_tokenizer(tokenizer, train_rows, eval_rows, batch_size=self.reader_cfg.micro_batch_size,
                                          eval_batch_size=self.eval_batch_size, num_workers=self.num_workers,
                                          seed=cfg.seed)
        return fit_and_predict_reader(self.name, reader, data, context, self.reader_cfg,
                                      ContextBuilder(eval_table, include_title))


def _in_dataset_order(table: datasets.Dataset) -> datasets.Dataset:
    """The table with `selected_idxs` = every paragraph in dataset order (EE reads them all)."""
    return table.add_column("selected_idxs", [[paragraph["idx"] for paragraph in paragraphs]
                                              for paragraphs in table["paragraphs"]])
