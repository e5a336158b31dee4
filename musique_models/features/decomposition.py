"""The official decomposer's step-token format, and the `#k` form of MuSiQue's decompositions.

MuSiQue writes a decomposition as single-hop steps whose `#k` (1-based) stands for the answer of step k:
`["Hello Love >> performer", "What city did #1 live when he died?"]`. The official decomposer (a BART
question translator) reads and writes it as one text with added tokens, 0-based:
`[[CQS]] 0 [[CQE]] Hello Love >> performer [[CQS]] 1 [[CQE]] What city did [[RQS]] 0 [[RQE]] live when he died?`.
`[[CQS]] i [[CQE]]` opens step i, `[[RQS]] k [[RQE]]` stands for the answer of step k. Each of the ten markers
(steps 0..4) is one added token (`DECOMPOSITION_TOKENS`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

STEP_START = "[[CQS]]"
STEP_END = "[[CQE]]"
REFERENCE_START = "[[RQS]]"
REFERENCE_END = "[[RQE]]"
MAX_STEPS = 5

# The official reader's added tokens, in its order (step 0's opener, step 0's reference, step 1's opener, ...).
DECOMPOSITION_TOKENS: list[str] = [
    token
    for index in range(MAX_STEPS)
    for token in (f"{STEP_START} {index} {STEP_END}", f"{REFERENCE_START} {index} {REFERENCE_END}")
]

_HASH_REFERENCE = re.compile(r"#(\d+)")


def _marker_pattern(start: str, end: str) -> re.Pattern[str]:
    """`[[XQS]] k [[XQE]]` with any case and any spacing (as a tokenizer's decode writes it), k captured."""
    spaced = [r"\s*".join(re.escape(char) for char in marker) for marker in (start, end)]
    return re.compile(rf"{spaced[0]}\s*(\d+)\s*{spaced[1]}", re.IGNORECASE)


_STEP_MARKER = _marker_pattern(STEP_START, STEP_END)
_REFERENCE_MARKER = _marker_pattern(REFERENCE_START, REFERENCE_END)


def _collapse(text: str) -> str:
    return " ".join(text.split())


def references(step_question: str) -> list[int]:
    """The steps (1-based k of `#k`) a step question refers to, in order of first mention, each once."""
    return list(dict.fromkeys(int(k) for k in _HASH_REFERENCE.findall(step_question)))


def decomposition_text(step_questions: list[str]) -> str:
    """The official target text of a decomposition given in the `#k` form (`#k` -> `[[RQS]] k-1 [[RQE]]`).

    Whitespace is collapsed; `subject >> relation` steps are kept as they are. Raises ValueError for more than
    five steps or a reference outside #1..#5 (the official tokens cover steps 0..4 only).
    """
    if len(step_questions) > MAX_STEPS:
        raise ValueError(f"{len(step_questions)} steps: the official step tokens cover at most {MAX_STEPS}")

    def reference_token(match: re.Match[str]) -> str:
        step = int(match.group(1))
        if not 1 <= step <= MAX_STEPS:
            raise ValueError(f"reference #{step} outside #1..#{MAX_STEPS} in {match.string!r}")
        return f"{REFERENCE_START} {step - 1} {REFERENCE_END}"

    return " ".join(
        _collapse(f"{STEP_START} {index} {STEP_END} {_HASH_REFERENCE.sub(reference_token, question)}")
        for index, question in enumerate(step_questions)
    )


@dataclass
class ParsedDecomposition:
    """A decomposition read back from the official format.

    `steps`: the step questions in the `#k` (1-based) form. `invalid`: it cannot be executed as written (see
    `problems`, which count steps from 0 as the text's step tokens do: a step that refers to its own or a later
    step, or to a step that does not exist; an empty step; a text without any step marker; an empty text).
    """

    steps: list[str]
    invalid: bool = False
    problems: list[str] = field(default_factory=list)


def _hash_reference(match: re.Match[str]) -> str:
    """`#k` for a `[[RQS]] k-1 [[RQE]]` match; a space after it when a digit follows (`#1 5`, never `#15`)."""
    follows_digit = match.string[match.end() : match.end() + 1].isdigit()
    return f"#{int(match.group(1)) + 1}" + (" " if follows_digit else "")


def parse_decomposition(text: str) -> ParsedDecomposition:
    """Split a (generated) decomposition text into steps, as the official `decomposed_question_to_instances`.

    Text before the first `[[CQS]] i [[CQE]]` is dropped, and the number in a step's marker is not read (steps
    are numbered by their order). A text without any marker (or an empty one) is ONE step: the whole text,
    stripped. Markers are matched in any case and spacing (an uncased tokenizer decodes `[[rqs]] 0 [[rqe]]`).
    """
    pieces = _STEP_MARKER.split(text)  # [before, index, step, index, step, ...]
    has_markers = len(pieces) > 1
    steps = [_collapse(_REFERENCE_MARKER.sub(_hash_reference, step)) for step in (pieces[2::2] or [text])]
    problems = []
    if not has_markers:
        problems.append("empty text" if not steps[0] else f"no {STEP_START} i {STEP_END} marker: one step")
    for index, step in enumerate(steps):  # 0-based, as the step tokens of the text count them
        if not step and has_markers:
            problems.append(f"step {index} is empty")
        for k in references(step):
            token = f"{REFERENCE_START} {k - 1} {REFERENCE_END}"
            if k > len(steps) or k < 1:
                problems.append(f"step {index} refers to {token}, which is no step")
            elif k - 1 == index:
                problems.append(f"step {index} refers to {token}, its own answer")
            elif k - 1 > index:
                problems.append(f"step {index} refers to {token}, a later step's answer")
    return ParsedDecomposition(steps=steps, invalid=bool(problems), problems=problems)
