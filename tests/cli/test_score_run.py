"""`evaluate.py run=RUN_DIR`: predicting with a finished run (never training), its exact reproduction of the run's
own metrics, DiRe on every model family and dataset, the unlabelled test split, and the refusals."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from musique_models import PROJECT_ROOT
from musique_models.cli.evaluate import EvaluateConfigError
from musique_models.data.formats import read_examples
from musique_models.data.probe import support_groups
from musique_models.data.subsample import evaluation_subset_indices
from musique_models.data.unlabelled import write_unlabelled
from musique_models.evaluation.evaluator import evaluate_dire_files
from musique_models.export import export_run
from musique_models.runs.api import ApiInputError, load_run
from musique_models.runs.score import RunScoringError, score_run
from musique_models.runs.train import train
from musique_models.systems import registry
from musique_models.training.stage import StageNotFinishedError
from tests.conftest import ONE_THREAD, SAMPLES, run_python

QUESTIONS = 4
COMMON = [
    "dataset.sample=true",
    "dataset.train_size=6",
    f"eval_size={QUESTIONS}",
    "trainer.fast_dev_run=true",
    "trainer.enable_progress_bar=false",
    ONE_THREAD,
    "logger=none",
]
# The contract test: every model the registry names (`system:` in its conf/model/ config) is trained on its tiny
# backbones (`system.tiny`) on its `system.contract_dataset`, then `evaluate.py run=` must reproduce it without
# training. A new model is tested by its config.
RUNS = {
    f"{model}-{system.contract_dataset}": [f"model={model}", f"dataset={system.contract_dataset}", *system.tiny]
    for model, system in registry().items()
    if system.name is not None
}
SAMPLE_DEV = {
    "musique_ans": SAMPLES / "musique_ans" / "dev.jsonl",
    "musique_full": SAMPLES / "musique_full" / "dev_derived.jsonl",
    "hotpotqa_20k": SAMPLES / "hotpotqa" / "dev.json",
    "2wiki_20k": SAMPLES / "2wiki" / "dev.json",
}


def compose_cfg(config: str, overrides: list[str]) -> DictConfig:
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        return compose(config, overrides=overrides)


def trained_run(tmp_path: Path, name: str) -> Path:
    run = tmp_path / name
    train(compose_cfg("train", [*RUNS[name], *COMMON, f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={run}"]))
    return run


FULL_RUN = ["model=select_answer", "dataset=musique_full", "backbone=tiny"]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished Select+Answer run on the MuSiQue-Full sample, shared by the tests that only read it."""
    tmp_path = tmp_path_factory.mktemp("score_run")
    run = tmp_path / "full"
    train(compose_cfg("train", [*FULL_RUN, *COMMON, f"paths.cache_dir={tmp_path}/cache", f"paths.output_dir={run}"]))
    return run


def evaluate_run(run: Path, *overrides: str) -> dict[str, float]:
    return score_run(compose_cfg("evaluate", [f"run={run}", *overrides]))


