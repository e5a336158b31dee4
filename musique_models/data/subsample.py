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


# Every run that evaluates on `eval_size` questions of a split takes the same ones, whatever its own seed: runs
# compared with each other are scored on the same questions.
EVALUATION_SUBSET_SEED = 0


def evaluation_subset_indices(ids: Sequence[str], hops: Sequence[int], size: int) -> list[int]:
    """Row indices that keep `size` distinct question ids, in file order, with the split's mix of hop counts: each
    hop count gets its share of `size` (largest remainders first), drawn with `EVALUATION_SUBSET_SEED`. Twins (rows
    sharing an id) are kept together; a size at least the number of questions keeps all."""
    if size < 0:
        raise ValueError(f"evaluation subset size must be >= 0, got {size}")
    hops_of = dict(zip(ids, hops, strict=True))  # the first row of an id gives its hops (twins share them)
    unique_ids = list(dict.fromkeys(ids))
    if size >= len(unique_ids):
        return list(range(len(ids)))
    groups: dict[int, list[str]] = {}
    for question_id in unique_ids:
        groups.setdefault(hops_of[question_id], []).append(question_id)
    exact = {hop: size * len(members) / len(unique_ids) for hop, members in groups.items()}
    shares = {hop: int(value) for hop, value in exact.items()}
    by_remainder = sorted(groups, key=lambda hop: (-(exact[hop] - shares[hop]), hop))
    for hop in by_remainder[: size - sum(shares.values())]:
        shares[hop] += 1
    rng = random.Random(EVALUATION_SUBSET_SEED)
    chosen = {question_id for hop in sorted(groups) for question_id in rng.sample(groups[hop], shares[hop])}
    return [row for row, question_id in enumerate(ids) if question_id in chosen]
