"""A run stopped by a signal: what stopped it, its status `interrupted`, and the exact commands that resume it (the
run, and the whole sweep for a multirun job). Light: nothing here imports torch, so a stop while torch loads is
still answered."""

from __future__ import annotations

import logging
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from musique_models import PROJECT_ROOT
from musique_models.io import write_json
from musique_models.run_files import (
    CHECKPOINTS_FOLDER,
    RESUME_FILE,
    STATUS_FILE,
    has_trained,
)
from musique_models.training.stop import STOP, RunInterrupted, requeue_slurm_job

log = logging.getLogger(__name__)


def is_interruption(error: BaseException) -> bool:
    """Whether the run stopped because it was asked to: a `RunInterrupted` in the error's chain, or, after a stop
    signal, Lightning's own exit on a signal (`KeyboardInterrupt`, `SystemExit`)."""
    if _run_interrupted(error) is not None:
        return True
    return STOP.requested and isinstance(error, KeyboardInterrupt | SystemExit)


def interruption_reason(error: BaseException) -> str:
    """What stopped the run, as the `RunInterrupted` in the error's chain says (`SIGINT received again: stopped at
    once`), else the signal's name."""
    interruption = _run_interrupted(error)
    return str(interruption) if interruption is not None and str(interruption) else STOP.signal_name or "a stop request"


def _run_interrupted(error: BaseException) -> RunInterrupted | None:
    """The first `RunInterrupted` in the error's chain (its causes and contexts), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RunInterrupted):
            return current
        current = current.__cause__ or current.__context__
    return None


def interrupted(output_dir: Path, reason: str) -> SystemExit:
    """Record the stopped run as `interrupted` with its resume point and the command that resumes it, print both,
    requeue the job when SLURM asked (its time-limit or pre-emption signal), and give the exit to raise
    (128 + the signal's number, as a shell reports a process stopped by a signal)."""

    command = resume_command(output_dir)
    record: dict[str, Any] = {"status": "interrupted", "signal": STOP.signal_name, "resume_command": command}
    sweep_command = sweep_resume_command()
    if sweep_command is not None:
        record["sweep_resume_command"] = sweep_command
    points = sorted(output_dir.glob(f"*/{CHECKPOINTS_FOLDER}/{RESUME_FILE}"), key=lambda path: path.stat().st_mtime_ns)
    if points:
        record["resume_point"] = str(points[-1].relative_to(output_dir))
    if STOP.requeue:
        launcher = callable(STOP.previous.get(STOP.signum))
        record["requeue"] = "asked of the launcher's own handler" if launcher else "scontrol requeue"
    write_json(output_dir / STATUS_FILE, record)
    where = (
        "none: every finished stage is kept, the stage that was running starts afresh"
        if has_trained(output_dir)
        else "none yet (no stage had started): resuming starts the run's first stage"
    )
    if points:
        try:  # torch loads here when the stop came before it did (or in the middle of its import): then say less
            from musique_models.training.resume import describe_resume_point

            where = f"{points[-1]}, {describe_resume_point(points[-1])}"
        except Exception:  # the status is written; a point that cannot be described now is only not described
            where = str(points[-1])
    log.warning("run interrupted (%s). Resume point: %s", reason, where)
    print(f"resume it with:\n  {command}", file=sys.stderr, flush=True)
    if sweep_command is not None:
        print(
            f"or resume the whole sweep (finished jobs are kept) with:\n  {sweep_command}", file=sys.stderr, flush=True
        )
    if STOP.requeue:
        requeue_slurm_job(STOP.signum, STOP.previous.get(STOP.signum))
    return SystemExit(128 + int(STOP.signum or 0))


def resume_command(output_dir: Path) -> str:
    """The exact command that resumes the run in `output_dir`: the run's own overrides (a multirun job's, as a
    single run), its folder and `ckpt_path=last`, from the folder it was started in. The folder is quoted for
    Hydra's override grammar where it needs it (a path may hold `=`, `,`, brackets) and the whole for the shell."""
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        overrides = [o for o in task_overrides() if o.split("=", 1)[0].lstrip("+~") != "ckpt_path"]
        if in_multirun():
            overrides.append("hydra.mode=RUN")
        cwd = hydra_cfg.runtime.cwd
    else:  # called from Python, not through train.py: the overrides are not known here
        overrides, cwd = ["<the run's overrides>"], os.getcwd()
    arguments = [
        sys.executable,
        str(PROJECT_ROOT / "train.py"),
        *overrides,
        f"hydra.run.dir={hydra_value(str(output_dir.resolve()))}",
        "ckpt_path=last",
    ]
    return shell_command(cwd, arguments)


def in_multirun() -> bool:
    """Whether this is a job of a Hydra multirun (`--multirun`)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def shell_command(cwd: str, arguments: list[str]) -> str:
    """`cd CWD && ARGUMENTS`, quoted for a POSIX shell."""
    return f"cd {shlex.quote(cwd)} && {shlex.join(arguments)}"


def sweep_resume_command() -> str | None:
    """For a job of a multirun started with `train.py --multirun`, the command that resumes the whole sweep: the
    sweep's own command line in its folder (`hydra.sweep.dir`) with `ckpt_path=last`, which keeps the finished
    jobs, resumes the stopped one and starts those not started. None for a single run, or a job run by a launcher
    in another process (its command line is not the sweep's)."""
    if not in_multirun():
        return None
    if Path(sys.argv[0]).resolve() != (PROJECT_ROOT / "train.py").resolve():
        return None
    hydra_cfg = HydraConfig.get()
    kept = [
        argument
        for argument in sys.argv[1:]
        if argument.split("=", 1)[0].lstrip("+~") not in ("ckpt_path", "hydra.sweep.dir")
    ]
    arguments = [
        sys.executable,
        str(PROJECT_ROOT / "train.py"),
        *kept,
        f"hydra.sweep.dir={hydra_value(str(Path(hydra_cfg.sweep.dir).resolve()))}",
        "ckpt_path=last",
    ]
    return shell_command(hydra_cfg.runtime.cwd, arguments)


def hydra_value(text: str) -> str:
    """`text` as a value of Hydra's override grammar: as it is when it holds only characters that need no quoting
    (ASCII letters, digits and `/._-@+`), else single-quoted with its quotes escaped."""
    if re.fullmatch(r"[A-Za-z0-9_/.@+-]+", text):
        return text
    return "'" + text.replace("'", "\\'") + "'"


def task_overrides() -> list[str]:
    """The run's command-line overrides as typed (`seed=${x}` stays as it is: never resolved here); [] outside
    Hydra."""
    if not HydraConfig.initialized():
        return []
    return list(OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False))
