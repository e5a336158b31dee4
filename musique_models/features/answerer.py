"""Answerer features: question + selected paragraphs with markers, split into overlapping windows (as HF `run_qa`).

Each window row keeps `input_ids` (the collator derives the attention mask and, for encoders that use them, the
segment ids) and what decoding needs: token offsets into the context (`offset_start`/`offset_end`, -1 outside
it and on markers; the collator stacks them into `offset_mapping`), the
position of every paragraph marker with its paragraph idx, and the labels (answer span tokens, support per
marker, answerability, answer type). The context itself is rebuilt from the example by `build_context`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import datasets
import numpy as np
import pyarrow as pa
from transformers import PreTrainedTokenizerFast

from musique_models.features.context import (
    PARAGRAPH_MARKER,
    FeaturizationError,
    answer_type,
    build_context,
    locate_answer,
    ordered_paragraphs,
)

ANSWERER_FEATURES = datasets.Features(
    {
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
    }
)


@dataclass
class TokenWindows:
    """Windows of tokenised (question, context) pairs, flattened over the batch: W windows, N tokens in all.

    `offsets` are character offsets into the context, (-1, -1) for tokens outside it (question, special tokens);
    `bounds[w]:bounds[w + 1]` are window w's tokens; `example` is the batch example each window belongs to.
    """

    input_ids: np.ndarray  # (N,) int32
    offsets: np.ndarray  # (N, 2) int32
    in_context: np.ndarray  # (N,) bool
    bounds: np.ndarray  # (W + 1,) int64
    example: np.ndarray  # (W,) int64

    @property
    def window_of_token(self) -> np.ndarray:
        """(N,) the window each token belongs to."""
        return np.repeat(np.arange(len(self.example)), np.diff(self.bounds))

    def per_window(self, values: np.ndarray) -> np.ndarray:
        """(N,) the per-window `values` (W,) repeated over each window's tokens."""
        return np.repeat(values, np.diff(self.bounds))

    def list_array(self, flat: np.ndarray) -> pa.ListArray:
        """A token-level column as one Arrow list per window."""
        return pa.ListArray.from_arrays(pa.array(self.bounds.astype(np.int32)), pa.array(flat))


