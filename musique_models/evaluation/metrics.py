"""The one metrics implementation: answer, support, answerability, paired MuSiQue-Full and DiRe scores.

Definitions follow the official MuSiQue evaluator (StonyBrookNLP/musique, `evaluate_v1.0.py` and `metrics/`)
and DiRe (StonyBrookNLP/dire, `metrics/probe_*` and `evaluation_scripts/evaluate_probe_of_original_dataset.py`,
whose answer scores are HotpotQA's own: `hotpot_evaluate_v1.py`'s `f1_score`). Floats are kept at full precision
(the official scripts round when they print).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_DROP_PUNCTUATION = str.maketrans("", "", string.punctuation)
HOP_BUCKETS = (2, 3, 4)


def normalize_answer(text: str) -> str:
    """SQuAD normalisation: lower-case, drop punctuation, drop the articles a/an/the, squeeze whitespace."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_DROP_PUNCTUATION)).split())


@dataclass(frozen=True)
class Scores:
    """Precision, recall, F1 and exact match of one prediction against one gold."""

    precision: float
    recall: float
    f1: float
    em: float


def _common_token_count(left: list[str], right: list[str]) -> int:
    """`sum((Counter(left) & Counter(right)).values())`, without building Counters (answers are a few tokens)."""
    return sum(min(left.count(token), right.count(token)) for token in set(right))


# HotpotQA's answer F1 gives these normalised answers no partial credit: F1 0 unless prediction and gold are equal.
HOTPOTQA_EXACT_ONLY_ANSWERS = frozenset({"yes", "no", "noanswer"})


def _token_scores(predicted_tokens: list[str], gold_tokens: list[str], em: float, hotpotqa_rules: bool) -> Scores:
    if not hotpotqa_rules and (not gold_tokens or not predicted_tokens):
        agree = float(gold_tokens == predicted_tokens)
        return Scores(agree, agree, agree, em)
    same = _common_token_count(predicted_tokens, gold_tokens)
    if same == 0:
        return Scores(0.0, 0.0, 0.0, em)
    precision = same / len(predicted_tokens)
    recall = same / len(gold_tokens)
    return Scores(precision, recall, 2 * precision * recall / (precision + recall), em)


def answer_scores(prediction: str, golds: Sequence[str], hotpotqa_rules: bool = False) -> Scores:
    """EM and F1 are each the max over `golds` (the answer and its aliases), as the official evaluator does.

    Precision and recall (used by DiRe's joint score) are those of the gold with the best F1. `hotpotqa_rules`:
    HotpotQA's own F1 (`hotpot_evaluate_v1.py`'s `f1_score`, which DiRe's official scorer uses): precision, recall
    and F1 are 0 when the normalised prediction or gold is yes / no / noanswer and the two differ, and when they
    share no token (two empty answers too); EM is unchanged.
    """
    normalized_prediction = normalize_answer(prediction)
    predicted_tokens = normalized_prediction.split()
    per_gold = []
    for gold in golds:
        normalized_gold = normalize_answer(gold)
        em = float(normalized_prediction == normalized_gold)
        if (
            hotpotqa_rules
            and not em
            and (normalized_prediction in HOTPOTQA_EXACT_ONLY_ANSWERS or normalized_gold in HOTPOTQA_EXACT_ONLY_ANSWERS)
        ):
            per_gold.append(Scores(0.0, 0.0, 0.0, em))
        else:
            per_gold.append(_token_scores(predicted_tokens, normalized_gold.split(), em, hotpotqa_rules))
    best = max(per_gold, key=lambda scores: scores.f1)
    return Scores(best.precision, best.recall, best.f1, max(scores.em for scores in per_gold))


# The data formats whose DiRe answer scores follow the official DiRe scorer's HotpotQA rules.
DIRE_HOTPOTQA_RULES_FORMATS = ("hotpotqa",)


def dire_answer_scores(prediction: str, golds: Sequence[str], data_format: str | None) -> Scores:
    """The answer scores DiRe picks and caps with (probe and original predictions alike): HotpotQA's rules
    (`answer_scores(..., hotpotqa_rules=True)`) for the HotpotQA format, as the official DiRe scorer; the standard
    ones for every other format (and for None)."""
    return answer_scores(prediction, golds, hotpotqa_rules=data_format in DIRE_HOTPOTQA_RULES_FORMATS)


