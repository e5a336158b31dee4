"""The chance line of support F1: the exact expectation of a random choice, checked against random draws."""

from __future__ import annotations

import random

import pytest

from musique_models.evaluation.chance import random_support_f1, ranking_support_f1
from musique_models.evaluation.metrics import support_scores


@pytest.mark.parametrize(("gold", "paragraphs", "predicted"), [(2, 20, 2), (2, 10, 4), (4, 20, 1), (3, 20, 7)])
def test_the_expected_f1_of_a_random_choice_matches_random_draws(gold: int, paragraphs: int, predicted: int) -> None:
    draw = random.Random(f"{gold}-{paragraphs}-{predicted}")
    drawn = [support_scores(draw.sample(range(paragraphs), predicted), range(gold)).f1 for _ in range(20000)]
    assert random_support_f1(gold, paragraphs, predicted) == pytest.approx(sum(drawn) / len(drawn), abs=0.005)


def test_edge_cases_follow_support_scores() -> None:
    assert random_support_f1(2, 10) == pytest.approx(0.2)  # as many as the gold: k / n
    assert random_support_f1(2, 2) == 1.0  # every paragraph is gold
    assert random_support_f1(2, 10, 0) == 0.0  # nothing named
    assert random_support_f1(0, 10, 0) == support_scores([], []).f1 == 1.0


def test_a_ranking_is_scored_on_its_top_gold_count() -> None:
    assert ranking_support_f1([4, 1, 0, 2], [1, 4]) == 1.0
    assert ranking_support_f1([4, 0, 1, 2], [1, 4]) == 0.5
    assert ranking_support_f1([3, 0, 1, 4], [1, 4]) == 0.0
