"""Step Execution: hop-by-hop execution on hand-made cases, the refusal of HotpotQA, and tiny end-to-end runs of
both executors on every dataset that has decompositions."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import datasets
import pytest

from musique_models.data.features import FEATURES
from musique_models.data.schema import Example, Paragraph
from musique_models.evaluation.evaluator import evaluate_predictions
from musique_models.evaluation.gold import gold_from_example
from musique_models.features.decomposition import decomposition_text, parse_decomposition
from musique_models.models.decoding import DecodedQuestion
from musique_models.recipes.build import instantiate_recipe
from musique_models.recipes.decomposer import DECOMPOSER_MONITOR, Decomposer
from musique_models.recipes.reader import reader_monitor
from musique_models.recipes.select_answer import SELECTOR_MONITOR
from musique_models.recipes.step_execution import ExecutedStep, StepExecution, chain_prediction, execute_steps
from musique_models.runs.train import train
from tests.conftest import ONE_THREAD, run_python

# A world of facts the fake executor knows: question -> (answer, paragraph idx).
FACTS = {
    "who directed Alien": ("Ridley Scott", 3),
    "Ridley Scott >> place of birth": ("South Shields", 7),
    "South Shields >> located in": ("Tyne and Wear", 1),
    "Tyne and Wear >> country": ("England", 0),
    "who wrote Dune": ("Frank Herbert", 2),
}


class FakeExecutor:
    """Answers from FACTS (an unknown question: the empty answer, unanswerable); records each call's questions."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def answer(self, table: datasets.Dataset) -> list[DecodedQuestion]:
        self.calls.append(list(table["question"]))
        decoded = []
        for question in table["question"]:
            answer, paragraph = FACTS.get(question, ("", None))
            support = {} if paragraph is None else {paragraph: 0.9, paragraph + 10: 0.2}
            decoded.append(DecodedQuestion(answer, 0.5, [], support, paragraph is not None, 0.9))
        return decoded


def _table(count: int) -> datasets.Dataset:
    example = Example(
        id="q",
        dataset="musique_ans",
        question="original",
        paragraphs=[Paragraph(idx=i, title="t", text="x", is_supporting=False) for i in range(20)],
        answer="",
        answer_aliases=[],
        answerable=True,
        decomposition=[],
        num_hops=2,
    )
    rows = [{**example.to_dict(), "id": f"q{row}"} for row in range(count)]
    return datasets.Dataset.from_list(rows, features=FEATURES)


def test_steps_run_hop_by_hop_with_earlier_answers_filled_in() -> None:
    templates = [
        ["who directed Alien", "#1 >> place of birth"],  # 2 hops
        ["who directed Alien", "#1 >> place of birth", "#2 >> located in"],  # 3 hops
        ["who directed Alien", "#1 >> place of birth", "#2 >> located in", "#3 >> country"],  # 4 hops
        ["who wrote Dune"],
    ]
    executor = FakeExecutor()
    executed = execute_steps(executor, _table(4), templates)
    # one batched call per hop, holding exactly the rows that have that hop
    assert [len(call) for call in executor.calls] == [4, 3, 2, 1]
    assert executor.calls[1] == ["Ridley Scott >> place of birth"] * 3
    assert [step.answer for step in executed[2]] == ["Ridley Scott", "South Shields", "Tyne and Wear", "England"]
    assert [step.question for step in executed[2]][-1] == "Tyne and Wear >> country"
    assert [step.paragraph for step in executed[2]] == [3, 7, 1, 0]  # each step's most probable paragraph
    prediction = chain_prediction("q2", executed[2])
    assert prediction.predicted_answer == "England"
    assert prediction.predicted_support_idxs == [0, 1, 3, 7]  # the union of the steps' paragraphs
    assert chain_prediction("q3", executed[3]).predicted_answer == "Frank Herbert"


def test_invalid_references_become_empty_strings_and_never_crash() -> None:
    parsed = parse_decomposition(decomposition_text(["who directed Alien", "#3 >> place of birth", "#2 >> country"]))
    assert parsed.invalid and parsed.steps == ["who directed Alien", "#3 >> place of birth", "#2 >> country"]
    executor = FakeExecutor()
    executed = execute_steps(executor, _table(1), [parsed.steps])
    # #3 does not exist yet when step 2 runs, #2 exists when step 3 runs (with step 2's empty answer)
    assert [step.question for step in executed[0]] == ["who directed Alien", ">> place of birth", ">> country"]
    assert [step.answer for step in executed[0]] == ["Ridley Scott", "", ""]


