from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from musique_models.data.source import DatasetSource
from musique_models.data.subsample import evaluation_subset_indices, subsample_indices
from tests.conftest import SAMPLES

IDS = [f"q{i}" for i in range(1000)]


def test_same_seed_same_ids_and_exact_size() -> None:
    first = subsample_indices(IDS, 200, seed=7)
    assert first == subsample_indices(IDS, 200, seed=7)
    assert len(first) == 200 and len(set(first)) == 200
    assert first == sorted(first)  # file order is kept


def test_different_seed_different_ids() -> None:
    assert set(subsample_indices(IDS, 200, seed=7)) != set(subsample_indices(IDS, 200, seed=8))


def test_pairs_are_kept_together_and_size_counts_questions() -> None:
    paired_ids = [question_id for question_id in IDS for _ in range(2)]
    rows = subsample_indices(paired_ids, 300, seed=1)
    assert len(rows) == 600
    kept = [paired_ids[row] for row in rows]
    assert len(set(kept)) == 300 and all(kept.count(question_id) == 2 for question_id in set(kept[:20]))


def test_size_at_least_the_data_keeps_everything_and_negative_is_an_error() -> None:
    assert subsample_indices(IDS, None, seed=1) == list(range(1000))
    assert subsample_indices(IDS, 5000, seed=1) == list(range(1000))
    with pytest.raises(ValueError, match="subsample size must be >= 0, got -1"):
        subsample_indices(IDS, -1, seed=1)


def test_source_subsamples_train_only_and_saves_ids(tmp_path: Path) -> None:
    source = DatasetSource(
        name="musique_full",
        display_name="x",
        format="musique",
        files={},
        data_dir="/",
        sample=True,
        sample_files={
            "train": str(SAMPLES / "musique_full/train_derived.jsonl"),
            "dev": str(SAMPLES / "musique_full/dev_derived.jsonl"),
        },
        paired=True,
        train_size=30,
        seed=3,
        cache_dir=str(tmp_path / "cache"),
    )
    train = source.load("train", run_dir=tmp_path / "run")
    assert len(train) == 60 and len(set(train["id"])) == 30
    saved = (tmp_path / "run" / "subsample_train_ids.json").read_text()
    assert all(f'"{question_id}"' in saved for question_id in set(train["id"]))
    assert len(source.load("dev")) == 400
    source.seed = 4
    assert set(source.load("train")["id"]) != set(train["id"])


def test_an_evaluation_subset_keeps_the_hop_mix_the_twins_and_the_file_order() -> None:
    # the sample's layout: ordered by hops (100 2-hop, 60 3-hop, 40 4-hop questions), MuSiQue-Full twins
    hops = [2] * 100 + [3] * 60 + [4] * 40
    ids = [f"{hop}hop__{n}" for n, hop in enumerate(hops)]
    twin_ids = [question_id for question_id in ids for _ in range(2)]
    twin_hops = [hop for hop in hops for _ in range(2)]
    rows = evaluation_subset_indices(twin_ids, twin_hops, 50)
    kept = [twin_ids[row] for row in rows]
    assert len(set(kept)) == 50 and len(kept) == 100  # 50 questions, both twins of each
    assert rows == sorted(rows)  # file order
    mix = Counter(twin_hops[row] for row in rows[::2])
    assert mix == {2: 25, 3: 15, 4: 10}  # the split's 50% / 30% / 20%, where the first 50 would be all 2-hop
    assert evaluation_subset_indices(twin_ids, twin_hops, 50) == rows  # the same for every run
    assert Counter(hops[row] for row in evaluation_subset_indices(ids, hops, 7)) == {2: 4, 3: 2, 4: 1}
    assert evaluation_subset_indices(ids, hops, 500) == list(range(200))
