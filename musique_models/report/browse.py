"""`python -m musique_models.report.browse RUN_DIR [--out FILE] [--split-metrics PATH]`: one self-contained static
page (`RUN_DIR/errors.html`) to page through a run's evaluation split, question by question.

Per question: the question, the gold answers against the predicted answer with its answer F1, every paragraph
(title and text) with gold and predicted support marked, the gold decomposition (step, answer, supporting
paragraph), and for Step Execution runs the executed steps (`steps.jsonl`) and the predicted decomposition
(`decompositions.jsonl`), every side file a predictor declared (`side_files.json`: a generative reader's raw
generations, `generations.jsonl`), field by field under its title, for Select+Answer and 1-Para the paragraphs the selector put in the top K that the answerer read, with every paragraph's rank, and for Beam
Retrieval each retrieved chain with its score per hop (`selector_ranking.json`). MuSiQue-Full twins (same id, answerable and not) are shown side by side with gold and
predicted answerability. Filters: hops, answer correctness (F1 = 1 / partial / 0), support F1 range,
answerability, text; a pager.

The page needs no server and no network (inline CSS and JS). The data is embedded once as JSON (paragraph titles
and texts stored once each, however many questions share them) and only the current page's questions are turned
into DOM, so a 2,417-question split stays fast. Every per-question score comes from the evaluator
(`evaluate_predictions`): nothing is scored here.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import deque
from importlib import resources
from pathlib import Path
from typing import Any

import datasets
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models.data.schema import Example
from musique_models.errors import DataFormatError, MusiqueModelsError, user_errors_exit
from musique_models.evaluation.evaluator import evaluate_predictions, is_count_metric
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import align_predictions, read_predictions
from musique_models.io import atomic_open
from musique_models.run_files import (
    CONFIG_FILE,
    DECOMPOSITIONS_FILE,
    METRICS_FILE,
    PAGE_FILE,
    PREDICTIONS_FILE,
    RANKING_FILE,
    SIDE_FILES,
    STEPS_FILE,
    declared_side_files,
)

DATA_ELEMENT_ID = "browse-data"


class BrowseError(MusiqueModelsError):
    """A folder the error browser cannot show: not a run folder, or a run that predicted nothing."""


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                rows.append((line_number, json.loads(line)))
            except json.JSONDecodeError as error:
                raise DataFormatError(f"malformed JSON: {error}", path=path, line=line_number) from None
    return rows


def _rows_of_predictions(table: datasets.Dataset, predicted_ids: list[str], where: str, path: Path) -> list[int]:
    """The table rows the predictions are for, in the predictions' order: each predicted id takes the next row
    of the table with that id (MuSiQue-Full twins: both rows, in the table's order)."""
    positions: dict[str, deque[int]] = {}
    for index, question_id in enumerate(table["id"]):
        positions.setdefault(question_id, deque()).append(index)
    rows = []
    for line, question_id in enumerate(predicted_ids, start=1):
        free = positions.get(question_id)
        if not free:
            problem = "is not an id of" if question_id not in positions else "has more rows than in"
            raise DataFormatError(f"predicted id {problem} {where}", path=path, line=line, record_id=question_id)
        rows.append(free.popleft())
    return rows


def _metrics(path: Path | None) -> dict[str, float]:
    if path is None or not path.exists():
        return {}
    try:
        metrics = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise DataFormatError(f"malformed JSON: {error}", path=path) from None
    if not isinstance(metrics, dict):
        raise DataFormatError("expected a JSON object of metrics", path=path)
    return {key: value for key, value in metrics.items() if isinstance(value, int | float)}


def build_page_data(run_dir: str | Path, split_metrics: str | Path | None = None) -> dict[str, Any]:
    """Everything the page shows, as one JSON-ready dict: `rows` (the evaluator's per-question rows plus the
    question, paragraphs, decompositions and executed steps), `groups` (row indices sharing an id), `texts`
    (every distinct paragraph title and text, referred to by position) and the run's description and metrics."""
    run_dir = Path(run_dir)
    config_file, predictions_file = run_dir / CONFIG_FILE, run_dir / PREDICTIONS_FILE
    if not run_dir.is_dir() or not config_file.exists():
        raise BrowseError(f"{run_dir}: not a train.py run folder (no {CONFIG_FILE})")
    if not predictions_file.exists():
        raise BrowseError(f"{run_dir}: no {PREDICTIONS_FILE} (the run predicted no answers: nothing to browse)")
    metrics_file = Path(split_metrics) if split_metrics else run_dir / METRICS_FILE
    if split_metrics and metrics_file.is_dir():
        metrics_file = metrics_file / METRICS_FILE
    if split_metrics and not metrics_file.exists():
        raise BrowseError(f"--split-metrics {split_metrics}: no such metrics file")

    cfg = OmegaConf.load(config_file)
    source = instantiate(cfg.dataset)
    split = cfg.eval_split
    predictions = read_predictions(predictions_file)
    table = source.load(split)
    where = f"{source.name} {split} (the run's evaluation split)"
    selected = table.select(_rows_of_predictions(table, [p.id for _, p in predictions], where, predictions_file))
    examples = [Example.from_dict(row) for row in selected]
    golds = [gold_from_example(example, index) for index, example in enumerate(examples)]
    report = evaluate_predictions(golds, align_predictions(golds, predictions, predictions_file))

    steps: dict[int, list[dict[str, Any]]] = {}
    if (run_dir / STEPS_FILE).exists():
        for line, step in _read_jsonl(run_dir / STEPS_FILE):
            row = _predicted_row(step, examples, "step", run_dir / STEPS_FILE, line)
            steps.setdefault(row, []).append({key: value for key, value in step.items() if key not in ("row", "id")})
    decompositions = {}
    if (run_dir / DECOMPOSITIONS_FILE).exists():
        decompositions = {
            record["id"]: {key: value for key, value in record.items() if key not in ("id", "question")}
            for _, record in _read_jsonl(run_dir / DECOMPOSITIONS_FILE)
        }

    side: dict[int, list[dict[str, Any]]] = {}  # the predictor's declared side files, by row: shown field by field
    for entry in declared_side_files(run_dir):
        path = run_dir / entry["file"]
        if not path.exists():
            raise BrowseError(f"{path}: declared in {SIDE_FILES} but missing")
        by_row: dict[int, list[dict[str, Any]]] = {}
        for line, record in _read_jsonl(path):
            row = _predicted_row(record, examples, entry["title"], path, line)
            by_row.setdefault(row, []).append({k: v for k, v in record.items() if k not in ("row", "id")})
        for row, records in by_row.items():
            side.setdefault(row, []).append({"title": entry["title"], "records": records})

    chains: dict[int, dict[str, Any]] = {}
    selections: dict[int, dict[str, Any]] = {}
    ranking_file = run_dir / RANKING_FILE
    if ranking_file.exists():
        ranking_record = json.loads(ranking_file.read_text(encoding="utf-8"))
        for entry in ranking_record.get("chains", []):  # Beam Retrieval's chains (a paper selector's file has none)
            row = _predicted_row(entry, examples, "chain", ranking_file)
            chains[row] = {"chain": entry.get("chain", []), "hop_scores": entry.get("hop_scores", [])}
        top_k = ranking_record.get("top_k")
        if top_k and not chains:  # a paper selector's ranking (by row, table order): its top K is what was read
            rankings = ranking_record.get("rankings", [])
            for row, entry in enumerate(rankings):
                _predicted_row({**entry, "row": row}, examples, "ranking", ranking_file)
                selections[row] = {"top_k": top_k, "ranking": entry.get("ranking", [])}

    texts: dict[str, int] = {}
    rows = []
    groups: dict[str, list[int]] = {}
    for index, (example, scores, prediction) in enumerate(zip(examples, report.per_question, predictions)):
        rows.append(
            {
                **scores,
                "question": example.question,
                "predicted_answer_confidence": prediction[1].predicted_answer_confidence,
                # [idx, title, text] with title and text as positions in `texts`
                "paragraphs": [
                    [p.idx, texts.setdefault(p.title, len(texts)), texts.setdefault(p.text, len(texts))]
                    for p in example.paragraphs
                ],
                "decomposition": [
                    {"question": s.question, "answer": s.answer, "paragraph_support_idx": s.paragraph_support_idx}
                    for s in example.decomposition
                ],
                "steps": steps.get(index, []),
                "predicted_decomposition": decompositions.get(example.id),
                "side_files": side.get(index, []),
                "chain": chains.get(index),
                "selection": selections.get(index),
            }
        )
        groups.setdefault(example.id, []).append(index)
    return {
        "run": str(run_dir),
        "model": cfg.get("model_name") or "",
        "dataset": source.display_name if getattr(source, "display_name", None) else source.name,
        "split": split,
        "metrics_file": str(metrics_file) if metrics_file.exists() else None,
        "metrics": _metrics(metrics_file),
        "count_metrics": [name for name, value in _metrics(metrics_file).items() if is_count_metric(name, value)],
        "texts": list(texts),
        "groups": list(groups.values()),
        "rows": rows,
    }


def _predicted_row(
    record: dict[str, Any], examples: list[Example], what: str, path: Path, line: int | None = None
) -> int:
    """The predicted row a side-file record names (`row`, checked against its `id`); a clear error otherwise."""
    row = record.get("row")
    if not isinstance(row, int) or not 0 <= row < len(examples) or examples[row].id != record.get("id"):
        raise DataFormatError(
            f"{what} of no predicted row (row and id must match predictions.jsonl)",
            path=path,
            line=line,
            record_id=record.get("id"),
        )
    return row


def embedded_json(data: Any) -> str:
    """`data` as JSON that is safe inside a `<script>` element: no `<` at all (escaped as `\\u003c`, which
    JSON.parse reads back), so no `</script>` or `<!--` in any text can end or confuse the element."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def page_asset(name: str) -> str:
    """One of the page's files, `musique_models/report/browser/<name>` (`page.html`: the body's markup; `page.css`;
    `page.js`: the script that renders the embedded data), read as package data."""
    return (resources.files("musique_models.report") / "browser" / name).read_text(encoding="utf-8")


def render_page(data: dict[str, Any]) -> str:
    """The whole page: the CSS inline, the body's markup, the embedded data and the script that renders it (one
    self-contained file)."""
    title = f"Errors: {data.get('model') or 'run'} on {data.get('dataset', '')} {data.get('split', '')}"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_escape(title)}</title>\n<style>\n{page_asset('page.css')}</style>\n</head>\n<body>\n"
        f"{page_asset('page.html')}"
        f'<script type="application/json" id="{DATA_ELEMENT_ID}">{embedded_json(data)}</script>\n'
        f"<script>\n{page_asset('page.js')}</script>\n</body>\n</html>\n"
    )


def write_page(run_dir: str | Path, out: str | Path | None = None, split_metrics: str | Path | None = None) -> Path:
    """Build the page of the run in `run_dir` and write it atomically to `out` (default `RUN_DIR/errors.html`)."""
    page = render_page(build_page_data(run_dir, split_metrics))
    path = Path(out) if out else Path(run_dir) / PAGE_FILE
    with atomic_open(path) as handle:
        handle.write(page)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m musique_models.report.browse",
        description="Write one self-contained static page to page through a run's evaluation split.",
    )
    parser.add_argument("run_dir", metavar="RUN_DIR", help="a train.py run folder (config.yaml, predictions.jsonl)")
    parser.add_argument("--out", metavar="FILE", help=f"the page to write (default RUN_DIR/{PAGE_FILE})")
    parser.add_argument(
        "--split-metrics",
        metavar="PATH",
        help=f"the metrics shown in the page's header: a metrics.json or a folder holding one "
        f"(default RUN_DIR/{METRICS_FILE})",
    )
    args = parser.parse_args(argv)
    with user_errors_exit():
        start = time.perf_counter()
        path = write_page(args.run_dir, args.out, args.split_metrics)
        size = path.stat().st_size / 2**20
        print(f"wrote {path} ({size:.1f} MiB) in {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
