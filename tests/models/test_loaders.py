from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from musique_models import PROJECT_ROOT
from musique_models.training.loaders import BalancedNegatives, BucketBatchSampler, PaddingCollator, ResumableDataLoader


def _loader(lengths: list[int]) -> ResumableDataLoader:
    rows = [{"input_ids": list(range(1, n + 1)), "label": 1.0} for n in lengths]
    return ResumableDataLoader(
        rows,
        BucketBatchSampler(lengths, 4, shuffle=True, seed=5, bucket_batches=2),
        collate_fn=PaddingCollator(0),
        generator=torch.Generator().manual_seed(0),
    )


def _epoch(loader) -> list[list[int]]:
    return [batch["input_ids"][:, 0].tolist() and batch["input_ids"].ne(0).sum(1).tolist() for batch in loader]


def test_each_row_once_per_epoch_new_order_each_epoch_and_little_padding() -> None:
    lengths = [5 + (i * 37) % 60 for i in range(40)]
    loader = _loader(lengths)
    first, second = _epoch(loader), _epoch(loader)
    assert sorted(n for batch in first for n in batch) == sorted(lengths) == sorted(n for b in second for n in b)
    assert first != second
    # bucketing: within a batch lengths are close (sorted inside chunks of 2 batches)
    spread = sum(max(batch) - min(batch) for batch in first) / len(first)
    assert spread < 30


def test_position_restores_mid_epoch_and_after_an_epoch() -> None:
    lengths = [5 + (i * 37) % 60 for i in range(40)]
    reference = _loader(lengths)
    epochs = [_epoch(reference), _epoch(reference)]
    interrupted = _loader(lengths)
    iterator = iter(interrupted)
    seen = [next(iterator)["input_ids"].ne(0).sum(1).tolist() for _ in range(3)]
    state = interrupted.state_dict()
    assert state == {"epoch": 0, "batches_done": 3} and seen == epochs[0][:3]
    resumed = _loader(lengths)
    resumed.load_state_dict(state)
    assert _epoch(resumed) == epochs[0][3:] and _epoch(resumed) == epochs[1]
    finished = _loader(lengths)
    finished.load_state_dict({"epoch": 0, "batches_done": 10})  # the whole first epoch was done
    assert _epoch(finished) == epochs[1]


def test_balanced_subset_draws_new_negatives_each_epoch_and_resumes_mid_epoch() -> None:
    # 6 questions x 10 rows; rows 0-1 of each question are positives; a row's "length" is its index + 1
    labels = [1.0 if i % 10 < 2 else 0.0 for i in range(60)]
    subset = BalancedNegatives(labels, [i // 10 for i in range(60)], seed=3)

    def loader() -> ResumableDataLoader:
        rows = [{"input_ids": list(range(1, n + 2)), "label": labels[n]} for n in range(60)]
        # one QUESTION a batch: its 2 positives and 2 drawn negatives
        sampler = BucketBatchSampler(list(range(1, 61)), 1, shuffle=True, seed=5, bucket_batches=2, subset=subset)
        return ResumableDataLoader(
            rows, sampler, collate_fn=PaddingCollator(0), generator=torch.Generator().manual_seed(0)
        )

    reference = loader()
    assert len(reference) == 6  # 24 rows a epoch: 12 positives + 12 negatives
    batches = _epoch(reference)
    assert all(len(batch) == 4 and len({(n - 1) // 10 for n in batch}) == 1 for batch in batches)
    epochs = [[row for batch in batches for row in batch]] + [[row for batch in _epoch(reference) for row in batch]]
    for rows in epochs:
        assert len(rows) == 24 and sum(labels[n - 1] for n in rows) == 12
    assert {n for n in epochs[0] if not labels[n - 1]} != {n for n in epochs[1] if not labels[n - 1]}
    interrupted = loader()
    iterator = iter(interrupted)
    for _ in range(2):
        next(iterator)
    resumed = loader()
    resumed.load_state_dict(interrupted.state_dict())
    assert [row for batch in _epoch(resumed) for row in batch] == epochs[0][8:]


def test_collator_pads_and_masks_markers() -> None:
    batch = PaddingCollator(pad_token_id=7)(
        [
            {
                "input_ids": [1, 2, 3],
                "marker_positions": [1],
                "support_labels": [1.0],
                "offset_start": [0, 1, 2],
                "offset_end": [1, 2, 3],
            },
            {
                "input_ids": [1],
                "marker_positions": [0, 0],
                "support_labels": [0.0, 1.0],
                "offset_start": [0],
                "offset_end": [1],
            },
        ]
    )
    assert batch["input_ids"].tolist() == [[1, 2, 3], [1, 7, 7]]
    assert batch["marker_mask"].tolist() == [[True, False], [True, True]]
    assert batch["offset_mapping"][1].tolist() == [[0, 1], [-1, -1], [-1, -1]]
    assert batch["support_labels"].dtype == torch.float32


# In a fresh interpreter: allocate and touch a block larger than glibc's mmap threshold, free it, and report how
# much of it the process still holds.
_FREED_BLOCK_PROBE = """
import ctypes, os, sys
from musique_models.training.malloc import keep_freed_memory
switched = keep_freed_memory() if sys.argv[1] == "keep" else False
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_size_t], [ctypes.c_void_p]
def resident() -> int:
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
size = 64 * 2**20
block = libc.malloc(size)
ctypes.memset(block, 1, size)
held = resident()
libc.free(block)
print(switched, held - resident())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_glibc_keeps_freed_memory_on_linux() -> None:
    def freed(mode: str) -> tuple[str, int]:
        result = subprocess.run(
            [sys.executable, "-c", _FREED_BLOCK_PROBE, mode],
            capture_output=True,
            text=True,
            check=True,
            cwd=PROJECT_ROOT,
        )
        switched, returned = result.stdout.split()
        return switched, int(returned)

    # glibc alone gives a freed 64 MB block back to the kernel at once; switched, the process keeps it for reuse
    assert freed("plain") == ("False", pytest.approx(64 * 2**20, rel=0.1))
    switched, returned = freed("keep")
    assert switched == "True" and returned < 2**20


def test_the_collator_pads_what_the_featurisers_declare_and_a_conflict_names_both(monkeypatch) -> None:
    from musique_models.errors import MusiqueModelsError
    from musique_models.features import padding
    from musique_models.features.padding import TOKENIZER_PAD, declare_columns, float_columns, pad_values

    pad_values()  # every featuriser declared; the toy column below is undone after the test
    monkeypatch.setattr(padding, "_PAD_VALUES", dict(padding._PAD_VALUES))
    monkeypatch.setattr(padding, "_OWNERS", dict(padding._OWNERS))

    declared = pad_values()
    # each featuriser's own columns, declared beside it (answerer, beam, generative), and the float ones
    assert declared["offset_start"] == -1 and declared["candidate_idx"] == -1 and declared["read_idxs"] == -1
    assert declared["input_ids"] is TOKENIZER_PAD and {"support_labels", "label"} <= float_columns()
    declare_columns("tests.toy_featuriser", pad={"toy_column": -7})
    batch = PaddingCollator(pad_token_id=0)(
        [{"input_ids": [1, 2], "toy_column": [3]}, {"input_ids": [1], "toy_column": [4, 5]}]
    )
    assert batch["toy_column"].tolist() == [[3, -7], [4, 5]] and batch["input_ids"].tolist() == [[1, 2], [1, 0]]
    with pytest.raises(
        MusiqueModelsError, match="'toy_column': padded with -7 by tests.toy_featuriser and with 0 by x"
    ):
        declare_columns("x", pad={"toy_column": 0})
