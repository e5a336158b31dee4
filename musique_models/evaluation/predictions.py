"""The official MuSiQue prediction format (and DiRe probe predictions): read, validate against gold, write.

One line per gold instance, in gold order:
    {"id": ..., "predicted_answer": ..., "predicted_support_idxs": [...], "predicted_answerable": true}
HotpotQA and 2Wiki use the same format with paragraph idx = position in `context`. Writers for HotpotQA's and
2Wiki's own prediction files are here too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec

from musique_models.data.schema import Example
from musique_models.errors import DataFormatError
from musique_models.evaluation.gold import GoldInstance, msgspec_error
from musique_models.io import write_json, write_jsonl


class Prediction(msgspec.Struct, omit_defaults=True):
    """One row of an official MuSiQue prediction file. `predicted_answer_confidence` (the answer's probability
    under the model) is a side field: the official evaluator ignores it, DiRe uses it; written when known."""

    id: str
    predicted_answer: str
    predicted_support_idxs: list[int]
    predicted_answerable: bool
    predicted_answer_confidence: float | None = None


class ProbePrediction(msgspec.Struct):
    """One row of a DiRe probe prediction file; `id` is the original question's id."""

    id: str
    probe: int
    predicted_answer: str
    predicted_answer_confidence: float
    predicted_support_idxs: list[int]


def _read_lines(path: str | Path, kind: type[msgspec.Struct]) -> list[tuple[int, msgspec.Struct]]:
    path = Path(path)
    if not path.exists():
        raise DataFormatError("predictions file not found", path=path)
    decoder = msgspec.json.Decoder(kind)
    rows = []
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append((line_number, decoder.decode(line)))
            except msgspec.ValidationError as error:
                raise msgspec_error(error, path, line_number, line) from None
            except msgspec.DecodeError as error:
                raise DataFormatError(f"malformed JSON: {error}", path=path, line=line_number) from None
    if not rows:
        raise DataFormatError("the predictions file is empty", path=path)
    return rows


def read_predictions(path: str | Path) -> list[tuple[int, Prediction]]:
    """`(line_number, Prediction)` for each line; a missing or mistyped field names file, line, id and field."""
    return _read_lines(path, Prediction)


def read_probe_predictions(path: str | Path) -> list[tuple[int, ProbePrediction]]:
    """`(line_number, ProbePrediction)` for each line of a DiRe probe prediction file."""
    return _read_lines(path, ProbePrediction)


def _shown(ids: Iterable[str]) -> str:
    ids = list(ids)
    return ", ".join(repr(i) for i in ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def align_predictions(
    golds: Sequence[GoldInstance], predictions: Sequence[tuple[int, Prediction]], path: str | Path
) -> list[Prediction]:
    """Check that predictions cover the gold exactly, in gold order, with valid support idx; return them.

    Raises `DataFormatError` for a missing or extra id (named), a duplicate, too few rows of a MuSiQue-Full id,
    a wrong order, and a support idx that is not one of the question's paragraph idx.
    """
    gold_counts = Counter(gold.id for gold in golds)
    predicted_counts = Counter(prediction.id for _, prediction in predictions)
    if not any(i in gold_counts for i in predicted_counts):
        raise DataFormatError(
            f"none of the {len(predicted_counts)} prediction ids is in the gold file (predictions like "
            f"{_shown(list(predicted_counts)[:2])}, gold like {_shown(list(gold_counts)[:2])}): are these "
            "predictions of another dataset or split?",
            path=path,
        )
    missing = [i for i in gold_counts if i not in predicted_counts]
    if missing:
        subset = ""
        if all(i in gold_counts for i in predicted_counts):
            subset = (
                f" (the predictions cover {len(predicted_counts)} of the gold file's {len(gold_counts)} questions: a "
                "run with eval_size scored only those; `evaluate.py run=RUN_DIR` scores a run's own questions)"
            )
        raise DataFormatError(f"{len(missing)} gold ids have no prediction: {_shown(missing)}{subset}", path=path)
    extra = [i for i in predicted_counts if i not in gold_counts]
    if extra:
        raise DataFormatError(f"{len(extra)} predicted ids are not in the gold file: {_shown(extra)}", path=path)
    for question_id, count in predicted_counts.items():
        expected = gold_counts[question_id]
        if count != expected:
            line = [line for line, p in predictions if p.id == question_id][-1]
            problem = "duplicate prediction" if count > expected else "missing row"
            pairing = " (MuSiQue-Full needs exactly two rows per id)" if expected == 2 else ""
            raise DataFormatError(
                f"{problem}: {count} rows for this id, the gold file has {expected}{pairing}",
                path=path,
                line=line,
                record_id=question_id,
            )
    for gold, (line, prediction) in zip(golds, predictions):
        if prediction.id != gold.id:
            raise DataFormatError(
                f"wrong order: this line has id {prediction.id!r} where gold row {gold.row + 1} has {gold.id!r} "
                f"(predictions must follow the gold file's order)",
                path=path,
                line=line,
                record_id=prediction.id,
            )
        unknown = [idx for idx in prediction.predicted_support_idxs if idx not in gold.paragraph_idxs]
        if unknown:
            raise DataFormatError(
                f"idx {unknown} are not idx of this question's paragraphs",
                path=path,
                line=line,
                record_id=prediction.id,
                field="predicted_support_idxs",
            )
    return [prediction for _, prediction in predictions]


def write_predictions(path: str | Path, predictions: Iterable[Prediction | ProbePrediction]) -> None:
    """Write official MuSiQue (or DiRe probe) predictions as jsonl, atomically (never a half-written file)."""
    write_jsonl(path, predictions)


def _paragraph_level_sp(example: Example, support_idxs: Iterable[int]) -> list[list]:
    by_idx = {paragraph.idx: paragraph for paragraph in example.paragraphs}
    facts = []
    for idx in sorted(set(support_idxs)):
        paragraph = by_idx[idx]
        facts.extend([paragraph.title, sentence] for sentence in range(max(len(paragraph.sentences), 1)))
    return facts


def write_hotpotqa_predictions(
    path: str | Path, examples: Sequence[Example], predictions: Sequence[Prediction], include_evidence: bool = False
) -> None:
    """HotpotQA's own prediction file (`{"answer": {id: ...}, "sp": {id: [[title, sent], ...]}}`), atomically.

    Support is paragraph level: every sentence of each predicted paragraph is listed. With `include_evidence`
    (2WikiMultihopQA's evaluator expects the key) an empty `"evidence"` list is written per id.
    """
    if [example.id for example in examples] != [prediction.id for prediction in predictions]:
        raise ValueError("predictions must follow the examples' order, one per example")
    output: dict[str, dict] = {"answer": {}, "sp": {}}
    for example, prediction in zip(examples, predictions):
        output["answer"][example.id] = prediction.predicted_answer
        output["sp"][example.id] = _paragraph_level_sp(example, prediction.predicted_support_idxs)
    if include_evidence:
        output["evidence"] = {example.id: [] for example in examples}
    write_json(path, output, indent=None)


def write_2wiki_predictions(path: str | Path, examples: Sequence[Example], predictions: Sequence[Prediction]) -> None:
    """2WikiMultihopQA's own prediction file: HotpotQA's layout plus an (empty) `evidence` per id."""
    write_hotpotqa_predictions(path, examples, predictions, include_evidence=True)
