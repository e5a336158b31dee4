"""benchmarks/overfit.py at tiny scale: it scores exactly the questions it trained on and fails a model that did not
memorise them (a benchmark that cannot fail proves nothing)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
