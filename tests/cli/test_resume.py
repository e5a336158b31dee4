"""A run SIGKILLed mid-epoch and resumed with ckpt_path=last ends with the metrics of an uninterrupted run."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import torch

from tests.conftest import run_python

RUN = [
    "train.py",
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=24",
    "eval_size=12",
    "model.selector.max_epochs=1",
    "model.answerer.max_epochs=2",
    "model.answerer.micro_batch_size=2",
    "model.answerer.accumulate_grad_batches=1",
    "callbacks=none",
    "callbacks.step_checkpoint.every_n_train_steps=2",
    "trainer.enable_progress_bar=false",
    "logger=wandb",
    "trainer.threads=2",  # not `auto`: a thread count that follows the load would change float rounding
]


def _train(tmp_path: Path, run_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    return run_python([*RUN, f"paths.cache_dir={tmp_path}/cache", f"hydra.run.dir={run_dir}", *extra])


def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(tmp_path: Path) -> None:
    uninterrupted = _train(tmp_path, tmp_path / "full")
    assert uninterrupted.returncode == 0, uninterrupted.stderr[-3000:]

    killed_dir = tmp_path / "killed"
    killed = _train(
        tmp_path,
        killed_dir,
        "+callbacks.killer._target_=tests.cli.killer.KillAtStep",
        "+callbacks.killer.step=5",
        "+callbacks.killer.stage=answerer",
    )
    assert killed.returncode == -signal.SIGKILL
    assert not (killed_dir / "metrics.json").exists() and not (killed_dir / "predictions.jsonl").exists()
    assert not (killed_dir / "answerer/checkpoints/last.ckpt").exists()  # killed before its first validation
    last = torch.load(killed_dir / "answerer/checkpoints/steps/last.ckpt", map_location="cpu", weights_only=False)
    # a finished stage keeps only its best weights; its record says how many steps it took (2 epochs)
    assert [p.name for p in (tmp_path / "full/answerer/checkpoints").iterdir()] == ["best.ckpt"]
    batches_per_epoch = json.loads((tmp_path / "full/answerer/stage.json").read_text())["global_step"] // 2
    assert last["global_step"] == 4 and last["epoch"] == 0  # mid-epoch: step 4 of the first epoch
    assert last["loops"]["fit_loop"]["epoch_loop.batch_progress"]["current"]["processed"] == 4 < batches_per_epoch
    assert last["QADataModule"]["train_position"] == {"epoch": 0, "batches_done": 4}

    resumed = _train(tmp_path, killed_dir, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "stage selector already finished" in resumed.stderr + resumed.stdout
    assert json.loads((killed_dir / "metrics.json").read_text()) == json.loads(
        (tmp_path / "full/metrics.json").read_text()
    )
    assert (killed_dir / "predictions.jsonl").read_text() == (tmp_path / "full/predictions.jsonl").read_text()
    # the resumed run continued the same (offline) wandb run
    run_id = (killed_dir / "wandb_run_id.txt").read_text().strip()
    assert len(list((killed_dir / "wandb").glob(f"offline-run-*-{run_id}"))) >= 1
