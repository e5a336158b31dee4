"""Decoding held to the target format (`answer: ... | support: 3, 7 | answerable: yes`): the guide writes the field
labels, the model fills the fields.

A small prompted LLM (SmolLM2-135M-Instruct over twenty paragraphs) rarely writes the format on its own, zero-shot or
3-shot: it writes a sentence, and the parser can read nothing from it. `TargetFormatGuide` is a transformers
`LogitsProcessor` that leaves the model every choice a field allows and no other:
- `answer:` is written for it; the answer is its own free text, ended where the model would end it (its end token,
  a newline or a `|`: their probability goes to the next label) or after `max_answer_tokens`;
- ` | support:` is written for it; the support field takes only tokens made of digits, commas and spaces that keep
  it a list of the question's paragraph numbers (`valid_idxs`: those it read), at least `min_support` of them (a
  small model left to itself names no paragraph) and at most `max_support_items`, ended as the answer is once its
  last number is whole; after `max_support_tokens` only the last number may be finished, then the field closes (a
  number is never cut: SmolLM2 writes each digit as its own token);
- on data with unanswerable questions, ` | answerable:` is written for it, and the field is ` yes` or ` no`;
- then the end token.
Every token a field rules out gets no probability and a written label its own score. The probability the reader
reports for a greedy generation is therefore the probability under the guide (a forced label counts 1, a field's
tokens are renormalised over what the field allows); beam search ranks beams by the model's own scores of the same
tokens. Greedy search and beam search both work through it.
"""

from __future__ import annotations

import re

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerFast

NEG_INF = float("-inf")


class TargetFormatGuide(LogitsProcessor):
    """A `LogitsProcessor` holding generation to the target format (see the module docstring).

    Args:
        tokenizer: the reader's tokenizer.
        end_token_id: the id that ends a generation.
        prompt_width: the width of the (left-padded) prompts: generated ids start there.
        with_answerability: the target has the `answerable` field.
        max_answer_tokens: most tokens of the answer field.
        max_support_tokens: most tokens of the support field (past them, only its last number may be finished).
        min_support: fewest paragraph numbers in the support field (1: every generation names a paragraph, an
            unanswerable question's too, where the scorer reads no support; 0: the model may name none).
        max_support_items: most paragraph numbers in the support field (4: MuSiQue's most hops).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerFast,
        end_token_id: int,
        prompt_width: int,
        with_answerability: bool,
        max_answer_tokens: int = 24,
        max_support_tokens: int = 16,
        min_support: int = 1,
        max_support_items: int = 4,
    ) -> None:
        self.end = end_token_id
        self.prompt_width = prompt_width
        self.with_answerability = with_answerability
        self.max_answer_tokens = max_answer_tokens
        self.max_support_tokens = max_support_tokens
        self.min_support = min_support
        self.max_support_items = max_support_items
        # each generating row's paragraph numbers (beams: each beam a row); None: any number
        self.valid_idxs: list[set[str] | None] | None = None
        encode = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        self.answer_label = encode("answer:")
        self.support_label = encode(" | support:")
        self.answerable_label = encode(" | answerable:")
        self.choices = [encode(" yes"), encode(" no")]
        pieces = tokenizer.batch_decode([[token] for token in range(len(tokenizer))])
        special = set(tokenizer.all_special_ids)
        enders = [i for i, piece in enumerate(pieces) if i in special or "\n" in piece or "|" in piece]
        self.enders = torch.tensor(sorted(set(enders) | {end_token_id}))  # holds every field's closer
        # the support field's tokens: digits, commas and spaces alone
        self.number_pieces = {
            i: piece
            for i, piece in enumerate(pieces)
            if i not in special and piece and set(piece) <= set(_SUPPORT_CHARS)
        }
        # how decoded pieces join: byte-level BPE (Llama, Qwen, SmolLM) writes them as they are, WordPiece with spaces
        one, seven = encode("1")[-1], encode("7")[-1]
        self.joiner = "" if tokenizer.decode([one, seven]).strip() == "17" else " "
        for label in (self.support_label, self.answerable_label):
            if label[0] not in set(enders):
                raise ValueError(f"{tokenizer.name_or_path}: ' |' does not open its own token; cannot guide its format")

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """input_ids (B, P + t): the prompts and the t ids generated so far; scores (B, V): the next id's scores."""
        guided = scores.clone()
        for row, generated in enumerate(input_ids[:, self.prompt_width :].tolist()):
            valid = self.valid_idxs[row] if self.valid_idxs is not None else None
            self._guide_row(generated, valid, guided[row], scores[row])
        return guided

    def _guide_row(
        self, generated: list[int], valid: set[str] | None, guided: torch.Tensor, scores: torch.Tensor
    ) -> None:
        """Restrict one row's next-id `guided` scores (from its `scores`), given the ids it has generated so far and
        its paragraph numbers `valid`."""
        if self.end in generated:
            return  # finished: generate pads it
        step = _Reader(generated)
        if step.force(self.answer_label, guided, scores):
            return
        if step.free_field(self.support_label[0], None, True, self.max_answer_tokens, self.enders, guided, scores):
            return
        if step.force(self.support_label, guided, scores):
            return
        after_support = self.answerable_label[0] if self.with_answerability else self.end
        allowed, closable = None, True  # the support field is closed: its choices are not needed
        if after_support not in step.field():
            written = self.joiner.join(self.number_pieces.get(token, "") for token in step.field())
            allowed, closable = self._support_choices(written, valid, len(step.field()) >= self.max_support_tokens)
        if step.free_field(after_support, allowed, closable, self.max_support_tokens, self.enders, guided, scores):
            return
        if not self.with_answerability:
            return
        if step.force(self.answerable_label, guided, scores):
            return
        step.choose(self.choices, self.end, guided, scores)

    def _support_choices(self, written: str, valid: set[str] | None, full: bool) -> tuple[torch.Tensor, bool]:
        """The ids that keep the support field `written` so far a list of the row's paragraph numbers (`valid`;
        None: any numbers), and whether it may close now (its last number whole, at least `min_support` of them).
        Once the field is `full` (of tokens) or holds `max_support_items` numbers, only ids that go on with its last
        number remain."""
        glue = self.joiner if written else ""
        allowed = [
            token
            for token, piece in self.number_pieces.items()
            if _readable(written + glue + piece, valid, unfinished=not self.joiner)
        ]
        items = [item for item in re.split(r"[ ,]+", written) if item]
        if full or len(items) >= self.max_support_items:
            joins_last = not self.joiner and written[-1:].isdigit()
            allowed = [token for token in allowed if joins_last and self.number_pieces[token].isdigit()]
        last_whole = not written or not written[-1].isdigit() or valid is None or items[-1] in valid
        return torch.tensor(allowed, dtype=torch.long), last_whole and len(items) >= self.min_support