def support_scores(predicted: Iterable[int], gold: Iterable[int]) -> Scores:
    """Set precision/recall/F1 of predicted vs gold supporting paragraph idx; EM = sets equal.

    Both empty gives F1 = EM = 1 (the official script never meets this case: it scores support on answerable
    instances only, which always have gold support).
    """
    predicted_set, gold_set = set(predicted), set(gold)
    if not predicted_set and not gold_set:
        return Scores(1.0, 1.0, 1.0, 1.0)
    true_positives = len(predicted_set & gold_set)
    precision = true_positives / len(predicted_set) if predicted_set else 0.0
    recall = true_positives / len(gold_set) if gold_set else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return Scores(precision, recall, f1, float(predicted_set == gold_set))


@dataclass(frozen=True)
class InstanceResult:
    """Scores of one prediction on one gold instance (a row of the gold file)."""

    row: int
    id: str
    num_hops: int
    gold_answerable: bool
    predicted_answerable: bool
    answer: Scores
    support: Scores

    @property
    def sufficiency_correct(self) -> bool:
        return self.gold_answerable == self.predicted_answerable


def mean_score(values: Sequence[float]) -> float:
    """The mean of per-question scores, 0 for none (the official evaluator's averaging)."""
    return sum(values) / len(values) if values else 0.0


def hop_bucket(num_hops: int) -> int:
    """The per-hop bucket a question counts in: 2, 3 or 4 (fewer hops count as 2, more as 4)."""
    return min(max(num_hops, HOP_BUCKETS[0]), HOP_BUCKETS[-1])


def aggregate(results: Sequence[InstanceResult], paired: bool = True) -> dict[str, float]:
    """Dataset metrics from per-instance results, with the official key names plus per-hop keys.

    `answer_*` and `support_*` average over gold-answerable instances. When any gold instance is unanswerable
    (MuSiQue-Full), instances are grouped by id (two per id) and the paired metrics are added: a group scores
    the answerable instance's answer (or support) score only if the predicted answerability of both
    instances is right, else 0. `paired=False` (data that is not in twins: MuSiQue-Full's single-hop questions)
    leaves the paired metrics out and adds `avg_answer_sufficiency_f1`, the mean of answer F1 and answerability
    F1 (the official model's `avg_answer_answerability_f1` with `skip_grouped_metrics`).
    """
    by_hops: dict[int, list[InstanceResult]] = {hops: [] for hops in HOP_BUCKETS}
    for result in results:
        by_hops[hop_bucket(result.num_hops)].append(result)
    has_unanswerable = any(not result.gold_answerable for result in results)
    metrics = _answer_support_means(results, suffix="")
    for hops, hop_results in by_hops.items():
        if hop_results:
            metrics.update(_answer_support_means(hop_results, suffix=f"_{hops}hop"))
    if has_unanswerable and not paired:
        metrics.update(_answerability_metrics(results))
        metrics["avg_answer_sufficiency_f1"] = average_answer_sufficiency_f1(
            metrics["answer_f1"], metrics["sufficiency_f1"]
        )
    elif has_unanswerable:
        metrics.update(_sufficiency_metrics(results))
        for hops, hop_results in by_hops.items():
            if hop_results:
                metrics.update(_group_metrics(hop_results, suffix=f"_{hops}hop"))
    return metrics


def counts_toward(result: InstanceResult, has_unanswerable: bool, paired: bool = True) -> list[str]:
    """The metrics `aggregate` counts `result` in, by family: `answer` (answer_f1 / answer_em, per hop too) and
    `support` (support_*) for a gold-answerable row only; `answerability` (sufficiency_*, and
    avg_answer_sufficiency_f1 unpaired) and `pair` (group_*: the row's twin pair) for every row of a file with
    unanswerable rows. An unanswerable row's answer and support scores are computed but never averaged."""
    families = ["answer", "support"] if result.gold_answerable else []
    if has_unanswerable:
        families += ["answerability", "pair"] if paired else ["answerability"]
    return families


