"""Decomposer features: the question as source, its gold decomposition in the official step-token format as target.

As the official `question_translator` reader: the ten step tokens are added to the tokenizer as normal tokens,
the source is the question (clipped to `max_source_tokens` text tokens, special tokens on top), the target is
`decomposition_text` of the steps between the tokenizer's start and end tokens (`<s> ... </s>` for BART,
`[CLS] ... [SEP]` for a WordPiece tokenizer), clipped to `max_target_tokens` tokens in all. The target's first
token is the decoder's start token and is not predicted.
"""

from __future__ import annotations

from typing import Any

import datasets
from transformers import PreTrainedTokenizerFast

from musique_models.features.context import FeaturizationError, question_source
from musique_models.features.decomposition import DECOMPOSITION_TOKENS, decomposition_text

DECOMPOSER_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int32")),
        "labels": datasets.List(datasets.Value("int32")),
        "example_row": datasets.Value("int32"),
    }
)


def add_decomposition_tokens(tokenizer: PreTrainedTokenizerFast) -> None:
    """Add the step tokens (`DECOMPOSITION_TOKENS`) as normal added tokens, as the official reader does; raise
    ValueError if one of them does not encode to exactly one id. Adding them again changes nothing."""
    tokenizer.add_tokens(DECOMPOSITION_TOKENS)
    for token in DECOMPOSITION_TOKENS:
        ids = tokenizer.encode(token, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(
                f"the step token {token!r} encodes to {len(ids)} ids {ids} with {tokenizer.name_or_path}'s "
                "tokenizer; the decomposer needs each step token to be one id"
            )


def featurize_decomposer(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    max_source_tokens: int,
    max_target_tokens: int,
) -> dict[str, Any]:
    """Batched `datasets.map` function: `input_ids` (the question), `labels` (the target, with the tokenizer's
    start and end tokens) and `example_row`. The tokenizer must hold the step tokens (`add_decomposition_tokens`).
    A question without a gold decomposition (HotpotQA) raises FeaturizationError."""
    if tokenizer.convert_tokens_to_ids(DECOMPOSITION_TOKENS[0]) == tokenizer.unk_token_id:
        raise ValueError("the tokenizer has no step tokens: call add_decomposition_tokens(tokenizer) first")
    targets = []
    for position, (row, steps) in enumerate(zip(rows, batch["decomposition"])):
        if not steps:
            name = f"question {batch['id'][position]!r}" if "id" in batch else f"row {row}"
            raise FeaturizationError(
                f"{name} has no gold decomposition: the decomposer trains on datasets that have them (MuSiQue, 2Wiki)"
            )
        targets.append(decomposition_text([step["question"] for step in steps]))
    labels = tokenizer(targets, truncation=True, max_length=max_target_tokens)
    return {
        "input_ids": question_source(tokenizer, batch["question"], max_source_tokens),
        "labels": labels["input_ids"],
        "example_row": list(rows),
    }


featurize_decomposer.output_features = DECOMPOSER_FEATURES  # type: ignore[attr-defined]


def featurize_decomposer_source(
    batch: dict[str, list], rows: list[int], tokenizer: PreTrainedTokenizerFast, *, max_source_tokens: int, **_: Any
) -> dict[str, Any]:
    """What decomposing needs, for any question (with a gold decomposition or not: a test set, HotpotQA): the
    source `input_ids` exactly as `featurize_decomposer` builds it, and `example_row`."""
    return {"input_ids": question_source(tokenizer, batch["question"], max_source_tokens), "example_row": list(rows)}


featurize_decomposer_source.output_features = datasets.Features(  # type: ignore[attr-defined]
    {"input_ids": DECOMPOSER_FEATURES["input_ids"], "example_row": DECOMPOSER_FEATURES["example_row"]}
)