def test_full_answerability_rule_and_support_union_on_twins() -> None:
    answerable_steps = [
        ExecutedStep(1, "a", "a", "x", 0.9, 4, True),
        ExecutedStep(2, "#1 b", "x b", "y", 0.8, 4, True),
    ]
    one_unanswerable = [answerable_steps[0], ExecutedStep(2, "#1 b", "x b", "y", 0.8, 9, False)]
    answerable = chain_prediction("q", answerable_steps)
    unanswerable = chain_prediction("q", one_unanswerable)
    assert answerable.predicted_answerable and answerable.predicted_support_idxs == [4]  # a paragraph counts once
    assert not unanswerable.predicted_answerable and unanswerable.predicted_support_idxs == [4, 9]
    # scored as a MuSiQue-Full twin pair: both answerability predictions right -> the answerable row's answer F1
    paragraphs = [Paragraph(idx=i, title="t", text="x", is_supporting=i == 4) for i in range(10)]
    golds = [
        gold_from_example(Example("q", "musique_full", "?", paragraphs, "y", [], answerable, [], 2), row)
        for row, answerable in enumerate((True, False))
    ]
    metrics = evaluate_predictions(golds, [answerable, unanswerable]).metrics
    assert metrics["group_answer_sufficiency_f1"] == 1.0 and metrics["sufficiency_accuracy"] == 1.0


def test_hotpotqa_is_refused_in_one_line(tmp_path: Path) -> None:
    result = run_python(
        [
            "train.py",
            "model=step_execution",
            "dataset=hotpotqa_20k",
            "dataset.sample=true",
            "backbone=tiny",
            "logger=none",
            f"paths.cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/run",
        ]
    )
    assert result.returncode == 2
    # the whole of stderr is the one line that says why and what to use instead
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: model=decomposer needs question decompositions, and HotpotQA (distractor) has none")
    assert "use dataset=musique_ans, musique_full or 2wiki_20k" in line


