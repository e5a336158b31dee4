"""What a random choice of supporting paragraphs scores: the line a support F1 must clear to show that a model
learned anything."""

from __future__ import annotations

from collections.abc import Sequence

from musique_models.evaluation.metrics import support_scores


def random_support_f1(gold: int, paragraphs: int, predicted: int | None = None) -> float:
    """The expected support F1 of `predicted` paragraphs (default: as many as the gold support) drawn at random
    from a question's `paragraphs`, `gold` of them supporting: m drawn hit m * k / n gold paragraphs on average, so
    F1 = 2 * (m k / n) / (m + k) in expectation (k / n when m = k); 1 when there is nothing to find and nothing is
    named (as `support_scores`), 0 when nothing is named."""
    predicted = gold if predicted is None else predicted
    if not paragraphs or not predicted or not gold:
        return support_scores([], []).f1 if not gold and not predicted else 0.0
    gold, predicted = min(gold, paragraphs), min(predicted, paragraphs)
    return 2 * (predicted * gold / paragraphs) / (predicted + gold)


def ranking_support_f1(ranking: Sequence[int], gold: Sequence[int]) -> float:
    """The support F1 of a ranking's top |gold| paragraphs (its precision and recall are equal): how well it ranks
    the supporting paragraphs first, whatever threshold a model would later apply."""
    return support_scores(ranking[: len(set(gold))], gold).f1
