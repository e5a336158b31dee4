"""The Q-only recipe (`model=q_only`): its configs and paper experiments compose, and on every dataset sample a
tiny BART fits, predicts one answer per row from the questions alone, and reloads from the run folder into a
predictor that predicts the same."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate

import musique_models.models.base as module_base
from musique_models.data.schema import Example
from musique_models.evaluation.gold import gold_from_example
from musique_models.models.backbone import BackboneSpec
from musique_models.recipes.base import Predictor, Recipe, RunContext
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.question_only import STAGE_NAME, QuestionOnly
from musique_models.training.run_folder import evaluation_subset
from musique_models.training.stage import StageNotFinishedError
from tests.conftest import DATASET_CONFIGS, ONE_THREAD

PAPER_EPOCHS = {"musique_ans": 3, "musique_full": 3, "hotpotqa_20k": 10, "2wiki_20k": 10}
EVAL_QUESTIONS = 4
TINY_Q_ONLY = [
    "model=q_only",
    "backbone@model.answerer.backbone=tiny_bart",
    "dataset.sample=true",
    "dataset.train_size=6",
    "trainer=cpu",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
    "model.eval_batch_size=64",
    "model.answerer.max_answer_tokens=8",
    "model.answerer.validate=true",  # fast_dev_run: one validation batch, scored with the evaluator's metrics
]


@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_config_composes_for_every_dataset(dataset: str, compose_train_cfg) -> None:
    for sample in (True, False):
        cfg = compose_train_cfg(["model=q_only", f"dataset={dataset}", f"dataset.sample={str(sample).lower()}"])
        recipe = instantiate_recipe(cfg)
        assert isinstance(recipe, QuestionOnly) and isinstance(recipe, Recipe) and recipe.name == "q_only"
        stage = recipe.answerer_cfg
        backbone = instantiate(stage.backbone)
        assert isinstance(backbone, BackboneSpec) and backbone.name == "minilm_bert2bert"
        assert stage.lr == backbone.learning_rate and stage.num_beams == 1 and stage.label_smoothing == 0.1
        if sample:  # CPU-sized: more epochs, no validation
            assert (stage.max_epochs, stage.micro_batch_size, stage.validate) == (20, 8, False)
        else:  # the paper's scale
            assert stage.max_epochs == PAPER_EPOCHS[dataset] and stage.validate and stage.patience == 3
            assert stage.micro_batch_size * stage.accumulate_grad_batches == 16 and stage.check_val_every_n_epoch == 1


@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_paper_experiment_composes(dataset: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg([f"experiment=q_only_{dataset}"])
    assert cfg.model.name == "q_only" and cfg.dataset.name == dataset and not cfg.dataset.sample
    assert cfg.experiment_name == f"q_only_{dataset}" and cfg.seed == 100 and cfg.optimized_metric == "answer_f1"
    stage = cfg.model.answerer
    assert stage.backbone.name == "bart_large" and stage.lr == 3e-5 and stage.warmup_ratio == 0.0
    assert stage.micro_batch_size * stage.accumulate_grad_batches == 16 and stage.max_epochs == PAPER_EPOCHS[dataset]
    assert stage.validate and stage.gradient_clip_algorithm == "norm"
    assert isinstance(instantiate_recipe(cfg), QuestionOnly)


def _context(cfg, run_dir: Path) -> RunContext:
    """The run's data as `train.py` loads it: the subsampled training split, `EVAL_QUESTIONS` dev questions as
    `eval_size` takes them (twins together)."""
    source = instantiate(cfg.dataset)
    train, dev = (source.load(split, run_dir=run_dir) for split in ("train", "dev"))
    evaluation = evaluation_subset(dev, EVAL_QUESTIONS)
    return RunContext(
        cfg=cfg,
        source=source,
        train=train,
        evaluation=evaluation,
        eval_golds=[gold_from_example(Example.from_dict(row), i) for i, row in enumerate(evaluation)],
        run_dir=run_dir,
        loggers=[],
    )


@pytest.mark.slow
@pytest.mark.parametrize("dataset", DATASET_CONFIGS)
def test_fit_predict_and_load_on_every_sample(dataset: str, compose_train_cfg, tmp_path: Path, monkeypatch) -> None:
    cfg = compose_train_cfg([f"dataset={dataset}", *TINY_Q_ONLY])
    context = _context(cfg, tmp_path / "run")
    table = context.evaluation
    validated: list[dict[str, float]] = []  # what validation scored, with the evaluator's aggregation
    aggregate = module_base.aggregate  # what every generating module validates with (log_validation_scores)
    monkeypatch.setattr(module_base, "aggregate", lambda *args: validated.append(aggregate(*args)) or validated[-1])
    recipe = instantiate_recipe(cfg)
    predictor = recipe.fit(context)
    assert len(validated) == 1 and validated[0]["count"] == EVAL_QUESTIONS
    assert isinstance(predictor, Predictor) and predictor.extra_metrics == {}
    predictions = predictor.predict(table, tmp_path / "out")

    assert [prediction.id for prediction in predictions] == table["id"]
    assert all(prediction.predicted_support_idxs == [] for prediction in predictions)
    assert all(0 < prediction.predicted_answer_confidence <= 1 for prediction in predictions)
    has_head = dataset == "musique_full"
    assert predictor.module.answerability_head == has_head == context.has_unanswerable
    assert (predictor.module.answerable_head is not None) == has_head
    if not has_head:
        assert all(prediction.predicted_answerable for prediction in predictions)
    else:  # twins share their question: the same prediction for both
        by_id: dict[str, set] = {}
        for prediction in predictions:
            by_id.setdefault(prediction.id, set()).add(
                (prediction.predicted_answer, prediction.predicted_answerable, prediction.predicted_answer_confidence)
            )
        assert len(by_id) == EVAL_QUESTIONS and all(len(values) == 1 for values in by_id.values())
        # so one twin of each pair is always wrong: the paired metric is 0 (the best checkpoint follows answer F1)
        assert validated[0]["group_answer_sufficiency_f1"] == 0.0 and validated[0]["sufficiency_accuracy"] == 0.5

    # the questions alone: an unlabelled copy of the table (answer "", answerable true) gets the same predictions
    unlabelled = table.map(lambda row: {"answer": "", "answer_aliases": [], "answerable": True})
    assert predictor.predict(unlabelled, tmp_path / "out") == predictions

    loaded = recipe.load(cfg, tmp_path / "run")
    assert loaded.predict(table, tmp_path / "again") == predictions
    with pytest.raises(StageNotFinishedError, match=STAGE_NAME):
        recipe.load(cfg, tmp_path / "empty")
