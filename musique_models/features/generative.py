"""Generative readers' inputs and outputs: the one target format, its parser, and the featurisers of the seq2seq
(T5, BART, BERT2BERT) and the decoder-only (Llama, Qwen, SmolLM) readers.

The target, one line for every question (`target_text`):

    answer: Dutch East Indies | support: 3, 7 | answerable: yes

`support` lists the paragraphs' own `idx` (the indices the official prediction format uses), in the order they
were read; `answerable` is written only on data with unanswerable questions (MuSiQue-Full), where an unanswerable
question's target is `answer:  | support:  | answerable: no`. The reader reads each paragraph tagged with its idx,
`[3] Title || text` (the title when the dataset's `include_title` says so), so a generated index maps back to its
paragraph without a lookup table.

`parse_generation` never fails: a field it cannot read becomes an empty answer, no support or "answerable", and
the generation is counted as unparsed (`ParsedGeneration.problems` says why).
"""

from __future__ import annotations

import random
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import datasets
from transformers import PreTrainedTokenizerFast

from musique_models.features.context import TITLE_SEPARATOR, FeaturizationError, end_token_id, start_token_id
from musique_models.features.padding import declare_columns

TARGET_FIELDS = ("answer", "support", "answerable")
INSTRUCTION = (
    "Answer the question from the paragraphs. Reply in one line: "
    "answer: <a short answer: a name, a place, a date or a number> | "
    "support: <the numbers of the paragraphs the answer needs, comma-separated>"
)
ANSWERABILITY_INSTRUCTION = (
    " | answerable: <yes, or no if the paragraphs do not hold the answer; then leave answer and support empty>"
)

GENERATIVE_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int32")),
        "labels": datasets.List(datasets.Value("int32")),
        # the prompt's length: a decoder-only reader generates from input_ids[:prompt_length] (0 for seq2seq)
        "prompt_length": datasets.Value("int32"),
        # the idx of the paragraphs read, in reading order: the numbers a support may name
        "read_idxs": datasets.List(datasets.Value("int32")),
        "example_row": datasets.Value("int32"),
    }
)


def target_text(answer: str, support: Sequence[int], answerable: bool | None) -> str:
    """The one-line target; `answerable` None leaves the field out (data without unanswerable questions)."""
    text = f"answer: {' '.join(answer.split())} | support: {', '.join(str(idx) for idx in support)}"
    return text if answerable is None else f"{text} | answerable: {'yes' if answerable else 'no'}"


def row_target(answer: str, answerable: bool, paragraphs: Sequence[dict], with_answerability: bool) -> str:
    """A schema row's target over the paragraphs it reads (in reading order): its answer and the supporting ones
    among them; an unanswerable row's target has no answer and no support."""
    if not answerable:
        return target_text("", [], False)
    support = [paragraph["idx"] for paragraph in paragraphs if paragraph["is_supporting"]]
    return target_text(answer, support, True if with_answerability else None)


@dataclass(frozen=True)
class ParsedGeneration:
    """What a generation says, with what could not be read in `problems` (empty: fully parsed)."""

    answer: str
    support: list[int]
    answerable: bool
    problems: tuple[str, ...] = ()

    @property
    def parsed(self) -> bool:
        return not self.problems


_FIELD = re.compile(r"\b(answer|support|answerable)\s*:", re.IGNORECASE)
_YES, _NO = {"yes", "true", "1"}, {"no", "false", "0"}


def _field_values(text: str) -> dict[str, str]:
    """Each field's first value: from its label to the next `|` or label."""
    matches = list(_FIELD.finditer(text))
    values: dict[str, str] = {}
    for position, match in enumerate(matches):
        end = matches[position + 1].start() if position + 1 < len(matches) else len(text)
        values.setdefault(match.group(1).lower(), text[match.end() : end].split("|", 1)[0].strip())
    return values


