from __future__ import annotations

import random
from pathlib import Path

import pytest

from musique_models.data.contrast import main as contrast_main
from musique_models.data.contrast import make_contrast, make_full_pairs
from musique_models.data.formats import read_examples
from tests.conftest import SAMPLES


def _check_pair(answerable, contrast) -> None:
    assert contrast.id == answerable.id and not contrast.answerable and answerable.answerable
    assert [p.idx for p in contrast.paragraphs] == [p.idx for p in answerable.paragraphs]
    changed = [
        (a, c) for a, c in zip(answerable.paragraphs, contrast.paragraphs) if (a.title, a.text) != (c.title, c.text)
    ]
    assert len(changed) == 1
    removed, distractor = changed[0]
    assert removed.is_supporting and not distractor.is_supporting
    assert distractor.title not in {p.title for p in answerable.paragraphs}
    assert set(contrast.supporting_idxs) == set(answerable.supporting_idxs) - {removed.idx}
    for before, after in zip(answerable.decomposition, contrast.decomposition):
        expected = None if before.paragraph_support_idx == removed.idx else before.paragraph_support_idx
        assert after.paragraph_support_idx == expected and after.question == before.question
        if before.paragraph_support_idx == removed.idx:
            assert before.answer.lower() not in distractor.text.lower()
    assert answerable.answer.lower() not in distractor.text.lower()


def test_musique_contrasts_follow_musique_full() -> None:
    examples = read_examples(SAMPLES / "musique_ans/train.json", "musique", "musique_ans")
    pairs = list(make_full_pairs(examples, seed=13))
    assert len(pairs) == len(examples)
    for answerable, contrast in pairs:
        _check_pair(answerable, contrast)
        assert sum(s.paragraph_support_idx is None for s in contrast.decomposition) >= 1


def test_hotpot_and_2wiki_contrasts() -> None:
    for relative, data_format in [("hotpotqa/train.json", "hotpotqa"), ("2wiki/train.json", "2wiki")]:
        examples = read_examples(SAMPLES / relative, data_format, data_format)
        pairs = list(make_full_pairs(examples, seed=1))
        assert len(pairs) == len(examples) >= 100, relative  # every question gets its contrast
        for answerable, contrast in pairs:
            _check_pair(answerable, contrast)


@pytest.mark.slow
def test_contrast_is_reproducible_and_seed_dependent() -> None:
    examples = read_examples(SAMPLES / "musique_ans/train.json", "musique", "musique_ans")
    pool = [p for e in examples for p in e.paragraphs if not p.is_supporting]
    first = [make_contrast(e, pool, random.Random(f"5:{e.id}")) for e in examples[:20]]
    again = [make_contrast(e, pool, random.Random(f"5:{e.id}")) for e in examples[:20]]
    other = [make_contrast(e, pool, random.Random(f"6:{e.id}")) for e in examples[:20]]
    assert first == again and first != other


def test_shipped_derived_full_sample_is_exactly_what_the_tool_writes(tmp_path: Path) -> None:
    for split, source in [("train", "musique_ans/train.json"), ("dev", "musique_ans/dev.jsonl")]:
        output = tmp_path / f"{split}.jsonl"
        contrast_main(
            [
                "--input",
                str(SAMPLES / source),
                "--format",
                "musique",
                "--output",
                str(output),
                "--seed",
                "13",
                "--source",
                f"MuSiQue-Ans v1.0 {split} sample",
            ]
        )
        shipped = (SAMPLES / f"musique_full/{split}_derived.jsonl").read_text()
        assert shipped == output.read_text()
        assert f"DERIVED unanswerable contrast of MuSiQue-Ans v1.0 {split} sample" in shipped