def encode_windows(
    tokenizer: PreTrainedTokenizerFast, questions: list[str], contexts: list[str], max_length: int, stride: int
) -> TokenWindows:
    """Tokenise each (question, context) pair into overlapping windows of at most `max_length` tokens (the
    question whole in each, the context split with `stride` tokens of overlap), as `tokenizer(...,
    truncation="only_second", return_overflowing_tokens=True)` does, but straight from the Rust encodings into
    flat arrays: the per-window Python lists the HF wrapper builds were a third of the featurisation time."""
    backend = tokenizer.backend_tokenizer
    # the HF wrapper resets these on its next call when it needs other settings
    backend.enable_truncation(max_length, stride=stride, strategy="only_second")
    backend.no_padding()
    try:
        encodings = backend.encode_batch(list(zip(questions, contexts)), add_special_tokens=True)
    except Exception as error:  # the Rust tokenizer raises a plain Exception
        if "truncat" not in str(error).lower():
            raise
        longest = max(len(ids) for ids in tokenizer(questions, add_special_tokens=False)["input_ids"])
        raise FeaturizationError(
            f"a question of {longest} tokens leaves no room for context in windows of "
            f"max_length={max_length} with stride={stride}; raise the reader's max_length or "
            "lower its stride"
        ) from None
    windows, example = [], []
    for index, encoding in enumerate(encodings):
        windows.append(encoding)
        windows.extend(encoding.overflowing)
        example.extend([index] * (1 + len(encoding.overflowing)))
    lengths = np.fromiter((len(window.ids) for window in windows), dtype=np.int64, count=len(windows))
    bounds = np.zeros(len(windows) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    total = int(bounds[-1])
    input_ids = np.fromiter(chain.from_iterable(window.ids for window in windows), dtype=np.int32, count=total)
    offsets = np.fromiter(
        chain.from_iterable(chain.from_iterable(window.offsets for window in windows)), dtype=np.int32, count=2 * total
    ).reshape(-1, 2)
    in_context = np.zeros(total, dtype=bool)
    for window, begin in zip(windows, bounds[:-1].tolist()):
        sequence_ids = window.sequence_ids  # None for special tokens, 0 question, 1 context: one contiguous run
        if 1 in sequence_ids:
            in_context[begin + sequence_ids.index(1) : begin + len(sequence_ids) - sequence_ids[::-1].index(1)] = True
    offsets[~in_context] = -1
    return TokenWindows(input_ids, offsets, in_context, bounds, np.asarray(example, dtype=np.int64))


def _first_per_window(mask: np.ndarray, window_of_token: np.ndarray, windows: int, last: bool = False) -> np.ndarray:
    """(W,) the flat token index of each window's first (or last) True in `mask`, -1 where it has none."""
    positions = np.flatnonzero(mask)
    result = np.full(windows, -1, dtype=np.int64)
    if last:
        result[window_of_token[positions]] = positions  # later positions overwrite earlier ones
    else:
        result[window_of_token[positions[::-1]]] = positions[::-1]
    return result


def featurize_answerer(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    max_length: int,
    stride: int,
    include_title: bool,
    prefix: str = "",
) -> pa.Table:
    """Batched `datasets.map` function: one row per window of each question (see the module docstring). `prefix`
    (the yes/no prefix) opens the context, so it is in the question's first window only."""
    contexts, marker_paragraph, answer_chars = [], [], []
    for paragraphs, selected, answer, aliases in zip(
        batch["paragraphs"], batch["selected_idxs"], batch["answer"], batch["answer_aliases"]
    ):
        context, spans = build_context(ordered_paragraphs(paragraphs, selected), include_title, prefix)
        supporting = {p["idx"] for p in paragraphs if p["is_supporting"]}
        contexts.append(context)
        marker_paragraph.append({span.marker_start: (span.idx, span.idx in supporting) for span in spans})
        answer_chars.append(locate_answer(context, spans, supporting, [answer, *aliases], prefix) or (-1, -1))
    windows = encode_windows(tokenizer, batch["question"], contexts, max_length, stride)
    n_windows = len(windows.example)
    window_of_token = windows.window_of_token
    markers = windows.in_context & (windows.input_ids == tokenizer.convert_tokens_to_ids(PARAGRAPH_MARKER))
    window_start = windows.bounds[:-1]

    # paragraph markers: window-relative positions, each with its paragraph idx and support label
    marker_tokens = np.flatnonzero(markers)
    marker_window = window_of_token[marker_tokens]
    marker_info = [
        marker_paragraph[example][char]
        for example, char in zip(windows.example[marker_window].tolist(), windows.offsets[marker_tokens, 0].tolist())
    ]
    marker_bounds = np.searchsorted(marker_window, np.arange(n_windows + 1)).astype(np.int32)

    # answer span: the tokens holding the answer's first and last character; (0, 0), the CLS token, when the
    # answer is not (wholly) inside the window
    windows.offsets[markers] = -1
    context = windows.in_context & ~markers
    char_start = windows.per_window(np.array([answer_chars[e][0] for e in windows.example], dtype=np.int64))
    char_end = windows.per_window(np.array([answer_chars[e][1] for e in windows.example], dtype=np.int64))
    has_answer = context & (char_start >= 0)
    first = _first_per_window(
        has_answer & (windows.offsets[:, 0] <= char_start) & (char_start < windows.offsets[:, 1]),
        window_of_token,
        n_windows,
    )
    last = _first_per_window(
        has_answer & (windows.offsets[:, 0] < char_end) & (char_end <= windows.offsets[:, 1]),
        window_of_token,
        n_windows,
        last=True,
    )
    found = (first >= 0) & (last >= 0)
    start_position = np.where(found, first - window_start, 0)
    end_position = np.where(found, last - window_start, 0)

    example = windows.example
    return pa.table(
        {
            "input_ids": windows.list_array(windows.input_ids),
            "offset_start": windows.list_array(windows.offsets[:, 0].copy()),
            "offset_end": windows.list_array(windows.offsets[:, 1].copy()),
            "marker_positions": pa.ListArray.from_arrays(
                pa.array(marker_bounds), pa.array((marker_tokens - window_start[marker_window]).astype(np.int32))
            ),
            "marker_paragraph_idx": pa.ListArray.from_arrays(
                pa.array(marker_bounds), pa.array([idx for idx, _ in marker_info], type=pa.int32())
            ),
            "support_labels": pa.ListArray.from_arrays(
                pa.array(marker_bounds),
                pa.array([float(is_support) for _, is_support in marker_info], type=pa.float32()),
            ),
            "start_position": pa.array(start_position.astype(np.int32)),
            "end_position": pa.array(end_position.astype(np.int32)),
            "answerable": pa.array(np.asarray(batch["answerable"], dtype=np.int8)[example]),
            "answer_type": pa.array(np.array([answer_type(a) for a in batch["answer"]], dtype=np.int8)[example]),
            "example_row": pa.array(np.asarray(rows, dtype=np.int32)[example]),
        }
    )


featurize_answerer.output_features = ANSWERER_FEATURES  # type: ignore[attr-defined]
