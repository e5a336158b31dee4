"""benchmarks/overfit.py at tiny scale: it scores exactly the questions it trained on and fails a model that did not
memorise them (a benchmark that cannot fail proves nothing)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from tests.conftest import run_python


@pytest.mark.slow
def test_overfit_benchmark_fails_a_model_that_did_not_memorise(tmp_path: Path) -> None:
    result = run_python(
        [
            "benchmarks/overfit.py",
            "model=select_answer",
            "backbone=tiny",
            "model.selector.max_epochs=1",
            "model.answerer.max_epochs=1",
            f"paths.cache_dir={tmp_path}/cache",
            "--out",
            str(tmp_path),
        ]
    )
    assert result.returncode == 1, result.stderr[-3000:]  # one epoch of a random tiny model memorises nothing
    (record,) = [json.loads(path.read_text()) for path in tmp_path.glob("select_answer-*/overfit.json")]
    assert record["verdict"] == "FAIL" and record["questions"] == 8 and record["answer_f1"] < 0.8
    run = Path(record["run_dir"])
    trained = set(json.loads((run / "subsample_train_ids.json").read_text())["ids"])
    scored = {json.loads(line)["id"] for line in (run / "predictions.jsonl").read_text().splitlines()}
    assert len(trained) == 8 and scored == trained


def test_answer_f1_where_read_counts_only_the_questions_whose_answer_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = importlib.util.spec_from_file_location("overfit", PROJECT_ROOT / "benchmarks" / "overfit.py")
    overfit = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "overfit", overfit)  # its dataclasses resolve their module
    spec.loader.exec_module(overfit)
    answer_f1_where_read = overfit.answer_f1_where_read

    def paragraph(idx: int, text: str) -> dict:
        return {"idx": idx, "title": "", "text": text, "is_supporting": False}

    table = {
        "id": ["a", "b", "c"],
        "paragraphs": [
            [paragraph(0, "Paris is in France."), paragraph(1, "Lyon.")],
            [paragraph(0, "Nothing here."), paragraph(1, "Berlin is in Germany.")],
            [paragraph(0, "The United States."), paragraph(1, "Other.")],
        ],
        "answer": ["Paris", "Berlin", "USA"],
        "answer_aliases": [[], [], ["United States"]],
    }
    # K = 1: a reads paragraph 0 (the answer), b reads paragraph 0 (not it), c reads paragraph 0 (an alias)
    rankings = [{"id": "a", "ranking": [0, 1]}, {"id": "b", "ranking": [0, 1]}, {"id": "c", "ranking": [0, 1]}]
    (tmp_path / "selector_ranking.json").write_text(json.dumps({"top_k": 1, "rankings": rankings}))
    scores = [{"id": "a", "answer_f1": 1.0}, {"id": "b", "answer_f1": 0.0}, {"id": "c", "answer_f1": 0.5}]
    (tmp_path / "metrics.per_question.jsonl").write_text("".join(json.dumps(row) + "\n" for row in scores))
    assert answer_f1_where_read(tmp_path, table) == {"answer_f1_read": 0.75, "questions_read": 2}
    assert answer_f1_where_read(tmp_path / "missing", table) == {}
