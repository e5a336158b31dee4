"""The error browser: the page of a MuSiQue-Full run (twins side by side) and of a Step Execution run (executed
steps, predicted decomposition), parsed and checked against the evaluator's per-question file; its escaping; its
one-line refusals."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from musique_models import PROJECT_ROOT
from musique_models.data.formats import read_examples
from musique_models.report.browse import DATA_ELEMENT_ID, main, render_page, write_page
from musique_models.runs.score import score_run
from musique_models.runs.train import train
from tests.conftest import ONE_THREAD, SAMPLES

QUESTIONS = 5
COMMON = [
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=6",
    f"eval_size={QUESTIONS}",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
]
RUNS = {
    "musique_full": ["model=select_answer", "dataset=musique_full"],
    "step_execution": [
        "model=step_execution",
        "dataset=musique_ans",
        "backbone@model.decomposer.backbone=tiny_bart",
        "model.decomposer.num_beams=1",
        "model.decomposer.max_target_tokens=24",
    ],
}
SAMPLE_DEV = {
    "musique_full": SAMPLES / "musique_full" / "dev_derived.jsonl",
    "step_execution": SAMPLES / "musique_ans" / "dev.jsonl",
}
DATASET = {"musique_full": "musique_full", "step_execution": "musique_ans"}


def compose_cfg(config: str, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config, overrides=overrides)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both tiny runs, trained once, each also scored by `evaluate.py run=` (the per-question file)."""
    root = tmp_path_factory.mktemp("browse")
    folders = {}
    for name, overrides in RUNS.items():
        run = root / name
        train(compose_cfg("train", [*overrides, *COMMON, f"paths.cache_dir={root}/cache", f"paths.output_dir={run}"]))
        score_run(compose_cfg("evaluate", [f"run={run}"]))
        folders[name] = run
    return folders


