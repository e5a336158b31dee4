"""train.py end to end on every dataset sample with a tiny random backbone, and its outputs accepted by evaluate.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from pytorch_lightning.callbacks import EarlyStopping

from musique_models.errors import ConfigValueError
from musique_models.features.context import YES_NO_PREFIX
from musique_models.models.backbone import BackboneSpec
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.end2end import End2End
from musique_models.recipes.reader import reader_monitor, yes_no_setup
from musique_models.recipes.select_answer import SELECTOR_MONITOR, SelectAnswer
from musique_models.runs.train import train
from musique_models.training.stage import lightning_trainer_kwargs, stage_callbacks
from tests.conftest import DATASET_CONFIGS, ONE_THREAD, SAMPLES, TINY_SELECT_ANSWER, run_python

MODELS = ["select_answer", "end2end", "c_only"]
BACKBONES = [
    "minilm",
    "tiny",
    "roberta_large",
    "longformer_base",
    "longformer_large",
    "deberta_v3_large",
    "minilm_long",
    "tiny_longformer",
]
TINY_RUN = [
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=12",
    "eval_size=10",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "model.eval_batch_size=64",
]


@pytest.mark.slow
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_every_model_and_dataset_config_composes_and_instantiates(model: str, dataset: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg([f"model={model}", f"dataset={dataset}"])
    recipe = instantiate_recipe(cfg)
    assert recipe.name == model
    if model == "select_answer":
        assert (
            isinstance(recipe, SelectAnswer)
            and recipe.top_k == cfg.model.paper_settings[cfg.dataset.name].answerer_top_k
        )
        paper_epochs = {"musique_ans": 3, "musique_full": 3}.get(dataset, 10)
        assert recipe.selector_cfg.max_epochs == (4 if cfg.dataset.sample else paper_epochs)
        assert recipe.answerer_cfg.max_epochs == (1 if cfg.dataset.sample else paper_epochs)
    else:
        assert isinstance(recipe, End2End) and recipe.empty_question == (model == "c_only")
        paragraph_tokens = {"hotpotqa_20k": 300, "2wiki_20k": 500}.get(dataset, 250)
        assert recipe.reader_cfg.max_paragraph_tokens == paragraph_tokens
        assert recipe.reader_cfg.max_question_tokens == 150 and recipe.reader_cfg.max_document_tokens == 4000
        official = compose_train_cfg([f"model={model}", f"dataset={dataset}", "dataset.sample=false"]).model.reader
        effective_batch = official.micro_batch_size * official.accumulate_grad_batches
        assert effective_batch == (12 if dataset.startswith("musique") else 16) and official.gradient_checkpointing
        assert official.max_epochs == (10 if dataset == "hotpotqa_20k" else 3) and official.validate
    trainer = instantiate(lightning_trainer_kwargs(cfg), logger=False, enable_progress_bar=False)
    assert trainer.gradient_clip_val == 1.0 and trainer.gradient_clip_algorithm == "value"


@pytest.mark.parametrize("backbone", BACKBONES)
def test_backbone_configs_instantiate(backbone: str, compose_train_cfg) -> None:
    spec = instantiate(compose_train_cfg([f"backbone={backbone}"]).backbone)
    assert isinstance(spec, BackboneSpec) and spec.name == backbone
    if spec.source == "hub":
        assert "/" in spec.path  # a hub name, only resolved when a user is online
    else:
        assert Path(spec.model_dir(), "config.json").exists()  # packaged MiniLM, sha256 checked


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_fast_dev_run_select_answer_on_every_sample(dataset: str, compose_train_cfg, tmp_path: Path) -> None:
    cfg = compose_train_cfg([f"dataset={dataset}", "trainer.fast_dev_run=true", *TINY_RUN])
    train(cfg)
    run = tmp_path / "run"
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    metrics = json.loads((run / "metrics.json").read_text())
    rows_per_question = 2 if dataset == "musique_full" else 1
    assert len(predictions) == 10 * rows_per_question
    assert set(predictions[0]) == {
        "id",
        "predicted_answer",
        "predicted_support_idxs",
        "predicted_answerable",
        "predicted_answer_confidence",
    }
    # a span's probability (start x end), 0 only without a span
    assert all(0.0 < p["predicted_answer_confidence"] <= 1.0 for p in predictions if p["predicted_answer"])
    assert 0.0 <= metrics["answer_f1"] <= 1.0 and ("group_answer_sufficiency_f1" in metrics) == (
        dataset == "musique_full"
    )
    assert (run / "selector" / "stage.json").exists() and (run / "answerer" / "stage.json").exists()
    ranking = json.loads((run / "selector_ranking.json").read_text())
    assert len(ranking["rankings"]) == 10 * rows_per_question and 0.0 <= ranking["metrics"]["recall_at_7"] <= 1.0
    # the answerer read each question's top K of that ranking: every predicted support paragraph is among them
    for prediction, ranked in zip(predictions, ranking["rankings"], strict=True):
        assert prediction["id"] == ranked["id"]  # each ranking names its question
        assert set(prediction["predicted_support_idxs"]) <= set(ranked["ranking"][: ranking["top_k"]])
    # the training split's ranking, which the answerer trained on, names its questions too (twins: two rows)
    trained = json.loads((run / "subsample_train_ids.json").read_text())["ids"]
    train_ranking = json.loads((run / "selector" / "ranking_train.json").read_text())["rankings"]
    assert list(dict.fromkeys(row["id"] for row in train_ranking)) == trained
    assert len(train_ranking) == len(trained) * rows_per_question


@pytest.mark.slow
def test_train_predictions_pass_evaluate_py(tmp_path: Path) -> None:
    common = [f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/run"]
    result = run_python(
        [
            "train.py",
            "dataset=hotpotqa_20k",
            "backbone=tiny",
            "dataset.sample=true",
            "dataset.train_size=12",
            "model.selector.max_epochs=1",
            "model.answerer.max_epochs=1",
            "model.answerer.validate=true",
            "trainer.enable_progress_bar=false",
            ONE_THREAD,
            *common,
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    run = tmp_path / "run"
    evaluated = run_python(
        [
            "evaluate.py",
            f"predictions={run}/predictions.jsonl",
            f"gold={SAMPLES}/hotpotqa/dev.json",
            f"output={tmp_path}/metrics.json",
            f"paths.log_dir={tmp_path}/logs",
        ],
        timeout=300,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert json.loads((tmp_path / "metrics.json").read_text()) == json.loads((run / "metrics.json").read_text())
    assert (run / "config.yaml").exists() and "answerer/val/answer_f1" in next(
        (run / "answerer" / "csv").rglob("metrics.csv")
    ).read_text()


# The official experiment configs (StonyBrookNLP/musique experiment_configs/*.jsonnet, setting=full): epochs,
# early-stopping patience, effective batch (the answerer's and End2End's in questions) and the validation metric.
OFFICIAL = {
    ("select_answer", "musique_ans"): {"selector": (3, 2), "answerer": (3, 3, 16)},
    ("select_answer", "musique_full"): {"selector": (3, 2), "answerer": (3, 3, 16)},
    ("select_answer", "hotpotqa_20k"): {"selector": (10, 3), "answerer": (10, 3, 16)},
    ("select_answer", "2wiki_20k"): {"selector": (10, 3), "answerer": (10, 3, 16)},
    ("end2end", "musique_ans"): {"reader": (3, 3, 12)},
    ("end2end", "musique_full"): {"reader": (3, 3, 12)},
    ("end2end", "hotpotqa_20k"): {"reader": (10, 3, 16)},
    ("end2end", "2wiki_20k"): {"reader": (3, 3, 16)},
}


@pytest.mark.parametrize(("model", "dataset"), list(OFFICIAL), ids=lambda value: str(value))
def test_official_files_get_the_official_epochs_patience_and_batches(
    model: str, dataset: str, compose_train_cfg
) -> None:
    cfg = compose_train_cfg([f"model={model}", f"dataset={dataset}", "dataset.sample=false"])
    for stage, expected in OFFICIAL[(model, dataset)].items():
        stage_cfg = cfg.model[stage]
        assert (stage_cfg.max_epochs, stage_cfg.patience) == expected[:2] and stage_cfg.validate
        if len(expected) == 3:
            assert stage_cfg.micro_batch_size * stage_cfg.accumulate_grad_batches == expected[2]


def test_early_stopping_takes_each_stages_patience(compose_train_cfg, tmp_path: Path) -> None:
    cfg = compose_train_cfg(["dataset=musique_full", "dataset.sample=false"])
    for stage, patience in (("selector", 2), ("answerer", 3)):
        callbacks = stage_callbacks(cfg, tmp_path, "val/x", "max", has_loggers=False, stage_cfg=cfg.model[stage])
        (stopping,) = [c for c in callbacks if isinstance(c, EarlyStopping)]
        assert stopping.patience == patience and stopping.monitor == "val/x"


def test_each_component_has_its_own_backbone_defaulting_to_the_runs(compose_train_cfg) -> None:
    default = compose_train_cfg(["backbone=tiny"])
    assert default.model.selector.backbone.name == default.model.answerer.backbone.name == "tiny"
    mixed = compose_train_cfg(["backbone=tiny", "backbone@model.selector.backbone=roberta_large"])
    # the component's backbone replaces the run's: nothing of the run's (tiny's random config) leaks into it
    assert (
        "config_overrides" not in mixed.model.selector.backbone
        and "tokenizer_from" not in mixed.model.selector.backbone
    )
    assert mixed.model.selector.backbone.name == "roberta_large" and mixed.model.answerer.backbone.name == "tiny"
    assert mixed.model.selector.lr == 2e-5 and mixed.model.answerer.lr == 1e-4  # each from its own backbone
    end2end = compose_train_cfg(["model=end2end", "backbone=tiny", "backbone@model.reader.backbone=tiny_longformer"])
    assert end2end.model.reader.backbone.name == "tiny_longformer"


@pytest.mark.slow
def test_select_answer_trains_each_stage_on_its_own_backbone(compose_train_cfg, tmp_path: Path) -> None:
    cfg = compose_train_cfg([*TINY_SELECT_ANSWER, "logger=none", "backbone@model.answerer.backbone=tiny_longformer"])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    stored = {
        stage: torch.load(run / stage / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=False)
        for stage in ("selector", "answerer")
    }
    assert stored["selector"]["hyper_parameters"]["backbone"].name == "tiny"
    assert stored["answerer"]["hyper_parameters"]["backbone"].name == "tiny_longformer"
    # a Longformer answerer reads its top K as one input (the End2End reader's module, global attention)
    assert "gradient_checkpointing" in stored["answerer"]["hyper_parameters"]
    assert any("attention.self.query_global" in key for key in stored["answerer"]["state_dict"])  # a Longformer


# The paper's systems as the official experiment configs (StonyBrookNLP/musique experiment_configs/, setting=full)
# define them, per stage: backbone, lr, epochs, effective batch (questions), token caps, K, patience, validation
# metric; every system: gradient clipping by value at 1.0, seed 100, slanted triangular schedule.
_SELECTOR = {"backbone": "roberta_large", "lr": 2e-5, "max_length": 300, "monitor": "val/rank_f1"}
_ANSWERER = {
    "backbone": "longformer_large",
    "lr": 2e-5,
    "batch": 16,
    "patience": 3,
    "max_document_tokens": 4000,
    "max_paragraph_tokens": 400,
    "max_question_tokens": 150,
}
_READER = {
    "backbone": "longformer_large",
    "lr": 2e-5,
    "patience": 3,
    "max_document_tokens": 4000,
    "max_question_tokens": 150,
}
_AN, _AN_SF = "val/answer_f1", "val/group_answer_sufficiency_f1"  # +answer_text_f1, +answer_sufficiency_f1


def _sa(epochs: int, selector_batch: int, selector_patience: int, k: int, monitor: str) -> dict:
    return {
        "selector": {**_SELECTOR, "epochs": epochs, "batch": selector_batch, "patience": selector_patience},
        "answerer": {**_ANSWERER, "epochs": epochs, "k": k, "monitor": monitor},
    }


def _ee(epochs: int, batch: int, paragraph_tokens: int, monitor: str) -> dict:
    return {
        "reader": {
            **_READER,
            "epochs": epochs,
            "batch": batch,
            "max_paragraph_tokens": paragraph_tokens,
            "monitor": monitor,
        }
    }


OFFICIAL_SYSTEMS = {
    "sa_musique_ans": _sa(epochs=3, selector_batch=12, selector_patience=2, k=7, monitor=_AN),
    "sa_musique_full": _sa(epochs=3, selector_batch=12, selector_patience=2, k=7, monitor=_AN_SF),
    "sa_hotpotqa_20k": _sa(epochs=10, selector_batch=16, selector_patience=3, k=3, monitor=_AN),
    "sa_2wiki_20k": _sa(epochs=10, selector_batch=16, selector_patience=3, k=5, monitor=_AN),
    "ee_musique_ans": _ee(epochs=3, batch=12, paragraph_tokens=250, monitor=_AN),
    "ee_musique_full": _ee(epochs=3, batch=12, paragraph_tokens=250, monitor=_AN_SF),
    "ee_hotpotqa_20k": _ee(epochs=10, batch=16, paragraph_tokens=300, monitor=_AN),
    "ee_2wiki_20k": _ee(epochs=3, batch=16, paragraph_tokens=500, monitor=_AN),
}
_YES_NO_DATASETS = ("hotpotqa_20k", "2wiki_20k")


@pytest.mark.parametrize("system", list(OFFICIAL_SYSTEMS))
def test_each_official_system_composes_to_exactly_the_official_values(system: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg([f"experiment={system}"])
    dataset = system.split("_", 1)[1]
    assert cfg.dataset.name == dataset and not cfg.dataset.sample and cfg.seed == 100
    assert cfg.model.name == ("select_answer" if system.startswith("sa_") else "end2end")
    trainer = instantiate(lightning_trainer_kwargs(cfg), logger=False, enable_progress_bar=False)
    assert trainer.gradient_clip_val == 1.0 and trainer.gradient_clip_algorithm == "value"
    recipe = instantiate_recipe(cfg)
    # titles and the ( yes | no ) prefix on HotpotQA and 2Wiki only, as the official readers
    assert cfg.dataset.include_title == cfg.dataset.yes_no_answers == (dataset in _YES_NO_DATASETS)
    assert recipe.yes_no == "prefix"
    has_unanswerable = dataset == "musique_full"
    for stage, expected in OFFICIAL_SYSTEMS[system].items():
        stage_cfg = cfg.model[stage]
        actual = {
            "backbone": stage_cfg.backbone.name,
            "lr": stage_cfg.lr,
            "epochs": stage_cfg.max_epochs,
            "batch": stage_cfg.micro_batch_size * stage_cfg.accumulate_grad_batches,
            "patience": stage_cfg.patience,
            "monitor": SELECTOR_MONITOR if stage == "selector" else reader_monitor(has_unanswerable),
        }
        for key in ("max_length", "max_document_tokens", "max_paragraph_tokens", "max_question_tokens"):
            if key in expected:
                actual[key] = stage_cfg[key]
        if "k" in expected:
            actual["k"] = recipe.top_k
        assert actual == expected
        assert stage_cfg.schedule == "slanted_triangular" and stage_cfg.warmup_ratio == 0.1
        assert stage_cfg.validate and stage_cfg.get("max_answer_tokens") is None
        if stage == "answerer":  # the Longformer answerer reads its top K as one input
            assert recipe._single_input(instantiate(stage_cfg.backbone))
        if stage in ("answerer", "reader"):
            assert stage_cfg.gradient_checkpointing


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prefix", "head"])
def test_yes_no_answers_as_prefix_spans_or_with_the_answer_type_head(mode: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg(["dataset=hotpotqa_20k", f"model.yes_no={mode}", "trainer.fast_dev_run=true", *TINY_RUN])
    assert yes_no_setup(cfg, mode) == ((YES_NO_PREFIX, False) if mode == "prefix" else ("", True))
    assert yes_no_setup(compose_train_cfg([f"model.yes_no={mode}"]), mode) == ("", False)  # MuSiQue: neither
    with pytest.raises(ConfigValueError, match="model.yes_no='both': expected one of prefix, head"):
        yes_no_setup(cfg, "both")
    train(cfg)
    answerer = torch.load(
        Path(cfg.paths.output_dir) / "answerer" / "checkpoints" / "best.ckpt", map_location="cpu", weights_only=False
    )
    assert any(key.startswith("type_head.") for key in answerer["state_dict"]) == (mode == "head")
