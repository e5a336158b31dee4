"""End2End (EE, Trivedi et al., 2022): one Longformer reads the question and all paragraphs at once.

Input (`musique_models.features.end2end`): `<s> question </s></s> [( yes | no )] [[PP]] paragraph_1 [[PP]]
paragraph_2 ... </s>`, every paragraph in dataset order, clipped per dataset, markers never clipped. Global
attention on every token before the context (`<s>`, the question, the separators) and every marker, as the
official `transformer_rc` reader. The heads are the multi-paragraph answerer's (span over the context, support per
marker, answerability on the first token for MuSiQue-Full, optionally answer type), so decoding and metrics are
shared; the input is one window per question. Gradient checkpointing is on by default (4,000-token inputs).

The same module is Select+Answer's answerer when that reads its top K as one input (a Longformer backbone). The
recipes that train it: `musique_models.recipes.end2end` (`model=end2end`, C-only: `model=c_only`) and
`musique_models.recipes.select_answer`.
"""

from __future__ import annotations

from typing import Any

import torch

from musique_models.models.answerer import MultiParagraphAnswerer
from musique_models.models.backbone import BackboneError, BackboneSpec


class End2EndReader(MultiParagraphAnswerer):
    """The multi-paragraph answerer's heads on a Longformer that gives everything before the context and the
    paragraph markers global attention (`global_attention_mask`, built by the collator from the features'
    `global_positions`). Args as `MultiParagraphAnswerer`, plus `gradient_checkpointing`."""

    def __init__(
        self, backbone: BackboneSpec, vocab_size: int, gradient_checkpointing: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(backbone, vocab_size, **kwargs)
        if self.encoder.config.model_type != "longformer":
            raise BackboneError(
                f"End2End needs a Longformer backbone (longformer_base, longformer_large, "
                f"minilm_long, tiny_longformer); {backbone.name!r} is a {self.encoder.config.model_type}"
            )
        if gradient_checkpointing:
            # non-reentrant checkpointing works with DDP and with inputs that need no gradient
            self.encoder.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})

    def encode(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        token_type_ids: torch.Tensor | None = None,
        global_attention_mask: torch.Tensor | None = None,
        **_: torch.Tensor,
    ) -> torch.Tensor:
        """Token states (B, T, H); `global_attention_mask` (B, T) is 1 before the context and on the markers."""
        if global_attention_mask is None:
            raise ValueError("End2EndReader needs a global_attention_mask (features from featurize_end2end)")
        return self.encoder(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            global_attention_mask=global_attention_mask,
        ).last_hidden_state
