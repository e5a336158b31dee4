"""From per-window reader outputs to one official prediction per question (shared by every reader model).

Each window contributes its best answer span (the highest start + end logit over every span within one paragraph,
searched exhaustively, optionally at most `max_answer_tokens` long), the support probability of each paragraph
marker it holds, an answerability probability and answer-type probabilities. Per question: the best-scoring span
over all windows (its text is the exact context substring), each paragraph's highest support probability, and the
mean answerability and answer-type probabilities. A span's confidence is its probability in its window: the
start token's softmax probability times the end token's, each over the window's context tokens.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerFast

from musique_models.evaluation.predictions import Prediction
from musique_models.features.context import ANSWER_TYPES

# Columns of the per-window table that crosses processes (floats): see `window_outputs`.
WINDOW_COLUMNS = (
    "feature_row",
    "example_row",
    "span_score",
    "char_start",
    "char_end",
    "span_prob",
    "answerable_prob",
    "type_span",
    "type_yes",
    "type_no",
)
MARKER_COLUMNS = ("feature_row", "example_row", "paragraph_idx", "support_prob")


def best_spans(
    start_logits: torch.Tensor,
    end_logits: torch.Tensor,
    offsets: torch.Tensor,
    max_answer_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The best (start, end) token pair per window, searched exhaustively as the official `get_best_span`: the
    highest start + end logit among ALL pairs with start <= end, both in the context and in the same paragraph (no
    marker between them: the official search may cross markers), at most `max_answer_tokens` long when set (the
    official default: no cap).

    Exact in O(T) memory: for each end token, the best start is the running maximum of the start logits over its
    paragraph (or over the last `max_answer_tokens` tokens of it). Shapes: logits (windows, tokens), offsets
    (windows, tokens, 2) with -1 outside the context. Returns score (-inf when a window has no context token),
    start and end token index, each (windows,).
    """
    in_context = offsets[..., 0] >= 0  # (W, T); markers, question and special tokens are not
    segment = torch.cumsum(~in_context, dim=1)  # (W, T): every non-context token starts a new segment
    starts = start_logits.double().masked_fill(~in_context, float("-inf"))  # (W, T)
    ends = end_logits.double().masked_fill(~in_context, float("-inf"))  # (W, T)
    if max_answer_tokens is None:
        # Lifting each segment above the previous ones by more than the logits' range makes a plain running
        # maximum never reach back into an earlier segment (an end token's own start is always a candidate).
        finite = starts[in_context]
        lift = float(finite.max() - finite.min()) + 1.0 if finite.numel() else 1.0
        running = torch.cummax(starts + segment.double() * lift, dim=1).values  # (W, T), non-decreasing
        # the FIRST position where the running maximum reached its value: the smallest start among equals
        best_start = torch.searchsorted(running.contiguous(), running.contiguous(), side="left")  # (W, T)
        start_score = starts.gather(1, best_start)  # (W, T)
    else:
        span = max_answer_tokens
        padded_starts = nn.functional.pad(starts, (span - 1, 0), value=float("-inf"))
        padded_segment = nn.functional.pad(segment, (span - 1, 0), value=-1)
        candidates = padded_starts.unfold(1, span, 1)  # (W, T, span): starts at j - span + 1 .. j
        same_segment = padded_segment.unfold(1, span, 1) == segment[..., None]
        start_score, back = candidates.masked_fill(~same_segment, float("-inf")).max(dim=2)  # (W, T)
        best_start = torch.arange(starts.shape[1], device=starts.device)[None, :] - (span - 1) + back
    scores = start_score + ends  # (W, T): the best span ending at each token
    # ties (common with bf16 logits) go to the smallest start, then the smallest end, as the official row-major argmax
    tokens = starts.shape[1]
    order = (best_start.clamp(min=0) * tokens + torch.arange(tokens, device=starts.device)).double()  # (W, T)
    best_score = scores.max(dim=1, keepdim=True).values  # (W, 1)
    best_end = order.masked_fill(scores != best_score, float("inf")).argmin(dim=1)  # (W,)
    rows = torch.arange(len(best_end), device=best_end.device)
    return scores[rows, best_end], best_start[rows, best_end].clamp(min=0), best_end


