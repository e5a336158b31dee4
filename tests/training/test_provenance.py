"""Where a run's data came from, as `provenance.json` records it: the shipped samples, the official files, or
other files given on the command line."""

from __future__ import annotations

import pytest

from musique_models.training.provenance import data_origin, override_keys


@pytest.mark.parametrize(
    ("sample", "overrides", "expected"),
    [
        (True, [], "sample"),
        (False, [], "official"),
        (False, ["dataset.files.dev=/x.jsonl"], "other files"),
        (False, ["++dataset.data_dir=/data"], "other files"),
        (False, ["dataset.hub_path=me/musique"], "other files"),
        (True, ["dataset.sample_files.train=/x.jsonl"], "other files"),
        (True, ["dataset.train_size=8", "seed=1", "eval_size=4"], "sample"),  # settings, not files
        (False, ["dataset.filesystem=x"], "official"),  # a key that only starts with a file key's name
        (False, ["dataset.sample_files.dev=/x.jsonl"], "official"),  # not read with sample=false (refused by train.py)
    ],
)
def test_data_origin_counts_only_overrides_of_the_files_the_run_reads(
    sample: bool, overrides: list[str], expected: str
) -> None:
    assert data_origin(sample, overrides) == expected


def test_override_keys_drop_the_grammar_prefixes() -> None:
    assert override_keys(["+a.b=1", "++c=x=y", "~d", "e=[1,2]"]) == ["a.b", "c", "d", "e"]
