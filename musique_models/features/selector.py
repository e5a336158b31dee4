"""Selector features: one `question SEP paragraph` text per row, as the official `text_ranker` reader builds it.

The question and the paragraph are joined by the literal word `SEP` into ONE sequence (not a tokenizer pair),
paragraph titles left out, and the whole clipped to `max_length` tokens (300 in the official configs) before the
special tokens are added.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerFast

# What the official reader puts between the question and the paragraph (a plain word, not the tokenizer's [SEP]).
QUESTION_SEPARATOR = " SEP "


def selector_texts(batch: dict[str, list], rows: list[int]) -> dict[str, list]:
    """Expand a batch of examples into one (untokenised) text per paragraph. Training balances positives and
    negatives by sampling these rows afresh each epoch (`BalancedNegatives`), not here."""
    out: dict[str, list] = {"text": [], "label": [], "example_row": [], "paragraph_idx": []}
    for row, question, paragraphs in zip(rows, batch["question"], batch["paragraphs"]):
        question = " ".join(question.split())
        for paragraph in paragraphs:
            out["text"].append(question + QUESTION_SEPARATOR + paragraph["text"].strip())
            out["label"].append(float(paragraph["is_supporting"]))
            out["example_row"].append(row)
            out["paragraph_idx"].append(paragraph["idx"])
    return out


def featurize_selector(
    batch: dict[str, list], rows: list[int], tokenizer: PreTrainedTokenizerFast, *, max_length: int
) -> dict[str, Any]:
    """Batched `datasets.map` function: tokenised texts with label, example row and paragraph idx. `max_length`
    counts the text's tokens, the special tokens come on top (as the official reader adds them after clipping)."""
    texts = selector_texts(batch, rows)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    encoded = tokenizer(texts["text"], truncation=True, max_length=max_length + specials)
    return {
        **{key: encoded[key] for key in encoded},
        "label": texts["label"],
        "example_row": texts["example_row"],
        "paragraph_idx": texts["paragraph_idx"],
    }
