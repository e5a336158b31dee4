"""`python -m musique_models.report.browse RUN_DIR [--out FILE] [--split-metrics PATH]`: one self-contained static
page (`RUN_DIR/errors.html`) to page through a run's evaluation split, question by question.

Per question: the question, the gold answers against the predicted answer with its answer F1, every paragraph
(title and text) with gold and predicted support marked, the gold decomposition (step, answer, supporting
paragraph), and for Step Execution runs the executed steps (`steps.jsonl`) and the predicted decomposition
(`decompositions.jsonl`), for generative readers each raw generation (`generations.jsonl`), for Select+Answer and
1-Para the paragraphs the selector put in the top K that the answerer read, with every paragraph's rank, and for Beam
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
from pathlib import Path
from typing import Any

import datasets
from hydra.utils import instantiate
from omegaconf import OmegaConf

from musique_models.data.schema import Example
from musique_models.errors import DataFormatError, MusiqueModelsError, user_errors_exit
from musique_models.evaluation.evaluator import COUNT_METRICS, evaluate_predictions
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import align_predictions, read_predictions
from musique_models.io import atomic_open
from musique_models.run_files import (
    CONFIG_FILE,
    DECOMPOSITIONS_FILE,
    GENERATIONS_FILE,
    METRICS_FILE,
    PAGE_FILE,
    PREDICTIONS_FILE,
    RANKING_FILE,
    STEPS_FILE,
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

    generations: dict[int, dict[str, Any]] = {}
    if (run_dir / GENERATIONS_FILE).exists():  # a generative reader's raw generations, by row
        for line, record in _read_jsonl(run_dir / GENERATIONS_FILE):
            row = _predicted_row(record, examples, "generation", run_dir / GENERATIONS_FILE, line)
            generations[row] = {"text": record.get("generation", ""), "problems": record.get("problems", [])}

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
                "generation": generations.get(index),
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
        "count_metrics": list(COUNT_METRICS),
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


def render_page(data: dict[str, Any]) -> str:
    """The whole page: inline CSS, the embedded data and the inline script that renders it."""
    title = f"Errors: {data.get('model') or 'run'} on {data.get('dataset', '')} {data.get('split', '')}"
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
        f"{_BODY}\n"
        f'<script type="application/json" id="{DATA_ELEMENT_ID}">{embedded_json(data)}</script>\n'
        f"<script>{_JS}</script>\n</body>\n</html>\n"
    )


def write_page(run_dir: str | Path, out: str | Path | None = None, split_metrics: str | Path | None = None) -> Path:
    """Build the page of the run in `run_dir` and write it atomically to `out` (default `RUN_DIR/errors.html`)."""
    page = render_page(build_page_data(run_dir, split_metrics))
    path = Path(out) if out else Path(run_dir) / PAGE_FILE
    with atomic_open(path) as handle:
        handle.write(page)
    return path


_BODY = """<header id="top">
  <h1 id="title"></h1>
  <div id="run"></div>
  <table id="metrics"></table>
</header>
<form id="filters" onsubmit="return false">
  <fieldset><legend>hops</legend><span id="hops"></span></fieldset>
  <fieldset><legend>answer</legend>
    <select id="correctness">
      <option value="all">all</option><option value="correct">correct (F1 = 1)</option>
      <option value="partial">partial (0 &lt; F1 &lt; 1)</option><option value="wrong">wrong (F1 = 0)</option>
    </select></fieldset>
  <fieldset><legend>support F1</legend>
    <input id="sf-min" type="number" min="0" max="1" step="0.05" value="0"> to
    <input id="sf-max" type="number" min="0" max="1" step="0.05" value="1"></fieldset>
  <fieldset id="answerability-box"><legend>answerability</legend>
    <select id="answerability">
      <option value="all">all rows</option><option value="answerable">answerable rows</option>
      <option value="unanswerable">unanswerable rows</option>
      <option value="mispredicted">answerability mispredicted</option>
    </select></fieldset>
  <fieldset><legend>search</legend><input id="search" type="search" placeholder="id, question, answer"></fieldset>
  <fieldset><legend>paragraphs</legend><label><input id="expand" type="checkbox"> expand all</label></fieldset>
  <button id="reset" type="button">reset</button>
