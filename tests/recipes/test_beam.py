"""Beam SA as a system (`model=beam_select_answer`): the retrieved chain, in chain order, is what the answerer reads
and the predicted support, as many paragraphs as the question's type says; the ranking file and the error browser
show each chain with its score per hop; a trained retriever is reused by `selector_checkpoint` (another stage's
checkpoint refused); `experiment=beam_sa_<dataset>` composes to the authors' settings. (`tests/cli/test_score_run.py`
trains it on MuSiQue-Full and reproduces it with `evaluate.py run=`.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra.utils import instantiate

from musique_models.errors import MusiqueModelsError, user_error_message
from musique_models.evaluation.predictions import read_predictions
from musique_models.features.beam import hop_count
from musique_models.recipes.build import instantiate_recipe
from musique_models.report.browse import build_page_data
from musique_models.run_files import PREDICTIONS_FILE, RANKING_FILE
from musique_models.runs.train import train
from tests.cli.test_score_run import compose_cfg
from tests.conftest import ONE_THREAD

RUN = [
    "model=beam_select_answer",
    "backbone=tiny",
    "dataset=musique_full",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=6",
    "model.selector.max_epochs=1",
    "model.answerer.max_epochs=1",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
]


@pytest.fixture(scope="module")
def beam_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("beam")
    train(compose_cfg("train", [*RUN, f"paths.cache_dir={root}/cache", f"paths.output_dir={root}/run"]))
    return root / "run"


@pytest.mark.slow
def test_the_chain_is_read_in_chain_order_and_is_the_predicted_support(
    beam_run: Path, tmp_path: Path, monkeypatch
) -> None:
    record = json.loads((beam_run / RANKING_FILE).read_text())
    predictions = [prediction for _, prediction in read_predictions(beam_run / PREDICTIONS_FILE)]
    cfg = compose_cfg("train", RUN)
    dev = instantiate(cfg.dataset).load("dev")
    predicted = {p.id for p in predictions}  # 6 questions: 6 answerable and 6 unanswerable twins
    table = dev.select([row for row, question_id in enumerate(dev["id"]) if question_id in predicted])
    chains = [entry["chain"] for entry in record["chains"]]
    assert [entry["id"] for entry in record["chains"]] == table["id"] == [p.id for p in predictions]
    assert [len(chain) for chain in chains] == [hop_count(kind) for kind in table["question_type"]]
    assert all(len(entry["hop_scores"]) == len(entry["chain"]) for entry in record["chains"])
    assert [p.predicted_support_idxs for p in predictions] == chains
    assert set(record["metrics"]) == {"chain_f1", "chain_em", "chain_recall"}
    # what the answerer reads: the chain, in chain order
    predictor = instantiate_recipe(cfg).load(cfg, beam_run)
    read: list[list[int]] = []
    original = predictor.reader.read
    monkeypatch.setattr(predictor.reader, "read", lambda rows: read.extend(rows["selected_idxs"]) or original(rows))
    again = predictor.predict(table, tmp_path)
    assert read == chains and [p.predicted_support_idxs for p in again] == chains
    # the browser shows every question's chain with its hop scores
    page = build_page_data(beam_run)
    assert [row["chain"]["chain"] for row in page["rows"]] == chains
    assert [row["chain"]["hop_scores"] for row in page["rows"]] == [e["hop_scores"] for e in record["chains"]]


@pytest.mark.slow
def test_a_trained_retriever_is_reused_and_another_stage_refused(beam_run: Path, tmp_path: Path) -> None:
    checkpoint = beam_run / "selector/checkpoints/best.ckpt"
    cfg = compose_cfg("train", [*RUN, f"model.selector_checkpoint={checkpoint}", f"paths.output_dir={tmp_path}/run"])
    train(cfg)
    assert not (tmp_path / "run/selector/checkpoints").exists()  # no retriever trained
    reused = json.loads((tmp_path / "run" / RANKING_FILE).read_text())["chains"]
    assert reused == json.loads((beam_run / RANKING_FILE).read_text())["chains"]
    wrong = beam_run / "answerer/checkpoints/best.ckpt"
    refused = compose_cfg("train", [*RUN, f"model.selector_checkpoint={wrong}"])
    with pytest.raises(MusiqueModelsError, match="not a beam retriever's checkpoint"):
        instantiate_recipe(refused).load(refused, beam_run)


@pytest.mark.parametrize(
    ("dataset", "encoder", "beam_size", "label_order", "lr", "epochs"),
    [
        ("musique_ans", "deberta_v3_base", 2, True, 1e-5, 20),
        ("musique_full", "deberta_v3_base", 2, True, 1e-5, 20),
        ("hotpotqa_20k", "deberta_v3_large", 2, False, 2e-5, 20),
        ("2wiki_20k", "deberta_v3_base", 1, False, 1e-5, 12),  # run_train_2wiki.sh leaves config.py's 12
    ],
)
def test_the_beam_sa_experiments_compose_to_the_authors_settings(
    dataset: str, encoder: str, beam_size: int, label_order: bool, lr: float, epochs: int
) -> None:
    cfg = compose_cfg("train", [f"experiment=beam_sa_{dataset}"])
    retriever = cfg.model.selector
    assert cfg.dataset.name == dataset and not cfg.dataset.sample
    assert retriever.backbone.name == encoder and retriever.lr == lr and retriever.max_length == 512
    assert (retriever.beam_size, retriever.label_order) == (beam_size, label_order)
    # every epoch trains: the best of all of them is kept, no early stop (patience = epochs)
    assert retriever.max_epochs == epochs == retriever.patience and retriever.validate
    assert retriever.micro_batch_size * retriever.accumulate_grad_batches == 8
    assert (retriever.gradient_clip_algorithm, retriever.gradient_clip_val) == ("norm", 2.0)
    assert retriever.gradient_checkpointing
    assert cfg.model.answerer.backbone.name == "longformer_large" and cfg.model.top_k is None


@pytest.mark.parametrize(
    ("override", "message"),
    [("model.top_k=3", "reads the whole retrieved chain"), ("model.selector.beam_size=0", "at least 1")],
)
def test_a_top_k_or_an_empty_beam_is_refused_before_training(override: str, message: str) -> None:
    with pytest.raises(Exception) as raised:  # Hydra wraps it; the CLI prints the one line below
        instantiate_recipe(compose_cfg("train", [*RUN, override]))
    assert message in (user_error_message(raised.value) or "")
