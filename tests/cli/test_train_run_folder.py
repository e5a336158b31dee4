"""What train.py does with its run folder: resume only the same run, refuse to overwrite one, resume a moved
folder, record its status and log what the console shows; and one-line errors for what a user can get wrong."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from musique_models.errors import MusiqueModelsError, RunConfigError
from musique_models.io import write_json
from musique_models.models.selector import load_selector
from musique_models.runs.train import train
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
        (["datset=x"], "unknown key `datset`; did you mean `dataset`?"),
        (["trainer.max_epoch=2"], "unknown key `trainer.max_epoch`; did you mean `trainer.max_epochs`?"),
        (["model.answerr.lr=1"], "unknown key `model.answerr.lr`; did you mean `model.answerer.lr`?"),
        (["+model.lrr=1", "backbone=tiny"], "model.lrr: SelectAnswer has no such setting (its settings: answerer,"),
        (
            ["+model.top_kk=1", "backbone=tiny"],
            "model.top_kk: SelectAnswer has no such setting; did you mean `model.top_k`?",
        ),
        (["model=nope"], "Could not find 'model/nope'"),
        (["seed=${oops}"], "oops"),
        (["model.yes_no=both"], "model.yes_no='both': expected one of prefix, head"),
        (["model.answerer.input=long"], "model.answerer.input='long': expected one of auto, single, windows"),
        (["dataset.sample=false", "dataset.data_dir=/nowhere"], "train file not found: /nowhere/musique_ans_v1.0"),
        (["model.answerer.lrr=1e-4"], "model.answerer.lrr: AnswererSettings has no such setting; did you mean `model"),
        (["+model.answerer.lrr=1e-4"], "model.answerer.lrr: AnswererSettings has no such setting; did you mean `model"),
        (
            ["model.selector.max_epoch=2"],
            "SelectorSettings has no such setting; did you mean `model.selector.max_epochs`?",
        ),
        (["model=q_only", "++model.answerer.beams=3"], "model.answerer.beams: QuestionOnlySettings has no such"),
        (["dataset.files.dev=/x.jsonl"], "dataset.files.dev would not be read: dataset.sample=true reads the shipped"),
        (["dataset.sample=false", "dataset.sample_files.dev=/x"], "dataset.sample_files.dev would not be read"),
    ],
)
@pytest.mark.slow
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
@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (["+model.selector.bogus_key=1"], "error: model.selector.bogus_key: SelectorSettings has no such setting"),
        (["dataset.sample=false", "dataset.data_dir=/nowhere"], "error: MuSiQue-Ans v1.0 train file not found"),
        # Hydra has made its folder already: a run folder asked for elsewhere would be ignored, so it is refused
        (["paths.output_dir=/elsewhere"], "error: paths.output_dir=/elsewhere: train.py writes a run into Hydra's"),
    ],
)
def test_a_refused_run_never_imports_torch(arguments: list[str], expected: str, tmp_path: Path) -> None:
    """In a fresh interpreter (the zygote has torch imported already): a setting or a file refused before any work
    costs the user no torch import, and leaves no run folder."""
    result = run_python(
        ["-X", "importtime", "train.py", *arguments, f"hydra.run.dir={tmp_path}/run"], env={"HF_HUB_OFFLINE": "1"}
    )
    assert result.returncode == 2, result.stderr[-2000:]
    imported = {row.split("|")[-1].strip() for row in result.stderr.splitlines() if row.startswith("import time:")}
    (line,) = [row for row in result.stderr.strip().splitlines() if not row.startswith("import time:")]
    assert line.startswith(expected) and "hydra" in imported and "torch" not in imported
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_hub_backbone_offline_is_refused_in_one_line_before_anything_loads(tmp_path: Path) -> None:
    """Not in the local Hugging Face cache and offline: one line at once (no download retries, torch never loads),
    with the offline backbones of the kind it needs, and no run folder."""
    cases = [
        (["backbone=roberta_large"], "roberta_large", "encoder: minilm", "tiny_llama"),
        (
            ["model=llm_prompt", "backbone@model.reader.backbone=qwen2_5_1_5b_instruct"],
            "qwen2_5_1_5b_instruct",
            "decoder-only: smollm2_135m_instruct, tiny_llama",
            "minilm",
        ),
    ]
    for model, backbone, kind, other_kind in cases:
        result = run_python(
            ["-X", "importtime", "train.py", *model, "dataset.sample=true", f"hydra.run.dir={tmp_path}/run"],
            env={"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")},
        )
        assert result.returncode == 2, result.stderr[-2000:]
        imported = {row.split("|")[-1].strip() for row in result.stderr.splitlines() if row.startswith("import time:")}
        (line,) = [row for row in result.stderr.strip().splitlines() if not row.startswith("import time:")]
        assert line.startswith(f"error: backbone '{backbone}': ") and "is not in the local Hugging Face cache" in line
        assert "HF_HUB_OFFLINE=1 is set" in line and "huggingface-cli download" in line and "backbone.path=" in line
        assert kind in line and other_kind not in line, line  # the backbones of the kind it needs
        assert "torch" not in imported and "musique_models.models.hub" in imported
        assert not (tmp_path / "run").exists()  # nothing started: no run folder is left


@pytest.mark.slow
def test_a_user_error_after_a_stage_trained_keeps_the_run_marked_failed(tmp_path: Path) -> None:
    stage_done = _train_py(
        [
            *TINY,
            "model.answerer.backbone.tokenizer_from.source=bogus",  # found when the answerer's stage builds it
            f"hydra.run.dir={tmp_path}/run",
            f"paths.cache_dir={tmp_path}/cache",
        ],
    )
    assert stage_done.returncode == 2 and "unknown source 'bogus'" in stage_done.stderr, stage_done.stderr[-2000:]
    assert (tmp_path / "run" / "selector" / "stage.json").exists()
    assert json.loads((tmp_path / "run" / "status.json").read_text())["status"] == "failed"


def _train_py(arguments: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_python(["train.py", *arguments], env=env)
