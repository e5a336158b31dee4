"""trainer=ddp_sim (2 CPU processes, gloo) runs Select+Answer end to end; wandb logs offline into the run folder; a
run whose worker process alone receives SIGINT stops every rank at a resume point and, resumed with the printed
command, ends with exactly the uninterrupted run's predictions (each rank's RNG states are kept)."""

from __future__ import annotations

import json
import shlex
import signal
import sys
from pathlib import Path

import pytest

from musique_models import PROJECT_ROOT
from tests.conftest import run_python

RUN = [
    "train.py",
    "trainer=ddp_sim",
    "backbone=tiny",
    "dataset=musique_full",
    "dataset.sample=true",
    "dataset.train_size=10",
    "eval_size=9",
    "model.selector.max_epochs=2",
    "model.answerer.max_epochs=1",
    "model.selector.validate=true",
    "model.answerer.validate=true",
    "trainer.enable_progress_bar=false",
    "trainer.threads=1",
]


@pytest.mark.slow
def test_ddp_sim_two_cpu_processes(tmp_path: Path) -> None:
    # with wandb (offline): the rank-0 logger of a DDP run
    result = run_python([*RUN, "logger=wandb", f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={tmp_path}/run"])
    assert result.returncode == 0, result.stderr[-4000:]
    assert "distributed_backend=gloo" in result.stderr + result.stdout
    assert "All distributed processes registered. Starting with 2 processes" in result.stderr + result.stdout
    run = tmp_path / "run"
    predictions = (run / "predictions.jsonl").read_text().splitlines()
    assert len(predictions) == 18  # 9 MuSiQue-Full questions, two rows each, none lost or repeated
    metrics = json.loads((run / "metrics.json").read_text())
    assert "group_answer_sufficiency_f1" in metrics and metrics["count"] == 9
    # the validation metrics that ran under DDP were logged once per epoch by the answerer stage
    rows = (next((run / "answerer" / "csv").rglob("metrics.csv"))).read_text()
    assert "answerer/val/group_answer_sufficiency_f1" in rows
    run_id = (run / "wandb_run_id.txt").read_text().strip()
    assert list((run / "wandb").glob(f"offline-run-*-{run_id}"))

    # SIGINT to rank 1's worker process alone, in the selector's second epoch: every rank stops at the same step
    stopped = run_python(
        [
            *RUN,
            f"paths.cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/stopped",
            "+callbacks.ctrl_c._target_=tests.cli.killer.SignalAtStep",
            f"+callbacks.ctrl_c.step={json.loads((run / 'selector/stage.json').read_text())['global_step'] // 2 + 1}",
            "+callbacks.ctrl_c.stage=selector",
            "+callbacks.ctrl_c.signal=SIGINT",
            "+callbacks.ctrl_c.rank=1",  # a worker process, not the main one, and not rank 0
        ]
    )
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-4000:]
    status = json.loads((tmp_path / "stopped/status.json").read_text())
    assert status["status"] == "interrupted" and status["resume_point"] == "selector/checkpoints/last.ckpt"
    # the printed command (`cd FOLDER && python train.py ...`), run in its folder through the zygote rather than a
    # fresh interpreter (tests/cli/test_resume.py pastes printed commands into a shell)
    folder, command = status["resume_command"].split(" && ", 1)
    python, script, *arguments = shlex.split(command)
    assert shlex.split(folder) == ["cd", str(PROJECT_ROOT)] and arguments[-1] == "ckpt_path=last"
    assert (python, script) == (sys.executable, str(PROJECT_ROOT / "train.py"))
    resumed = run_python(["train.py", *arguments], cwd=PROJECT_ROOT)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    assert "stage selector resumes from" in resumed.stderr + resumed.stdout
    for name in ("predictions.jsonl", "metrics.json"):
        assert (tmp_path / "stopped" / name).read_bytes() == (run / name).read_bytes(), name
