"""Lexical SA (`model=lexical_select_answer`): BM25 ranks each question's own paragraphs (overlap first, ties in
dataset order, well above chance on the real sample), trains nothing and keeps no checkpoint, and the answerer
trains on BM25's own top K. (`tests/cli/test_score_run.py` trains it from its registry entry and reproduces it with
`evaluate.py run=`.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate

from musique_models.errors import user_error_message
from musique_models.features.lexical import bm25_ranking, bm25_scores
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.lexical import LexicalRanker
from musique_models.recipes.select_answer import ranking_metrics
from musique_models.run_files import CHECKPOINTS_FOLDER, RANKING_FILE, STAGE_FILE, stage_ranking_file
from musique_models.runs.train import train
from tests.cli.test_score_run import compose_cfg
from tests.conftest import ONE_THREAD

PARAGRAPHS = [
    {"idx": 0, "title": "Paris", "text": "The capital of France."},
    {"idx": 1, "title": "Lyon", "text": "A city on the Rhone."},
    {"idx": 2, "title": "Rhone", "text": "A river that flows through Lyon to the sea."},
    {"idx": 3, "title": "Marseille", "text": "A port."},
]
SETTINGS = {"k1": 1.5, "b": 0.75, "method": "lucene", "include_title": True}


def test_the_paragraphs_sharing_the_questions_words_come_first_and_ties_keep_their_order() -> None:
    ranking, scores = bm25_ranking("Which river flows through Lyon?", PARAGRAPHS, **SETTINGS)
    assert ranking == [2, 1, 0, 3]
    assert scores[2] > scores[1] > 0 and scores[0] == scores[3] == 0
    # only stop words (or nothing) to match: every score 0, the dataset's order
    assert bm25_ranking("What is the?", PARAGRAPHS, **SETTINGS) == ([0, 1, 2, 3], [0.0] * 4)
    # the title counts only when asked
    assert bm25_scores("Marseille", PARAGRAPHS, include_title=False)[3] == 0
    assert bm25_scores("Marseille", PARAGRAPHS, include_title=True)[3] > 0


def test_bm25_finds_the_supporting_paragraphs_well_above_chance_on_the_real_sample() -> None:
    cfg = compose_cfg("train", ["dataset=musique_ans", "dataset.sample=true"])
    dev = instantiate(cfg.dataset).load("dev")
    rankings, columns = LexicalRanker(SETTINGS).rank(dev)
    assert [sorted(ranking) for ranking in rankings] == [sorted(p["idx"] for p in ps) for ps in dev["paragraphs"]]
    metrics = ranking_metrics(columns, 7)
    # chance: K of 20 paragraphs finds K/20 of the support (0.10 at 2, 0.35 at 7); measured 0.40 and 0.65
    assert metrics["recall_at_2"] > 0.3 and metrics["recall_at_7"] > 0.55


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("+model.selector_checkpoint=x.ckpt", "BM25, which has no checkpoint"),
        ("model.selector.method=tfidf", "model.selector.method"),
    ],
)
def test_a_selector_checkpoint_and_an_unknown_method_are_refused(override: str, message: str) -> None:
    with pytest.raises(Exception) as raised:  # Hydra wraps it; the CLI prints the one line below
        instantiate_recipe(compose_cfg("train", ["model=lexical_select_answer", override]))
    assert message in (user_error_message(raised.value) or "")


RUN = [
    "model=lexical_select_answer",
    "backbone=tiny",
    "dataset=musique_ans",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=4",
    "model.answerer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
]


@pytest.mark.slow
def test_the_ranker_keeps_no_checkpoint_and_writes_the_rankings_the_answerer_trains_on(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train(compose_cfg("train", [*RUN, f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={run}"]))
    # the ranker: its ranking files, no stage record, no checkpoint; the answerer: a trained stage
    assert not (run / "selector" / STAGE_FILE).exists() and not (run / "selector" / CHECKPOINTS_FOLDER).exists()
    assert (run / "answerer" / STAGE_FILE).exists()
    cfg = compose_cfg("train", RUN)
    ranked = json.loads((run / "selector" / stage_ranking_file("train")).read_text())
    assert ranked["top_k"] == int(cfg.model.top_k) == 7 and len(ranked["rankings"]) == 6
    by_id = {row["id"]: row["ranking"] for row in ranked["rankings"]}
    full = instantiate(cfg.dataset).load("train")
    drawn = full.select([row for row, question_id in enumerate(full["id"]) if question_id in by_id])
    assert [by_id[question_id] for question_id in drawn["id"]] == LexicalRanker(SETTINGS).rank(drawn)[0]
    # the evaluation's ranking file carries recall@K against the gold support
    assert set(json.loads((run / RANKING_FILE).read_text())["metrics"]) >= {"recall_at_7", "rank_f1"}