def parse_generation(
    text: str, paragraph_idxs: Collection[int] | None = None, with_answerability: bool = False
) -> ParsedGeneration:
    """Read a generated target (see the module docstring); never raises.

    A value runs to the next `|` or field (an answer cannot hold a `|`); text before the first field is ignored;
    a field given twice keeps its first value. Support items must be
    integers among `paragraph_idxs` (when given): others are dropped and counted; a support list with an item that
    is not a number is read as no support. Without `with_answerability` every question is answerable and an
    `answerable` field is ignored."""
    values = _field_values(text)
    problems = []
    answer = values.get("answer")
    if answer is None:
        problems.append("no answer field")
        answer = ""
    support: list[int] = []
    if "support" not in values:
        problems.append("no support field")
    else:
        items = [item for item in re.split(r"[,\s]+", values["support"]) if item]
        if not all(item.lstrip("#").isdigit() for item in items):
            problems.append(f"support is not a list of paragraph numbers: {values['support']!r}")
        else:
            for idx in (int(item.lstrip("#")) for item in items):
                if paragraph_idxs is not None and idx not in paragraph_idxs:
                    problems.append(f"support names paragraph {idx}, which the question does not have")
                elif idx not in support:
                    support.append(idx)
    answerable = True
    if with_answerability:
        flag = values.get("answerable", "").lower().rstrip(".")
        if flag in _NO:
            answerable = False
        elif flag not in _YES:
            problems.append("no answerable field" if "answerable" not in values else f"answerable is {flag!r}")
    return ParsedGeneration(answer, support, answerable, tuple(problems))


def paragraph_text(paragraph: dict, include_title: bool) -> str:
    """A paragraph as the reader reads it: `[idx] Title || text` (or `[idx] text`), whitespace collapsed."""
    body = " ".join(paragraph["text"].split())
    if include_title:
        body = f"{' '.join(paragraph['title'].split())}{TITLE_SEPARATOR}{body}"
    return f"[{paragraph['idx']}] {body}"


def read_paragraphs(paragraphs: Sequence[dict], selected_idxs: Sequence[int] | None) -> list[dict]:
    """The paragraphs a reader reads: those `selected_idxs` names, in that order (a selector's top K), else all
    of them in dataset order."""
    if selected_idxs is None:
        return list(paragraphs)
    by_idx = {paragraph["idx"]: paragraph for paragraph in paragraphs}
    return [by_idx[idx] for idx in selected_idxs]


def clip_texts(tokenizer: PreTrainedTokenizerFast, texts: list[str], max_tokens: int) -> tuple[list[str], list[int]]:
    """Each text cut after its first `max_tokens` tokens (at the token's character offset), and its token count."""
    if not texts:
        return [], []
    encoded = tokenizer(texts, add_special_tokens=False, return_offsets_mapping=True)
    clipped, counts = [], []
    for text, offsets in zip(texts, encoded["offset_mapping"], strict=True):
        if len(offsets) > max_tokens:
            text = text[: offsets[max_tokens - 1][1]] if max_tokens > 0 else ""
        clipped.append(text)
        counts.append(min(len(offsets), max_tokens))
    return clipped, counts


def fit_paragraphs(texts: list[str], counts: list[int], budget: int) -> list[str]:
    """The leading paragraphs whose token counts fit `budget` (counting one token between paragraphs); the
    paragraphs after the budget is spent are not read."""
    kept, used = [], 0
    for text, count in zip(texts, counts, strict=True):
        if used + count + 1 > budget:
            break
        kept.append(text)
        used += count + 1
    return kept


@dataclass(frozen=True)
class PromptStyle:
    """How a reader's input is written: a seq2seq source (`question: ... context: ...`), or a decoder-only prompt
    with the instruction, in the tokenizer's chat template where it has one (`chat`) and plain text otherwise."""

    causal: bool
    chat: bool
    with_answerability: bool

    def instruction(self) -> str:
        return INSTRUCTION + (ANSWERABILITY_INSTRUCTION if self.with_answerability else "")

    def question_block(self, question: str, paragraphs: list[str]) -> str:
        """A question and its paragraphs: for a decoder-only reader the paragraphs first and the question after them,
        next to the instruction and the answer (a small LLM loses a question asked before 2,000 tokens of text)."""
        if not self.causal:
            return f"question: {question} context: {' '.join(paragraphs)}"
        return "Paragraphs:\n" + "\n".join(paragraphs) + "\n\nQuestion: " + question

    def prompt(self, tokenizer: PreTrainedTokenizerFast, block: str, exemplars: Sequence[tuple[str, str]]) -> str:
        """The decoder-only prompt of `block` after the k-shot `exemplars` ((block, target) pairs)."""
        if self.chat:  # the instruction closes the first user turn
            messages: list[dict[str, str]] = []
            for position, (shown, target) in enumerate(exemplars):
                outro = "\n\n" + self.instruction() if position == 0 else ""
                messages += [{"role": "user", "content": shown + outro}, {"role": "assistant", "content": target}]
            outro = "" if exemplars else "\n\n" + self.instruction()
            messages.append({"role": "user", "content": block + outro})
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        shots = "".join(f"{shown}\nOutput: {target}\n\n" for shown, target in exemplars)
        return f"{self.instruction()}\n\n{shots}{block}\nOutput:"


