"""Selector features: one `question SEP paragraph` text per row, as the official `text_ranker` reader builds it.

The question and the paragraph are joined by the literal word `SEP` into ONE sequence (not a tokenizer pair),
paragraph titles left out, and the whole clipped to `max_length` tokens (300 in the official configs) before the
special tokens are added.

A paragraph's label says whether it is one of the question's gold supporting paragraphs (`positives="support"`,
Select+Answer), or whether it contains the answer (`positives="answer"`, the 1-Para baseline: see
`answer_paragraph_idxs`).
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerFast

from musique_models.errors import check_choice
from musique_models.evaluation.metrics import normalize_answer
from musique_models.features.padding import declare_columns

# What the official reader puts between the question and the paragraph (a plain word, not the tokenizer's [SEP]).
QUESTION_SEPARATOR = " SEP "
SELECTOR_POSITIVES = ("support", "answer")


def paragraphs_containing(paragraphs: list[dict], answers: list[str]) -> list[int]:
    """Idx of the paragraphs that contain the answer or one of its aliases: the answer's words, SQuAD-normalised as
    the evaluator normalises them, occur as whole words in a row in the paragraph's normalised text (so "2" is not
    in "1920" and "US" not in "thus")."""
    needles = [f" {normalized} " for normalized in map(normalize_answer, answers) if normalized]
    return [
        paragraph["idx"]
        for paragraph in paragraphs
        if any(needle in f" {normalize_answer(paragraph['text'])} " for needle in needles)
    ]


def answer_paragraph_idxs(paragraphs: list[dict], answers: list[str]) -> list[int]:
    """Idx of the paragraphs that contain the answer (`paragraphs_containing`), the positives of the 1-Para
    baseline's selector (Min et al., 2019; Chen & Durrett, 2019). When no paragraph contains it (yes/no answers,
    paraphrased answers) the gold supporting paragraphs stand in, so that every answerable question keeps a
    positive."""
    found = paragraphs_containing(paragraphs, answers)
    return found or [paragraph["idx"] for paragraph in paragraphs if paragraph["is_supporting"]]


def selector_texts(batch: dict[str, list], rows: list[int], positives: str = "support") -> dict[str, list]:
    """Expand a batch of examples into one (untokenised) text per paragraph, labelled by `positives` (see the
    module docstring). Training balances positives and negatives by sampling these rows afresh each epoch
    (`BalancedNegatives`), not here."""
    check_choice("positives", positives, SELECTOR_POSITIVES)
    out: dict[str, list] = {"text": [], "label": [], "example_row": [], "paragraph_idx": []}
    for position, (row, question, paragraphs) in enumerate(zip(rows, batch["question"], batch["paragraphs"])):
        question = " ".join(question.split())
        if positives == "answer":
            answers = [batch["answer"][position], *batch["answer_aliases"][position]]
            labelled = set(answer_paragraph_idxs(paragraphs, answers))
        else:
            labelled = {paragraph["idx"] for paragraph in paragraphs if paragraph["is_supporting"]}
        for paragraph in paragraphs:
            out["text"].append(question + QUESTION_SEPARATOR + paragraph["text"].strip())
            out["label"].append(float(paragraph["idx"] in labelled))
            out["example_row"].append(row)
            out["paragraph_idx"].append(paragraph["idx"])
    return out


def featurize_selector(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    max_length: int,
    positives: str = "support",
) -> dict[str, Any]:
    """Batched `datasets.map` function: tokenised texts with label (see `positives`), example row and paragraph idx.
    `max_length` counts the text's tokens, the special tokens come on top (as the official reader adds them after
    clipping)."""
    texts = selector_texts(batch, rows, positives)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    encoded = tokenizer(texts["text"], truncation=True, max_length=max_length + specials)
    return {
        **{key: encoded[key] for key in encoded},
        "label": texts["label"],
        "example_row": texts["example_row"],
        "paragraph_idx": texts["paragraph_idx"],
    }


declare_columns(__name__, pad={}, floats=("label",))  # a pair's label: 1.0 positive, 0.0 negative
