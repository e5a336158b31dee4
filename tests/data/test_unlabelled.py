"""Unlabelled splits (official test sets): read without labels only where a dataset declares them, refused as
labelled data, and the shipped unlabelled samples reproducible from the labelled ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate

from musique_models.data.formats import read_examples
from musique_models.data.unlabelled import write_unlabelled
from musique_models.errors import DataFormatError
from tests.conftest import SAMPLES

LABELLED = {
    "musique": (SAMPLES / "musique_ans" / "dev.jsonl", ".jsonl"),
    "hotpotqa": (SAMPLES / "hotpotqa" / "dev.json", ".json"),
    "2wiki": (SAMPLES / "2wiki" / "dev.json", ".json"),
}


@pytest.mark.parametrize("data_format", list(LABELLED))
def test_an_unlabelled_copy_reads_as_the_questions_without_their_labels(data_format: str, tmp_path: Path) -> None:
    source, suffix = LABELLED[data_format]
    unlabelled = tmp_path / f"test{suffix}"
    assert write_unlabelled(source, unlabelled, count=3) == 3
    labelled = read_examples(source, data_format, "d")[:3]
    read = read_examples(unlabelled, data_format, "d", labelled=False)
    assert [e.id for e in read] == [e.id for e in labelled] and [e.question for e in read] == [
        e.question for e in labelled
    ]
    for example, original in zip(read, labelled):
        assert [(p.idx, p.title, p.text) for p in example.paragraphs] == [
            (p.idx, p.title, p.text) for p in original.paragraphs
        ]
        assert example.answer == "" and example.supporting_idxs == [] and example.decomposition == []
        assert example.answerable and example.num_hops == original.num_hops  # MuSiQue: from the id; else 2
    # a labelled split that lacks its labels is still an error, naming the file, line and field
    with pytest.raises(DataFormatError) as error:
        read_examples(unlabelled, data_format, "d")
    assert error.value.path == str(unlabelled) and error.value.line == 1 and error.value.field
    assert "missing field" in str(error.value)


def test_unlabelled_musique_full_still_needs_both_twins(tmp_path: Path) -> None:
    unlabelled = tmp_path / "test.jsonl"
    write_unlabelled(SAMPLES / "musique_full" / "dev_derived.jsonl", unlabelled, count=3)
    assert len(read_examples(unlabelled, "musique", "musique_full", require_pairs=True, labelled=False)) == 6
    lines = unlabelled.read_text().splitlines()
    unlabelled.write_text("\n".join(lines[:-1]) + "\n")
    with pytest.raises(DataFormatError, match="exactly twice"):
        read_examples(unlabelled, "musique", "musique_full", require_pairs=True, labelled=False)


@pytest.mark.parametrize(
    ("dataset", "labelled_file", "count"),
    [
        ("musique_ans", SAMPLES / "musique_ans" / "dev.jsonl", 20),
        ("musique_full", SAMPLES / "musique_full" / "dev_derived.jsonl", 10),
        ("2wiki_20k", SAMPLES / "2wiki" / "dev.json", 20),
    ],
)
def test_the_shipped_test_split_is_the_dev_samples_first_ids_unlabelled(
    dataset: str, labelled_file: Path, count: int, compose_train_cfg, tmp_path: Path
) -> None:
    source = instantiate(compose_train_cfg([f"dataset={dataset}", "dataset.sample=true"]).dataset)
    assert not source.is_labelled("test") and source.is_labelled("dev")
    remade = tmp_path / f"remade{labelled_file.suffix}"
    write_unlabelled(labelled_file, remade, count=count)
    assert remade.read_text() == source.path("test").read_text()
    table = source.load("test")
    rows = remade.read_text().splitlines() if remade.suffix == ".jsonl" else json.loads(remade.read_text())
    assert len(table) == len(rows) and set(table["answer"]) == {""}
