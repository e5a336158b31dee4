"""Confidence intervals over questions: the percentile bootstrap of a mean per-question score, and of the difference
between two systems scored on the same questions (paired: each resample draws the same questions for both).

A figure on 100 sample questions is one draw of many; its interval says how far another 100 questions could move
it. The resamples are drawn with a seeded generator, so an interval is reproducible.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """A mean and its percentile-bootstrap interval at `confidence`, over `count` questions."""

    mean: float
    low: float
    high: float
    count: int
    confidence: float

    def text(self, scale: float = 100.0, digits: int = 1) -> str:
        """`12.3 [8.1, 16.9]` (scaled: percentages by default)."""
        return f"{self.mean * scale:.{digits}f} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def bootstrap_interval(
    values: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval:
    """The mean of `values` (one score a question) and its percentile-bootstrap interval."""
    return _bootstrap([float(value) for value in values], confidence, resamples, seed)


def paired_difference(
    first: Sequence[float], second: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> Interval:
    """The mean of `first - second` (two systems' scores on the same questions, in the same order) and its paired
    percentile-bootstrap interval: an interval that excludes 0 says the systems differ on such questions."""
    if len(first) != len(second):
        raise ValueError(f"paired scores need the same questions: {len(first)} and {len(second)} scores")
    return _bootstrap([float(a) - float(b) for a, b in zip(first, second, strict=True)], confidence, resamples, seed)


def _bootstrap(values: list[float], confidence: float, resamples: int, seed: int) -> Interval:
    if not values:
        raise ValueError("no scores to bootstrap")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence {confidence} is not between 0 and 1")
    count = len(values)
    draw = random.Random(seed)
    means = sorted(sum(values[draw.randrange(count)] for _ in range(count)) / count for _ in range(resamples))
    # as many resampled means left out below the interval as above it (2,000 resamples at 95%: 50 each side)
    outside = int((1 - confidence) / 2 * resamples)
    low, high = means[outside], means[resamples - 1 - outside]
    return Interval(sum(values) / count, low, high, count, confidence)