def prompt_style(tokenizer: PreTrainedTokenizerFast, causal: bool, with_answerability: bool) -> PromptStyle:
    """The style of a reader with `tokenizer` (the chat template is used where the tokenizer has one)."""
    return PromptStyle(causal, causal and bool(getattr(tokenizer, "chat_template", None)), with_answerability)


def _sequence_ids(tokenizer: PreTrainedTokenizerFast) -> tuple[int | None, int]:
    """(start, end) token ids: what opens a decoder-only prompt (None: nothing) and what ends every target."""
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.cls_token_id
    end = end_token_id(tokenizer)
    if end is None:
        raise FeaturizationError(f"tokenizer {tokenizer.name_or_path!r} has no end token (eos or sep)")
    return start, end


def decoder_start_id(tokenizer: PreTrainedTokenizerFast) -> int:
    """The id a seq2seq decoder starts from: the start token (`<s>`, `[CLS]`), or T5's padding token."""
    start = start_token_id(tokenizer)
    if start is not None:
        return start
    raise FeaturizationError(f"tokenizer {tokenizer.name_or_path!r} has no start, cls or pad token")


def exemplar_pairs(
    exemplars: Sequence[dict], include_title: bool, max_paragraph_tokens: int, tokenizer: Any, style: PromptStyle
) -> list[tuple[str, str]]:
    """The (shown block, target) of each k-shot exemplar (`draw_exemplars`), its paragraphs clipped as the
    question's."""
    pairs = []
    for exemplar in exemplars:
        texts, _ = clip_texts(
            tokenizer, [paragraph_text(p, include_title) for p in exemplar["paragraphs"]], max_paragraph_tokens
        )
        target = row_target(
            exemplar["answer"], exemplar["answerable"], exemplar["paragraphs"], style.with_answerability
        )
        pairs.append((style.question_block(exemplar["question"], texts), target))
    return pairs


