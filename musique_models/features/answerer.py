"""Answerer features: question + selected paragraphs with markers, split into overlapping windows (as HF `run_qa`).

Each window row keeps `input_ids` (the collator derives the attention mask and, for encoders that use them, the
segment ids) and what decoding needs: token offsets into the context (`offset_start`/`offset_end`, -1 outside
it and on markers; the collator stacks them into `offset_mapping`), the
position of every paragraph marker with its paragraph idx, and the labels (answer span tokens, support per
marker, answerability, answer type). The context itself is rebuilt from the example by `build_context`.
"""

from __future__ import annotations

from itertools import chain
from typing import Any

import datasets
import numpy as np

from transformers import PreTrainedTokenizerFast

from musique_models.features.context import answer_type, build_context, locate_answer
from musique_models.models.backbone import PARAGRAPH_MARKER

NO_OFFSET = (-1, -1)


def ordered_paragraphs(paragraphs: list[dict], selected_idxs: list[int]) -> list[dict]:
    """The selected paragraphs, in the selector's rank order."""
    by_idx = {paragraph["idx"]: paragraph for paragraph in paragraphs}
    return [by_idx[idx] for idx in selected_idxs]


ANSWERER_FEATURES = datasets.Features({
    "input_ids": datasets.List(datasets.Value("int32")),
    "offset_start": datasets.List(datasets.Value("int32")),
    "offset_end": datasets.List(datasets.Value("int32")),
    "marker_positions": datasets.List(datasets.Value("int32")),
    "marker_paragraph_idx": datasets.List(datasets.Value("int32")),
    "support_labels": datasets.List(datasets.Value("float32")),
    "start_position": datasets.Value("int32"),
    "end_position": datasets.Value("int32"),
    "answerable": datasets.Value("int8"),
    "answer_type": datasets.Value("int8"),
    "example_row": datasets.Value("int32"),
})


def featurize_answerer(batch: dict[str, list], rows: list[int], tokenizer: PreTrainedTokenizerFast, *,
                       max_length: int, stride: int, include_title: bool) -> dict[str, Any]:
    """Batched `datasets.map` function: one row per window of each question (see the module docstring)."""
    contexts, paragraph_spans, answer_spans = [], [], []
    for paragraphs, selected, answer, aliases in zip(batch["paragraphs"], batch["selected_idxs"], batch["answer"],
                                                     batch["answer_aliases"]):
        context, spans = build_context(ordered_paragraphs(paragraphs, selected), include_title)
        supporting = {p["idx"] for p in paragraphs if p["is_supporting"]}
        contexts.append(context)
        paragraph_spans.append(spans)
        answer_spans.append(locate_answer(context, spans, supporting, [answer, *aliases]))
    encoded = tokenizer(batch["question"], contexts, truncation="only_second", max_length=max_length, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True, return_attention_mask=False,
                        return_token_type_ids=False)
    marker_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER)
    out: dict[str, list] = {key: [] for key in ("offset_start", "offset_end", "marker_positions", "marker_paragraph_idx",
                                                "support_labels", "start_position", "end_position", "answerable",
                                                "answer_type", "example_row")}
    for window, example in enumerate(encoded["overflow_to_sample_mapping"]):
        # vectorised over the window's tokens (a Python loop per token was most of the featurisation time)
        pairs = encoded["offset_mapping"][window]
        offsets = np.fromiter(chain.from_iterable(pairs), dtype=np.int64, count=2 * len(pairs)).reshape(-1, 2)  # (T, 2)
        token_starts = offsets[:, 0].copy()
        sequence_ids = encoded.sequence_ids(window)  # None for special tokens, 0 question, 1 context
        in_second = np.zeros(len(sequence_ids), dtype=bool)  # (T,): the context is one contiguous run
        if 1 in sequence_ids:
            in_second[sequence_ids.index(1): len(sequence_ids) - sequence_ids[::-1].index(1)] = True
        input_ids = encoded["input_ids"][window]
        markers = in_second & (np.fromiter(input_ids, dtype=np.int64, count=len(input_ids)) == marker_id)
        context = in_second & ~markers
        offsets[~context] = NO_OFFSET
        paragraph_by_marker_start = {span.marker_start: span.idx for span in paragraph_spans[example]}
        marker_positions = np.flatnonzero(markers)
        marker_idxs = [paragraph_by_marker_start[start] for start in token_starts[marker_positions].tolist()]
        supporting = {p["idx"] for p in batch["paragraphs"][example] if p["is_supporting"]}
        start = end = 0  # the CLS token: no answer span in this window
        if answer_spans[example] is not None:
            char_start, char_end = answer_spans[example]
            starts = np.flatnonzero(context & (offsets[:, 0] <= char_start) & (char_start < offsets[:, 1]))
            ends = np.flatnonzero(context & (offsets[:, 0] < char_end) & (char_end <= offsets[:, 1]))
            if len(starts) and len(ends):
                start, end = int(starts[0]), int(ends[-1])
        # numpy columns go to Arrow without building a Python object per token
        out["offset_start"].append(offsets[:, 0].astype(np.int32))
        out["offset_end"].append(offsets[:, 1].astype(np.int32))
        out["marker_positions"].append(marker_positions.astype(np.int32))
        out["marker_paragraph_idx"].append(marker_idxs)
        out["support_labels"].append([float(idx in supporting) for idx in marker_idxs])
        out["start_position"].append(start)
        out["end_position"].append(end)
        out["answerable"].append(int(batch["answerable"][example]))
        out["answer_type"].append(answer_type(batch["answer"][example]))
        out["example_row"].append(rows[example])
    out["input_ids"] = encoded["input_ids"]
    return out


featurize_answerer.output_features = ANSWERER_FEATURES  # type: ignore[attr-defined]
