"""Selector features: one `question [SEP] paragraph` pair per row (title prepended for HotpotQA/2Wiki)."""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerFast


def selector_pairs(batch: dict[str, list], rows: list[int], *, include_title: bool) -> dict[str, list]:
    """Expand a batch of examples into one (untokenised) pair per paragraph. Training balances positives and
    negatives by sampling these rows afresh each epoch (`BalancedNegatives`), not here."""
    out: dict[str, list] = {"question": [], "paragraph": [], "label": [], "example_row": [], "paragraph_idx": []}
    for row, question, paragraphs in zip(rows, batch["question"], batch["paragraphs"]):
        for paragraph in paragraphs:
            out["question"].append(question)
            out["paragraph"].append(
                f"{paragraph['title']}. {paragraph['text']}" if include_title else paragraph["text"]
            )
            out["label"].append(float(paragraph["is_supporting"]))
            out["example_row"].append(row)
            out["paragraph_idx"].append(paragraph["idx"])
    return out


def featurize_selector(
    batch: dict[str, list], rows: list[int], tokenizer: PreTrainedTokenizerFast, *, max_length: int, include_title: bool
) -> dict[str, Any]:
    """Batched `datasets.map` function: tokenised pairs with label, example row and paragraph idx."""
    pairs = selector_pairs(batch, rows, include_title=include_title)
    encoded = tokenizer(pairs["question"], pairs["paragraph"], truncation="only_second", max_length=max_length)
    return {
        **{key: encoded[key] for key in encoded},
        "label": pairs["label"],
        "example_row": pairs["example_row"],
        "paragraph_idx": pairs["paragraph_idx"],
    }