ANSWER_SUPPORT_METRICS = ("answer_f1", "answer_em", "support_f1", "support_em")


def question_scores(result: InstanceResult) -> dict[str, float]:
    """An answerable question's answer and support scores under the names `aggregate` averages (unsuffixed)."""
    return {
        "answer_f1": result.answer.f1,
        "answer_em": result.answer.em,
        "support_f1": result.support.f1,
        "support_em": result.support.em,
    }


def _answer_support_means(results: Sequence[InstanceResult], suffix: str) -> dict[str, float]:
    scores = [question_scores(result) for result in results if result.gold_answerable]
    means = {name + suffix: mean_score([question[name] for question in scores]) for name in ANSWER_SUPPORT_METRICS}
    return {**means, f"count{suffix}": float(len(scores))}


def twin_pairs(results: Sequence[InstanceResult]) -> dict[str, list[InstanceResult]]:
    """MuSiQue-Full's twin pairs: id -> its rows, in the order the ids first appear; a ValueError unless each id has
    one answerable and one unanswerable row."""
    pairs: dict[str, list[InstanceResult]] = {}
    for result in results:
        pairs.setdefault(result.id, []).append(result)
    for question_id, pair in pairs.items():
        if len(pair) != 2 or sum(result.gold_answerable for result in pair) != 1:
            raise ValueError(f"id {question_id!r}: paired metrics need one answerable and one unanswerable row")
    return pairs


def pair_scores(pair: Sequence[InstanceResult]) -> dict[str, float]:
    """The paired scores of one twin pair (unsuffixed `group_*` names): the answerable row's answer (or support)
    score if the predicted answerability of both rows is right, else 0."""
    (answerable,) = [result for result in pair if result.gold_answerable]
    both_right = float(all(result.sufficiency_correct for result in pair))
    return {
        "group_answer_sufficiency_f1": both_right * answerable.answer.f1,
        "group_answer_sufficiency_em": both_right * answerable.answer.em,
        "group_support_sufficiency_f1": both_right * answerable.support.f1,
        "group_support_sufficiency_em": both_right * answerable.support.em,
    }


PAIR_METRICS = tuple(f"group_{score}_sufficiency_{kind}" for score in ("answer", "support") for kind in ("f1", "em"))


def _group_metrics(results: Sequence[InstanceResult], suffix: str) -> dict[str, float]:
    scores = [pair_scores(pair) for pair in twin_pairs(results).values()]
    return {name + suffix: mean_score([pair[name] for pair in scores]) for name in PAIR_METRICS}


def _sufficiency_metrics(results: Sequence[InstanceResult]) -> dict[str, float]:
    """Answerability accuracy and F1 (`_answerability_metrics`), plus the paired metrics."""
    return {**_answerability_metrics(results), **_group_metrics(results, suffix="")}


@dataclass(frozen=True)
class AnswerabilityCounts:
    """What answerability F1 is computed from: rows judged answerable that are (`true_positive`), rows judged
    answerable (`predicted_positive`), rows that are (`gold_positive`). Counts of several row sets add up."""

    true_positive: float
    predicted_positive: float
    gold_positive: float


def answerability_counts(results: Sequence[InstanceResult]) -> AnswerabilityCounts:
    """The answerability counts of `results`."""
    return AnswerabilityCounts(
        true_positive=sum(r.predicted_answerable and r.gold_answerable for r in results),
        predicted_positive=sum(r.predicted_answerable for r in results),
        gold_positive=sum(r.gold_answerable for r in results),
    )


def answerability_f1(counts: AnswerabilityCounts) -> float:
    """Binary F1 with 'answerable' as the positive class (0 when nothing is predicted or gold answerable)."""
    precision = counts.true_positive / counts.predicted_positive if counts.predicted_positive else 0.0
    recall = counts.true_positive / counts.gold_positive if counts.gold_positive else 0.0
    return 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0


def average_answer_sufficiency_f1(answer_f1: float, sufficiency_f1: float) -> float:
    """`avg_answer_sufficiency_f1`: the mean of answer F1 and answerability F1 (unpaired files)."""
    return (answer_f1 + sufficiency_f1) / 2


