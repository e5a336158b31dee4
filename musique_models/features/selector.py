"""Selector features: one `question [SEP] paragraph` pair per row (title prepended for HotpotQA/2Wiki)."""

from __future__ import annotations

import random
from typing import Any

from transformers import PreTrainedTokenizerFast


def selector_pairs(batch: dict[str, list], rows: list[int], *, balanced: bool, include_title: bool,
                   seed: int) -> dict[str, list]:
    """Expand a batch of examples into paragraph pairs (untokenised).

    With `balanced`, each question keeps its gold supporting paragraphs plus as many randomly chosen other
    paragraphs (seeded by `seed` and the row); else every paragraph.
    """
    out: dict[str, list] = {"question": [], "paragraph": [], "label": [], "example_row": [], "paragraph_idx": []}
    for row, question, paragraphs in zip(rows, batch["question"], batch["paragraphs"]):
        chosen = paragraphs
        if balanced:
            positives = [p for p in paragraphs if p["is_supporting"]]
            negatives = [p for p in paragraphs if not p["is_supporting"]]
            rng = random.Random(f"{seed}:{row}")
            chosen = positives + rng.sample(negatives, min(len(positives), len(negatives)))
        for paragraph in chosen:
            out["question"].append(question)
            out["paragraph"].append(f"{paragraph['title']}. {paragraph['text']}" if include_title else paragraph["text"])
            out["label"].append(float(paragraph["is_supporting"]))
            out["example_row"].append(row)
            out["paragraph_idx"].append(paragraph["idx"])
    return out


def featurize_selector(batch: dict[str, list], rows: list[int], tokenizer: PreTrainedTokenizerFast, *,
                       max_length: int, balanced: bool, include_title: bool, seed: int) -> dict[str, Any]:
    """Batched `datasets.map` function: tokenised pairs with label, example row and paragraph idx."""
    pairs = selector_pairs(batch, rows, balanced=balanced, include_title=include_title, seed=seed)
    encoded = tokenizer(pairs["question"], pairs["paragraph"], truncation="only_second", max_length=max_length)
    return {**{key: encoded[key] for key in encoded.keys()}, "label": pairs["label"],
            "example_row": pairs["example_row"], "paragraph_idx": pairs["paragraph_idx"]}
