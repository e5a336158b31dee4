"""Beam Retrieval features (Zhang et al., NAACL 2024; github.com/canghongjian/beam_retriever): one row per question,
with the question's tokens and every paragraph's, the gold chain and the number of hops to retrieve.

As the authors' `retrieval/datasets.py` builds them for MuSiQue: the question without its final `?` (at most half of
`max_length` tokens, so that every hop keeps room for its paragraphs), each paragraph as `title.text` (one string,
no space; the authors join HotpotQA's and 2Wiki's titles to the text with nothing between, here `title.text` for
every dataset), both tokenised without special tokens, each paragraph clipped to `max_length` minus the question's
tokens. The hop inputs are assembled from these tokens by the model, hop by hop
(`hop_input`).

The gold chain: in the order of the question's decomposition (MuSiQue: `label_order`, as the authors' code reads
`paragraph_support_idx` step by step), else the supporting paragraphs in dataset order (HotpotQA, 2Wiki, where any
order is a correct chain). An unanswerable question has no complete chain: its gold chain is empty (it is not
trained on, and scored only through the answerer's answerability).

The number of hops to retrieve comes from the question's type, as the authors' prediction script reads it
(`test_model_tmp.py`): MuSiQue states it in its id (`3hop1__...` -> 3), 2Wiki's `bridge_comparison` questions have 4
supporting paragraphs, every other question 2. It is not read from the gold support, so an unlabelled test file gets
it too where it keeps the id (MuSiQue) or 2Wiki's `type` (a file without `type`, as the shipped unlabelled 2Wiki
sample, chains 2).
"""

from __future__ import annotations

import re
from typing import Any

import datasets
from transformers import PreTrainedTokenizerFast

from musique_models.features.padding import declare_columns

# The columns of a featurised question; the collator pads each list column (declared at the end of this module).
BEAM_COLUMNS = ("input_ids", "candidate_tokens", "candidate_lengths", "candidate_idx", "gold_chain")
FOUR_HOP_TYPES = ("bridge_comparison",)  # 2WikiMultihopQA: two bridges, then a comparison


def hop_count(question_type: str) -> int:
    """The number of paragraphs to chain for a question of type `question_type` (see the module docstring)."""
    match = re.match(r"(\d+)hop", question_type)
    if match:
        return int(match.group(1))
    return 4 if question_type in FOUR_HOP_TYPES else 2


def gold_chain(row: dict[str, Any], label_order: bool) -> list[int]:
    """The idx of a row's gold supporting paragraphs, in decomposition order when `label_order` and every step names
    its paragraph, else in dataset order; [] for an unanswerable row (no complete chain)."""
    if not row["answerable"]:
        return []
    supporting = [paragraph["idx"] for paragraph in row["paragraphs"] if paragraph["is_supporting"]]
    if label_order:
        steps = [step["paragraph_support_idx"] for step in row.get("decomposition") or []]
        if steps and None not in steps and sorted(set(steps)) == sorted(supporting):
            return list(dict.fromkeys(steps))
    return supporting


def featurize_beam(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    max_length: int,
    label_order: bool,
) -> dict[str, list]:
    """Batched `datasets.map` function: one row per question. `input_ids`: the question's tokens;
    `candidate_tokens`: every paragraph's tokens, concatenated, `candidate_lengths` their lengths and `candidate_idx`
    their idx, in dataset order; `gold_chain`: positions (in that order) of the gold chain; `hops`: paragraphs to
    chain at prediction; `example_row`. `max_length` counts the special tokens of a hop input too."""
    out: dict[str, list] = {column: [] for column in (*BEAM_COLUMNS, "hops", "example_row")}
    table_rows = [{key: values[i] for key, values in batch.items()} for i in range(len(rows))]
    for row, record in zip(rows, table_rows, strict=True):
        question = record["question"].strip()
        question = question[:-1] if question.endswith("?") else question
        question_ids = tokenizer.encode(question, add_special_tokens=False, truncation=True, max_length=max_length // 2)
        room = max(max_length - len(question_ids), 1)
        texts = [f"{paragraph['title']}.{paragraph['text']}" for paragraph in record["paragraphs"]]
        encoded = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=room)["input_ids"]
        idxs = [paragraph["idx"] for paragraph in record["paragraphs"]]
        position_of = {idx: position for position, idx in enumerate(idxs)}
        out["input_ids"].append(question_ids)
        out["candidate_tokens"].append([token for tokens in encoded for token in tokens])
        out["candidate_lengths"].append([len(tokens) for tokens in encoded])
        out["candidate_idx"].append(idxs)
        out["gold_chain"].append([position_of[idx] for idx in gold_chain(record, label_order)])
        out["hops"].append(hop_count(record.get("question_type") or ""))
        out["example_row"].append(row)
    return out


featurize_beam.output_features = datasets.Features(  # type: ignore[attr-defined]
    {
        "input_ids": datasets.Sequence(datasets.Value("int32")),
        "candidate_tokens": datasets.Sequence(datasets.Value("int32")),
        "candidate_lengths": datasets.Sequence(datasets.Value("int32")),
        "candidate_idx": datasets.Sequence(datasets.Value("int32")),
        "gold_chain": datasets.Sequence(datasets.Value("int32")),
        "hops": datasets.Value("int32"),
        "example_row": datasets.Value("int64"),
    }
)


def hop_budget(max_length: int, question_length: int, hops: int, hop: int) -> int:
    """Tokens (without the two special tokens) of a hop-`hop` input (0-based) of a `hops`-hop chain: each later hop
    keeps room for one mean paragraph (`(max_length - 2 - question) // hops` tokens), the last hop has all of
    `max_length - 2`, as the authors' `Retriever.forward`."""
    mean_paragraph = (max_length - 2 - question_length) // hops
    return max_length - 2 - (hops - 1 - hop) * mean_paragraph


def hop_input(
    question: list[int], chain_tokens: list[int], candidate: list[int], budget: int, candidate_first: bool = False
) -> list[int]:
    """The text tokens of one hop input: the question, the chain's paragraphs so far (`chain_tokens`, as the
    previous hop's input held them) and the candidate, clipped to `budget`. `candidate_first` puts the candidate
    before the chain (training shuffles the two, as the authors' code, so that the order is not a cue)."""
    context = candidate + chain_tokens if candidate_first else chain_tokens + candidate
    return (question + context)[:budget]


# every paragraph's tokens, lengths and idx; the gold chain
declare_columns(__name__, pad={"candidate_tokens": None, "candidate_lengths": 0, "candidate_idx": -1, "gold_chain": -1})