def featurize_generative(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    causal: bool,
    max_question_tokens: int,
    max_paragraph_tokens: int,
    max_source_tokens: int,
    max_target_tokens: int,
    include_title: bool,
    with_answerability: bool,
    exemplars: Sequence[dict] = (),
) -> dict[str, Any]:
    """Batched `datasets.map` function over schema rows (with `selected_idxs` when a selector chose what is read):
    `input_ids`, `labels`, `prompt_length`, `read_idxs` (the idx of the paragraphs read) and `example_row`.

    Seq2seq (`causal` false): `input_ids` is the source (`question: Q context: [i] ... [j] ...`, the tokenizer's
    special tokens on top), `labels` the target between the decoder's start token and the end token. Decoder-only:
    `input_ids` is the prompt (instruction, the k-shot `exemplars`, the question and its paragraphs, in the chat
    template where the tokenizer has one) followed by the target and the end token, `labels` the same ids with the
    prompt's positions -100 (the loss is on the target alone), `prompt_length` the prompt's length.

    The question is clipped to `max_question_tokens`, each paragraph to `max_paragraph_tokens`, and the paragraphs
    that do not fit `max_source_tokens` (the whole input without the target) are not read; the target is clipped
    to `max_target_tokens` tokens."""
    style = prompt_style(tokenizer, causal, with_answerability)
    start, end = _sequence_ids(tokenizer)
    decoder_start = None if causal else decoder_start_id(tokenizer)
    shots = exemplar_pairs(exemplars, include_title, max_paragraph_tokens, tokenizer, style)
    questions, _ = clip_texts(tokenizer, [" ".join(q.split()) for q in batch["question"]], max_question_tokens)
    selected = batch.get("selected_idxs") or [None] * len(rows)
    columns: dict[str, list] = {name: [] for name in GENERATIVE_FEATURES}
    for position, row in enumerate(rows):
        paragraphs = read_paragraphs(batch["paragraphs"][position], selected[position])
        texts, counts = clip_texts(
            tokenizer, [paragraph_text(p, include_title) for p in paragraphs], max_paragraph_tokens
        )
        bare = _encode(tokenizer, style, style.question_block(questions[position], []), shots, start)
        budget = max_source_tokens - len(bare)
        while True:  # token counts of pieces tokenized apart can differ by a few from the whole's
            kept = fit_paragraphs(texts, counts, budget)
            source = _encode(tokenizer, style, style.question_block(questions[position], kept), shots, start)
            if len(source) <= max_source_tokens or not kept:
                break
            budget -= len(source) - max_source_tokens
        if len(source) > max_source_tokens:
            raise FeaturizationError(
                f"row {row}: the prompt without paragraphs takes {len(source)} tokens, more than max_source_tokens="
                f"{max_source_tokens} (fewer exemplars, or a larger max_source_tokens)"
            )
        read = paragraphs[: len(kept)]
        target = row_target(batch["answer"][position], batch["answerable"][position], read, with_answerability)
        target_ids = tokenizer(target, add_special_tokens=False)["input_ids"][: max_target_tokens - 1] + [end]
        if causal:
            columns["input_ids"].append(source + target_ids)
            columns["labels"].append([-100] * len(source) + target_ids)
            columns["prompt_length"].append(len(source))
        else:
            columns["input_ids"].append(source)
            columns["labels"].append([decoder_start, *target_ids])
            columns["prompt_length"].append(0)
        columns["read_idxs"].append([paragraph["idx"] for paragraph in read])
        columns["example_row"].append(row)
    return columns


featurize_generative.output_features = GENERATIVE_FEATURES  # type: ignore[attr-defined]


def _encode(
    tokenizer: PreTrainedTokenizerFast,
    style: PromptStyle,
    block: str,
    shots: Sequence[tuple[str, str]],
    start: int | None,
) -> list[int]:
    if not style.causal:
        return tokenizer(block, add_special_tokens=True)["input_ids"]
    ids = tokenizer(style.prompt(tokenizer, block, shots), add_special_tokens=False)["input_ids"]
    # a chat template writes its own start token; a plain prompt opens with the tokenizer's
    return ids if style.chat or start is None else [start, *ids]


def draw_exemplars(
    train: datasets.Dataset, shots: int, seed: int, excluded_ids: Collection[str], distractors: int = 2
) -> list[dict]:
    """`shots` k-shot exemplars from the training split, reproducible from `seed`: answerable rows whose id is not
    in `excluded_ids` (the questions to be answered), each with its supporting paragraphs and `distractors` other
    paragraphs, in dataset order. Plain dicts with `id`, `question`, `answer`, `answerable` and `paragraphs`."""
    if shots <= 0:
        return []
    excluded = set(excluded_ids)
    candidates = [
        row
        for row, (question_id, answerable) in enumerate(zip(train["id"], train["answerable"], strict=True))
        if answerable and question_id not in excluded
    ]
    if len(candidates) < shots:
        raise FeaturizationError(
            f"{shots} exemplars asked for, but the training split has {len(candidates)} answerable questions that are "
            "not being answered"
        )
    draw = random.Random(seed)
    exemplars = []
    for row in sorted(draw.sample(candidates, shots)):
        example = train[row]
        gold = [p for p in example["paragraphs"] if p["is_supporting"]]
        others = [p for p in example["paragraphs"] if not p["is_supporting"]]
        chosen = {p["idx"] for p in gold + draw.sample(others, min(distractors, len(others)))}
        exemplars.append(
            {
                "id": example["id"],
                "question": example["question"],
                "answer": example["answer"],
                "answerable": True,
                "paragraphs": [
                    {key: p[key] for key in ("idx", "title", "text", "is_supporting")}
                    for p in example["paragraphs"]
                    if p["idx"] in chosen
                ],
            }
        )
    return exemplars


declare_columns(__name__, pad={"read_idxs": -1})  # the paragraphs read