# A few seconds: the tiny random BART decomposer, 6 training and 4 evaluation questions, one batch per stage.
TINY_DECOMPOSER = [
    "backbone@model.decomposer.backbone=tiny_bart",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=4",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
    "model.decomposer.num_beams=2",
    "model.decomposer.max_target_tokens=40",
]
TINY_STEP_EXECUTION = ["model=step_execution", *TINY_DECOMPOSER]
EXECUTOR_BACKBONES = {"end2end": ["backbone=tiny_longformer"], "select_answer": ["backbone=tiny"]}


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["end2end", "select_answer"])
@pytest.mark.parametrize("dataset", ["musique_ans", "musique_full", "2wiki_20k"])
def test_fast_dev_run_of_both_executors(executor: str, dataset: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg(
        [*TINY_STEP_EXECUTION, f"dataset={dataset}", f"executor={executor}", *EXECUTOR_BACKBONES[executor]]
    )
    train(cfg)
    run = Path(cfg.paths.output_dir)
    stages = [
        "decomposer",
        *(["executor_reader"] if executor == "end2end" else ["executor_selector", "executor_answerer"]),
    ]
    assert all((run / stage / "stage.json").exists() for stage in stages)
    rows = 4 * (2 if dataset == "musique_full" else 1)
    predictions = [json.loads(line) for line in (run / "predictions.jsonl").read_text().splitlines()]
    decompositions = [json.loads(line) for line in (run / "decompositions.jsonl").read_text().splitlines()]
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    metrics = json.loads((run / "metrics.json").read_text())
    assert len(predictions) == rows and len(decompositions) == 4  # twins share their decomposition
    # every row ran at least one step, the steps of a row are numbered 1..n, and the prediction is the chain's
    by_row: dict[int, list[dict]] = {}
    for step in steps:
        by_row.setdefault(step["row"], []).append(step)
    assert sorted(by_row) == list(range(rows))
    for row, prediction in enumerate(predictions):
        chain = by_row[row]
        assert [step["step"] for step in chain] == list(range(1, len(chain) + 1))
        assert prediction["predicted_answer"] == chain[-1]["answer"]
        assert prediction["predicted_support_idxs"] == sorted(
            {s["paragraph"] for s in chain if s["paragraph"] is not None}
        )
    assert metrics["invalid_decompositions"] == sum(d["invalid"] for d in decompositions)
    assert ("group_answer_sufficiency_f1" in metrics) == (dataset == "musique_full")


# The official execution systems (StonyBrookNLP/musique experiment_configs/execution_*.jsonnet, setting=full), per
# stage: backbone, lr, epochs, effective batch, patience, token caps, K, validation metric and the rest that differs.
_DECOMPOSER = {
    "backbone": "bart_large",
    "lr": 3e-5,
    "epochs": 3,
    "batch": 16,
    "patience": 10,
    "monitor": "val/bleu",
    "max_source_tokens": 100,
    "max_target_tokens": 100,
    "num_beams": 10,
    "label_smoothing": 0.1,
    "gradient_clip_algorithm": "norm",
}
_SINGLE_HOP_AN, _SINGLE_HOP_AN_SF = "val/answer_f1", "val/avg_answer_sufficiency_f1"


def _ex_ee(
    batch: int, paragraph_tokens: int, batches_per_epoch: int | None, single_support: bool, monitor: str
) -> dict:
    return {
        "decomposer": _DECOMPOSER,
        "reader": {
            "backbone": "longformer_large",
            "lr": 2e-5,
            "epochs": 3,
            "batch": batch,
            "patience": 3,
            "monitor": monitor,
            "max_question_tokens": 150,
            "max_paragraph_tokens": paragraph_tokens,
            "max_document_tokens": 4000,
            "batches_per_epoch": batches_per_epoch,
            "single_support": single_support,
        },
    }


def _ex_sa(selector_batch: int, selector_patience: int, monitor: str) -> dict:
    return {
        "decomposer": _DECOMPOSER,
        "selector": {
            "backbone": "roberta_large",
            "lr": 2e-5,
            "epochs": 3,
            "batch": selector_batch,
            "patience": selector_patience,
            "monitor": "val/rank_f1",
            "max_length": 300,
        },
        "answerer": {
            "backbone": "longformer_large",
            "lr": 2e-5,
            "epochs": 3,
            "batch": 16,
            "patience": 3,
            "monitor": monitor,
            "max_question_tokens": 150,
            "max_paragraph_tokens": 400,
            "max_document_tokens": 4000,
            "k": 3,
        },
    }


EXECUTION_SYSTEMS = {
    "ex_ee_musique_ans": _ex_ee(12, 250, 2000, True, _SINGLE_HOP_AN),
    "ex_ee_musique_full": _ex_ee(12, 250, 3000, False, _SINGLE_HOP_AN_SF),
    "ex_ee_2wiki_20k": _ex_ee(16, 500, None, False, _SINGLE_HOP_AN),
    "ex_sa_musique_ans": _ex_sa(12, 2, _SINGLE_HOP_AN),
    "ex_sa_musique_full": _ex_sa(12, 2, _SINGLE_HOP_AN_SF),
    "ex_sa_2wiki_20k": _ex_sa(16, 3, _SINGLE_HOP_AN),
    "decomposer_musique": {"decomposer": _DECOMPOSER},
    "decomposer_2wiki": {"decomposer": _DECOMPOSER},
}


@pytest.mark.parametrize("system", list(EXECUTION_SYSTEMS))
def test_each_execution_system_composes_to_exactly_the_official_values(system: str, compose_train_cfg) -> None:
    cfg = compose_train_cfg([f"experiment={system}"])
    assert not cfg.dataset.sample and cfg.seed == 100
    datasets_of_decomposers = {"decomposer_musique": "musique_ans", "decomposer_2wiki": "2wiki_20k"}
    assert cfg.dataset.name == datasets_of_decomposers.get(system) or system.endswith(cfg.dataset.name)
    recipe = instantiate_recipe(cfg)
    if system.startswith("ex_"):
        assert isinstance(recipe, StepExecution) and recipe.decomposition == "predicted"
        assert recipe.executor == ("end2end" if system.startswith("ex_ee") else "select_answer")
    else:
        assert isinstance(recipe, Decomposer)
    executor_monitor = reader_monitor(cfg.dataset.name == "musique_full", paired=False)
    for stage, expected in EXECUTION_SYSTEMS[system].items():
        stage_cfg = cfg.model[stage]
        actual = {
            "backbone": stage_cfg.backbone.name,
            "lr": stage_cfg.lr,
            "epochs": stage_cfg.max_epochs,
            "batch": stage_cfg.micro_batch_size * stage_cfg.accumulate_grad_batches,
            "patience": stage_cfg.patience,
            "monitor": {"decomposer": DECOMPOSER_MONITOR, "selector": SELECTOR_MONITOR}.get(stage, executor_monitor),
        }
        actual.update({key: stage_cfg.get(key) for key in expected if key not in actual and key != "k"})
        if "k" in expected:
            actual["k"] = recipe.select_answer.top_k
        assert actual == expected
        if stage == "decomposer":  # AllenNLP's polynomial_decay: linear decay from the first step, no warmup
            assert stage_cfg.schedule == "linear" and stage_cfg.warmup_ratio == 0.0
        else:
            assert stage_cfg.schedule == "slanted_triangular" and stage_cfg.warmup_ratio == 0.1
            assert stage_cfg.validate and stage_cfg.get("max_answer_tokens") is None


RESUMABLE_RUN = [
    "train.py",
    "model=step_execution",
    "executor=select_answer",
    "backbone=tiny",
    "backbone@model.decomposer.backbone=tiny_bart",
    "model.decomposer.max_epochs=1",
    "model.decomposer.num_beams=2",
    "model.decomposer.max_target_tokens=40",
    "dataset.sample=true",
    "dataset.train_size=10",
    "eval_size=6",
    "model.selector.max_epochs=1",
    "model.answerer.max_epochs=2",
    "model.answerer.micro_batch_size=2",
    "trainer.enable_progress_bar=false",
    "logger=none",
    ONE_THREAD,
]


@pytest.mark.slow
def test_kill_in_the_executors_training_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    def run(run_dir: Path, *extra: str):
        return run_python([*RESUMABLE_RUN, f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={run_dir}", *extra])

    uninterrupted = run(tmp_path / "full")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]
    # the default callbacks: killed in the executor answerer's second epoch, it resumes from its first epoch's end
    per_epoch = json.loads((tmp_path / "full/executor_answerer/stage.json").read_text())["global_step"] // 2
    killed_dir = tmp_path / "killed"
    killed = run(
        killed_dir,
        "+callbacks.killer._target_=tests.cli.killer.SignalAtStep",
        f"+callbacks.killer.step={per_epoch + 1}",
        "+callbacks.killer.stage=executor_answerer",
    )
    assert killed.returncode == -signal.SIGKILL
    assert (killed_dir / "executor_selector/stage.json").exists()
    assert not (killed_dir / "executor_answerer/stage.json").exists()
    assert (killed_dir / "executor_answerer/checkpoints/last.ckpt").exists()
    resumed = run(killed_dir, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "stage decomposer already finished" in resumed.stderr + resumed.stdout
    assert "stage executor_answerer resumes from" in resumed.stderr + resumed.stdout
    for name in ("predictions.jsonl", "steps.jsonl", "decompositions.jsonl", "metrics.json"):
        assert (killed_dir / name).read_text() == (tmp_path / "full" / name).read_text(), name


def test_the_decomposer_alone_writes_decompositions_and_their_scores_not_answers(compose_train_cfg) -> None:
    cfg = compose_train_cfg(["model=decomposer", "dataset=2wiki_20k", *TINY_DECOMPOSER])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics) == {"decomposition_bleu", "decomposition_exact_match", "invalid_decompositions"}
    assert 0.0 <= metrics["decomposition_bleu"] <= 100.0 and 0.0 <= metrics["decomposition_exact_match"] <= 1.0
    decompositions = [json.loads(line) for line in (run / "decompositions.jsonl").read_text().splitlines()]
    assert len(decompositions) == 4 and metrics["invalid_decompositions"] == sum(d["invalid"] for d in decompositions)
    assert not (run / "predictions.jsonl").exists()


@pytest.mark.slow
def test_single_hop_summary_view(tmp_path: Path) -> None:
    common = ["dataset.sample=true", f"paths.cache_dir={tmp_path}/cache"]
    result = run_python(["-m", "musique_models.data.summary", "dataset=musique_full", "view=single_hop", *common])
    assert result.returncode == 0, result.stderr[-2000:]
    assert "train (single-hop)" in result.stdout and "dev (single-hop)" in result.stdout
    refused = run_python(["-m", "musique_models.data.summary", "dataset=hotpotqa_20k", "view=single_hop", *common])
    assert refused.returncode == 2 and "has no decompositions" in refused.stderr.strip().splitlines()[-1]
    unknown = run_python(["-m", "musique_models.data.summary", "dataset=musique_ans", "view=steps", *common])
    assert unknown.returncode == 2 and "view='steps'" in unknown.stderr
