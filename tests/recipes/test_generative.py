"""Generative readers as systems: a prompted LLM runs end to end on the shipped sample (valid official predictions,
metrics, its exemplars never a question being answered, reproduced by `evaluate.py run=`), unreadable generations
are counted and written, vLLM's absence is one line, and `experiment=sa_t5_<dataset>` composes to the paper's SA
with a RoBERTa-large selector and a T5-large answerer. (`tests/cli/test_score_run.py` trains and reproduces every
generative model of the registry too.)"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import pytorch_lightning as pl
import torch
from hydra.utils import instantiate

from musique_models.errors import MusiqueModelsError, user_error_message
from musique_models.evaluation.predictions import read_predictions
from musique_models.models.backbone import load_tokenizer
from musique_models.models.selector import ParagraphSelector
from musique_models.recipes.base import RunContext
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.reader import reader_monitor
from musique_models.report.browse import build_page_data
from musique_models.run_files import EXEMPLARS_FILE, GENERATIONS_FILE, METRICS_FILE, PREDICTIONS_FILE
from musique_models.runs.score import score_run
from musique_models.runs.train import train
from musique_models.training.run_folder import evaluation_subset
from tests.cli.test_score_run import compose_cfg
from tests.conftest import ONE_THREAD

COMMON = [
    "dataset.sample=true",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
    "backbone@model.reader.backbone=tiny_llama",
]


def _prompted_run(tmp_path: Path, overrides: list[str]) -> Path:
    run = tmp_path / "run"
    cfg = compose_cfg(
        "train",
        ["model=llm_prompt", *COMMON, *overrides, f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={run}"],
    )
    train(cfg)
    return run


@pytest.mark.slow
def test_a_prompted_llm_writes_official_predictions_and_metrics_that_evaluate_run_reproduces(tmp_path: Path) -> None:
    run = _prompted_run(tmp_path, ["model.shots=2", "dataset.train_size=10", "eval_size=5", "seed=3"])
    predictions = [prediction for _, prediction in read_predictions(run / PREDICTIONS_FILE)]
    evaluation = evaluation_subset(instantiate(compose_cfg("train", ["dataset.sample=true"]).dataset).load("dev"), 5)
    assert [p.id for p in predictions] == evaluation["id"]
    assert all(0.0 <= p.predicted_answer_confidence <= 1.0 for p in predictions)
    metrics = json.loads((run / METRICS_FILE).read_text())
    generations = [json.loads(line) for line in (run / GENERATIONS_FILE).read_text().splitlines()]
    assert [g["id"] for g in generations] == evaluation["id"] and [g["row"] for g in generations] == list(range(5))
    assert metrics["unparsed_generations"] == sum(bool(g["problems"]) for g in generations)
    assert {"answer_f1", "support_f1", "count"} <= set(metrics)
    exemplars = json.loads((run / EXEMPLARS_FILE).read_text())["exemplars"]
    assert len(exemplars) == 2 and not {e["id"] for e in exemplars} & set(evaluation["id"])
    # the error browser shows each question's raw generation
    page = build_page_data(run)
    shown = [row["side_files"] for row in page["rows"]]  # the declared side file, each row's record under its title
    assert [entry[0]["title"] for entry in shown] == ["raw generation"] * 5
    assert [entry[0]["records"][0]["generation"] for entry in shown] == [g["generation"] for g in generations]
    # the same prompts again, from the run folder alone
    original = (run / PREDICTIONS_FILE).read_bytes()
    assert score_run(compose_cfg("evaluate", [f"run={run}"])) == metrics
    assert (run / PREDICTIONS_FILE).read_bytes() == original


def test_exemplars_are_never_a_question_being_answered(tmp_path: Path) -> None:
    cfg = compose_cfg("train", ["model=llm_prompt", "model.shots=4", *COMMON])
    source = instantiate(cfg.dataset)
    train_split = source.load("train").select(range(8))
    for seed in range(5):
        # the questions to answer are half of the training questions themselves: only the other half can serve
        evaluation = train_split.select(range(seed % 2, 8, 2))
        context = RunContext(cfg, source, train_split, evaluation, [], tmp_path, [])
        cfg.seed = seed
        predictor = instantiate_recipe(cfg).fit(context)
        exemplars = {e["id"] for e in json.loads((tmp_path / EXEMPLARS_FILE).read_text())["exemplars"]}
        assert exemplars == set(train_split["id"]) - set(evaluation["id"])
        # and a table that holds an exemplar is refused
        with pytest.raises(MusiqueModelsError, match="exemplars"):
            predictor.predict(train_split, tmp_path)


def test_unreadable_generations_are_counted_written_and_logged(tmp_path: Path, caplog) -> None:
    cfg = compose_cfg("train", ["model=llm_prompt", *COMMON])
    table = instantiate(cfg.dataset).load("dev").select(range(5))
    texts = [
        "answer: Jane Austen | support: 1, 2",  # read in full
        "answer: Jane Austen | supp",  # truncated
        "answer: x | support: x | answer: y",  # support not numbers
        "",  # empty
        "answer: a | support: 999",  # a paragraph the question does not have
    ]
    first_idxs = [paragraphs[0]["idx"] for paragraphs in table["paragraphs"]]
    texts[0] = f"answer: Jane Austen | support: {first_idxs[0]}"
    predictor = instantiate_recipe(cfg)._predictor(cfg, [], with_answerability=False)
    every = [{paragraph["idx"] for paragraph in paragraphs} for paragraphs in table["paragraphs"]]
    predictor.reader.generate = lambda rows: (texts, [0.5] * len(texts), every)
    with caplog.at_level(logging.WARNING):
        predictions = predictor.predict(table, tmp_path)
    assert predictor.extra_metrics == {"unparsed_generations": 4}
    assert isinstance(predictor.extra_metrics["unparsed_generations"], int)  # a count: shown as it is
    assert [(p.predicted_answer, p.predicted_support_idxs) for p in predictions] == [
        ("Jane Austen", [first_idxs[0]]),
        ("Jane Austen", []),
        ("x", []),
        ("", []),
        ("a", []),
    ]
    assert all(p.predicted_answerable for p in predictions)
    written = [json.loads(line) for line in (tmp_path / GENERATIONS_FILE).read_text().splitlines()]
    assert [row["generation"] for row in written] == texts
    assert [bool(row["problems"]) for row in written] == [False, True, True, True, True]
    # one warning: the count and the first three, never one line per generation
    (warning,) = [record for record in caplog.records if "generations could not be read" in record.getMessage()]
    message = warning.getMessage()
    assert message.startswith(
        f"4 of 5 generations could not be read in full; the first 3; every one is in {GENERATIONS_FILE}"
    )
    assert all(table["id"][row] in message for row in range(1, 4)) and table["id"][4] not in message


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        # the default (the guide on) is refused for the guide first: installing vLLM would not be enough
        (["model.engine=vllm"], "model.engine=vllm generates without the format guide"),
        (["model.engine=vllm", "model.reader.guided_format=false"], "model.engine=vllm: vLLM is not installed"),
        (["model.shots=-1"], "model.shots=-1: the number of exemplars is 0 (zero-shot) or more"),
    ],
)
def test_a_prompted_llm_it_cannot_run_is_one_line(overrides: list[str], said: str) -> None:
    cfg = compose_cfg("train", ["model=llm_prompt", *overrides, *COMMON])
    with pytest.raises(Exception) as raised:  # noqa: PT011 (Hydra wraps it; train.py prints the one line)
        instantiate_recipe(cfg)
    message = user_error_message(raised.value)
    assert message.startswith(said) and "\n" not in message


@pytest.mark.parametrize(
    ("dataset", "top_k", "epochs", "monitor_paired"),
    [
        ("musique_ans", 7, 3, False),
        ("musique_full", 7, 3, True),
        ("hotpotqa_20k", 3, 10, False),
        ("2wiki_20k", 5, 10, False),
    ],
)
def test_sa_t5_composes_to_a_roberta_large_selector_and_a_t5_large_answerer(
    dataset: str, top_k: int, epochs: int, monitor_paired: bool, compose_train_cfg
) -> None:
    cfg = compose_train_cfg([f"experiment=sa_t5_{dataset}"])
    assert cfg.model.name == "select_generate" and cfg.dataset.name == dataset and not cfg.dataset.sample
    assert cfg.model.selector.backbone.name == "roberta_large" and cfg.model.selector.lr == 2e-5
    assert cfg.model.selector.schedule == "slanted_triangular"
    answerer = cfg.model.answerer
    assert answerer.backbone.name == "t5_large" and answerer.backbone.path == "google-t5/t5-large"
    assert not answerer.backbone.get("causal", False) and answerer.lr == 1e-4
    assert answerer.micro_batch_size * answerer.accumulate_grad_batches == 16 and answerer.max_epochs == epochs
    assert answerer.max_source_tokens == 2048 and answerer.backbone.max_length == 2048
    recipe = instantiate_recipe(cfg)
    assert recipe.top_k == top_k
    assert cfg.optimized_metric == ("group_answer_sufficiency_f1" if monitor_paired else "answer_f1")
    assert reader_monitor(monitor_paired).endswith(cfg.optimized_metric)


def test_a_prompted_llm_reads_a_trained_selectors_top_k(tmp_path: Path) -> None:
    tiny = instantiate(compose_cfg("train", ["backbone=tiny"]).backbone)
    selector = ParagraphSelector(tiny, len(load_tokenizer(tiny)))
    checkpoint = tmp_path / "selector.ckpt"
    torch.save(
        {
            "state_dict": selector.state_dict(),
            "hyper_parameters": dict(selector.hparams),
            "pytorch-lightning_version": pl.__version__,
        },
        checkpoint,
    )
    cfg = compose_cfg(
        "train", ["model=llm_prompt", f"model.selector_checkpoint={checkpoint}", "model.top_k=3", *COMMON]
    )
    predictor = instantiate_recipe(cfg)._predictor(cfg, [], with_answerability=False)
    table = instantiate(cfg.dataset).load("dev").select(range(4))
    read = []

    def generate(rows):
        read.extend(rows["selected_idxs"])
        return [""] * len(rows), [0.0] * len(rows), [set(idxs) for idxs in rows["selected_idxs"]]

    predictor.reader.generate = generate
    predictor.predict(table, tmp_path)
    # each question's 3 best paragraphs by the selector, best first
    rankings, _ = predictor.ranker.rank(table)
    assert read == [ranking[:3] for ranking in rankings] and all(len(idxs) == 3 for idxs in read)


def test_a_generation_naming_a_paragraph_the_reader_did_not_read_does_not_get_it_as_support(tmp_path: Path) -> None:
    cfg = compose_cfg(
        "train", ["model=llm_prompt", "model.reader.guided_format=false", "model.reader.max_source_tokens=400", *COMMON]
    )
    reader = instantiate_recipe(cfg)._predictor(cfg, [], with_answerability=False).reader
    table = instantiate(cfg.dataset).load("dev").select(range(3))

    def outputs(rows):  # every row generates a support naming paragraphs 0 and 19
        yield {
            "ids": torch.ones(len(rows), 1, dtype=torch.long),
            "example_row": torch.tensor(rows["example_row"]),
            "confidence": torch.zeros(len(rows)),
        }

    reader.batches.outputs = outputs
    reader.fitted.reader.texts = lambda ids: ["answer: x | support: 0, 19"] * len(ids)
    read = reader.generate(table)[2]
    decoded = reader.read(table)
    # 400 tokens hold the first few of the 20 paragraphs: 0 is read, 19 is not
    assert all(0 in idxs and 19 not in idxs for idxs in read)
    assert [question.support for question in decoded] == [[0]] * 3
    assert all(generation.problems for generation in reader.generations)  # the dropped number is said