def gold_subset(dataset: str, count: int, output: Path) -> Path:
    """The `count` questions of the dataset's dev sample that `eval_size=count` scores, as a gold file in its own
    format (written here from the raw records: not through the code under test)."""
    source = SAMPLE_DEV[dataset]
    data_format = {
        "musique_ans": "musique",
        "musique_full": "musique",
        "hotpotqa_20k": "hotpotqa",
        "2wiki_20k": "2wiki",
    }
    examples = list(read_examples(source, data_format[dataset], dataset))
    ids = [example.id for example in examples]
    kept = {ids[row] for row in evaluation_subset_indices(ids, [example.num_hops for example in examples], count)}
    if source.suffix == ".jsonl":
        lines = source.read_text().splitlines()
        output.write_text("\n".join(line for line in lines if json.loads(line)["id"] in kept) + "\n")
    else:
        output.write_text(json.dumps([record for record in json.loads(source.read_text()) if record["_id"] in kept]))
    return output


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def check_against_the_run_and_the_evaluator(run: Path, dataset: str, partition: str, gold_folder: Path) -> None:
    """`evaluate.py run=RUN mode=dire` on the run's own split: its predictions and standard metrics are the run's
    own exactly (same weights, features, decoding), and its DiRe figures are what the evaluator's DiRe function
    computes from the written files."""
    dire = evaluate_run(run, "mode=dire", f"partition={partition}")
    folder = run / "evaluations" / f"{dataset}-dev-dire-{partition}"
    metrics = json.loads((run / "metrics.json").read_text())
    assert {key: dire[key] for key in metrics} == metrics
    assert (folder / "predictions.jsonl").read_text() == (run / "predictions.jsonl").read_text()
    probes = read_jsonl(folder / "probe_predictions.jsonl")
    per_question = read_jsonl(folder / "metrics.per_question.jsonl")
    answerable = [row["id"] for row in per_question if row["answerable"]]
    assert [(p["id"], p["probe"]) for p in probes] == [(i, k) for i in answerable for k in (0, 1)]
    assert all(0.0 <= p["predicted_answer_confidence"] <= 1.0 for p in probes)
    written_probes = (
        read_jsonl(folder / "probe.jsonl")
        if (folder / "probe.jsonl").exists()
        else json.loads((folder / "probe.json").read_text())
    )
    assert len(written_probes) == len(probes)
    gold = gold_subset(dataset, QUESTIONS, gold_folder / f"gold{SAMPLE_DEV[dataset].suffix}")
    from_files = evaluate_dire_files(gold, folder / "predictions.jsonl", folder / "probe_predictions.jsonl")
    assert {key: dire[key] for key in from_files.metrics} == from_files.metrics
    assert dire["dire_count"] == len(set(answerable)) > 0


def check_the_python_api(run: Path, dataset: str, folder: Path) -> None:
    """`load_run(RUN).predict_records(records)` on the raw records of the run's evaluation questions gives exactly the
    run's predictions (the same code path as `evaluate.py run=`)."""
    gold = gold_subset(dataset, QUESTIONS, folder / f"api_gold{SAMPLE_DEV[dataset].suffix}")
    records = read_jsonl(gold) if gold.suffix == ".jsonl" else json.loads(gold.read_text())
    expected = [
        (p["id"], p["predicted_answer"], p["predicted_support_idxs"], p["predicted_answerable"])
        + (p["predicted_answer_confidence"],)
        for p in read_jsonl(run / "predictions.jsonl")
    ]
    answers = load_run(run, device="cpu").predict_records(records)
    assert [(a.id, a.answer, a.support_idxs, a.answerable, a.confidence) for a in answers] == expected
    # what the system writes beside its predictions comes back on each answer, as the run wrote it
    ranking = (
        json.loads((run / "selector_ranking.json").read_text()) if (run / "selector_ranking.json").exists() else {}
    )
    if ranking.get("chains"):  # Beam SA
        assert [a.chain for a in answers] == [entry["chain"] for entry in ranking["chains"]]
    elif ranking:
        assert [a.ranking for a in answers] == [entry["ranking"] for entry in ranking["rankings"]]
    if (run / "steps.jsonl").exists():  # Step Execution
        assert sum(len(a.steps) for a in answers) == len(read_jsonl(run / "steps.jsonl")) > 0
    if (run / "generations.jsonl").exists():  # a generative reader
        assert [a.generation for a in answers] == [g["generation"] for g in read_jsonl(run / "generations.jsonl")]
    # its export (safetensors, tokenizers, config, model card) loads back to the same predictions, reading nothing
    # outside the export: no package, no hub
    export = export_run(run, folder / "export")
    with reading_only_the_export():
        exported = load_run(export, device="cpu").predict_records(records)
    assert [(a.id, a.answer, a.support_idxs, a.answerable, a.confidence) for a in exported] == expected


