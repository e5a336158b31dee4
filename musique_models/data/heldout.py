"""Training and evaluation sides made of real questions that share none: what a comparison on held-out questions
reads.

A side is a list of examples read from official files (`read_side`: repeated questions dropped, the first kept).
Where a dataset has too few training questions, its evaluation questions are split into folds (`dev_folds`): the
scored fold stays held out and the other folds join training. MuSiQue composes its dev questions from a pool of
single-hop dev questions, so two dev questions can share a sub-question; a fold keeps every question that shares a
sub-question with another in the same fold, as MuSiQue's own train/dev split keeps them apart. `check_disjoint`
refuses two sides that share a question id, a question text or (MuSiQue) a single-hop sub-question.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from musique_models.data.formats import get_format
from musique_models.data.schema import Example
from musique_models.errors import MusiqueModelsError

# MuSiQue ids name the single-hop questions they compose: `2hop__482757_12019`, `3hop1__9285_5188_23307`.
_MUSIQUE_ID = re.compile(r"^\d+hop\d*__([\d_]+)$")


class HeldoutOverlapError(MusiqueModelsError, ValueError):
    """A training side and an evaluation side that share questions."""


def question_text(example: Example) -> str:
    """The question as compared across files: lower-cased, whitespace squeezed."""
    return " ".join(example.question.lower().split())


def single_hop_ids(example: Example | str) -> set[str]:
    """The ids of the single-hop questions a MuSiQue question (or question id) is composed of (empty for other
    datasets)."""
    match = _MUSIQUE_ID.match(example if isinstance(example, str) else example.id)
    return set(match.group(1).split("_")) if match else set()


def read_side(paths: Sequence[str | Path], data_format: str, dataset: str) -> tuple[list[Example], int]:
    """The examples of `paths` in order, a question seen before (same id or text) dropped; and how many were
    dropped."""
    fmt = get_format(data_format)
    kept: list[Example] = []
    seen_ids: set[str] = set()
    seen_texts: set[str] = set()
    dropped = 0
    for path in paths:
        for example in fmt.read(path, dataset):
            if example.id in seen_ids or question_text(example) in seen_texts:
                dropped += 1
                continue
            seen_ids.add(example.id)
            seen_texts.add(question_text(example))
            kept.append(example)
    return kept, dropped


def dev_folds(examples: Sequence[Example], folds: int, seed: int) -> list[list[Example]]:
    """`examples` in `folds` folds of near-equal size, drawn with `seed`; questions that share a single-hop
    sub-question (directly or through others) go to the same fold. Each fold keeps file order."""
    if folds < 1:
        raise ValueError(f"folds must be at least 1, got {folds}")
    groups = sharing_groups(examples)
    random.Random(seed).shuffle(groups)
    assigned: list[list[int]] = [[] for _ in range(folds)]
    for group in sorted(groups, key=len, reverse=True):  # stable: equal sizes keep the shuffled order
        min(assigned, key=len).extend(group)
    return [[examples[index] for index in sorted(fold)] for fold in assigned]


def sharing_groups(examples: Sequence[Example | str]) -> list[list[int]]:
    """The positions of `examples` (or question ids) in groups of questions that share a single-hop sub-question,
    directly or through others (every other question a group of its own), each in order."""
    parent = list(range(len(examples)))

    def root(index: int) -> int:
        while parent[index] != index:
            parent[index] = parent[parent[index]]
            index = parent[index]
        return index

    first_with: dict[str, int] = {}
    for index, example in enumerate(examples):
        for key in single_hop_ids(example):
            if key in first_with:
                parent[root(index)] = root(first_with[key])
            else:
                first_with[key] = index
    groups: dict[int, list[int]] = {}
    for index in range(len(examples)):
        groups.setdefault(root(index), []).append(index)
    return list(groups.values())


# What may not be on both sides of a comparison; `overlap` also counts shared supporting paragraphs, which the same
# Wikipedia page can give two different questions (reported, not refused).
QUESTION_OVERLAPS = ("ids", "questions", "single_hop_ids")


def overlap(first: Iterable[Example], second: Iterable[Example]) -> dict[str, list[str]]:
    """What two sides share: question ids, question texts, single-hop sub-question ids and supporting paragraphs'
    texts (each sorted)."""
    first, second = list(first), list(second)

    def supporting(examples: list[Example]) -> set[str]:
        return {" ".join(p.text.split()) for e in examples for p in e.paragraphs if p.is_supporting}

    shared_ids = {e.id for e in first} & {e.id for e in second}
    shared_texts = {question_text(e) for e in first} & {question_text(e) for e in second}
    shared_hops = set().union(*map(single_hop_ids, first)) & set().union(*map(single_hop_ids, second))
    return {
        "ids": sorted(shared_ids),
        "questions": sorted(shared_texts),
        "single_hop_ids": sorted(shared_hops),
        "supporting_paragraphs": sorted(supporting(first) & supporting(second)),
    }


def check_disjoint(train: Iterable[Example], evaluation: Iterable[Example], what: str) -> None:
    """Raise `HeldoutOverlapError` naming the questions or sub-questions `train` and `evaluation` share (`what`
    names the comparison)."""
    shared = {kind: values for kind, values in overlap(train, evaluation).items() if kind in QUESTION_OVERLAPS}
    if any(shared.values()):
        found = "; ".join(
            f"{len(values)} {kind} ({', '.join(values[:3])})" for kind, values in shared.items() if values
        )
        raise HeldoutOverlapError(f"{what}: the training and evaluation questions share {found}")


def without(examples: Iterable[Example], excluded: Iterable[Example]) -> list[Example]:
    """`examples` less those that share an id, a question text or a single-hop sub-question with `excluded`."""
    excluded = list(excluded)
    ids = {e.id for e in excluded}
    texts = {question_text(e) for e in excluded}
    hops = set().union(*map(single_hop_ids, excluded)) if excluded else set()
    return [e for e in examples if e.id not in ids and question_text(e) not in texts and not (single_hop_ids(e) & hops)]
