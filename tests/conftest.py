"""Shared fixtures. Every test runs offline, with caches under pytest's temporary folder."""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile

_RUN_TMP = tempfile.mkdtemp(prefix="musique-models-tests-")
for _name, _value in {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "WANDB_MODE": "offline",
    "HF_HOME": os.path.join(_RUN_TMP, "hf"),
    "WANDB_DIR": os.path.join(_RUN_TMP, "wandb"),
    "WANDB_DATA_DIR": os.path.join(_RUN_TMP, "wandb-data"),  # artifact staging (else under the home folder)
}.items():
    os.environ.setdefault(_name, _value)

import subprocess  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402

SAMPLES = PROJECT_ROOT / "data" / "samples"
DATASET_CONFIGS = ["musique_ans", "musique_full", "hotpotqa_20k", "2wiki_20k"]
# A Select+Answer run of a few seconds: tiny random backbone, 6 training and 4 evaluation questions, one epoch each.
TINY_SELECT_ANSWER = [
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=6",
    "eval_size=4",
    "model.eval_batch_size=64",
    "model.selector.max_epochs=1",
    "model.answerer.max_epochs=1",
    "trainer.enable_progress_bar=false",
]


@pytest.fixture
def compose_train_cfg(tmp_path: Path) -> Callable[..., DictConfig]:
    """Compose conf/train.yaml with overrides; caches and outputs go under `tmp_path`."""

    def _compose(overrides: Sequence[str] = ()) -> DictConfig:
        with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
            return compose(
                "train",
                overrides=[
                    f"paths.cache_dir={tmp_path}/cache",
                    f"paths.log_dir={tmp_path}/logs",
                    f"paths.output_dir={tmp_path}/run",
                    *overrides,
                ],
            )

    return _compose


def run_python(
    arguments: Sequence[str],
    cwd: Path = PROJECT_ROOT,
    env: dict[str, str] | None = None,
    timeout: int = 600,
    as_a_job: bool = False,
) -> subprocess.CompletedProcess:
    """`python ARGUMENTS` in a subprocess (this interpreter, the repository on PYTHONPATH), output captured.

    `as_a_job`: in a process group of its own that is killed once the process ends, as SLURM or a terminal ends a
    job: the helpers a SIGKILLed process leaves behind (wandb's service) end with it."""
    process = subprocess.Popen(
        [sys.executable, *arguments],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **(env or {})},
        start_new_session=as_a_job,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
        if as_a_job:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
