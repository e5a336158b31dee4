"""Intervals of statistics of several independent samples: differences between datasets and ratios to SA."""

from __future__ import annotations

import math
import random

import pytest

from musique_models.evaluation.intervals import Interval, bootstrap_interval, resampled_statistic


def test_one_sample_mean_is_the_bootstrap_interval() -> None:
    values = [random.Random(3).random() for _ in range(50)]
    alone = resampled_statistic([[[value] for value in values]], lambda means: float(means[0][0]))
    plain = bootstrap_interval(values)
    assert (alone.low, alone.high) == (plain.low, plain.high) and alone.mean == pytest.approx(plain.mean)


def independent_difference(first: list[float], second: list[float]) -> Interval:
    return resampled_statistic(
        [[[value] for value in first], [[value] for value in second]], lambda means: float(means[0][0] - means[1][0])
    )


def test_a_difference_of_independent_samples_is_as_wide_as_its_two_sides_together() -> None:
    draw = random.Random(5)
    first = [float(draw.random() < 0.6) for _ in range(100)]
    second = [float(draw.random() < 0.3) for _ in range(100)]
    difference = independent_difference(first, second)
    assert difference.mean == pytest.approx(sum(first) / 100 - sum(second) / 100)
    # a proportion's standard error is sqrt(p(1-p)/n); the difference's adds the two variances
    p, q = sum(first) / 100, sum(second) / 100
    expected = 1.96 * math.sqrt(p * (1 - p) / 100 + q * (1 - q) / 100)
    assert (difference.high - difference.low) / 2 == pytest.approx(expected, rel=0.15)
    assert difference.excludes_zero()
    assert not independent_difference(first, first[::-1]).excludes_zero()


def test_a_ratio_to_a_mean_that_can_be_zero_is_unbounded() -> None:
    units = [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]  # a resample of only zero rows divides by 0

    def ratio(means: list) -> float:
        return float(means[0][0] / means[0][1]) if means[0][1] else math.nan

    interval = resampled_statistic([units], ratio)
    assert interval.mean == 1.0 and (interval.low, interval.high) == (-math.inf, math.inf)
    with pytest.raises(ValueError, match="samples of units"):
        resampled_statistic([[]], ratio)
