"""Answerer features: question + selected paragraphs with markers, split into overlapping windows (as HF `run_qa`).

Each window row keeps what decoding needs: token offsets into the context (-1 outside it and on markers), the
position of every paragraph marker with its paragraph idx, and the labels (answer span tokens, support per
marker, answerability, answer type). The context itself is rebuilt from the example by `build_context`.
"""

from __future__ import annotations

from typing import Any

from transformers import PreTrainedTokenizerFast

from musique_models.features.context import answer_type, build_context, locate_answer
from musique_models.models.backbone import PARAGRAPH_MARKER

NO_OFFSET = (-1, -1)


def ordered_paragraphs(paragraphs: list[dict], selected_idxs: list[int]) -> list[dict]:
    """The selected paragraphs, in the selector's rank order."""
    by_idx = {paragraph["idx"]: paragraph for paragraph in paragraphs}
    return [by_idx[idx] for idx in selected_idxs]


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
                        return_overflowing_tokens=True, return_offsets_mapping=True)
    marker_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER)
    out: dict[str, list] = {key: [] for key in ("offset_mapping", "marker_positions", "marker_paragraph_idx",
                                                "support_labels", "start_position", "end_position", "answerable",
                                                "answer_type", "example_row")}
    for window, example in enumerate(encoded["overflow_to_sample_mapping"]):
        sequence_ids = encoded.sequence_ids(window)
        input_ids = encoded["input_ids"][window]
        spans = paragraph_spans[example]
        paragraph_by_marker_start = {span.marker_start: span.idx for span in spans}
        supporting = {p["idx"] for p in batch["paragraphs"][example] if p["is_supporting"]}
        offsets, markers, marker_idxs = [], [], []
        for position, (offset, sequence_id, token_id) in enumerate(zip(encoded["offset_mapping"][window],
                                                                      sequence_ids, input_ids)):
            if sequence_id == 1 and token_id == marker_id:
                markers.append(position)
                marker_idxs.append(paragraph_by_marker_start[offset[0]])
                offsets.append(NO_OFFSET)
            else:
                offsets.append(tuple(offset) if sequence_id == 1 else NO_OFFSET)
        start = end = 0  # the CLS token: no answer span in this window
        if answer_spans[example] is not None:
            char_start, char_end = answer_spans[example]
            token_starts = [i for i, (s, e) in enumerate(offsets) if s != -1 and s <= char_start < e]
            token_ends = [i for i, (s, e) in enumerate(offsets) if s != -1 and s < char_end <= e]
            if token_starts and token_ends:
                start, end = token_starts[0], token_ends[-1]
        out["offset_mapping"].append(offsets)
        out["marker_positions"].append(markers)
        out["marker_paragraph_idx"].append(marker_idxs)
        out["support_labels"].append([float(idx in supporting) for idx in marker_idxs])
        out["start_position"].append(start)
        out["end_position"].append(end)
        out["answerable"].append(int(batch["answerable"][example]))
        out["answer_type"].append(answer_type(batch["answer"][example]))
        out["example_row"].append(rows[example])
    for key in encoded.keys():
        if key not in ("offset_mapping", "overflow_to_sample_mapping"):
            out[key] = encoded[key]
    return out
