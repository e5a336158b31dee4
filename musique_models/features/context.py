"""Build the multi-paragraph reader context, and locate answers in it, the same way at training and decoding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.metrics import normalize_answer

# Marks the start of each paragraph in a reader's input (added to every tokenizer as a special token).
PARAGRAPH_MARKER = "[[PP]]"
# What an answer-type head predicts: a span of the context, or yes / no (HotpotQA and 2Wiki comparisons).
ANSWER_TYPES = ("span", "yes", "no")


class FeaturizationError(MusiqueModelsError, ValueError):
    """An example a featuriser cannot turn into model inputs; the message says which and what to change."""


@dataclass(frozen=True)
class ParagraphSpan:
    """Where one paragraph sits in the concatenated context (character offsets)."""

    idx: int
    marker_start: int
    text_start: int
    text_end: int


def build_context(paragraphs: Sequence[dict], include_title: bool) -> tuple[str, list[ParagraphSpan]]:
    """`[[PP]] title. text [[PP]] title. text ...` in the given order, with each paragraph's offsets."""
    pieces: list[str] = []
    spans = []
    length = 0
    for paragraph in paragraphs:
        if PARAGRAPH_MARKER in paragraph["text"] or (include_title and PARAGRAPH_MARKER in paragraph["title"]):
            raise FeaturizationError(
                f"paragraph {paragraph['idx']} ({paragraph['title']!r}) contains the paragraph "
                f"marker {PARAGRAPH_MARKER!r}, which readers use to find paragraphs; remove it "
                "from the data"
            )
        marker_start = length
        head = f"{PARAGRAPH_MARKER} " + (f"{paragraph['title']}. " if include_title else "")
        text_start = length + len(head)
        pieces.append(head + paragraph["text"] + " ")
        length = text_start + len(paragraph["text"]) + 1
        spans.append(ParagraphSpan(paragraph["idx"], marker_start, text_start, text_start + len(paragraph["text"])))
    return "".join(pieces), spans


def ordered_paragraphs(paragraphs: list[dict], selected_idxs: list[int]) -> list[dict]:
    """The selected paragraphs, in the given (rank or dataset) order."""
    by_idx = {paragraph["idx"]: paragraph for paragraph in paragraphs}
    return [by_idx[idx] for idx in selected_idxs]


class ContextBuilder:
    """Rebuilds the reader context of a row of a table with `selected_idxs` (picklable, for DDP spawn): what
    decoding slices answers from."""

    def __init__(self, table: Any, include_title: bool) -> None:
        self.table = table
        self.include_title = include_title

    def __call__(self, row: int) -> str:
        example = self.table[row]
        return build_context(ordered_paragraphs(example["paragraphs"], example["selected_idxs"]), self.include_title)[0]


def answer_type(answer: str) -> int:
    """0 for a span answer, 1 for yes, 2 for no (HotpotQA/2Wiki comparison questions)."""
    normalized = normalize_answer(answer)
    return ANSWER_TYPES.index(normalized) if normalized in ("yes", "no") else 0


def locate_answer(
    context: str, spans: Sequence[ParagraphSpan], supporting: set[int], answers: Sequence[str]
) -> tuple[int, int] | None:
    """Character span of the answer: its first whole-word occurrence in a supporting paragraph, else in any paragraph.

    Each answer (then alias) is tried exactly, then ignoring case. None when no paragraph holds any of them, and
    for yes/no answers (they are predicted by the answer-type head, not as a span).
    """
    if answers and answer_type(answers[0]) != 0:
        return None
    lowered = context.lower()
    ordered = [s for s in spans if s.idx in supporting] + [s for s in spans if s.idx not in supporting]
    for answer in answers:
        if not answer.strip():
            continue
        for haystack, needle in ((context, answer), (lowered, answer.lower())):
            for span in ordered:
                found = _find_whole_word(haystack, needle, span.text_start, span.text_end)
                if found != -1:
                    return found, found + len(answer)
    return None


def _find_whole_word(haystack: str, needle: str, start: int, end: int) -> int:
    """First occurrence of `needle` in `haystack[start:end]` not inside a longer word ("no" is not in "known")."""
    found = haystack.find(needle, start, end)
    while found != -1:
        before_ok = found == 0 or not haystack[found - 1].isalnum() or not needle[0].isalnum()
        after = found + len(needle)
        after_ok = after >= len(haystack) or not haystack[after].isalnum() or not needle[-1].isalnum()
        if before_ok and after_ok:
            return found
        found = haystack.find(needle, found + 1, end)
    return -1