</form>
<nav class="pager" id="pager-top"></nav>
<main id="questions"></main>
<nav class="pager" id="pager-bottom"></nav>"""

_CSS = """
:root { --gold: #1a7f37; --pred: #0550ae; --bad: #cf222e; --part: #9a6700; --line: #d0d7de; --soft: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; padding: 0 16px 24px;
  color: #1f2328; background: #fff; }
h1 { font-size: 20px; margin: 12px 0 2px; }
#run { color: #59636e; font-size: 12px; word-break: break-all; }
#metrics { border-collapse: collapse; margin: 6px 0; font-size: 12px; }
#metrics td, #metrics th { border: 1px solid var(--line); padding: 1px 6px; text-align: right; }
#metrics th:first-child, #metrics td:first-child { text-align: left; }
#filters { position: sticky; top: 0; z-index: 2; background: #fff; display: flex; flex-wrap: wrap; gap: 6px;
  align-items: flex-end; padding: 6px 0; border-bottom: 1px solid var(--line); }
fieldset { border: 1px solid var(--line); border-radius: 6px; padding: 2px 8px 4px; margin: 0; }
legend { font-size: 11px; color: #59636e; padding: 0 3px; }
input[type=number] { width: 4.5em; }
.pager { display: flex; gap: 6px; align-items: center; margin: 8px 0; flex-wrap: wrap; }
.pager input { width: 4em; }
.q { border: 1px solid var(--line); border-radius: 8px; margin: 10px 0; padding: 8px 12px; }
.q > header { display: flex; gap: 6px; align-items: center; flex-wrap: wrap; font-size: 12px; color: #59636e; }
.qid { font-family: ui-monospace, monospace; color: #1f2328; }
.question { font-size: 16px; font-weight: 600; margin: 4px 0 8px; }
.badge { display: inline-block; border-radius: 10px; padding: 0 7px; font-size: 12px; border: 1px solid var(--line);
  background: var(--soft); color: #1f2328; white-space: nowrap; }
.ok { background: #dafbe1; border-color: #aceebb; }
.partial { background: #fff8c5; border-color: #eed888; }
.wrong { background: #ffebe9; border-color: #ffcecb; }
.twins { display: grid; gap: 12px; grid-template-columns: repeat(var(--cols, 1), minmax(0, 1fr)); }
.panel { min-width: 0; }
.panel > h4 { margin: 2px 0 6px; font-size: 13px; }
.answers { display: grid; grid-template-columns: max-content 1fr; gap: 2px 10px; margin-bottom: 6px; }
.answers dt { color: #59636e; }
.answers dd { margin: 0; }
.gold-answer { color: var(--gold); font-weight: 600; }
.pred-answer { color: var(--pred); font-weight: 600; }
table.steps { border-collapse: collapse; width: 100%; margin: 4px 0 8px; font-size: 13px; }
table.steps th, table.steps td { border: 1px solid var(--line); padding: 2px 5px; vertical-align: top; text-align: left; }
table.steps th { background: var(--soft); font-weight: 600; }
h5 { margin: 8px 0 2px; font-size: 12px; text-transform: uppercase; letter-spacing: .04em; color: #59636e; }
details.para { border-left: 4px solid var(--line); padding: 1px 8px; margin: 3px 0; background: #fff; }
details.para.gold { border-left-color: var(--gold); background: #f3fbf5; }
details.para.pred { border-left-color: var(--pred); }
details.para.gold.pred { border-left-style: double; border-left-width: 6px; }
details.para summary { cursor: pointer; }
.ptitle { font-weight: 600; }
.tag { font-size: 11px; border-radius: 4px; padding: 0 4px; margin-left: 4px; color: #fff; font-weight: 600; }
.tag.gold { background: var(--gold); }
.tag.pred { background: var(--pred); }
.tag.sel { background: #6b5b95; }
.tag.miss { background: var(--bad); }
.ptext { margin: 2px 0 4px; white-space: pre-wrap; }
.muted { color: #59636e; }
.empty { color: #59636e; font-style: italic; margin: 20px 0; }
.problems { color: var(--bad); }
"""

_JS = r"""
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("browse-data").textContent);
  var T = DATA.texts, ROWS = DATA.rows, GROUPS = DATA.groups;
  var $ = function (id) { return document.getElementById(id); };
  var hopValues = Array.from(new Set(ROWS.map(function (r) { return r.num_hops; }))).sort(function (a, b) { return a - b; });
  var hasUnanswerable = ROWS.some(function (r) { return !r.answerable; });
  var state = { page: 0, size: 10 };
  var matched = [];

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function add(parent) {
    for (var i = 1; i < arguments.length; i++) if (arguments[i]) parent.appendChild(arguments[i]);
    return parent;
  }
  function num(x, digits) { return x === null || x === undefined ? "\u2013" : Number(x).toFixed(digits === undefined ? 2 : digits); }
  function correctness(f1) { return f1 >= 1 ? "correct" : f1 <= 0 ? "wrong" : "partial"; }
  function scoreClass(f1) { return f1 >= 1 ? "ok" : f1 <= 0 ? "wrong" : "partial"; }
  function badge(text, cls) { return el("span", "badge" + (cls ? " " + cls : ""), text); }

  // ---- filters -------------------------------------------------------------------------------------------
  function readFilters() {
    var hops = new Set();
    document.querySelectorAll("#hops input").forEach(function (box) { if (box.checked) hops.add(Number(box.value)); });
    return {
      hops: hops,
      correctness: $("correctness").value,
      sfMin: $("sf-min").value === "" ? 0 : Number($("sf-min").value),
      sfMax: $("sf-max").value === "" ? 1 : Number($("sf-max").value),
      answerability: $("answerability").value,
      search: $("search").value.trim().toLowerCase()
    };
  }
  function rowMatches(r, f) {
    if (!f.hops.has(r.num_hops)) return false;
    if (f.correctness !== "all" && correctness(r.answer_f1) !== f.correctness) return false;
    if (r.support_f1 < f.sfMin - 1e-9 || r.support_f1 > f.sfMax + 1e-9) return false;
    if (f.answerability === "answerable" && !r.answerable) return false;
    if (f.answerability === "unanswerable" && r.answerable) return false;
    if (f.answerability === "mispredicted" && r.answerable === r.predicted_answerable) return false;
    if (f.search) {
      var hay = [r.id, r.question, r.predicted_answer].concat(r.gold_answers).join("\n").toLowerCase();
      if (hay.indexOf(f.search) < 0) return false;
    }
    return true;
  }
  function applyFilters(keepPage) {
    var f = readFilters();
    matched = [];
    for (var g = 0; g < GROUPS.length; g++) {
      if (GROUPS[g].some(function (row) { return rowMatches(ROWS[row], f); })) matched.push(g);
    }
    if (!keepPage) state.page = 0;
    render();
  }

  // ---- the view in the address (#answer=partial&hops=3,4&page=2): shareable, kept on reload ------------------
  function saveHash() {
    var f = readFilters(), params = new URLSearchParams();
    if (f.hops.size !== hopValues.length) params.set("hops", Array.from(f.hops).join(","));
    if (f.correctness !== "all") params.set("answer", f.correctness);
    if (f.sfMin !== 0 || f.sfMax !== 1) params.set("support", f.sfMin + "-" + f.sfMax);
    if (f.answerability !== "all") params.set("answerability", f.answerability);
    if (f.search) params.set("q", f.search);
    if ($("expand").checked) params.set("expand", "1");
    if (state.size !== 10) params.set("size", state.size);
    if (state.page) params.set("page", state.page + 1);
    try { history.replaceState(null, "", "#" + params.toString()); } catch (e) { /* some file:// views refuse */ }
  }
  function loadHash() {
    var params = new URLSearchParams(location.hash.replace(/^#/, ""));
    if (params.has("hops")) {
      var hops = params.get("hops").split(",");
      document.querySelectorAll("#hops input").forEach(function (box) { box.checked = hops.indexOf(box.value) >= 0; });
    }
    if (params.has("answer")) $("correctness").value = params.get("answer");
    if (params.has("support")) {
      var range = params.get("support").split("-");
      $("sf-min").value = range[0]; $("sf-max").value = range[1] === undefined ? 1 : range[1];
    }
    if (params.has("answerability")) $("answerability").value = params.get("answerability");
    if (params.has("q")) $("search").value = params.get("q");
    $("expand").checked = params.get("expand") === "1";
    if (params.has("size")) state.size = Math.max(1, Number(params.get("size")) || 10);
    return params.has("page") ? Math.max(0, Number(params.get("page")) - 1 || 0) : 0;
  }

  // ---- pager ---------------------------------------------------------------------------------------------
  function pages() { return Math.max(1, Math.ceil(matched.length / state.size)); }
  function goTo(page) {
    state.page = Math.min(Math.max(0, page), pages() - 1);
    render();
    window.scrollTo(0, 0);
  }
  function pager(nav) {
    nav.replaceChildren();
    var first = el("button", null, "\u00ab first"), prev = el("button", null, "\u2039 prev");
    var next = el("button", null, "next \u203a"), last = el("button", null, "last \u00bb");
    first.type = prev.type = next.type = last.type = "button";
    first.onclick = function () { goTo(0); };
    prev.onclick = function () { goTo(state.page - 1); };
    next.onclick = function () { goTo(state.page + 1); };
    last.onclick = function () { goTo(pages() - 1); };
    first.disabled = prev.disabled = state.page === 0;
    next.disabled = last.disabled = state.page >= pages() - 1;
    var input = el("input");
    input.type = "number"; input.min = 1; input.max = pages(); input.value = state.page + 1;
    input.onchange = function () { goTo(Number(input.value) - 1); };
    var size = el("select");
    Array.from(new Set([5, 10, 25, 50, 100, state.size])).sort(function (a, b) { return a - b; }).forEach(function (n) {
      var option = el("option", null, n + " per page"); option.value = n; option.selected = n === state.size; add(size, option);
    });
    size.onchange = function () { state.size = Number(size.value); goTo(0); };
    var start = matched.length ? state.page * state.size + 1 : 0;
    var end = Math.min(matched.length, (state.page + 1) * state.size);
    var info = el("span", "muted", "questions " + start + "\u2013" + end + " of " + matched.length + " matching (" +
      GROUPS.length + " questions, " + ROWS.length + " rows)");
    add(nav, first, prev, el("span", null, "page"), input, el("span", null, "of " + pages()), next, last, size, info);
  }

  // ---- one question --------------------------------------------------------------------------------------
  function paragraphIndex(r) {
    var byIdx = {};
    r.paragraphs.forEach(function (p) { byIdx[p[0]] = p; });
    return byIdx;
  }
  function paragraphLabel(byIdx, idx) {
    if (idx === null || idx === undefined) return "\u2013";
    var p = byIdx[idx];
    return "P" + idx + (p ? ": " + T[p[1]] : "");
  }
  function table(headers, rows) {
    var t = el("table", "steps"), head = el("tr");
    headers.forEach(function (h) { add(head, el("th", null, h)); });
    add(t, head);
    rows.forEach(function (cells) {
      var tr = el("tr");
      cells.forEach(function (c) { add(tr, c instanceof Node ? add(el("td"), c) : el("td", null, c)); });
      add(t, tr);
    });
    return t;
  }
  function answerBlock(r) {
    var dl = el("dl", "answers");
    var golds = el("dd");
    r.gold_answers.forEach(function (a, i) {
      if (i) add(golds, el("span", "muted", " | "));
      add(golds, el("span", i ? "" : "gold-answer", a));
    });
    var pred = add(el("dd"), el("span", "pred-answer", r.predicted_answer === "" ? "(empty)" : r.predicted_answer));
    if (r.predicted_answer_confidence !== null && r.predicted_answer_confidence !== undefined)
      add(pred, el("span", "muted", "  confidence " + num(r.predicted_answer_confidence, 3)));
    var scores = add(el("dd"),
      badge("answer F1 " + num(r.answer_f1), scoreClass(r.answer_f1)), document.createTextNode(" "),
      badge("EM " + num(r.answer_em, 0)), document.createTextNode(" "),
      badge("support F1 " + num(r.support_f1), scoreClass(r.support_f1)), document.createTextNode(" "),
      badge("support EM " + num(r.support_em, 0)));
    var support = el("dd", null, "gold [" + r.gold_support_idxs.join(", ") + "]  predicted [" +
      r.predicted_support_idxs.join(", ") + "]");
    add(dl, el("dt", null, "gold"), golds, el("dt", null, "predicted"), pred, el("dt", null, "scores"), scores,
      el("dt", null, "support"), support);
    return dl;
  }
  function goldDecomposition(r, byIdx) {
    if (!r.decomposition.length) return null;
    return table(["#", "gold sub-question", "answer", "supporting paragraph"], r.decomposition.map(function (s, i) {
      return [String(i + 1), s.question, s.answer, paragraphLabel(byIdx, s.paragraph_support_idx)];
    }));
  }
  function executedSteps(r, byIdx) {
    if (!r.steps.length) return null;
    var gold = new Set(r.gold_support_idxs);
    return table(["#", "template", "asked", "answer", "confidence", "paragraph", "answerable"], r.steps.map(function (s) {
      var para = el("span", null, paragraphLabel(byIdx, s.paragraph));
      var cell = add(el("span"), para, s.paragraph !== null && s.paragraph !== undefined ?
        el("span", "tag " + (gold.has(s.paragraph) ? "gold" : "miss"), gold.has(s.paragraph) ? "gold" : "not gold") : null);
      return [String(s.step), s.template, s.question, s.answer, num(s.confidence, 3), cell, s.answerable ? "yes" : "no"];
    }));
  }
  function predictedDecomposition(d) {
    if (!d) return null;
    var box = el("div");
    add(box, el("h5", null, "predicted decomposition" + (d.invalid ? " (invalid)" : "")));
    if (d.steps && d.steps.length) {
      add(box, table(["#", "predicted sub-question"], d.steps.map(function (s, i) { return [String(i + 1), s === "" ? "(empty)" : s]; })));
    }
    add(box, el("div", "muted", "generated: " + d.predicted_text));
    if (d.problems && d.problems.length) add(box, el("div", "problems", "problems: " + d.problems.join("; ")));
    return box;
  }
  function rawGeneration(g) {
    if (!g) return null;
    var box = el("div");
    add(box, el("h5", null, "generation" + (g.problems && g.problems.length ? " (not read in full)" : "")));
    add(box, el("div", "muted", g.text === "" ? "(empty)" : g.text));
    if (g.problems && g.problems.length) add(box, el("div", "problems", "problems: " + g.problems.join("; ")));
    return box;
  }
  function retrievedChain(c, byIdx) {
    if (!c) return null;
    var box = el("div");
    add(box, el("h5", null, "retrieved chain"));
    add(box, table(["hop", "paragraph", "score"], c.chain.map(function (idx, i) {
      var score = c.hop_scores[i];
      return [String(i + 1), paragraphLabel(byIdx, idx), score === null || score === undefined ? "-" : score.toFixed(3)];
    })));
    return box;
  }
  function selectedTopK(s, r, byIdx) {
    if (!s) return null;
    var read = s.ranking.slice(0, s.top_k), gold = new Set(r.gold_support_idxs);
    var found = read.filter(function (idx) { return gold.has(idx); }).length;
    var box = el("div");
    add(box, el("h5", null, "selector's top " + s.top_k + " (what the answerer read)"));
    add(box, el("div", "muted", "gold supporting paragraphs in it: " + found + " of " + gold.size));
    add(box, table(["rank", "paragraph", ""], read.map(function (idx, i) {
      return [String(i + 1), paragraphLabel(byIdx, idx), gold.has(idx) ? el("span", "tag gold", "gold") : ""];
    })));
    return box;
  }
  function paragraphs(r, expand) {
    var box = el("div"), gold = new Set(r.gold_support_idxs), pred = new Set(r.predicted_support_idxs);
    var rank = {};
    if (r.selection) r.selection.ranking.forEach(function (idx, i) { rank[idx] = i + 1; });
    r.paragraphs.forEach(function (p) {
      var isGold = gold.has(p[0]), isPred = pred.has(p[0]);
      var d = el("details", "para" + (isGold ? " gold" : "") + (isPred ? " pred" : ""));
      d.open = expand || isGold || isPred;
      var ranked = r.selection && rank[p[0]] !== undefined;
      var rankTag = !ranked ? null : rank[p[0]] <= r.selection.top_k ?
        el("span", "tag sel", "top " + r.selection.top_k + ": #" + rank[p[0]]) : el("span", "muted", " rank " + rank[p[0]]);
      var summary = add(el("summary"), el("span", "muted", "P" + p[0] + " "), el("span", "ptitle", T[p[1]]),
        isGold ? el("span", "tag gold", "gold") : null, isPred ? el("span", "tag pred", "predicted") : null, rankTag);
      add(d, summary, el("div", "ptext", T[p[2]]));
      add(box, d);
    });
    return box;
  }
  function panel(r, twin, expand) {
    var byIdx = paragraphIndex(r);
    var p = el("section", "panel");
    var head = el("h4");
    if (twin || !r.answerable || !r.predicted_answerable) {
      var right = r.answerable === r.predicted_answerable;
      add(head, badge(r.answerable ? "gold: answerable" : "gold: unanswerable"), document.createTextNode(" "),
        badge("predicted: " + (r.predicted_answerable ? "answerable" : "unanswerable"), right ? "ok" : "wrong"),
        document.createTextNode(" "));
    }
    if (twin) add(head, el("span", "muted", "row " + r.row));
    add(p, head.childNodes.length ? head : null, answerBlock(r));
    var gd = goldDecomposition(r, byIdx), ex = executedSteps(r, byIdx);
    if (gd) add(p, el("h5", null, "gold decomposition"), gd);
    add(p, predictedDecomposition(r.predicted_decomposition));
    add(p, rawGeneration(r.generation));
    add(p, retrievedChain(r.chain, byIdx));
    add(p, selectedTopK(r.selection, r, byIdx));
    if (ex) add(p, el("h5", null, "executed steps"), ex);
    add(p, el("h5", null, "paragraphs (" + r.paragraphs.length + ")"), paragraphs(r, expand));
    return p;
  }
  function card(group, expand) {
    var first = ROWS[group[0]];
    var article = el("article", "q");
    article.id = "q-" + first.id;
    add(article, add(el("header"), el("span", "qid", first.id), badge(first.num_hops + " hops"),
      group.length > 1 ? badge("twins: " + group.length + " rows") : el("span", null, "row " + first.row)));
    add(article, el("div", "question", first.question));
    var twins = el("div", "twins");
    twins.style.setProperty("--cols", String(group.length));
    group.forEach(function (row) { add(twins, panel(ROWS[row], group.length > 1, expand)); });
    add(article, twins);
    return article;
  }

  // ---- page ----------------------------------------------------------------------------------------------
  function render() {
    state.page = Math.min(state.page, pages() - 1);
    var expand = $("expand").checked;
    var main = $("questions");
    var slice = matched.slice(state.page * state.size, (state.page + 1) * state.size);
    main.replaceChildren.apply(main, slice.map(function (g) { return card(GROUPS[g], expand); }));
    if (!slice.length) add(main, el("div", "empty", "no question matches the filters"));
    pager($("pager-top"));
    pager($("pager-bottom"));
    saveHash();
  }
  function header() {
    $("title").textContent = (DATA.model || "run") + " on " + DATA.dataset + " " + DATA.split;
    $("run").textContent = DATA.run + (DATA.metrics_file ? "  \u00b7  metrics: " + DATA.metrics_file : "");
    var names = Object.keys(DATA.metrics).filter(function (k) { return !/_\dhop$/.test(k); });
    if (!names.length) return;
    var t = $("metrics"), head = el("tr");
    add(head, el("th", null, "metric"), el("th", null, "all"), el("th", null, "2hop"), el("th", null, "3hop"), el("th", null, "4hop"));
    add(t, head);
    names.forEach(function (name) {
      var tr = add(el("tr"), el("td", null, name));
      ["", "_2hop", "_3hop", "_4hop"].forEach(function (suffix) {
        var v = DATA.metrics[name + suffix];
        var isCount = /count$/.test(name) || DATA.count_metrics.indexOf(name) >= 0;
        var scale = name === "decomposition_bleu" ? 1 : 100;
        add(tr, el("td", null, v === undefined ? "" : isCount ? Number(v).toFixed(0) : (scale * v).toFixed(1)));
      });
      add(t, tr);
    });
  }
  function init() {
    header();
    hopValues.forEach(function (h) {
      var label = el("label"), box = el("input");
      box.type = "checkbox"; box.value = h; box.checked = box.defaultChecked = true;
      add(label, box, document.createTextNode(" " + h + " "));
      add($("hops"), label);
    });
    if (!hasUnanswerable) $("answerability-box").style.display = "none";
    ["correctness", "sf-min", "sf-max", "answerability", "expand"].forEach(function (id) {
      $(id).addEventListener("change", function () { applyFilters(id === "expand"); });
    });
    $("hops").addEventListener("change", function () { applyFilters(false); });
    $("search").addEventListener("input", function () { applyFilters(false); });
    $("reset").onclick = function () { $("filters").reset(); applyFilters(false); };
    document.addEventListener("keydown", function (e) {
      if (e.target && /^(INPUT|SELECT|TEXTAREA)$/.test(e.target.tagName)) return;
      if (e.key === "ArrowRight") goTo(state.page + 1);
      if (e.key === "ArrowLeft") goTo(state.page - 1);
    });
    state.page = loadHash();
    applyFilters(true);
  }
  init();
})();
"""


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