def _answerability_metrics(results: Sequence[InstanceResult]) -> dict[str, float]:
    """Answerability accuracy, and binary F1 with 'answerable' as the positive class."""
    return {
        "sufficiency_accuracy": mean_score([float(r.sufficiency_correct) for r in results]),
        "sufficiency_f1": answerability_f1(answerability_counts(results)),
    }


@dataclass(frozen=True)
class DireQuestionResult:
    """DiRe scores of one question: min(probe score, score on the original question)."""

    id: str
    num_hops: int
    answer: Scores
    support: Scores

    @property
    def joint(self) -> Scores:
        """HotpotQA-style joint: precision and recall multiply, EM is the min (as DiRe's `compute_joint`)."""
        precision = self.answer.precision * self.support.precision
        recall = self.answer.recall * self.support.recall
        f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
        return Scores(precision, recall, f1, min(self.answer.em, self.support.em))


def _min_scores(left: Scores, right: Scores) -> Scores:
    return Scores(
        min(left.precision, right.precision),
        min(left.recall, right.recall),
        min(left.f1, right.f1),
        min(left.em, right.em),
    )


def dire_question_result(
    question_id: str,
    num_hops: int,
    gold_support: Iterable[int],
    original_answer: Scores,
    original_support: Scores,
    probe_answers: Sequence[Scores],
    probe_confidences: Sequence[float],
    probe_supports: Sequence[Iterable[int]],
) -> DireQuestionResult:
    """Score one question's two probe predictions as the official DiRe scorer does.

    `probe_answers` (answer scores), `probe_confidences` and `probe_supports` are the two probe predictions in the
    order they are listed (the probe prediction file's lines). The probe answer is the second listed's only if its
    confidence is strictly higher, else the first listed's: a tie takes the first listed, as the official scorer
    (it pops each question's predictions from the end of its list, so its `store[1]`, taken unless `store[0]` is
    strictly more confident, is the first listed). The probe support is the union of both probes' predicted
    supports, scored against all gold supporting paragraphs. Each score is then capped by the same score of the
    prediction on the original question.
    """
    if len(probe_answers) != 2 or len(probe_confidences) != 2 or len(probe_supports) != 2:
        raise ValueError(f"id {question_id!r}: DiRe needs exactly two probe predictions")
    chosen = 1 if probe_confidences[1] > probe_confidences[0] else 0
    probe_support = support_scores(set(probe_supports[0]) | set(probe_supports[1]), gold_support)
    return DireQuestionResult(
        id=question_id,
        num_hops=num_hops,
        answer=_min_scores(probe_answers[chosen], original_answer),
        support=_min_scores(probe_support, original_support),
    )


DIRE_METRICS = (
    "dire_answer_f1",
    "dire_answer_em",
    "dire_support_f1",
    "dire_support_em",
    "dire_joint_f1",
    "dire_joint_em",
)


def dire_question_scores(result: DireQuestionResult) -> dict[str, float]:
    """One question's DiRe scores under the names `aggregate_dire` averages (unsuffixed)."""
    joint = result.joint
    return {
        "dire_answer_f1": result.answer.f1,
        "dire_answer_em": result.answer.em,
        "dire_support_f1": result.support.f1,
        "dire_support_em": result.support.em,
        "dire_joint_f1": joint.f1,
        "dire_joint_em": joint.em,
    }


def aggregate_dire(results: Sequence[DireQuestionResult]) -> dict[str, float]:
    """Means of the DiRe answer, support and joint scores, overall and per hop count."""
    metrics: dict[str, float] = {}
    buckets: list[tuple[str, Sequence[DireQuestionResult]]] = [("", results)]
    buckets += [(f"_{hops}hop", [r for r in results if hop_bucket(r.num_hops) == hops]) for hops in HOP_BUCKETS]
    for suffix, bucket in buckets:
        if not bucket and suffix:
            continue
        scores = [dire_question_scores(result) for result in bucket]
        metrics.update({name + suffix: mean_score([question[name] for question in scores]) for name in DIRE_METRICS})
        metrics[f"dire_count{suffix}"] = float(len(bucket))
    return metrics
