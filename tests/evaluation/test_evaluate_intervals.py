"""evaluate.py's intervals: a file beside the metrics (the metrics JSON unchanged) and in the printed table; and
`compare=`, two prediction files of one gold file tested metric by metric on the same questions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from musique_models import PROJECT_ROOT
from musique_models.cli.evaluate import EvaluateConfigError, evaluate
from musique_models.evaluation.evaluator import evaluate_files
from musique_models.evaluation.gold import read_gold
from musique_models.evaluation.intervals import metric_intervals, paired_metric_tests
from musique_models.evaluation.predictions import Prediction, write_predictions
from tests.conftest import SAMPLES

FULL = SAMPLES / "musique_full/dev_derived.jsonl"


def _config(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose("evaluate", overrides=list(overrides))


def _predictions(path: Path, wrong_answers: int = 0) -> Path:
    """Perfect predictions of the MuSiQue-Full sample, but for a wrong answer on the first `wrong_answers`
    answerable rows."""
    predictions = []
    for gold in read_gold(FULL):
        wrong = gold.answerable and sum(p.predicted_answerable for p in predictions) < wrong_answers
        answer = "no such answer" if wrong else gold.answers[0]
        predictions.append(Prediction(gold.id, answer, list(gold.support_idxs), gold.answerable))
    write_predictions(path, predictions)
    return path


def test_the_intervals_go_beside_the_metrics_which_stay_as_they_were(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # the printed table's cells on one line each
    predictions = _predictions(tmp_path / "a.jsonl", wrong_answers=50)
    metrics = evaluate(_config(f"predictions={predictions}", f"gold={FULL}"))
    written = (tmp_path / "a.metrics.json").read_text()
    assert json.loads(written) == evaluate_files(predictions, FULL).metrics == metrics  # no key added
    saved = json.loads((tmp_path / "a.metrics.intervals.json").read_text())
    assert saved["bootstrap"] == {"method": "percentile bootstrap", "confidence": 0.95, "resamples": 2000, "seed": 0}
    rows = [json.loads(line) for line in (tmp_path / "a.metrics.per_question.jsonl").read_text().splitlines()]
    expected = {name: vars(interval) for name, interval in metric_intervals(rows).items()}
    assert saved["intervals"] == expected
    answer = saved["intervals"]["answer_f1"]
    assert answer["mean"] == metrics["answer_f1"] == 150 / 200 and answer["count"] == 200  # 200 twin pairs
    assert answer["low"] < 0.75 < answer["high"]
    out = capsys.readouterr().out
    assert f"{75.0:.1f} [{100 * answer['low']:.1f}, {100 * answer['high']:.1f}]" in out
    assert (
        "95% percentile-bootstrap interval over questions (MuSiQue-Full: twin pairs; DiRe: questions with their " in out
    )
    assert "2000 resamples, seed 0" in out
    assert f"intervals: {tmp_path / 'a.metrics.intervals.json'}" in out


def test_compare_tests_two_prediction_files_on_the_same_questions(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    better = _predictions(tmp_path / "better.jsonl", wrong_answers=0)
    worse = _predictions(tmp_path / "worse.jsonl", wrong_answers=40)
    first = evaluate(_config(f"predictions={better}", f"compare={worse}", f"gold={FULL}", "dataset=musique_full"))
    assert first == evaluate_files(better, FULL).metrics
    assert sorted(path.name for path in tmp_path.iterdir()) == ["better.jsonl", "better.vs.worse.json", "worse.jsonl"]
    saved = json.loads((tmp_path / "better.vs.worse.json").read_text())
    assert saved["bootstrap"]["seed"] == 0 and saved["bootstrap"]["resamples"] == 2000
    assert saved["bootstrap"]["confidence"] == 0.95
    answer = saved["metrics"]["answer_f1"]
    assert (answer["predictions"], answer["compare"]) == (1.0, 160 / 200)
    assert answer["difference"] == pytest.approx(0.2) and answer["count"] == 200
    assert 0 < answer["low"] < 0.2 < answer["high"] and answer["p_value"] < 0.01
    assert saved["metrics"]["support_f1"]["difference"] == 0 and saved["metrics"]["support_f1"]["p_value"] == 1
    tests = paired_metric_tests(evaluate_files(better, FULL).per_question, evaluate_files(worse, FULL).per_question)
    assert set(saved["metrics"]) == set(tests)
    assert {name: (m["low"], m["high"], m["p_value"]) for name, m in saved["metrics"].items()} == {
        name: (t.difference.low, t.difference.high, t.p_value) for name, t in tests.items()
    }
    out = capsys.readouterr().out
    assert "better - worse" in out and tests["answer_f1"].difference.text() in out and "<0.001" in out
    assert f"comparison: {tmp_path / 'better.vs.worse.json'}" in out


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["compare={p}", "mode=dire", "probe_predictions=probe.jsonl"], "drop mode=dire"),
        (["compare={p}", "output=out.json"], "drop output="),
        (["compare_output=out.json"], "compare_output= applies with compare=B.jsonl only"),
    ],
)
def test_compare_options_that_do_not_apply_are_refused(overrides: list[str], message: str, tmp_path: Path) -> None:
    predictions = _predictions(tmp_path / "a.jsonl")
    with pytest.raises(EvaluateConfigError, match=message):
        evaluate(_config(f"predictions={predictions}", f"gold={FULL}", *(o.format(p=predictions) for o in overrides)))
    assert sorted(path.name for path in tmp_path.iterdir()) == ["a.jsonl"]