@contextmanager
def reading_only_the_export() -> Iterator[None]:
    """Any backbone read from an installed package or the hub fails the test."""

    def outside(*args: object, **kwargs: object) -> None:
        pytest.fail(f"an export's load read a backbone outside the export: {args}")

    with (
        mock.patch("musique_models.models.backbone.packaged_path", outside),
        mock.patch("musique_models.models.backbone.hub_folder", outside),
    ):
        yield


@pytest.mark.slow
@pytest.mark.parametrize("name", list(RUNS))
def test_evaluate_run_reproduces_the_runs_metrics_and_scores_dire_as_the_evaluator(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = trained_run(tmp_path, name)
    stages = {path: path.stat().st_mtime_ns for path in run.rglob("*") if path.is_file()}
    # nothing may fit: any Trainer.fit (every stage's training goes through it) fails the test
    monkeypatch.setattr(pl.Trainer, "fit", lambda *args, **kwargs: pytest.fail("evaluate.py run= trained a stage"))
    dataset = RUNS[name][1].split("=")[1]
    check_against_the_run_and_the_evaluator(run, dataset, "half", tmp_path)
    check_the_python_api(run, dataset, tmp_path)
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in stages.items())  # nothing of the run was touched


@pytest.mark.slow
def test_probe_predictions_never_name_a_removed_paragraph(full_run: Path, tmp_path: Path) -> None:
    run = full_run
    check_against_the_run_and_the_evaluator(run, "musique_full", "first_vs_rest", tmp_path)
    folder = run / "evaluations" / "musique_full-dev-dire-first_vs_rest"
    present = {
        (record["id"], record["probe"]): {paragraph["idx"] for paragraph in record["paragraphs"]}
        for record in read_jsonl(folder / "probe.jsonl")
    }
    for probe in read_jsonl(folder / "probe_predictions.jsonl"):
        assert set(probe["predicted_support_idxs"]) <= present[(probe["id"], probe["probe"])]
    # first_vs_rest: probe 0 lacks exactly the first supporting paragraph of the decomposition, probe 1 the rest
    dev = {e.id: e for e in read_examples(SAMPLE_DEV["musique_full"], "musique", "musique_full") if e.answerable}
    for (question_id, number), idxs in present.items():
        first, rest = support_groups(dev[question_id], "first_vs_rest")
        assert not set([first, rest][number]) & idxs and set([rest, first][number]) <= idxs


def test_unlabelled_test_split_gives_the_leaderboard_file_unscored(full_run: Path, tmp_path: Path, capsys) -> None:
    run = full_run
    test_file = SAMPLES / "musique_full" / "test_unlabelled_derived.jsonl"
    assert evaluate_run(run, "split=test") == {}
    folder = run / "evaluations" / "musique_full-test"
    predictions = read_jsonl(folder / "predictions.jsonl")
    # every test row, in the file's order, both twins of each MuSiQue-Full id
    assert [p["id"] for p in predictions] == [json.loads(line)["id"] for line in test_file.read_text().splitlines()]
    assert all(len([q for q in predictions if q["id"] == p["id"]]) == 2 for p in predictions)
    assert set(predictions[0]) >= {"id", "predicted_answer", "predicted_support_idxs", "predicted_answerable"}
    assert not (folder / "metrics.json").exists()
    assert "NOT scored" in " ".join(capsys.readouterr().out.split())
    # the shipped unlabelled sample is the dev sample's first ids with the labels stripped, reproducibly
    remade = tmp_path / "remade.jsonl"
    write_unlabelled(SAMPLE_DEV["musique_full"], remade, count=10)
    assert remade.read_text() == test_file.read_text()


def test_predicting_another_datasets_split(full_run: Path) -> None:
    run = full_run
    metrics = evaluate_run(run, "dataset=2wiki_20k", "dataset.sample=true", "eval_size=3")
    predictions = read_jsonl(run / "evaluations" / "2wiki_20k-dev" / "predictions.jsonl")
    assert len(predictions) == 3 and metrics["count"] == 3.0
    assert "group_answer_sufficiency_f1" not in metrics  # 2Wiki has no unanswerable twins


