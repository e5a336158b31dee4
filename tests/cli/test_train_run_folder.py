"""What train.py does with its run folder: resume only the same run, refuse to overwrite one, resume a moved
folder, record its status and log what the console shows; and one-line errors for what a user can get wrong."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

from musique_models.cli.train import RunConfigError, cores_left_free, cpu_busy_and_total, free_cores, train
from musique_models.errors import MusiqueModelsError
from musique_models.io import write_json
from musique_models.models.selector import load_selector
from tests.conftest import SAMPLES, TINY_SELECT_ANSWER, run_python

TINY = [*TINY_SELECT_ANSWER, "logger=none"]


@pytest.mark.slow
def test_resume_refuses_another_config_and_resumes_the_same_one_even_after_a_move(
    compose_train_cfg, tmp_path: Path
) -> None:
    first = tmp_path / "first"
    train(compose_train_cfg([*TINY, f"paths.output_dir={first}"]))
    assert json.loads((first / "status.json").read_text())["status"] == "finished"
    predictions = (first / "predictions.jsonl").read_text()
    stage = json.loads((first / "answerer" / "stage.json").read_text())
    assert not Path(stage["best_checkpoint"]).is_absolute()

    with pytest.raises(RunConfigError, match="already holds a run"):
        train(compose_train_cfg([*TINY, f"paths.output_dir={first}"]))
    with pytest.raises(RunConfigError, match=r"Differing keys: .*dataset\.name"):
        train(compose_train_cfg([*TINY, "dataset=hotpotqa_20k", f"paths.output_dir={first}", "ckpt_path=last"]))
    other_file = f"dataset.sample_files.train={SAMPLES}/musique_full/train_derived.jsonl"
    with pytest.raises(RunConfigError, match=r"Differing keys: dataset\.sample_files\.train$"):
        train(compose_train_cfg([*TINY, other_file, f"paths.output_dir={first}", "ckpt_path=last"]))
    with pytest.raises(RunConfigError, match=r"Differing keys: callbacks\.early_stopping\.patience$"):
        train(
            compose_train_cfg(
                [*TINY, "callbacks.early_stopping.patience=9", f"paths.output_dir={first}", "ckpt_path=last"]
            )
        )
    with pytest.raises(RunConfigError, match="ckpt_path takes `last`"):
        train(compose_train_cfg([*TINY, f"paths.output_dir={first}", "ckpt_path=/some/answerer.ckpt"]))
    with pytest.raises(RunConfigError, match="holds no run"):
        train(compose_train_cfg([*TINY, f"paths.output_dir={tmp_path / 'empty'}", "ckpt_path=last"]))
    assert (first / "predictions.jsonl").read_text() == predictions  # nothing of the finished run was touched

    # a finished run is left as it is by a resume
    metrics_written = (first / "metrics.json").stat().st_mtime_ns
    train(compose_train_cfg([*TINY, f"paths.output_dir={first}", "ckpt_path=last"]))
    assert (first / "metrics.json").stat().st_mtime_ns == metrics_written

    # a run stopped after its stages finished, then moved, resumes from the stages' best weights in the new folder
    (first / "predictions.jsonl").unlink()
    (first / "metrics.json").unlink()
    write_json(first / "status.json", {"status": "interrupted"})
    moved = tmp_path / "moved"
    shutil.move(first, moved)
    train(compose_train_cfg([*TINY, f"paths.output_dir={moved}", "ckpt_path=last", "model.eval_batch_size=8"]))
    assert (moved / "predictions.jsonl").read_text() == predictions
    assert not first.exists()


@pytest.mark.slow
def test_run_folder_keeps_status_log_and_only_weights(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = _train_py([*TINY, f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={run}"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines()[0] == f"run folder: {run}"  # first, so a killed run can be found
    log = (run / "train.log").read_text()
    assert "MuSiQue-Ans v1.0" in log and "answer_f1" in log and "support_f1" in log  # summary and metrics tables
    assert json.loads((run / "status.json").read_text()) == {"status": "finished"}
    for stage in ("selector", "answerer"):
        (checkpoint,) = (run / stage / "checkpoints").iterdir()
        stored = torch.load(checkpoint, map_location="cpu", weights_only=False)
        assert checkpoint.name == "best.ckpt" and "optimizer_states" not in stored
    for noise in ("Tip:", "GPU available", "TPU available", "resize_token_embeddings", "LeafSpec"):
        assert noise not in result.stdout + result.stderr


def test_a_wrong_stage_checkpoint_is_refused_as_selector(tmp_path: Path) -> None:
    torch.save(
        {
            "state_dict": {"span_head.weight": torch.zeros(1), "encoder.x": torch.zeros(1)},
            "hyper_parameters": {"answerability_head": True},
        },
        tmp_path / "answerer.ckpt",
    )
    with pytest.raises(MusiqueModelsError, match="not a paragraph selector's checkpoint .*span_head"):
        load_selector(str(tmp_path / "answerer.ckpt"))
    with pytest.raises(MusiqueModelsError, match="no such file"):
        load_selector(str(tmp_path / "missing.ckpt"))


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["eval_split=validation"], "has no such split"),
        (["eval_split=test"], "unlabelled and cannot be scored"),
        (["eval_size=0"], "positive number"),
        (["trainer=gpu"], "no usable GPU"),
        (["ckpt_path=last"], "holds no run"),
        (["datset=x"], "Could not override 'datset'"),
        (["model=nope"], "Could not find 'model/nope'"),
        (["seed=${oops}"], "oops"),
        (["model.yes_no=both"], "model.yes_no='both': expected one of prefix, head"),
        (["model.answerer.input=long"], "model.answerer.input='long': expected one of auto, single, windows"),
        (["dataset.sample=false", "dataset.data_dir=/nowhere"], "train file not found: /nowhere/musique_ans_v1.0"),
        (["model.answerer.lrr=1e-4"], "model.answerer.lrr: AnswererSettings has no such setting (its settings: acc"),
        (["+model.answerer.lrr=1e-4"], "model.answerer.lrr: AnswererSettings has no such setting (its settings: acc"),
        (["model=q_only", "++model.answerer.beams=3"], "model.answerer.beams: QuestionOnlySettings has no such"),
        (["dataset.files.dev=/x.jsonl"], "dataset.files.dev would not be read: dataset.sample=true reads the shipped"),
        (["dataset.sample=false", "dataset.sample_files.dev=/x"], "dataset.sample_files.dev would not be read"),
    ],
)
def test_user_errors_are_one_line_and_exit_status_2(arguments: list[str], expected: str, tmp_path: Path) -> None:
    if arguments == ["trainer=gpu"] and torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    result = _train_py([*arguments, f"paths.log_dir={tmp_path}/logs", f"paths.cache_dir={tmp_path}/cache"])
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert (result.stdout + result.stderr).count(expected) == 1  # said once, not logged a second time
    # a run refused, or stopped before it trained anything, leaves no run folder behind
    assert not [path for path in (tmp_path / "logs").rglob("*") if path.is_file()]


@pytest.mark.slow
def test_a_hub_backbone_offline_says_it_needs_a_network(tmp_path: Path) -> None:
    result = _train_py(
        [*TINY, "backbone=roberta_large", f"hydra.run.dir={tmp_path}/run", f"paths.cache_dir={tmp_path}/cache"],
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert "needs a network" in line and "backbone.path" in line
    assert not (tmp_path / "run").exists()  # nothing trained: no run folder is left

    # a user error after a stage trained keeps the run (resumable), marked failed
    stage_done = _train_py(
        [
            *TINY,
            "backbone@model.answerer.backbone=roberta_large",
            f"hydra.run.dir={tmp_path}/run",
            f"paths.cache_dir={tmp_path}/cache",
        ],
        env={"HF_HUB_OFFLINE": "1"},
    )
    assert stage_done.returncode == 2 and "needs a network" in stage_done.stderr, stage_done.stderr[-2000:]
    assert (tmp_path / "run" / "selector" / "stage.json").exists()
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def _train_py(arguments: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_python(["train.py", *arguments], env=env)


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


STAT = "cpu  0 0 0 0 0\ncpu0 {b0} 0 0 {i0} 0\ncpu1 {b1} 0 0 {i1} 0\ncpu2 {b2} 0 0 {i2} 0\ncpu3 {b3} 0 0 {i3} 0\n"


def _reading(busy: list[int], idle: list[int], allowed: set[int]) -> tuple[int, int]:
    values = {f"b{n}": busy[n] for n in range(4)} | {f"i{n}": idle[n] for n in range(4)}
    return cpu_busy_and_total(STAT.format(**values), allowed)


def test_free_cores_arithmetic_counts_only_the_allowed_cpus_and_the_quota() -> None:
    start = _reading([0] * 4, [0] * 4, {0, 1, 2, 3})
    one_busy = _reading([100, 0, 0, 0], [0, 100, 100, 100], {0, 1, 2, 3})  # cpu0 busy the whole time
    assert cores_left_free(start, one_busy, cores=4, quota=4) == 3
    assert cores_left_free(start, one_busy, cores=4, quota=2) == 2  # a cgroup quota of 2 cores
    idle = _reading([0] * 4, [100] * 4, {0, 1, 2, 3})
    assert cores_left_free(start, idle, cores=4, quota=4) == 4
    # a CPU set of cpu2 and cpu3: cpu0's load is another set's business
    allowed = {2, 3}
    assert (
        cores_left_free(
            _reading([0] * 4, [0] * 4, allowed), _reading([100, 0, 0, 0], [0, 100, 100, 100], allowed), cores=2, quota=2
        )
        == 2
    )
    all_busy = _reading([100] * 4, [0] * 4, {0, 1, 2, 3})
    assert cores_left_free(start, all_busy, cores=4, quota=4) == 1  # never fewer than one thread
    assert cores_left_free(start, start, cores=4, quota=4) is None  # no time passed


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_auto_threads_take_one_thread_when_every_core_is_kept_busy() -> None:
    cores = len(os.sched_getaffinity(0))
    spinners = [multiprocessing.Process(target=_spin, args=(3.0,)) for _ in range(cores)]
    for spinner in spinners:
        spinner.start()
    time.sleep(0.5)
    try:
        assert free_cores(0.5) == 1
    finally:
        for spinner in spinners:
            spinner.join()
