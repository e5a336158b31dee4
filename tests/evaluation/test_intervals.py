"""Bootstrap intervals over questions: they hold the mean, shrink as questions are added, cover the true mean at
about their confidence, are reproducible from the seed, and a paired difference sees what two unpaired intervals
cannot."""

from __future__ import annotations

import random

import pytest

from musique_models.evaluation.intervals import bootstrap_interval, paired_difference


def test_the_interval_holds_the_mean_and_narrows_with_more_questions() -> None:
    draw = random.Random(1)
    few = [draw.random() for _ in range(25)]
    many = few * 16
    small, large = bootstrap_interval(few), bootstrap_interval(many)
    assert small.low < small.mean < small.high and small.mean == pytest.approx(sum(few) / 25)
    assert large.high - large.low < (small.high - small.low) / 2.5  # ~1/sqrt(16) as wide
    assert bootstrap_interval(few, seed=3) == bootstrap_interval(few, seed=3)
    assert bootstrap_interval([0.5] * 10).text() == "50.0 [50.0, 50.0]"


def test_95_percent_intervals_cover_the_true_mean_about_95_times_in_100() -> None:
    draw = random.Random(7)
    covered = 0
    for trial in range(200):
        scores = [float(draw.random() < 0.3) for _ in range(100)]  # an F1 of 0 or 1, true mean 0.3
        interval = bootstrap_interval(scores, resamples=400, seed=trial)
        covered += interval.low <= 0.3 <= interval.high
    assert 0.88 <= covered / 200 <= 0.99


def test_a_paired_difference_finds_a_small_consistent_gain_that_unpaired_intervals_overlap() -> None:
    draw = random.Random(2)
    base = [draw.random() for _ in range(100)]
    better = [min(1.0, score + 0.03) for score in base]
    alone = bootstrap_interval(base), bootstrap_interval(better)
    assert alone[0].high > alone[1].low  # the two intervals overlap
    gain = paired_difference(better, base)
    assert gain.excludes_zero() and 0.02 < gain.mean < 0.031
    assert not paired_difference(base, base).excludes_zero()
    with pytest.raises(ValueError, match="same questions"):
        paired_difference(base, base[:-1])
