"""What a run does when it is asked to stop (Ctrl-C, a scheduler's SIGTERM, SLURM's requeue signals), from the moment
`train.py` starts.

Standard library only: `train.py` installs the handlers before Hydra composes the config and before torch loads, so
that a stop signal is honoured in every phase of a run: before the run starts (nothing is kept), while it reads and
featurises its data or predicts (it stops at once, `interrupted`, resumable), and while a stage trains (at the
stage's next optimizer step, after writing a resume point: `musique_models.training.resume`).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from musique_models.run_files import STOP_FILE

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# SLURM sends these before a time limit (`--signal=USR1@120`) or a pre-emption; submitit uses SIGUSR2.
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


class RunInterrupted(BaseException):
    """The run stopped because it was asked to (a signal); its resume points are in place.

    A `BaseException`, as `KeyboardInterrupt` is: it is raised from a signal handler at any point, and no
    `except Exception` on the way may swallow it. (Not a `KeyboardInterrupt`: Lightning turns that into
    `sys.exit(1)`.)"""


class StopRequest:
    """This process's record of a stop signal (one per process: `STOP`).

    `handling()` installs the handlers for a run and restores the previous ones after it; `deferred(stage_dir)`
    marks the span in which a training stage honours the request itself (at its next optimizer step). Outside that
    span a signal raises `RunInterrupted` at once; inside it the request is recorded and written to
    `stage_dir/STOP_FILE` for the stage's other processes. A second signal raises at once anywhere.
    """

    def __init__(self) -> None:
        self.signum: int | None = None
        self.installed = False
        self.previous: dict[int, Any] = {}
        self._stage_dir: Path | None = None
        self._main = True
        self._pid = os.getpid()
        # called in the handler just before it raises `RunInterrupted` (train.py notes the folder Hydra made: Hydra
        # forgets it on the way out of a job stopped before the task function ran)
        self.before_stop: Callable[[], None] | None = None

    @property
    def requested(self) -> bool:
        """Whether a stop signal was received since `handling()` began."""
        return self.signum is not None

    @property
    def signal_name(self) -> str:
        """The received signal's name (`SIGINT`), empty when none was."""
        return signal.Signals(self.signum).name if self.signum is not None else ""

    @property
    def requeue(self) -> bool:
        """Whether the signal asks for the job to be requeued (SLURM's time-limit or pre-emption warning)."""
        return self.signum in REQUEUE_SIGNALS

    @contextmanager
    def handling(self, slurm: bool = False, main: bool = True) -> Iterator[StopRequest]:
        """Install the stop handlers for SIGINT and SIGTERM (and SIGUSR1/SIGUSR2 with `slurm`) until the block
        ends. `main=False` (a DDP worker process) only records signals: the main process decides when to stop."""
        if not self.install(slurm, main):
            yield self
            return
        try:
            yield self
        finally:
            for signum, handler in self.previous.items():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            self.installed = False

    def install(self, slurm: bool = False, main: bool = True) -> bool:
        """Install the stop handlers for good (`train.py` does so before anything else loads, so that a signal is
        honoured in every phase); whether this call installed them (False when they already are, or off the main
        thread, where Python cannot)."""
        if self.installed or threading.current_thread() is not threading.main_thread():
            return False
        signals = STOP_SIGNALS + (REQUEUE_SIGNALS if slurm else ())
        self.signum, self.installed, self._main, self._pid = None, True, main, os.getpid()
        self.previous = {signum: signal.signal(signum, self._handle) for signum in signals}
        return True

    def reclaim(self) -> None:
        """Put this object's handler back on SIGTERM (Lightning puts its own there at the start of every fit)."""
        if self.installed and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._handle)

    @contextmanager
    def deferred(self, stage_dir: Path | None) -> Iterator[None]:
        """While the block runs, a training stage in `stage_dir` honours a stop request at its next optimizer step
        (None: no stage writes resume points, so a signal stops at once)."""
        self._stage_dir = stage_dir
        if stage_dir is not None:
            (stage_dir / STOP_FILE).unlink(missing_ok=True)
        try:
            yield
        except BaseException as error:
            stop_file = stage_dir / STOP_FILE if stage_dir is not None else None
            if isinstance(error, RunInterrupted) or stop_file is None or not stop_file.exists():
                raise
            # the stage's DDP worker processes stopped on a request (theirs alone, perhaps): so does this process
            if not self.requested:
                self.signum = signal.Signals[stop_file.read_text().strip()]
            raise RunInterrupted(f"{self.signal_name}: the stage's processes stopped at a resume point") from error
        finally:
            self._stage_dir = None
            if stage_dir is not None:
                (stage_dir / STOP_FILE).unlink(missing_ok=True)

    def pending_in(self, stage_dir: Path) -> bool:
        """Whether a stop was requested in this process or, through `STOP_FILE`, in the run's main process."""
        return self.requested or (stage_dir / STOP_FILE).exists()

    def _before_stopping(self) -> None:
        """Call `before_stop` (what the entry point must note while the signal's moment lasts); never fails."""
        if self.before_stop is not None:
            with contextlib.suppress(Exception):
                self.before_stop()

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            return  # a forked child (a DataLoader worker) inherited the handler: the process that installed it acts
        first = self.signum is None
        if first:
            self.signum = signum
        if not self._main:
            return  # a DDP worker: the request is acted on at the next optimizer step, together with every rank
        name = signal.Signals(signum).name
        if not first:
            for child in multiprocessing.active_children():  # DDP workers, DataLoader workers: they stop too
                child.kill()
            self._before_stopping()
            raise RunInterrupted(f"{name} received again: stopped at once")
        if self._stage_dir is None:
            self._before_stopping()
            raise RunInterrupted(f"{name} received")
        self._stage_dir.mkdir(parents=True, exist_ok=True)
        (self._stage_dir / STOP_FILE).write_text(name + "\n")
        log.warning(
            "%s received: the stage writes a resume point at its next optimizer step (after the current validation, "
            "if one runs) and stops; send it again to stop at once",
            name,
        )


STOP = StopRequest()


def stopped_before_start(reason: str) -> SystemExit:
    """Say that a stop signal came before the run started (nothing of it is kept) and give the exit to raise:
    128 + the signal's number, as a shell reports a process stopped by a signal."""
    print(f"stopped ({reason}) before the run started: nothing was written", file=sys.stderr, flush=True)
    return SystemExit(128 + int(STOP.signum or signal.SIGINT))


def requeue_slurm_job(signum: int | None, previous_handler: Any) -> None:
    """Requeue this SLURM job after a time-limit or pre-emption signal, as Lightning's SLURM support does: through
    the launcher's own handler of that signal when it has one (submitit requeues the job and exits), else with
    `scontrol requeue <job>` (an array task as `<array job>_<task>`)."""
    if callable(previous_handler):
        previous_handler(signum, None)
        return
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ.get("SLURM_JOB_ID", "")
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        log.error("cannot requeue SLURM job %s: scontrol is not on PATH", job)
        return
    if result.returncode == 0:
        log.warning("requeued SLURM job %s: it resumes this run when it starts again", job)
    else:
        log.error("scontrol requeue %s failed (%d): %s", job, result.returncode, result.stderr.strip())
