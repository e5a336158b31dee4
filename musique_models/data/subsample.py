"""Reproducible subsampling of training questions (the paper trains every dataset on 20K questions)."""

from __future__ import annotations

import random
from collections.abc import Sequence


def subsample_indices(ids: Sequence[str], size: int | None, seed: int) -> list[int]:
    """Row indices that keep `size` distinct question ids chosen with `seed`, in file order.

    Rows that share an id (MuSiQue-Full's answerable/unanswerable twins) are kept or dropped together, so
    `size` counts questions, not rows. `size=None` or a size at least the number of questions keeps all.
    """
    unique_ids = list(dict.fromkeys(ids))
    if size is None or size >= len(unique_ids):
        return list(range(len(ids)))
    if size < 0:
        raise ValueError(f"subsample size must be >= 0, got {size}")
    chosen = set(random.Random(seed).sample(unique_ids, size))
    return [row for row, question_id in enumerate(ids) if question_id in chosen]