def window_outputs(
    batch: dict[str, torch.Tensor],
    outputs: dict[str, torch.Tensor],
    max_answer_tokens: int | None,
    single_support: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-window and per-marker tables (float64, columns `WINDOW_COLUMNS`, `MARKER_COLUMNS`) of a batch.
    Support probabilities are per-marker sigmoids, or with `single_support` a softmax over the window's markers."""
    offsets = batch["offset_mapping"]
    score, start, end = best_spans(
        outputs["start_logits"].float(), outputs["end_logits"].float(), offsets, max_answer_tokens
    )
    rows = torch.arange(len(start), device=start.device)
    in_context = offsets[..., 0] >= 0  # (W, T)
    start_log_probs = torch.log_softmax(outputs["start_logits"].double().masked_fill(~in_context, -1e30), dim=-1)
    end_log_probs = torch.log_softmax(outputs["end_logits"].double().masked_fill(~in_context, -1e30), dim=-1)
    span_prob = (start_log_probs[rows, start] + end_log_probs[rows, end]).exp()  # (W,)
    char_start = offsets[rows, start, 0].double()
    char_end = offsets[rows, end, 1].double()
    no_span = torch.isinf(score)  # a window with no context token
    char_start[no_span], char_end[no_span], span_prob[no_span] = -1, -1, 0.0
    answerable = torch.sigmoid(outputs["answerable_logit"].float()).double()
    types = torch.softmax(outputs["type_logits"].float(), dim=-1).double()
    windows = torch.stack(
        [
            batch["feature_row"].double(),
            batch["example_row"].double(),
            score.double().nan_to_num(neginf=-1e30),
            char_start,
            char_end,
            span_prob,
            answerable,
            types[:, 0],
            types[:, 1],
            types[:, 2],
        ],
        dim=1,
    )
    mask = batch["marker_mask"]
    logits = outputs["support_logits"].float()
    support = (
        torch.softmax(logits.masked_fill(~mask, float("-inf")), dim=-1).nan_to_num(0.0)
        if single_support
        else torch.sigmoid(logits)
    ).double()
    markers = torch.stack(
        [
            batch["feature_row"][:, None].expand_as(mask).double()[mask],
            batch["example_row"][:, None].expand_as(mask).double()[mask],
            batch["marker_paragraph_idx"].double()[mask],
            support[mask],
        ],
        dim=1,
    )
    return windows, markers


@dataclass
class _Question:
    span: tuple[float, int, int, float] = (float("-inf"), -1, -1, 0.0)
    answerable: list[float] = field(default_factory=list)
    types: list[list[float]] = field(default_factory=list)
    support: dict[int, float] = field(default_factory=dict)


@dataclass
class DecodedQuestion:
    """One question decoded from the gathered tables: its answer and how sure the reader is of it.

    `confidence`: the probability of the decoded span (see the module docstring; 0 without a span).
    `support_probs`: paragraph idx -> support probability. `top_paragraph`: the most probable paragraph (None when
    the reader saw none). `answerable_prob`: the mean answerability probability over the question's windows."""

    answer: str
    confidence: float
    support: list[int]
    support_probs: dict[int, float]
    answerable: bool
    answerable_prob: float

    @property
    def top_paragraph(self) -> int | None:
        return max(self.support_probs, key=self.support_probs.__getitem__) if self.support_probs else None


def decode_questions(
    windows: torch.Tensor,
    markers: torch.Tensor,
    count: int,
    context_of: Callable[[int], str],
    *,
    support_threshold: float = 0.5,
    use_answerability: bool = False,
    use_answer_type: bool = False,
    single_support: bool = False,
) -> list[DecodedQuestion]:
    """One `DecodedQuestion` per example row 0..`count`-1, in order, from the gathered tables.

    Supporting paragraphs: those whose probability exceeds `support_threshold`, or with `single_support` the
    most probable one. Repeated windows (DDP padding) are dropped by `feature_row`. `context_of(row)` rebuilds a
    row's context.
    """
    questions = [_Question() for _ in range(count)]
    seen: set[int] = set()
    for feature, row, score, char_start, char_end, span_prob, answerable, *types in windows.tolist():
        if int(feature) in seen:
            continue
        seen.add(int(feature))
        question = questions[int(row)]
        if char_start >= 0 and score > question.span[0]:
            question.span = (score, int(char_start), int(char_end), span_prob)
        question.answerable.append(answerable)
        question.types.append(types)
    seen_markers: set[tuple[int, int]] = set()
    for feature, row, idx, probability in markers.tolist():
        key = (int(feature), int(idx))
        if key in seen_markers:
            continue
        seen_markers.add(key)
        support = questions[int(row)].support
        support[int(idx)] = max(probability, support.get(int(idx), 0.0))
    decoded = []
    for row, question in enumerate(questions):
        _, char_start, char_end, confidence = question.span
        answer = context_of(row)[char_start:char_end] if char_start >= 0 else ""
        if use_answer_type and question.types:
            mean_types = [sum(column) / len(question.types) for column in zip(*question.types)]
            chosen = max(range(len(ANSWER_TYPES)), key=mean_types.__getitem__)
            if chosen != 0:
                answer, confidence = ANSWER_TYPES[chosen], mean_types[chosen]
        answerable_prob = sum(question.answerable) / len(question.answerable) if question.answerable else 1.0
        answerable = answerable_prob > 0.5 if use_answerability else True
        if single_support:
            support = [max(question.support, key=question.support.__getitem__)] if question.support else []
        else:
            support = sorted(idx for idx, probability in question.support.items() if probability > support_threshold)
        decoded.append(DecodedQuestion(answer, confidence, support, question.support, answerable, answerable_prob))
    return decoded


def decode_predictions(
    windows: torch.Tensor,
    markers: torch.Tensor,
    example_ids: Sequence[str],
    context_of: Callable[[int], str],
    **settings: Any,
) -> list[Prediction]:
    """One official prediction per example row (rows 0..len(example_ids)-1, in order) from the gathered tables;
    `settings` as `decode_questions`."""
    return [
        Prediction(
            id=question_id,
            predicted_answer=question.answer,
            predicted_support_idxs=question.support,
            predicted_answerable=question.answerable,
        )
        for question_id, question in zip(
            example_ids, decode_questions(windows, markers, len(example_ids), context_of, **settings)
        )
    ]


# An uncased WordPiece decode writes every punctuation mark as its own word ("land - grant", "6. 8", "hudson ' s",
# "u. s."), which the answer metric (punctuation dropped, not spaced) scores as other words. These rules glue the
# marks that sit inside a word in answers back on; on the shipped samples' 629 distinct gold answers they raise the
# round-trip answer F1 (encode, decode, score against itself) of MiniLM's tokenizer from 0.922 to 0.977 (the rest is
# accents, which the uncased tokenizer drops). A byte-level BPE decode (BART) is exact and left alone.
_WORDPIECE_CLEANUP = (
    (re.compile(r"(?<=\w) ([-/]) (?=\w)"), r"\1"),  # hyphenated words, a/b
    (re.compile(r"(?<=\w) ' (?=(?:s|t|d|m|ll|re|ve)\b)"), "'"),  # hudson's, don't
    (re.compile(r"(?<=\b\w) ' (?=\w)"), "'"),  # o'neil, d'arcy
    (re.compile(r"(?<=\d)\. (?=\d)"), "."),  # 6.8
    (re.compile(r"(?<=\d), (?=\d{3}(?!\d))"), ","),  # 3,000 (not "April 5, 1975")
    (re.compile(r"(?<=\b\w)\. (?=\w\.)"), "."),  # u.s., a.p.j.
)


def clean_wordpiece_text(text: str) -> str:
    """A WordPiece decode with the in-word punctuation glued back (see `_WORDPIECE_CLEANUP`)."""
    for pattern, replacement in _WORDPIECE_CLEANUP:
        text = pattern.sub(replacement, text)
    return text


def decode_answers(tokenizer: PreTrainedTokenizerFast, ids: torch.Tensor | Sequence[Sequence[int]]) -> list[str]:
    """The answer texts of generated id rows (special tokens and padding dropped; a WordPiece tokenizer's text
    cleaned with `clean_wordpiece_text`)."""
    texts = tokenizer.batch_decode(ids, skip_special_tokens=True)
    if type(tokenizer.backend_tokenizer.model).__name__ == "WordPiece":
        texts = [clean_wordpiece_text(text) for text in texts]
    return [text.strip() for text in texts]


def generated_log_prob(scores: Sequence[torch.Tensor], generated: torch.Tensor, end_token_id: int) -> torch.Tensor:
    """The summed log-probability (B,) of greedily generated tokens `generated` (B, S), the end token included and
    the padding after it left out, from `generate(..., output_scores=True)`'s per-step logits (S of (B, V))."""
    token_log_probs = torch.stack(
        [  # each step's logits (B, V) -> the generated token's log-probability (B,)
            logits.float().log_softmax(dim=-1).gather(-1, generated[:, step, None]).squeeze(-1)
            for step, logits in enumerate(scores)
        ],
        dim=1,
    )  # (B, S)
    is_end = generated == end_token_id  # (B, S)
    after_end = (torch.cumsum(is_end.long(), dim=1) - is_end.long()) > 0  # padding after the end token
    return token_log_probs.masked_fill(after_end, 0.0).sum(dim=1)  # (B,)
