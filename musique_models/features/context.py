"""Build the multi-paragraph reader context, and locate answers in it, the same way at training and decoding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.metrics import normalize_answer
from musique_models.features.padding import declare_columns

# Marks the start of each paragraph in a reader's input (added to every tokenizer as a special token).
PARAGRAPH_MARKER = "[[PP]]"
# What an answer-type head predicts: a span of the context, or yes / no (HotpotQA and 2Wiki comparisons).
ANSWER_TYPES = ("span", "yes", "no")
# The official code's way with yes/no answers: this text opens the context, and "yes" / "no" are read from it as spans.
YES_NO_PREFIX = "( yes | no )"
# Between a paragraph's title and its text when titles are included (the official readers' separator).
TITLE_SEPARATOR = " || "


class FeaturizationError(MusiqueModelsError, ValueError):
    """An example a featuriser cannot turn into model inputs; the message says which and what to change."""


@dataclass(frozen=True)
class ParagraphSpan:
    """Where one paragraph sits in the concatenated context (character offsets)."""

    idx: int
    marker_start: int
    text_start: int
    text_end: int


def build_context(paragraphs: Sequence[dict], include_title: bool, prefix: str = "") -> tuple[str, list[ParagraphSpan]]:
    """`[prefix ][[PP]] title || text [[PP]] title || text ...` in the given order, with each paragraph's offsets.

    `prefix` (the yes/no prefix, or empty) opens the context before the first marker, as the official readers'
    `global_prefix`; a paragraph's span covers its title and text. Runs of whitespace in titles and texts become
    one space (the official reader's `clean_ws`)."""
    pieces: list[str] = [f"{prefix} "] if prefix else []
    length = len(pieces[0]) if prefix else 0
    spans = []
    for paragraph in paragraphs:
        if PARAGRAPH_MARKER in paragraph["text"] or (include_title and PARAGRAPH_MARKER in paragraph["title"]):
            raise FeaturizationError(
                f"paragraph {paragraph['idx']} ({paragraph['title']!r}) contains the paragraph "
                f"marker {PARAGRAPH_MARKER!r}, which readers use to find paragraphs; remove it "
                "from the data"
            )
        marker_start = length
        body = " ".join(paragraph["text"].split())  # whitespace collapsed, as the official reader's clean_ws
        text = f"{' '.join(paragraph['title'].split())}{TITLE_SEPARATOR}{body}" if include_title else body
        text_start = length + len(PARAGRAPH_MARKER) + 1
        pieces.append(f"{PARAGRAPH_MARKER} {text} ")
        length = text_start + len(text) + 1
        spans.append(ParagraphSpan(paragraph["idx"], marker_start, text_start, text_start + len(text)))
    return "".join(pieces), spans


def ordered_paragraphs(paragraphs: list[dict], selected_idxs: list[int]) -> list[dict]:
    """The selected paragraphs, in the given (rank or dataset) order."""
    by_idx = {paragraph["idx"]: paragraph for paragraph in paragraphs}
    return [by_idx[idx] for idx in selected_idxs]


class ContextBuilder:
    """Rebuilds the reader context of a row of a table with `selected_idxs` (picklable, for DDP spawn): what
    decoding slices answers from."""

    def __init__(self, table: Any, include_title: bool, prefix: str = "") -> None:
        self.table = table
        self.include_title = include_title
        self.prefix = prefix

    def __call__(self, row: int) -> str:
        example = self.table[row]
        paragraphs = ordered_paragraphs(example["paragraphs"], example["selected_idxs"])
        return build_context(paragraphs, self.include_title, self.prefix)[0]


def question_source(tokenizer: Any, questions: list[str], max_question_tokens: int) -> list[list[int]]:
    """A seq2seq encoder's input ids of each question (the decomposer's, Q-only's): whitespace squeezed, at most
    `max_question_tokens` text tokens, the tokenizer's special tokens on top."""
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    texts = [" ".join(question.split()) for question in questions]
    return tokenizer(texts, truncation=True, max_length=max_question_tokens + specials)["input_ids"]


def start_token_id(tokenizer: Any) -> int | None:
    """The id a generated sequence starts from: the start token (`<s>`, or `[CLS]` for a WordPiece tokenizer), else
    the padding token (T5's decoder starts from it, as T5 was trained); None without any."""
    return next(
        (
            token
            for token in (tokenizer.bos_token_id, tokenizer.cls_token_id, tokenizer.pad_token_id)
            if token is not None
        ),
        None,
    )


def end_token_id(tokenizer: Any) -> int | None:
    """The id that ends a generated sequence: the end token (`</s>`), or `[SEP]` for a WordPiece tokenizer."""
    return tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.sep_token_id


def answer_type(answer: str) -> int:
    """0 for a span answer, 1 for yes, 2 for no (HotpotQA/2Wiki comparison questions)."""
    normalized = normalize_answer(answer)
    return ANSWER_TYPES.index(normalized) if normalized in ("yes", "no") else 0


def answer_offset(answer: str, text: str) -> int | None:
    """Where `answer` starts in `text` by the official readers' order of preference: as a word with a space on both
    sides, then with a space before, then with a space after, then anywhere; the same four again ignoring case.
    The first occurrence of the first pattern that matches; None when none does."""
    answer = answer.strip()
    if not answer:
        return None
    for haystack, needle in ((text, answer), (text.lower(), answer.lower())):
        for pattern, shift in ((f" {needle} ", 1), (f" {needle}", 1), (f"{needle} ", 0), (needle, 0)):
            found = haystack.find(pattern)
            if found != -1:
                return found + shift
    return None


def locate_answer(
    context: str, spans: Sequence[ParagraphSpan], supporting: set[int], answers: Sequence[str], prefix: str = ""
) -> tuple[int, int] | None:
    """Character span of the gold answer in `context`, as the official readers choose it.

    In the LAST supporting paragraph that holds the answer (`answer_offset` in the paragraph's marker-led text);
    else, or when the answer is part of the yes/no `prefix`, its `answer_offset` in the whole context. Aliases are
    tried the same way when the answer is nowhere (the official readers use the answer only). None when no answer
    is in the context. (With the answer-type head, yes/no questions get no span loss whatever is found.)
    """
    for answer in answers:
        answer = answer.strip()
        if not answer:
            continue
        found = None
        if not (prefix and answer in prefix):
            for span in spans:
                if span.idx in supporting:
                    # the text as the official reader searches it: the marker and a space before, nothing after
                    local = answer_offset(answer, context[span.marker_start : span.text_end])
                    if local is not None:
                        found = span.marker_start + local
        if found is None:
            found = answer_offset(answer, context.rstrip())
        if found is not None:
            return found, found + len(answer)
    return None


# The span readers' columns (features/answerer.py's windows, features/end2end.py's one input): the span offsets
# (-1: no token of the context) and the paragraph markers.
declare_columns(
    __name__,
    pad={
        "offset_start": -1,
        "offset_end": -1,
        "marker_positions": 0,
        "marker_paragraph_idx": -1,
        "support_labels": 0.0,
    },
    floats=("support_labels",),
)
