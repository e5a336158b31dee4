"""Held-out sides: repeated questions dropped, folds that keep questions sharing a single-hop sub-question
together, and a refusal to compare on questions the model trained on."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from musique_models.data.heldout import (
    HeldoutOverlapError,
    check_disjoint,
    dev_folds,
    overlap,
    read_side,
    single_hop_ids,
    without,
)

MUSIQUE_DEV = PROJECT_ROOT / "data" / "samples" / "musique_ans" / "dev.jsonl"
MUSIQUE_TRAIN = PROJECT_ROOT / "data" / "samples" / "musique_ans" / "train.json"


def test_single_hop_ids_come_from_musique_ids_only() -> None:
    [first, *_] = read_side([MUSIQUE_DEV], "musique", "musique_ans")[0]
    assert first.id == "2hop__574419_270105" and single_hop_ids(first) == {"574419", "270105"}
    hotpot = read_side([PROJECT_ROOT / "data/samples/hotpotqa/dev.json"], "hotpotqa", "hotpotqa_20k")[0]
    assert single_hop_ids(hotpot[0]) == set()


def test_a_repeated_question_is_read_once_and_gzip_files_read_as_plain_ones(tmp_path: Path) -> None:
    rows = MUSIQUE_DEV.read_text().splitlines()[:3]
    repeated = json.loads(rows[0]) | {"id": "2hop__1_2"}  # another id, the same question text
    plain = tmp_path / "a.jsonl"
    plain.write_text("\n".join([*rows, json.dumps(repeated)]) + "\n")
    packed = tmp_path / "b.jsonl.gz"
    packed.write_bytes(gzip.compress("\n".join(rows).encode()))
    examples, dropped = read_side([plain, packed], "musique", "musique_ans")
    assert [e.id for e in examples] == [json.loads(row)["id"] for row in rows] and dropped == 4


def test_folds_are_balanced_reproducible_and_keep_sharing_questions_together() -> None:
    examples = read_side([MUSIQUE_DEV], "musique", "musique_ans")[0]
    folds = dev_folds(examples, 2, seed=13)
    assert sorted(len(fold) for fold in folds) == [100, 100]
    assert sum(map(len, folds)) == 200 and {e.id for fold in folds for e in fold} == {e.id for e in examples}
    shared = overlap(folds[0], folds[1])
    assert (shared["ids"], shared["questions"], shared["single_hop_ids"]) == ([], [], [])
    # the dev sample's questions share sub-questions (so a random split would leak them)
    shared = [(a.id, b.id) for a in examples for b in examples if a.id < b.id and single_hop_ids(a) & single_hop_ids(b)]
    assert len(shared) > 20
    assert [e.id for e in dev_folds(examples, 2, seed=13)[0]] == [e.id for e in folds[0]]
    assert [e.id for e in dev_folds(examples, 2, seed=14)[0]] != [e.id for e in folds[0]]
    assert dev_folds(examples, 1, seed=0) == [examples]


def test_sides_that_share_a_question_or_a_sub_question_are_refused() -> None:
    dev = read_side([MUSIQUE_DEV], "musique", "musique_ans")[0]
    train = read_side([MUSIQUE_TRAIN], "musique", "musique_ans")[0]
    check_disjoint(train, dev, "musique_ans")  # the official split: nothing shared
    with pytest.raises(HeldoutOverlapError, match=r"musique_ans: .* share 1 ids \(2hop__574419_270105\)"):
        check_disjoint([*train, dev[0]], dev, "musique_ans")
    first, sharing = next((a, b) for a in dev for b in dev if a.id != b.id and single_hop_ids(a) & single_hop_ids(b))
    with pytest.raises(HeldoutOverlapError, match="single_hop_ids"):
        check_disjoint([sharing], [first], "musique_ans")
    assert first not in without(dev, [sharing]) and len(without(dev, [])) == 200


def test_the_shipped_real_musique_full_questions_overlap_the_ans_dev_sample() -> None:
    # why the benchmark leaves some out: 6 are the same questions, more share sub-questions
    full = read_side([PROJECT_ROOT / "data/heldout/musique_full/dev_real100.jsonl.gz"], "musique", "musique_full")[0]
    dev = read_side([MUSIQUE_DEV], "musique", "musique_ans")[0]
    shared = overlap(full, dev)
    assert len(full) == 100 and sum(e.answerable for e in full) == 52
    assert len(shared["ids"]) == 6 and len(shared["single_hop_ids"]) > 6
