"""Every documented logger x callbacks option runs; a user's own logger or callback works from its config alone;
stages log under their own prefix with a step that never goes back; a failed run says so."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from musique_models.runs.train import train
from tests.conftest import TINY_SELECT_ANSWER
from tests.training.helpers import RecordingLogger

TINY = [
    *TINY_SELECT_ANSWER,
    "model.answerer.max_epochs=2",
    "model.answerer.validate=true",
    "model.answerer.micro_batch_size=4",
    "trainer.log_every_n_steps=1",
]


@pytest.mark.slow
@pytest.mark.parametrize("callbacks", ["default", "none"])
@pytest.mark.parametrize("logger", ["csv", "wandb", "none"])
def test_every_logger_and_callbacks_option_runs(logger: str, callbacks: str, compose_train_cfg, tmp_path: Path) -> None:
    cfg = compose_train_cfg([*TINY, f"logger={logger}", f"callbacks={callbacks}"])
    train(cfg)
    run = Path(cfg.paths.output_dir)
    assert json.loads((run / "status.json").read_text())["status"] == "finished"
    assert json.loads((run / "metrics.json").read_text())["count"] == 4
    # a finished stage keeps only its best weights: no optimizer state, no resume points
    for stage in ("selector", "answerer"):
        assert [p.name for p in (run / stage / "checkpoints").iterdir()] == ["best.ckpt"]
    # the wandb config keeps the CSV logger too
    assert (run / "answerer" / "csv").exists() == (logger in ("csv", "wandb"))
    assert (run / "wandb").exists() == (logger == "wandb")
    if logger == "csv":
        rows = {stage: _csv_rows(run / stage) for stage in ("selector", "answerer")}
        keys = set(rows["answerer"][0])
        assert "selector/train/loss" in rows["selector"][0]
        assert {"answerer/train/loss", "answerer/val/answer_f1"} <= keys
        assert ("answerer/lr-AdamW/pg1" in keys) == (callbacks == "default")  # the lr monitor only with callbacks
        steps = {stage: [int(row["step"]) for row in stage_rows] for stage, stage_rows in rows.items()}
        assert steps["answerer"] == sorted(steps["answerer"]) and max(steps["selector"]) < min(steps["answerer"])


def _csv_rows(stage_dir: Path) -> list[dict[str, str]]:
    with open(next((stage_dir / "csv").rglob("metrics.csv"))) as handle:
        return list(csv.DictReader(handle))


@pytest.mark.slow
def test_a_users_logger_gets_prefixed_monotonic_steps_and_a_failed_run_is_finalised_as_failed(
    compose_train_cfg,
) -> None:
    user_logger = ["logger=none", "+logger.mine._target_=tests.training.helpers.RecordingLogger"]
    cfg = compose_train_cfg([*TINY, *user_logger])
    train(cfg)
    steps = [step for step, metrics in RecordingLogger.calls if step is not None]
    assert steps == sorted(steps)
    keys = {key for _, metrics in RecordingLogger.calls for key in metrics}
    assert {"selector/train/loss", "answerer/train/loss", "test/answer_f1"} <= keys
    assert not {key for key in keys if key.startswith(("train/", "val/", "epoch"))}  # nothing unprefixed
    assert RecordingLogger.statuses[-1] == "success"

    failing = compose_train_cfg(
        [
            *TINY,
            *user_logger,
            "paths.output_dir=" + str(Path(cfg.paths.output_dir) / "x"),
            "+callbacks.fail._target_=tests.training.helpers.FailAtStep",
            "+callbacks.fail.step=1",
            "+callbacks.fail.stage=answerer",
        ]
    )
    with pytest.raises(RuntimeError, match="injected failure"):
        train(failing)
    assert RecordingLogger.statuses[-1] == "failed"
    status = json.loads((Path(failing.paths.output_dir) / "status.json").read_text())
    assert status["status"] == "failed" and "injected failure" in status["error"]