_SUPPORT_CHARS = "0123456789 ,"


def _readable(text: str, valid: set[str] | None, unfinished: bool) -> bool:
    """Whether `text` reads as paragraph numbers from `valid` (None: any), its last one perhaps `unfinished` (where
    the next piece joins it: byte-level BPE): spaces, then a number first, and no comma after a comma (separators
    alone would fill the field with nothing). The spaces matter: SmolLM2 writes `support: 3` as `:`, ` `, `3`."""
    compact = text.replace(" ", "")
    if not compact:
        return bool(text)  # the spaces before the first number
    if not any(character.isdigit() for character in text) or compact.startswith(",") or ",," in compact:
        return False
    if valid is None:
        return True
    *whole, last = re.split(r"[ ,]+", text)
    last_ok = not last or last in valid or (unfinished and any(idx.startswith(last) for idx in valid))
    return all(item in valid for item in whole if item) and last_ok


class _Reader:
    """Walks one row's generated ids through the format's parts, left to right."""

    def __init__(self, generated: list[int]) -> None:
        self.generated = generated
        self.at = 0

    def force(self, label: list[int], guided: torch.Tensor, scores: torch.Tensor) -> bool:
        """Within `label` (written for the model): rule out all but its next id and return True; past it: False."""
        done = self.generated[self.at : self.at + len(label)]
        if len(done) < len(label):
            _only(guided, scores, label[len(done)])
            return True
        self.at += len(label)
        return False

    def field(self) -> list[int]:
        """The ids generated since the last label."""
        return self.generated[self.at :]

    def free_field(
        self,
        closer: int,
        allowed: torch.Tensor | None,
        closable: bool,
        max_tokens: int,
        enders: torch.Tensor,
        guided: torch.Tensor,
        scores: torch.Tensor,
    ) -> bool:
        """Within a field the model fills (ids from `allowed`, or any), closed by `closer`: restrict the next id and
        return True; once `closer` was generated: False. The enders' probability goes to `closer` (when the field is
        `closable`); after `max_tokens` ids, only `closer` remains once the field is closable."""
        rest = self.generated[self.at :]
        if closer in rest:
            self.at += rest.index(closer)  # the closer opens the next label, which `force` walks
            return False
        if len(rest) >= max_tokens and closable:
            _only(guided, scores, closer)
            return True
        if allowed is not None and len(allowed) == 0:
            closable = True  # nothing can go on: close rather than rule out every id
        closing = torch.logsumexp(scores[enders], 0)  # `closer` is one of the enders
        if allowed is not None:
            kept = guided[allowed].clone()
            guided.fill_(NEG_INF)
            guided[allowed] = kept
        guided[enders] = NEG_INF
        if closable:
            guided[closer] = closing
        return True

    def choose(self, choices: list[list[int]], end: int, guided: torch.Tensor, scores: torch.Tensor) -> None:
        """One of `choices` (id sequences) written in full, then `end`."""
        rest = self.generated[self.at :]
        for choice in choices:
            if rest[: len(choice)] == choice[: len(rest)] and rest:
                _only(guided, scores, choice[len(rest)] if len(rest) < len(choice) else end)
                return
        kept = {choice[0]: scores[choice[0]].item() for choice in choices}
        guided.fill_(NEG_INF)
        for token, score in kept.items():
            guided[token] = score


def _only(guided: torch.Tensor, scores: torch.Tensor, token: int) -> None:
    """Rule out every id but `token`, which keeps its own score."""
    guided.fill_(NEG_INF)
    guided[token] = scores[token]
