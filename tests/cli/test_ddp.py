"""trainer=ddp_sim (2 CPU processes, gloo) runs Select+Answer end to end; wandb logs offline into the run folder."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_python


def test_ddp_sim_two_cpu_processes(tmp_path: Path) -> None:
    result = run_python(
        [
            "train.py",
            "trainer=ddp_sim",
            "backbone=tiny",
            "dataset=musique_full",
            "dataset.sample=true",
            "dataset.train_size=10",
            "eval_size=9",
            "model.selector.max_epochs=1",
            "model.answerer.max_epochs=1",
            "model.selector.validate=true",
            "model.answerer.validate=true",
            "trainer.enable_progress_bar=false",
            "logger=wandb",
            f"paths.cache_dir={tmp_path}/cache",
            f"hydra.run.dir={tmp_path}/run",
        ]
    )
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
