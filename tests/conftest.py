"""Shared fixtures. Every test runs offline, with caches under pytest's temporary folder."""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import select
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
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from musique_models import PROJECT_ROOT  # noqa: E402

SAMPLES = PROJECT_ROOT / "data" / "samples"
DATASET_CONFIGS = ["musique_ans", "musique_full", "hotpotqa_20k", "2wiki_20k"]
# A tiny run's thread count: its 64-wide layers gain nothing from a second thread (which, on a core another process
# holds, makes each step many times slower), and a fixed count spares `auto`'s 0.2 s load measurement at every stage.
# The count changes no result (tests/cli/test_resume.py, which also runs `auto`).
ONE_THREAD = "trainer.threads=1"
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
    ONE_THREAD,
]

# Under pytest-xdist each test process computes on one thread: two processes of two threads each on two cores
# spin-wait on each other (a real MiniLM fit took 114 s instead of 23 beside the DDP test). A run a test trains
# sets its own count (`trainer.threads`), as do the subprocesses.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    torch.set_num_threads(1)
TORCH_THREADS = torch.get_num_threads()


@pytest.fixture(autouse=True)
def _torch_threads() -> Iterator[None]:
    """Every test starts with torch's default thread count: a run trained in the test process sets its own."""
    yield
    torch.set_num_threads(TORCH_THREADS)


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

    `python train.py ...` is forked from a process that imported the training stack once (`tests/zygote.py`);
    every other command starts a fresh interpreter. `as_a_job`: in a process group of its own that is killed once
    the process ends, as SLURM or a terminal ends a job: the helpers a SIGKILLed process leaves behind (wandb's
    service) end with it."""
    environment = {**os.environ, "PYTHONPATH": str(PROJECT_ROOT), **(env or {})}
    if arguments and arguments[0] == "train.py":
        result = _zygote().run([str(PROJECT_ROOT / "train.py"), *arguments[1:]], cwd, environment, timeout, as_a_job)
    else:
        process = subprocess.Popen(
            [sys.executable, *arguments],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
            start_new_session=as_a_job,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
        result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        result.pid = process.pid  # type: ignore[attr-defined]
    if as_a_job:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(result.pid, signal.SIGKILL)  # type: ignore[attr-defined]
    return result


class _Zygote:
    """The client of `tests/zygote.py`: one request at a time, each answered by the forked child's pid and status."""

    def __init__(self, command: Sequence[str] = (sys.executable, "-m", "tests.zygote")) -> None:
        # the zygote's own errors (a failed preload, a crash) go to a file that every failure of it quotes
        self.stderr = tempfile.NamedTemporaryFile(prefix="zygote-", suffix=".stderr", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            list(command),
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        )
        assert self._answer(None).get("ready")

    def _answer(self, timeout: float | None) -> dict | None:
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        if not ready:
            return None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the zygote (tests/zygote.py) ended; its stderr ({self.stderr.name}):\n{self.errors()}")
        return json.loads(line)

    def errors(self) -> str:
        """What the zygote itself wrote to stderr (its children write to their own files)."""
        return Path(self.stderr.name).read_text(errors="replace")

    def run(
        self, argv: list[str], cwd: Path, env: dict[str, str], timeout: int, new_session: bool
    ) -> subprocess.CompletedProcess:
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder) / "stdout", Path(folder) / "stderr"
            request = {"argv": argv, "cwd": str(cwd), "env": env, "stdout": str(out), "stderr": str(err)}
            self.process.stdin.write(json.dumps({**request, "new_session": new_session}) + "\n")
            self.process.stdin.flush()
            pid = self._answer(60)["pid"]
            answer = self._answer(timeout)
            if answer is None:
                os.kill(pid, signal.SIGKILL)
                self._answer(None)
                raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text())
            result = subprocess.CompletedProcess(
                [sys.executable, *argv], os.waitstatus_to_exitcode(answer["status"]), out.read_text(), err.read_text()
            )
            result.pid = pid  # type: ignore[attr-defined]
            return result

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.stderr.close()
        Path(self.stderr.name).unlink(missing_ok=True)


@functools.cache
def _zygote() -> _Zygote:
    zygote = _Zygote()
    atexit.register(zygote.close)
    return zygote


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first (in their order): a minute-long test that starts last keeps one test process busy while
    the other has nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
