"""Every shipped real sample survives its reader (and the Arrow cache) field by field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from musique_models.data.formats import read_examples
from musique_models.data.schema import Example
from musique_models.data.source import DatasetSource
from tests.conftest import SAMPLES


def _raw_records(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return json.loads(text)
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _through_cache(path: Path, data_format: str, tmp_path: Path) -> list[Example]:
    source = DatasetSource(
        name="t", display_name="t", format=data_format, files={"x": str(path)}, data_dir="/", cache_dir=str(tmp_path)
    )
    return source.examples("x")


MUSIQUE_FILES = [
    "musique_ans/train.json",
    "musique_ans/dev.jsonl",
    "musique_full/official_unpaired_train20.json",
    "musique_full/train_derived.jsonl",
    "musique_full/dev_derived.jsonl",
]


@pytest.mark.parametrize("relative", MUSIQUE_FILES)
def test_musique_sample_fields_survive(relative: str, tmp_path: Path) -> None:
    path = SAMPLES / relative
    raw_records = _raw_records(path)
    examples = _through_cache(path, "musique", tmp_path)
    assert len(examples) == len(raw_records) > 0
    for raw, example in zip(raw_records, examples):
        assert example.id == raw["id"]
        assert example.question == raw["question"]
        assert example.answer == raw["answer"]
        assert example.answer_aliases == raw["answer_aliases"]
        assert example.answerable == raw["answerable"]
        assert [(p.idx, p.title, p.text, p.is_supporting) for p in example.paragraphs] == [
            (p["idx"], p["title"], p["paragraph_text"], p["is_supporting"]) for p in raw["paragraphs"]
        ]
        assert [(s.question, s.answer, s.paragraph_support_idx) for s in example.decomposition] == [
            (s["question"], s["answer"], s["paragraph_support_idx"]) for s in raw["question_decomposition"]
        ]
        assert example.num_hops == len(raw["question_decomposition"])
        assert example.question_type == raw["id"].split("__")[0]


@pytest.mark.parametrize(
    ("relative", "data_format"),
    [
        ("hotpotqa/train.json", "hotpotqa"),
        ("hotpotqa/dev.json", "hotpotqa"),
        ("2wiki/train.json", "2wiki"),
        ("2wiki/dev.json", "2wiki"),
    ],
)
def test_context_format_sample_fields_survive(relative: str, data_format: str, tmp_path: Path) -> None:
    path = SAMPLES / relative
    raw_records = _raw_records(path)
    examples = _through_cache(path, data_format, tmp_path)
    assert len(examples) == len(raw_records) > 0
    for raw, example in zip(raw_records, examples):
        assert example.id == raw["_id"]
        assert example.question == raw["question"]
        assert example.answer == raw["answer"]
        assert example.answerable is True
        assert example.question_type == raw["type"]
        support_titles = {title for title, _ in raw["supporting_facts"]}
        assert [p.idx for p in example.paragraphs] == list(range(len(raw["context"])))
        for paragraph, (title, sentences) in zip(example.paragraphs, raw["context"]):
            assert paragraph.title == title
            assert paragraph.sentences == sentences
            assert paragraph.text == "".join(sentences)
            assert paragraph.is_supporting == (title in support_titles)
            expected_sentence_ids = sorted({i for t, i in raw["supporting_facts"] if t == title and i < len(sentences)})
            assert sorted(paragraph.supporting_sentence_ids) == expected_sentence_ids
        if data_format == "2wiki":
            assert [step.answer for step in example.decomposition] == [obj for _, _, obj in raw["evidences"]]
            assert example.num_hops == len(raw["evidences"])
            for step, (_subject, relation, _) in zip(example.decomposition, raw["evidences"]):
                assert step.question.endswith(f" >> {relation}")
                assert (
                    step.paragraph_support_idx is None or example.paragraphs[step.paragraph_support_idx].is_supporting
                )


def test_2wiki_decomposition_uses_references_and_titles() -> None:
    examples = {e.id: e for e in read_examples(SAMPLES / "2wiki/train.json", "2wiki", "2wiki")}
    zone = examples["099f34280bda11eba7f7acde48001122"]  # The Zone (2017 film) -> director -> place of birth
    assert [(s.question, s.answer) for s in zone.decomposition] == [
        ("The Zone >> director", "Denys Desjardins"),
        ("#1 >> place of birth", "Montreal, Quebec"),
    ]
    titles = [zone.paragraphs[s.paragraph_support_idx].title for s in zone.decomposition]
    assert titles == ["The Zone (2017 film)", "Denys Desjardins"]
    steps_with_support = [s for e in examples.values() for s in e.decomposition if s.paragraph_support_idx is not None]
    all_steps = [s for e in examples.values() for s in e.decomposition]
    assert len(steps_with_support) / len(all_steps) > 0.98


def test_unanswerable_official_full_rows_keep_null_support() -> None:
    examples = read_examples(SAMPLES / "musique_full/official_unpaired_train20.json", "musique", "musique_full")
    unanswerable = [e for e in examples if not e.answerable]
    assert len(unanswerable) == 9 and len(examples) == 20
    assert all(any(s.paragraph_support_idx is None for s in e.decomposition) for e in unanswerable)


def test_to_dict_matches_dataclasses_asdict() -> None:
    from dataclasses import asdict

    for example in read_examples(SAMPLES / "2wiki/dev.json", "2wiki", "2wiki")[:10]:
        assert example.to_dict() == asdict(example)
        assert Example.from_dict(example.to_dict()) == example
