"""Single-input reader features: the question and its paragraphs in one long input (the official `transformer_rc`
reader): every paragraph in dataset order for End2End, the selector's top K in rank order for a Longformer answerer.

`<s> question </s></s> [prefix] [[PP]] paragraph_1 [[PP]] paragraph_2 ... </s>` (the tokenizer's own pair template:
BERT's `[CLS] q [SEP] c [SEP]` for converted BERT-family models). The question is clipped to `max_question_tokens`,
each paragraph (title first for HotpotQA/2Wiki) to `max_paragraph_tokens`, and the whole to `max_length`: when
the clipped paragraphs still do not fit, they share what is left evenly (the largest common per-paragraph cap
that fits), so no paragraph disappears (the official reader cuts the last paragraphs' text instead). Markers are
never clipped: every paragraph keeps its marker, its support prediction and its original idx. `prefix` is the
yes/no prefix (`( yes | no )`, HotpotQA and 2Wiki), never clipped.

The rows carry the answerer's columns (`ANSWERER_FEATURES`, one window per question, so decoding is shared)
plus `global_positions`: every token before the context (`<s>`, the question, the separators) and the markers,
which get Longformer's global attention, as in the official reader (`global_attention="before_context"`;
`"question"` gives it to the question's tokens and the markers only, this project's former choice, kept for
comparison). The answer span is (-1, -1), ignored by the
loss, when the answer is not in the (clipped) input.
"""

from __future__ import annotations

import datasets
import numpy as np
import pyarrow as pa
from transformers import PreTrainedTokenizerFast

from musique_models.errors import check_choice
from musique_models.features.answerer import ANSWERER_FEATURES
from musique_models.features.context import (
    PARAGRAPH_MARKER,
    ParagraphSpan,
    answer_type,
    build_context,
    locate_answer,
    ordered_paragraphs,
)

# Which tokens before the context get global attention (besides the markers, which always do).
GLOBAL_ATTENTION = ("before_context", "question")
END2END_FEATURES = datasets.Features({**ANSWERER_FEATURES, "global_positions": datasets.List(datasets.Value("int32"))})

_QUESTION, _CONTEXT = -2, -3  # placeholders for the question and the context in a pair template


def pair_template(tokenizer: PreTrainedTokenizerFast) -> list[int]:
    """The tokenizer's special-token layout of a (question, context) pair, with `_QUESTION` and `_CONTEXT` where
    the two go: `[CLS, _QUESTION, SEP, _CONTEXT, SEP]` for BERT, `[<s>, _QUESTION, </s>, </s>, _CONTEXT, </s>]`
    for RoBERTa. Read from the tokenizer's own post-processor on a two-word pair (padding and truncation off)."""
    encoding = tokenizer.backend_tokenizer.encode("question", "context", add_special_tokens=True)
    template: list[int] = []
    for token, sequence in zip(encoding.ids, encoding.sequence_ids):
        placeholder = None if sequence is None else (_QUESTION, _CONTEXT)[sequence]
        if placeholder is None or not template or template[-1] != placeholder:
            template.append(token if placeholder is None else placeholder)
    return template


def _fill(template: list[int], question: int, context: int) -> np.ndarray:
    """The template with `question` and `context` placeholder tokens where the two parts go."""
    sequence: list[int] = []
    for token in template:
        sequence += [token] * (question if token == _QUESTION else context if token == _CONTEXT else 1)
    return np.asarray(sequence, dtype=np.int64)


def shared_cap(lengths: list[int], budget: int, cap: int) -> int:
    """The largest per-paragraph cap c <= `cap` with sum(min(length, c)) <= `budget` (every paragraph keeps up to
    c tokens)."""
    if sum(min(length, cap) for length in lengths) <= budget:
        return cap
    low, high = 0, cap  # sum at `low` fits, at `high` does not
    while high - low > 1:
        middle = (low + high) // 2
        if sum(min(length, middle) for length in lengths) <= budget:
            low = middle
        else:
            high = middle
    return low


def _mask_clipped(context: str, spans: list[ParagraphSpan], clipped: list[ParagraphSpan]) -> str:
    """`context` with the text that clipping drops replaced by NULs (same offsets, never matches an answer)."""
    pieces, cursor = [], 0
    for whole, kept in zip(spans, clipped):
        pieces += [context[cursor : kept.text_end], "\0" * (whole.text_end - kept.text_end)]
        cursor = whole.text_end
    pieces.append(context[cursor:])
    return "".join(pieces)


