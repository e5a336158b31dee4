"""Q-only features: the question alone as source (no paragraph text, ever), its answer as target.

The source is the question, whitespace squeezed and clipped to `max_question_tokens` text tokens, with the
tokenizer's special tokens on top (as the decomposer's source). The target is the answer between the tokenizer's
start and end tokens (`<s> ... </s>` for BART, `[CLS] ... [SEP]` for a WordPiece tokenizer), clipped to
`max_answer_tokens` text tokens; its first token is the decoder's start token and is not predicted. An unanswerable
row (MuSiQue-Full's twin, same question as its answerable twin) has no target: its labels are `[-100, -100]`
(ignored by the loss; two positions, so that a batch of unanswerable rows alone still runs the decoder) and it
only trains the answerability head. Unlabelled rows (answer "", answerable true) featurise like any other.
"""

from __future__ import annotations

from typing import Any

import datasets
from transformers import PreTrainedTokenizerFast

from musique_models.features.context import question_source

QUESTION_ONLY_FEATURES = datasets.Features(
    {
        "input_ids": datasets.List(datasets.Value("int32")),
        "attention_mask": datasets.List(datasets.Value("int8")),
        "labels": datasets.List(datasets.Value("int32")),
        "answerable": datasets.Value("int8"),
        "example_row": datasets.Value("int32"),
    }
)
# the labels of a row without a generation target (an unanswerable question)
NO_TARGET = [-100, -100]


def featurize_question_only(
    batch: dict[str, list],
    rows: list[int],
    tokenizer: PreTrainedTokenizerFast,
    *,
    max_question_tokens: int,
    max_answer_tokens: int,
) -> dict[str, Any]:
    """Batched `datasets.map` function over schema rows: `input_ids` and `attention_mask` (the question alone),
    `labels` (the answer with the start and end tokens, or `NO_TARGET` for an unanswerable row), `answerable`
    (0/1) and `example_row`. Reads only the `question`, `answer` and `answerable` columns."""
    input_ids = question_source(tokenizer, batch["question"], max_question_tokens)
    specials = tokenizer.num_special_tokens_to_add(pair=False)
    answers = [" ".join(answer.split()) for answer in batch["answer"]]
    targets = tokenizer(answers, truncation=True, max_length=max_answer_tokens + specials)["input_ids"]
    answerable = [bool(flag) for flag in batch["answerable"]]
    return {
        "input_ids": input_ids,
        "attention_mask": [[1] * len(ids) for ids in input_ids],
        "labels": [target if flag else list(NO_TARGET) for target, flag in zip(targets, answerable, strict=True)],
        "answerable": [int(flag) for flag in answerable],
        "example_row": list(rows),
    }


featurize_question_only.output_features = QUESTION_ONLY_FEATURES  # type: ignore[attr-defined]