def test_unpaired_musique_full_questions_get_the_unpaired_metrics(full_run: Path, tmp_path: Path) -> None:
    # the real MuSiQue-Full dev questions come one row an id: no An+Sf, but answerability and its mean with An
    real = SAMPLES.parent / "heldout" / "musique_full" / "dev_real100.jsonl.gz"
    metrics = evaluate_run(
        full_run,
        "dataset=musique_full",
        "dataset.sample=true",
        f"dataset.sample_files.dev={real}",
        "dataset.paired=false",
        "eval_size=6",
        f"output={tmp_path / 'real'}",
    )
    assert "group_answer_sufficiency_f1" not in metrics and "avg_answer_sufficiency_f1" in metrics
    assert metrics["avg_answer_sufficiency_f1"] == pytest.approx((metrics["answer_f1"] + metrics["sufficiency_f1"]) / 2)
    rows = read_jsonl(tmp_path / "real" / "metrics.per_question.jsonl")
    assert len(rows) == 6 and {row["answerable"] for row in rows} == {True, False}
    assert all("pair" not in row["counts_toward"] for row in rows)


def test_unfinished_runs_missing_stages_and_unknown_splits_are_refused(full_run: Path, tmp_path: Path) -> None:
    run = Path(shutil.copytree(full_run, tmp_path / "run"))  # this test breaks the run: a copy
    with pytest.raises(RunScoringError, match="no such split"):
        evaluate_run(run, "split=validation")
    stage_file = run / "answerer" / "stage.json"
    stage_record = stage_file.read_text()
    stage_file.unlink()
    with pytest.raises(StageNotFinishedError, match="no finished stage 'answerer'"):
        evaluate_run(run)
    stage_file.write_text(stage_record)
    best = run / json.loads(stage_record)["best_checkpoint"]
    os.rename(best, best.with_suffix(".moved"))
    with pytest.raises(StageNotFinishedError, match="best checkpoint .* is missing"):
        evaluate_run(run)
    os.rename(best.with_suffix(".moved"), best)
    (run / "status.json").write_text(json.dumps({"status": "failed", "error": "killed"}))
    result = run_python(["evaluate.py", f"run={run}"], timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "the run is failed, not finished" in result.stderr.strip().splitlines()[-1]
    with pytest.raises(EvaluateConfigError, match="nothing-here: no such folder"):
        evaluate_run(tmp_path / "nothing-here")
    (tmp_path / "not-a-run").mkdir()
    with pytest.raises(EvaluateConfigError, match="not a train.py run folder"):
        evaluate_run(tmp_path / "not-a-run")


@pytest.mark.slow
def test_step_execution_and_the_decomposer_alone_predict_an_unlabelled_test_set(tmp_path: Path, capsys) -> None:
    # EX(EE) on MuSiQue-Full: the decomposer decomposes test questions that have no gold decomposition
    execution = tmp_path / "execution"
    train(
        compose_cfg(
            "train",
            [
                *RUNS["step_execution-musique_ans"],
                "dataset=musique_full",
                "executor=end2end",
                "backbone=tiny_longformer",
                *COMMON,
                "eval_size=2",
                f"paths.cache_dir={tmp_path}/cache",
                f"paths.output_dir={execution}",
            ],
        )
    )
    assert evaluate_run(execution) == json.loads((execution / "metrics.json").read_text())
    assert evaluate_run(execution, "split=test") == {}
    folder = execution / "evaluations" / "musique_full-test"
    test_ids = [json.loads(line)["id"] for line in (SAMPLES / "musique_full" / "test_unlabelled_derived.jsonl").open()]
    assert [p["id"] for p in read_jsonl(folder / "predictions.jsonl")] == test_ids
    assert [d["id"] for d in read_jsonl(folder / "decompositions.jsonl")] == list(dict.fromkeys(test_ids))
    assert {s["id"] for s in read_jsonl(folder / "steps.jsonl")} == set(test_ids)
    # the decomposer alone: its scores reproduced; a test set decomposed, not scored; no DiRe without answers
    alone = tmp_path / "decomposer"
    train(
        compose_cfg(
            "train",
            [
                "model=decomposer",
                "dataset=2wiki_20k",
                "backbone@model.decomposer.backbone=tiny_bart",
                "model.decomposer.num_beams=1",
                "model.decomposer.max_target_tokens=24",
                *COMMON,
                f"paths.cache_dir={tmp_path}/cache",
                f"paths.output_dir={alone}",
            ],
        )
    )
    assert evaluate_run(alone) == json.loads((alone / "metrics.json").read_text())
    assert evaluate_run(alone, "split=test") == {}
    assert len(read_jsonl(alone / "evaluations" / "2wiki_20k-test" / "decompositions.jsonl")) == 20
    assert not (alone / "evaluations" / "2wiki_20k-test" / "predictions.jsonl").exists()
    with pytest.raises(RunScoringError, match="no DiRe"):
        evaluate_run(alone, "mode=dire")


@pytest.mark.slow
def test_dire_min_paragraphs_on_a_trained_run(tmp_path: Path, capsys) -> None:
    """`evaluate.py run=RUN mode=dire dire_min_paragraphs=5` on 30 HotpotQA dev questions (one of them has 2
    paragraphs): that question gets no probes, DiRe counts it as skipped and averages over the other 29, as the
    evaluator does on the written files."""
    run = trained_run(tmp_path, "one_para-hotpotqa_20k")
    dire = evaluate_run(run, "mode=dire", "eval_size=30", "dire_min_paragraphs=5")
    folder = run / "evaluations" / "hotpotqa_20k-dev-dire-half-min5paragraphs"
    assert dire["dire_skipped_count"] == 1 and dire["dire_count"] == 29 and dire["count"] == 30
    assert "DiRe skipped 1 answerable question(s) with fewer than 5 paragraphs" in capsys.readouterr().out
    probes = json.loads((folder / "probe.json").read_text())
    short = "5abd259d55429924427fcf1a"
    assert len(probes) == 58 and short not in {probe["_id"] for probe in probes}
    assert short not in {probe["id"] for probe in read_jsonl(folder / "probe_predictions.jsonl")}
    gold = gold_subset("hotpotqa_20k", 30, tmp_path / "gold.json")
    from_files = evaluate_dire_files(
        gold, folder / "predictions.jsonl", folder / "probe_predictions.jsonl", min_paragraphs=5
    )
    assert {key: dire[key] for key in from_files.metrics} == from_files.metrics
    # what the folder scored, as the report reads it: not the run's own evaluation set (30 of its questions)
    assert json.loads((folder / "scoring.json").read_text()) == {
        "dataset": "hotpotqa_20k",
        "split": "dev",
        "sample": True,
        "eval_size": 30,
        "rows": 30,
        "mode": "dire",
        "partition": "half",
        "dire_min_paragraphs": 5,
    }


def test_a_run_folder_that_does_not_exist_is_refused_before_torch_loads(tmp_path: Path) -> None:
    result = run_python(["-X", "importtime", "evaluate.py", f"run={tmp_path / 'nothing-here'}"], timeout=120)
    assert result.returncode == 2
    (line,) = [row for row in result.stderr.splitlines() if not row.startswith("import time:")]
    assert line == f"error: run={tmp_path / 'nothing-here'}: no such folder"
    imported = {row.split("|")[-1].strip() for row in result.stderr.splitlines() if row.startswith("import time:")}
    assert "torch" not in imported


@pytest.mark.slow
def test_the_python_api_answers_plain_questions_and_refuses_bad_input_in_one_line(
    full_run: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    model = load_run(full_run, device="cpu")
    paragraphs = [{"title": "Rome", "text": "Rome was founded by Romulus."}, "Paris is the capital of France."]
    one = model.predict("Who founded Rome?", paragraphs, id="mine")
    batch = model.predict_batch(
        [("Who founded Rome?", paragraphs), {"question": "Where is Paris?", "paragraphs": paragraphs}]
    )
    # one question alone or in a batch: the same answer (the selector ranks each question's paragraphs on its own)
    assert (one.id, batch[0].id, batch[1].id) == ("mine", "q0", "q1")
    assert (one.answer, one.support_idxs, one.answerable) == (
        batch[0].answer,
        batch[0].support_idxs,
        batch[0].answerable,
    )
    assert one.support_titles == [["Rome", ""][idx] for idx in one.support_idxs] and 0.0 <= one.confidence <= 1.0
    assert sorted(one.ranking) == [0, 1]  # Select+Answer's ranking of the paragraphs given

    bad = [
        (lambda: model.predict(3, paragraphs), "item 0: the question must be a non-empty string"),
        (lambda: model.predict("q", []), "item 0: paragraphs must be a non-empty list"),
        (
            lambda: model.predict("q", [{"title": "t"}]),
            "item 0, paragraph 0: expected a string or a dict with a `text`",
        ),
        (lambda: model.predict_records([{"foo": 1}]), "record 0: not a MuSiQue, HotpotQA or 2WikiMultihopQA record"),
        (lambda: load_run(tmp_path / "nowhere"), "no such folder"),
        (lambda: model.predict_batch([]), "no questions to answer"),
        (lambda: model.predict_batch([("a", paragraphs, "x"), ("b", paragraphs, "x")]), "ids given twice: x"),
        (lambda: load_run(full_run, device="tpu"), "device='tpu': expected one of cpu, cuda"),
        (lambda: model.predict_records({"id": "x"}), "takes a list of records; got one record (a dict): pass [record]"),
        (lambda: model.predict_batch(("q", paragraphs)), "takes a list of (question, paragraphs) items; for one, use"),
    ]
    for call, message in bad:
        with pytest.raises(ApiInputError, match=re.escape(message)):
            call()
    # a run that did not finish, and a run made by another version: one line each, before any weight loads
    unfinished = tmp_path / "unfinished"
    shutil.copytree(full_run, unfinished)
    (unfinished / "status.json").write_text(json.dumps({"status": "interrupted"}))
    with pytest.raises(ApiInputError, match="the run is interrupted, not finished"):
        load_run(unfinished)
    other = tmp_path / "other"
    shutil.copytree(full_run, other)
    provenance = json.loads((other / "provenance.json").read_text())
    provenance["versions"]["musique-models"] = "9.9.0"
    (other / "provenance.json").write_text(json.dumps(provenance))
    with pytest.raises(ApiInputError, match="made by musique-models 9.9.0, this is 0.1.0"):
        load_run(other)
    if not torch.cuda.is_available():  # cuda asked for on a machine without a GPU: said, then loaded on the CPU
        with caplog.at_level("WARNING", logger="musique_models.runs.api"):
            assert load_run(full_run, device="cuda").predict("Who founded Rome?", paragraphs).answer == one.answer
        assert "device=cuda: this machine has no GPU" in caplog.text


@pytest.mark.slow
def test_the_python_api_pages_example_runs_on_a_tiny_run(
    full_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    page = (PROJECT_ROOT / "docs" / "python-api.md").read_text()
    block = page.split("<!-- example:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    namespace = {"RUN_DIR": str(full_run), "EXPORT_DIR": str(tmp_path / "export")}
    exec(compile(block, "docs/python-api.md", "exec"), namespace)  # noqa: S102 (the docs' own code)
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 2 and printed[1].startswith("[")  # the answer line, then the support


@pytest.mark.slow
def test_the_python_api_answers_unlabelled_records_as_the_official_test_files_hold_them(full_run: Path) -> None:
    unlabelled = read_jsonl(SAMPLES / "musique_ans" / "test_unlabelled.jsonl")[:3]
    assert all("answer" not in record and "question_decomposition" not in record for record in unlabelled)
    answers = load_run(full_run, device="cpu").predict_records(unlabelled)
    assert [answer.id for answer in answers] == [record["id"] for record in unlabelled]
    assert all(
        set(answer.support_idxs) <= {p["idx"] for p in record["paragraphs"]}
        for answer, record in zip(answers, unlabelled)
    )