def featurize_end2end(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    max_question_tokens: int,
    max_paragraph_tokens: int,
    max_length: int,
    include_title: bool,
    prefix: str = "",
    empty_question: bool = False,
    global_attention: str = "before_context",
) -> pa.Table:
    """Batched `datasets.map` function: one row per question (see the module docstring). `empty_question` drops
    the question (the C-only baseline): the special tokens before the context and the markers keep global
    attention. `global_attention`: `before_context` (official) or `question` (see the module docstring)."""
    check_choice("global_attention", global_attention, GLOBAL_ATTENTION)
    marker_id = tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER)
    backend = tokenizer.backend_tokenizer
    backend.no_truncation()
    backend.no_padding()
    template = pair_template(tokenizer)
    special_tokens = len(template) - 2
    contexts, spans_of = [], []
    for paragraphs, selected in zip(batch["paragraphs"], batch["selected_idxs"]):
        context, spans = build_context(ordered_paragraphs(paragraphs, selected), include_title, prefix)
        contexts.append(context)
        spans_of.append(spans)
    questions = [] if empty_question else backend.encode_batch(batch["question"], add_special_tokens=False)
    encoded_contexts = backend.encode_batch(contexts, add_special_tokens=False)
    columns: dict[str, list] = {name: [] for name in END2END_FEATURES}
    for example, encoding in enumerate(encoded_contexts):
        question_ids = [] if empty_question else questions[example].ids[:max_question_tokens]
        ids = np.asarray(encoding.ids, dtype=np.int32)  # (C,) the whole context: markers and paragraph tokens
        offsets = np.asarray(encoding.offsets, dtype=np.int32).reshape(-1, 2)  # (C, 2)
        marker_tokens = np.flatnonzero(ids == marker_id)  # (P,) one per paragraph, in context order
        prefix_tokens = int(marker_tokens[0]) if len(marker_tokens) else len(ids)  # the yes/no prefix, if any
        paragraph_ends = np.append(marker_tokens[1:], len(ids))
        lengths = np.minimum(paragraph_ends - marker_tokens - 1, max_paragraph_tokens)
        budget = max_length - special_tokens - len(question_ids) - prefix_tokens - len(marker_tokens)
        cap = shared_cap(lengths.tolist(), budget, max_paragraph_tokens)
        kept = np.zeros(len(ids), dtype=bool)
        kept[:prefix_tokens] = True
        spans = []
        for marker, length, span in zip(marker_tokens.tolist(), np.minimum(lengths, cap).tolist(), spans_of[example]):
            kept[marker : marker + 1 + length] = True
            visible_end = int(offsets[marker + length, 1]) if length else span.text_start
            spans.append(ParagraphSpan(span.idx, span.marker_start, span.text_start, min(visible_end, span.text_end)))

        sequence = _fill(template, len(question_ids), int(kept.sum()))
        question_positions = np.flatnonzero(sequence == _QUESTION)
        context_positions = np.flatnonzero(sequence == _CONTEXT)
        input_ids = sequence.astype(np.int32)
        input_ids[question_positions] = question_ids
        input_ids[context_positions] = ids[kept]
        token_offsets = np.full((len(sequence), 2), -1, dtype=np.int32)
        token_offsets[context_positions] = offsets[kept]
        markers = context_positions[ids[kept] == marker_id]  # (P,) positions in the input
        token_offsets[markers] = -1

        paragraphs = batch["paragraphs"][example]
        supporting = {p["idx"] for p in paragraphs if p["is_supporting"]}
        answer = batch["answer"][example]
        # the answer is looked for in what the input keeps (clipped text masked), as the official reader clips first
        shown = _mask_clipped(contexts[example], spans_of[example], spans)
        char_span = locate_answer(shown, spans, supporting, [answer, *batch["answer_aliases"][example]], prefix)
        start = end = -1  # ignored by the loss: the answer is not in the (clipped) input
        if char_span is not None:
            in_context = token_offsets[:, 0] >= 0
            starts = np.flatnonzero(
                in_context & (token_offsets[:, 0] <= char_span[0]) & (char_span[0] < token_offsets[:, 1])
            )
            ends = np.flatnonzero(
                in_context & (token_offsets[:, 0] < char_span[1]) & (char_span[1] <= token_offsets[:, 1])
            )
            if len(starts) and len(ends):
                start, end = int(starts[0]), int(ends[-1])
        columns["input_ids"].append(input_ids)
        columns["offset_start"].append(token_offsets[:, 0].copy())
        columns["offset_end"].append(token_offsets[:, 1].copy())
        columns["marker_positions"].append(markers.astype(np.int32))
        columns["marker_paragraph_idx"].append([span.idx for span in spans])
        columns["support_labels"].append([float(span.idx in supporting) for span in spans])
        columns["start_position"].append(start)
        columns["end_position"].append(end)
        columns["answerable"].append(int(batch["answerable"][example]))
        columns["answer_type"].append(answer_type(answer))
        columns["example_row"].append(rows[example])
        if global_attention == "question":
            attending = question_positions
        else:
            attending = np.arange(int(context_positions[0]) if len(context_positions) else len(sequence) - 1)
        columns["global_positions"].append(np.concatenate([attending, markers]).astype(np.int32))
    schema = END2END_FEATURES.arrow_schema
    return pa.table({name: pa.array(values, type=schema.field(name).type) for name, values in columns.items()})


featurize_end2end.output_features = END2END_FEATURES  # type: ignore[attr-defined]
