"""The single-hop questions Step Execution trains on, checked against the raw sample files field by field."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from musique_models.data.schema import Example
from musique_models.data.single_hop import fill_references, single_hop_examples, single_hop_table
from musique_models.data.source import DatasetSource
from tests.conftest import SAMPLES


def _raw_records(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _source(relative: str, data_format: str, tmp_path: Path) -> DatasetSource:
    return DatasetSource(
        name="t",
        display_name="t",
        format=data_format,
        files={"x": str(SAMPLES / relative)},
        data_dir="/",
        cache_dir=str(tmp_path / "datasets"),
    )


def _filled_by_hand(question: str, answers: list[str]) -> str:
    for number, answer in enumerate(answers, start=1):
        question = re.sub(rf"#{number}(?!\d)", answer, question)
    return " ".join(question.split())


@pytest.mark.parametrize(
    "relative", ["musique_ans/train.json", "musique_full/train_derived.jsonl", "musique_full/dev_derived.jsonl"]
)
def test_musique_single_hop_rows_match_the_raw_decompositions(relative: str, tmp_path: Path) -> None:
    raw_records = _raw_records(SAMPLES / relative)
    source = _source(relative, "musique", tmp_path)
    rows = single_hop_table(source.load("x"), tmp_path / "features")
    assert len(rows) == sum(len(raw["question_decomposition"]) for raw in raw_records)
    position = 0
    unanswerable_steps = 0
    for raw in raw_records:
        steps = raw["question_decomposition"]
        gold_answers = [step["answer"] for step in steps]
        for number, step in enumerate(steps, start=1):
            row = Example.from_dict(rows[position])
            position += 1
            assert row.id == f"{raw['id']}/{number}"
            assert row.question == _filled_by_hand(step["question"], gold_answers[: number - 1])
            assert "#" not in row.question or not re.search(r"#\d", row.question)
            assert row.answer == step["answer"]
            assert row.num_hops == 1
            assert [(p.idx, p.title, p.text) for p in row.paragraphs] == [
                (p["idx"], p["title"], p["paragraph_text"]) for p in raw["paragraphs"]
            ]
            support = step["paragraph_support_idx"]
            assert row.supporting_idxs == ([] if support is None else [support])
            assert row.answerable == (raw["answerable"] or support is not None)
            unanswerable_steps += not row.answerable
            expected_aliases = raw["answer_aliases"] if number == len(steps) and step["answer"] == raw["answer"] else []
            assert row.answer_aliases == expected_aliases
            # relation steps keep MuSiQue's "subject >> relation" form
            if ">>" in step["question"]:
                assert ">>" in row.question
    # the derived Full samples: exactly one unanswerable step per unanswerable question (its support was removed)
    assert unanswerable_steps == sum(not raw["answerable"] for raw in raw_records)


def test_2wiki_single_hop_rows_follow_the_evidence_triples(tmp_path: Path) -> None:
    raw_records = _raw_records(SAMPLES / "2wiki/train.json")
    examples = _source("2wiki/train.json", "2wiki", tmp_path).examples("x")
    checked = 0
    for raw, example in zip(raw_records, examples):
        rows = single_hop_examples(example)
        assert len(rows) == len(raw["evidences"])
        for number, ((subject, relation, obj), row) in enumerate(zip(raw["evidences"], rows), start=1):
            assert row.answer == obj
            assert row.question.endswith(f" >> {' '.join(relation.split())}")
            earlier = [evidence[2] for evidence in raw["evidences"][: number - 1]]
            # a subject that is an earlier step's answer was written as #k and comes back filled with that answer
            written = " ".join(f"{subject} >> {relation}".split())
            assert row.question == written or row.question.split(" >> ")[0] in earlier
            assert row.answerable
            assert len(row.supporting_idxs) <= 1
            checked += 1
    assert checked > 100


def test_fill_references() -> None:
    assert fill_references("#1 >> spouse", ["Ada"]) == "Ada >> spouse"
    assert fill_references("Who wrote #2 with #1 ?", ["A", "B"]) == "Who wrote B with A ?"
    assert fill_references("#12 then #1", ["x"]) == "then x"  # #12 does not exist; #1 is not a prefix match
    assert fill_references("when did #3 die", ["a", "b"]) == "when did die"  # a missing answer: the empty string


def test_hotpotqa_has_no_single_hop_rows(tmp_path: Path) -> None:
    examples = _source("hotpotqa/train.json", "hotpotqa", tmp_path).examples("x")
    assert all(single_hop_examples(example) == [] for example in examples)
