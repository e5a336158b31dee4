"""Score prediction files against gold files: what `evaluate.py` runs, on the one metrics implementation."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from musique_models.data.probe import has_too_few_paragraphs
from musique_models.errors import DataFormatError
from musique_models.evaluation.gold import GoldInstance, read_gold, sniff_format
from musique_models.evaluation.intervals import Interval, PairedTest, bootstrap_settings, metric_intervals
from musique_models.evaluation.metrics import (
    DireQuestionResult,
    InstanceResult,
    aggregate,
    aggregate_dire,
    answer_scores,
    counts_toward,
    dire_answer_scores,
    dire_question_result,
    support_scores,
)
from musique_models.evaluation.predictions import (
    Prediction,
    ProbePrediction,
    align_predictions,
    read_predictions,
    read_probe_predictions,
)
from musique_models.io import gc_paused, write_json, write_jsonl


def score_instance(gold: GoldInstance, prediction: Prediction) -> InstanceResult:
    """Answer and support scores of one prediction (computed for every row; aggregation picks the rows)."""
    return InstanceResult(
        row=gold.row,
        id=gold.id,
        num_hops=gold.num_hops,
        gold_answerable=gold.answerable,
        predicted_answerable=prediction.predicted_answerable,
        answer=answer_scores(prediction.predicted_answer, gold.answers),
        support=support_scores(prediction.predicted_support_idxs, gold.support_idxs),
    )


@dataclass
class EvaluationReport:
    """Dataset metrics plus the per-question rows written for error analysis, and what the metrics hide
    (`degenerate_predictions`)."""

    metrics: dict[str, float]
    per_question: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def evaluate_predictions(
    golds: Sequence[GoldInstance], predictions: Sequence[Prediction], paired: bool = True
) -> EvaluationReport:
    """Score aligned predictions (one per gold row, same order); `paired=False`: see `aggregate`."""
    results = [score_instance(gold, prediction) for gold, prediction in zip(golds, predictions, strict=True)]
    has_unanswerable = any(not result.gold_answerable for result in results)
    per_question = [
        {
            "row": r.row,
            "id": r.id,
            "num_hops": r.num_hops,
            "answerable": r.gold_answerable,
            "predicted_answerable": r.predicted_answerable,
            "predicted_answer": p.predicted_answer,
            "gold_answers": list(g.answers),
            "answer_f1": r.answer.f1,
            "answer_em": r.answer.em,
            "predicted_support_idxs": p.predicted_support_idxs,
            "gold_support_idxs": list(g.support_idxs),
            "support_f1": r.support.f1,
            "support_em": r.support.em,
            "counts_toward": counts_toward(r, has_unanswerable, paired),
        }
        for r, p, g in zip(results, predictions, golds)
    ]
    return EvaluationReport(aggregate(results, paired), per_question, degenerate_predictions(golds, predictions))


def evaluate_files(
    predictions_path: str | Path, gold_path: str | Path, data_format: str | None = None, paired: bool | None = None
) -> EvaluationReport:
    """Score an official-format prediction file against any supported gold file.

    `data_format` ('musique', 'hotpotqa' or '2wiki') and `paired` (MuSiQue-Full pairing required or refused) are
    what the dataset config says, detected from the file when None (see `read_gold`).
    """
    with gc_paused():
        golds = read_gold(gold_path, data_format, paired)
        predictions = align_predictions(golds, read_predictions(predictions_path), predictions_path)
        return evaluate_predictions(golds, predictions)


# Fewer questions than this are too few for "every question got the same answer" to mean anything.
DEGENERATE_MIN_QUESTIONS = 5


def degenerate_predictions(golds: Sequence[GoldInstance], predictions: Sequence[Prediction]) -> list[str]:
    """One line for each way the predictions are the same for every question, which the metrics alone hide: no
    supporting paragraph for any answerable question (Sp is 0 by construction), one answer for all of them (an
    empty one included), one answerability for every row of a file with unanswerable rows."""
    answerable = [p for g, p in zip(golds, predictions, strict=True) if g.answerable]
    if len(answerable) < DEGENERATE_MIN_QUESTIONS:
        return []
    count = len(answerable)
    lines = []
    if not any(p.predicted_support_idxs for p in answerable):
        lines.append(f"the model predicted no supporting paragraph for any of the {count} questions (Sp is 0)")
    answers = {p.predicted_answer for p in answerable}
    if len(answers) == 1:
        (answer,) = answers
        said = f"the same answer ({answer!r})" if answer else "an empty answer"
        lines.append(f"the model gave {said} to all {count} questions")
    if any(not gold.answerable for gold in golds) and len({p.predicted_answerable for p in predictions}) == 1:
        judged = "answerable" if predictions[0].predicted_answerable else "unanswerable"
        lines.append(f"the model judged all {len(predictions)} rows {judged} (the paired metrics then score 0)")
    return lines


def left_out_of_dire(golds: Sequence[GoldInstance], min_paragraphs: int | None) -> set[str]:
    """Ids of the answerable questions that `min_paragraphs` leaves out of DiRe (none when it is None)."""
    return {
        gold.id
        for gold in golds
        if gold.answerable and has_too_few_paragraphs(len(gold.paragraph_idxs), min_paragraphs)
    }


def dire_results(
    golds: Sequence[GoldInstance],
    predictions: Sequence[Prediction],
    probe_predictions: Sequence[tuple[int, ProbePrediction]],
    probe_path: str | Path,
    data_format: str | None = None,
    min_paragraphs: int | None = None,
) -> list[DireQuestionResult]:
    """DiRe scores of every answerable gold question, from its original prediction and its two probe predictions.

    `probe_predictions` are `(line, probe prediction)` pairs (lines of `probe_path`, named in errors; the earlier
    line of a question's two counts as listed first, which wins a confidence tie). `data_format` picks the answer
    rules (`dire_answer_scores`: HotpotQA's for 'hotpotqa'). With `min_paragraphs`, questions with fewer
    paragraphs are left out (their probe predictions, if any, are checked and ignored).
    """
    probes: dict[str, dict[int, tuple[int, ProbePrediction]]] = {}
    answerable = {gold.id: gold for gold in golds if gold.answerable}
    for line, probe in probe_predictions:
        if probe.id not in answerable:
            raise DataFormatError(
                "probe prediction for an id that is not an answerable gold question",
                path=probe_path,
                line=line,
                record_id=probe.id,
            )
        if probe.probe not in (0, 1):
            raise DataFormatError(
                f"probe must be 0 or 1, got {probe.probe}",
                path=probe_path,
                line=line,
                record_id=probe.id,
                field="probe",
            )
        if probe.probe in probes.setdefault(probe.id, {}):
            raise DataFormatError(
                f"duplicate prediction for probe {probe.probe}", path=probe_path, line=line, record_id=probe.id
            )
        gold = answerable[probe.id]
        unknown = [idx for idx in probe.predicted_support_idxs if idx not in gold.paragraph_idxs]
        if unknown:
            raise DataFormatError(
                f"idx {unknown} are not idx of this question's paragraphs",
                path=probe_path,
                line=line,
                record_id=probe.id,
                field="predicted_support_idxs",
            )
        probes[probe.id][probe.probe] = (line, probe)
    left_out = left_out_of_dire(golds, min_paragraphs)
    scored = {question_id: gold for question_id, gold in answerable.items() if question_id not in left_out}
    incomplete = [question_id for question_id in scored if len(probes.get(question_id, {})) != 2]
    if incomplete:
        raise DataFormatError(
            f"{len(incomplete)} answerable questions lack probe 0 or 1: " + ", ".join(repr(i) for i in incomplete[:5]),
            path=probe_path,
        )
    results = []
    for gold, prediction in zip(golds, predictions):
        if gold.id not in scored or not gold.answerable:
            continue
        listed = [probe for _, probe in sorted(probes[gold.id].values(), key=lambda pair: pair[0])]
        results.append(
            dire_question_result(
                question_id=gold.id,
                num_hops=gold.num_hops,
                gold_support=gold.support_idxs,
                original_answer=dire_answer_scores(prediction.predicted_answer, gold.answers, data_format),
                original_support=support_scores(prediction.predicted_support_idxs, gold.support_idxs),
                probe_answers=[
                    dire_answer_scores(probe.predicted_answer, gold.answers, data_format) for probe in listed
                ],
                probe_confidences=[probe.predicted_answer_confidence for probe in listed],
                probe_supports=[probe.predicted_support_idxs for probe in listed],
            )
        )
    return results


def dire_report(
    golds: Sequence[GoldInstance],
    predictions: Sequence[Prediction],
    probe_predictions: Sequence[tuple[int, ProbePrediction]],
    probe_path: str | Path,
    data_format: str | None = None,
    min_paragraphs: int | None = None,
) -> EvaluationReport:
    """The standard metrics (every question) plus DiRe's (`dire_results`), with DiRe's scores added to each scored
    question's per-question row. With `min_paragraphs`, `dire_skipped_count` counts the answerable questions left
    out of DiRe and their rows get `dire_skipped: true`."""
    report = evaluate_predictions(golds, predictions)
    results = dire_results(golds, predictions, probe_predictions, probe_path, data_format, min_paragraphs)
    report.metrics.update(aggregate_dire(results))
    skipped = left_out_of_dire(golds, min_paragraphs)
    if min_paragraphs is not None:
        report.metrics["dire_skipped_count"] = float(len(skipped))
    by_id = {result.id: result for result in results}
    for row in report.per_question:
        result = by_id.get(row["id"])
        if result is not None and row["answerable"]:
            row.update(
                dire_answer_f1=result.answer.f1, dire_support_f1=result.support.f1, dire_joint_f1=result.joint.f1
            )
            row["counts_toward"].append("dire")
        elif row["id"] in skipped and row["answerable"]:
            row["dire_skipped"] = True
    return report


def evaluate_dire_files(
    gold_path: str | Path,
    predictions_path: str | Path,
    probe_path: str | Path,
    data_format: str | None = None,
    paired: bool | None = None,
    min_paragraphs: int | None = None,
) -> EvaluationReport:
    """`dire_report` of a gold file, its prediction file and its probe prediction file (`data_format` and `paired`
    as in `evaluate_files`; the gold file's format, given or detected, picks DiRe's answer rules)."""
    with gc_paused():
        golds = read_gold(gold_path, data_format, paired)
        gold_format = data_format or sniff_format(gold_path).name
        predictions = align_predictions(golds, read_predictions(predictions_path), predictions_path)
        return dire_report(
            golds, predictions, read_probe_predictions(probe_path), probe_path, gold_format, min_paragraphs
        )


def write_report(report: EvaluationReport, output: str | Path, per_question_output: str | Path | None = None) -> Path:
    """Write metrics JSON (full-precision floats) and the per-question jsonl, each atomically."""
    output = Path(output)
    per_question_output = Path(per_question_output or output.with_name(output.stem + ".per_question.jsonl"))
    write_jsonl(per_question_output, report.per_question)
    write_json(output, report.metrics)
    return per_question_output


def intervals_path(output: str | Path) -> Path:
    """Where the intervals of the metrics in `output` go: `<output stem>.intervals.json` beside it."""
    output = Path(output)
    return output.with_name(output.stem + ".intervals.json")


def report_intervals(report: EvaluationReport) -> dict[str, Interval]:
    """The bootstrap interval of each metric the report's per-question rows allow (`metric_intervals`: the
    default seed, resamples and confidence); none without rows."""
    return metric_intervals(report.per_question) if report.per_question else {}


def write_intervals(path: str | Path, intervals: Mapping[str, Interval]) -> None:
    """Write the intervals (metric -> mean, low, high, count, confidence) with how they were made, atomically."""
    write_json(path, {"bootstrap": bootstrap_settings(), "intervals": {k: asdict(v) for k, v in intervals.items()}})


# Metrics already on a 0-100 scale (BLEU), shown as they are.
UNSCALED_METRICS = ("decomposition_bleu",)


# Counts that runs saved before counts were integers hold as floats (`3.0`).
SAVED_AS_FLOAT_COUNTS = ("invalid_decompositions", "unparsed_generations")


def is_count_metric(name: str, value: object) -> bool:
    """Whether a metric is a count, shown as it is: its name ends in `count`, or its value is an integer (what a
    predictor's `extra_metrics` gives for a count, e.g. `invalid_decompositions`; scores are floats), or it is one
    of the counts older runs saved as floats."""
    integer = isinstance(value, int) and not isinstance(value, bool)
    return name.endswith("count") or integer or name in SAVED_AS_FLOAT_COUNTS


def metrics_table(
    metrics: dict[str, float], title: str = "metrics", intervals: Mapping[str, Interval] | None = None
) -> Table:
    """The metrics as a readable table: one row per metric, columns all / 2hop / 3hop / 4hop; a metric over all
    questions with an interval in `intervals` shows it (`47.3 [45.4, 49.2]`; the per-hop ones would not fit 80
    columns)."""
    suffixes = ["", "_2hop", "_3hop", "_4hop"]
    names = [name for name in metrics if not any(name.endswith(s) for s in suffixes[1:])]
    intervals = intervals or {}
    table = Table(title=title)
    table.add_column("metric", no_wrap=True)
    for label in ["all", "2hop", "3hop", "4hop"]:
        table.add_column(label, justify="right")
    for name in names:
        cells = []
        for suffix in suffixes:
            value = metrics.get(name + suffix)
            is_count = is_count_metric(name, value)
            scale = 1 if name in UNSCALED_METRICS else 100
            if value is None:
                cells.append("")
            elif not suffix and name in intervals:
                cells.append(intervals[name].text())
            else:
                cells.append(f"{value:.0f}" if is_count else f"{scale * value:.1f}")
        table.add_row(name, *cells)
    return table


def comparison_table(
    first: Mapping[str, float], second: Mapping[str, float], tests: Mapping[str, PairedTest], labels: Sequence[str]
) -> Table:
    """A paired comparison as a table: per metric, both systems' values, the difference (first minus second) with
    its interval, the p-value and the number of resampling units (x100 but p and n)."""
    first_label, second_label = labels
    table = Table(title=f"{first_label} against {second_label}, on the same questions")
    for column in ("metric", first_label, second_label, f"{first_label} - {second_label}", "p", "n"):
        table.add_column(column, justify="left" if column == "metric" else "right", no_wrap=True)
    for name, test in tests.items():
        table.add_row(
            name,
            f"{100 * first[name]:.1f}",
            f"{100 * second[name]:.1f}",
            test.difference.text(),
            format_p_value(test.p_value),
            str(test.count),
        )
    return table


def format_p_value(p_value: float) -> str:
    """`0.032`, `<0.001` below a thousandth."""
    return "<0.001" if p_value < 0.001 else f"{p_value:.3f}"
