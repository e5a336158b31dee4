"""A new system joins by its own files: a toy recipe in a module of its own (outside the package) and its model
config in a copy of `conf/` (a temporary config folder) train, are reproduced by `evaluate.py run=` and get their
row in the report, and the error browser shows its declared side file, with no file of the package, of `conf/` or of
`tests/` touched. (Outside the package its component's settings are untyped: `register_stage_settings` types those
of `musique_models/recipes/*_settings.py`; Lexical SA shows a system inside it, schema included.)"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from musique_models import PROJECT_ROOT
from musique_models.evaluation.predictions import read_predictions
from musique_models.report.browse import build_page_data
from musique_models.report.runs import find_run_folders
from musique_models.run_files import METRICS_FILE, PREDICTIONS_FILE
from musique_models.runs.score import score_run
from musique_models.runs.train import train
from musique_models.systems import registry
from tests.conftest import ONE_THREAD

# The toy: the title of the paragraph that shares the most words with the question is the answer, that paragraph
# the support. It trains nothing; its one component has settings (`ranker.include_title`).
TOY_RECIPE = '''
"""The toy system of tests/recipes/test_new_system.py."""

from pathlib import Path

from musique_models.evaluation.metrics import normalize_answer
from musique_models.evaluation.predictions import Prediction
from musique_models.run_files import write_side_file


def overlap_ranking(question, paragraphs, include_title=True):
    words = set(normalize_answer(question).split())

    def shared(paragraph):
        text = f"{paragraph['title']} {paragraph['text']}" if include_title else paragraph["text"]
        return len(words & set(normalize_answer(text).split()))

    scores = [shared(paragraph) for paragraph in paragraphs]
    order = sorted(range(len(paragraphs)), key=lambda position: -scores[position])
    return [paragraphs[position]["idx"] for position in order], scores


class TitlePredictor:
    def __init__(self, include_title: bool) -> None:
        self.include_title = include_title
        self.extra_metrics = {}

    def predict(self, table, output_dir: Path) -> list[Prediction]:
        predictions, ranked = [], []
        rows = zip(table["id"], table["question"], table["paragraphs"])
        for row, (question_id, question, paragraphs) in enumerate(rows):
            ranking, scores = overlap_ranking(question, paragraphs, self.include_title)
            title = next(paragraph["title"] for paragraph in paragraphs if paragraph["idx"] == ranking[0])
            predictions.append(Prediction(question_id, title, [ranking[0]], True, 1.0))
            ranked.append({"row": row, "id": question_id, "top_three": ranking[:3], "best_score": max(scores)})
        write_side_file(output_dir, "toy_rankings.jsonl", "toy ranking", ranked)
        return predictions


class TopTitle:
    def __init__(self, ranker, name: str = "top_title") -> None:
        self.name = name
        self.include_title = bool(ranker.include_title)

    def fit(self, context) -> TitlePredictor:
        return TitlePredictor(self.include_title)

    def load(self, cfg, run_dir: Path) -> TitlePredictor:
        return TitlePredictor(self.include_title)
'''
TOY_CONFIG = """
_target_: toy_top_title.TopTitle
name: top_title
system:
  name: Top title
  order: 9
  family: artifact
  paper_experiments: []
  tiny: []
ranker:
  include_title: true
"""
RUN = ["model=top_title", "dataset=musique_ans", "dataset.sample=true", "eval_size=6", ONE_THREAD, "logger=none"]


def _fingerprint() -> dict[str, str]:
    folders = [PROJECT_ROOT / "musique_models", PROJECT_ROOT / "conf", PROJECT_ROOT / "tests"]
    return {
        str(path): hashlib.sha256(path.read_bytes()).hexdigest()
        for folder in folders
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def test_a_toy_system_joins_by_its_own_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = _fingerprint()
    conf = tmp_path / "conf"
    shutil.copytree(PROJECT_ROOT / "conf", conf)
    (conf / "model" / "top_title.yaml").write_text(TOY_CONFIG)
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "toy_top_title.py").write_text(TOY_RECIPE)
    monkeypatch.syspath_prepend(str(modules))

    import toy_top_title as toy

    run = tmp_path / "run"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", overrides=[*RUN, f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={run}"])
    train(cfg)

    # its predictions are the toy's, and `evaluate.py run=` reproduces its metrics from the run alone
    predictions = dict(read_predictions(run / PREDICTIONS_FILE))
    assert len(predictions) == 6
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        assert score_run(compose("evaluate", overrides=[f"run={run}"])) == json.loads((run / METRICS_FILE).read_text())
    dev = instantiate(cfg.dataset).load("dev")
    for question_id, question, paragraphs in zip(dev["id"], dev["question"], dev["paragraphs"], strict=True):
        if question_id in predictions:
            assert predictions[question_id].predicted_support_idxs == [toy.overlap_ranking(question, paragraphs)[0][0]]

    # the registry of its config folder names it; the report gives its run a row from the run's own config
    assert registry(conf / "model")["top_title"].name == "Top title"
    records, _ = find_run_folders([run])
    assert [record.system for record in records] == ["Top title"]
    # the error browser shows its declared side file, row by row, with no code of its own for it
    page = build_page_data(run)
    shown = {row["id"]: row["side_files"] for row in page["rows"]}
    for question_id, question, paragraphs in zip(dev["id"], dev["question"], dev["paragraphs"], strict=True):
        if question_id in shown:
            ((entry,),) = [shown[question_id]]
            assert entry["title"] == "toy ranking"
            assert entry["records"][0]["top_three"] == toy.overlap_ranking(question, paragraphs)[0][:3]
    assert _fingerprint() == before