class Page(HTMLParser):
    """Every start tag with its attributes, and the text of every script element (with its type)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._script: dict[str, str | None] | None = None
        self._text: list[str] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._script, self._text = dict(attrs), []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._text)))
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._text.append(data)

    @property
    def data(self) -> dict:
        embedded = [text for attrs, text in self.scripts if attrs.get("id") == DATA_ELEMENT_ID]
        assert len(embedded) == 1
        assert dict(next(a for a, _ in self.scripts if a.get("id") == DATA_ELEMENT_ID))["type"] == "application/json"
        return json.loads(embedded[0])

    @property
    def code(self) -> str:
        return "\n".join(text for attrs, text in self.scripts if attrs.get("type") is None)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def check_page(name: str, run: Path, html: str) -> dict:
    """The page holds every row the evaluator scored, with its scores, its question and its paragraphs."""
    page = Page(html)
    data = page.data
    per_question = read_jsonl(run / "evaluations" / f"{DATASET[name]}-dev" / "metrics.per_question.jsonl")
    assert len(data["rows"]) == len(per_question) >= QUESTIONS
    for shown, scored in zip(data["rows"], per_question, strict=True):
        assert {key: shown[key] for key in scored} == scored  # id, answers, F1, supports, answerability, hops
    predictions = read_jsonl(run / "predictions.jsonl")
    assert [(r["id"], r["predicted_answer"]) for r in data["rows"]] == [
        (p["id"], p["predicted_answer"]) for p in predictions
    ]
    examples = {(e.id, e.answerable): e for e in read_examples(SAMPLE_DEV[name], "musique", DATASET[name])}
    texts = data["texts"]
    for row in data["rows"]:
        example = examples[(row["id"], row["answerable"])]
        assert row["question"] == example.question
        assert [(idx, texts[title], texts[text]) for idx, title, text in row["paragraphs"]] == [
            (p.idx, p.title, p.text) for p in example.paragraphs
        ]
        assert [step["paragraph_support_idx"] for step in row["decomposition"]] == [
            step.paragraph_support_idx for step in example.decomposition
        ]
    assert data["metrics"] == json.loads((run / "metrics.json").read_text())
    # nothing external: no URL in any src or href, no stylesheet or script file
    for tag, attrs in page.tags:
        assert not any("http" in (attrs.get(key) or "") for key in ("src", "href")), (tag, attrs)
        assert tag != "link" and not (tag == "script" and "src" in attrs)
    # the filters and the pager are there, and only the current page becomes DOM (no question in the markup)
    for piece in ("rowMatches", "applyFilters", "correctness", "sf-min", "sf-max", "pager", "goTo", "slice("):
        assert piece in page.code
    markup = html.split(f'id="{DATA_ELEMENT_ID}"')[0]
    assert not any(row["question"] in markup for row in data["rows"])
    return data


@pytest.mark.slow
def test_musique_full_page_shows_every_row_and_groups_the_twins(runs: dict[str, Path], capsys) -> None:
    run = runs["musique_full"]
    main([str(run)])
    assert "errors.html" in capsys.readouterr().out
    data = check_page("musique_full", run, (run / "errors.html").read_text())
    # every id once, its two rows (answerable and not) side by side, in the file's order
    assert [i for group in data["groups"] for i in group] == list(range(len(data["rows"])))
    assert len(data["groups"]) == QUESTIONS
    for group in data["groups"]:
        rows = [data["rows"][i] for i in group]
        assert len({row["id"] for row in rows}) == 1
        assert sorted(row["answerable"] for row in rows) == [False, True]
        assert all(isinstance(row["predicted_answerable"], bool) for row in rows)
    assert all(not row["steps"] and row["predicted_decomposition"] is None for row in data["rows"])
    # the selector's top K that the answerer read, per row (twins each their own), as the run's ranking file has it
    ranking = json.loads((run / "selector_ranking.json").read_text())
    assert [(row["id"], row["selection"]) for row in data["rows"]] == [
        (entry["id"], {"top_k": ranking["top_k"], "ranking": entry["ranking"]}) for entry in ranking["rankings"]
    ]
    assert "selectedTopK" in Page((run / "errors.html").read_text()).code


def test_step_execution_page_shows_the_executed_steps_and_the_predicted_decomposition(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    run = runs["step_execution"]
    out = write_page(run, tmp_path / "page.html", split_metrics=run / "evaluations" / "musique_ans-dev")
    data = check_page("step_execution", run, out.read_text())
    steps = read_jsonl(run / "steps.jsonl")
    assert steps
    for index, row in enumerate(data["rows"]):
        expected = [
            {key: value for key, value in step.items() if key not in ("row", "id")}
            for step in steps
            if step["row"] == index
        ]
        assert row["steps"] == expected and [s["step"] for s in expected] == list(range(1, len(expected) + 1))
    decompositions = {d["id"]: d for d in read_jsonl(run / "decompositions.jsonl")}
    for row in data["rows"]:
        assert row["predicted_decomposition"]["predicted_text"] == decompositions[row["id"]]["predicted_text"]
        assert row["predicted_decomposition"]["steps"] == decompositions[row["id"]]["steps"]
    assert data["metrics_file"].endswith("evaluations/musique_ans-dev/metrics.json")


def test_paragraph_text_cannot_break_the_page() -> None:
    hostile = "</script><script>alert(1)</script><b>bold</b> & \"quotes\" 'single' <!-- --> \u2028"
    row = {
        "row": 0,
        "id": "2hop__1_2",
        "num_hops": 2,
        "answerable": True,
        "predicted_answerable": True,
        "predicted_answer": "</script><b>x</b>",
        "gold_answers": ["<i>a</i> & b"],
        "answer_f1": 0.5,
        "answer_em": 0.0,
        "predicted_support_idxs": [0],
        "gold_support_idxs": [0],
        "support_f1": 1.0,
        "support_em": 1.0,
        "question": hostile,
        "predicted_answer_confidence": None,
        "paragraphs": [[0, 0, 1]],
        "decomposition": [],
        "steps": [],
        "predicted_decomposition": None,
    }
    data = {
        "run": "</title><b>",
        "model": "</title><b>model",
        "dataset": "d&d",
        "split": "dev",
        "metrics_file": None,
        "metrics": {},
        "texts": ["<b>Title</b>", hostile],
        "groups": [[0]],
        "rows": [row],
    }
    html = render_page(data)
    page = Page(html)
    assert page.data == data  # the embedded JSON reads back exactly
    assert [tag for tag, _ in page.tags].count("script") == 2  # the data and the code, nothing injected
    assert "b" not in [tag for tag, _ in page.tags] and "i" not in [tag for tag, _ in page.tags]
    assert "</script><b>" not in html.split("<body>")[1].rsplit("<script>", 1)[0].replace("\\u003c", "")
    assert "<title>Errors: &lt;/title&gt;&lt;b&gt;model on d&amp;d dev</title>" in html


def test_folders_that_hold_no_run_are_refused_in_one_line(tmp_path: Path, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "nothing-here")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: {tmp_path / 'nothing-here'}: not a train.py run folder (no config.yaml)"
    ]
    (tmp_path / "config.yaml").write_text("seed: 1\n")
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path)])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no predictions.jsonl" in err[0]
