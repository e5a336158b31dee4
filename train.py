"""Train, test and predict with one model on one dataset: `python train.py model=... dataset=...`."""

from __future__ import annotations

import signal
import sys


def _stopped_while_starting(signum: int, frame: object) -> None:
    """A stop signal before even the stop handlers' module has loaded: nothing was written yet; exit 128 + signum."""
    print(f"stopped ({signal.Signals(signum).name}) before the run started: nothing was written", file=sys.stderr)
    raise SystemExit(128 + signum)


# From the first line, a stop signal ends the command at once (on a busy machine, importing even the light modules
# below takes a noticeable part of a second); the interpreter's own handlers come back just before STOP's go in.
_STARTUP_HANDLERS = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
if __name__ == "__main__":
    for _signum in _STARTUP_HANDLERS:
        signal.signal(_signum, _stopped_while_starting)

import os  # noqa: E402

# Light modules only: this attempt begins and its stop handlers are in place before anything heavy loads, so that
# Ctrl-C or a SIGTERM is honoured from the first moment (musique_models.training.stop).
from musique_models.run_files import begin_attempt, discard_unstarted_run, mark_run_start  # noqa: E402
from musique_models.training.stop import STOP, RunInterrupted, stopped_before_start  # noqa: E402

if __name__ == "__main__":
    for _signum, _handler in _STARTUP_HANDLERS.items():
        signal.signal(_signum, _handler)
    begin_attempt()
    STOP.install(slurm="SLURM_JOB_ID" in os.environ)
    STOP.before_stop = lambda: note_hydra_folder()  # defined below: called only when a signal comes

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from musique_models.errors import user_errors_exit  # noqa: E402

# Hydra then raises config errors instead of printing them over several lines: user_errors_exit prints one.
os.environ.setdefault("HYDRA_FULL_ERROR", "1")


# The folder Hydra made for this job, noted by the stop handler when a signal comes (`note_hydra_folder`): a stop
# that comes after Hydra made the folder but before it called `main` leaves Hydra's job, whose `finally` forgets it.
_HYDRA_FOLDER: list[str] = []


def note_hydra_folder() -> None:
    """Note the folder of the job Hydra is running, if it has one yet (called in the stop handler)."""
    from hydra.core.hydra_config import HydraConfig

    config = HydraConfig.instance().cfg
    folder = config.hydra.runtime.output_dir if config is not None else None
    if isinstance(folder, str) and folder:
        _HYDRA_FOLDER.append(folder)


def discard_hydra_folder() -> None:
    """Remove the run folder Hydra made for this command, when a stop came before the run marked its start there
    and it holds nothing but Hydra's files (`run_files.holds_only_this_start`)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        output_dir = HydraConfig.get().runtime.output_dir
    except Exception:  # no job config: none composed yet, or Hydra forgot it leaving a job stopped early
        output_dir = _HYDRA_FOLDER[-1] if _HYDRA_FOLDER else None
    if output_dir:
        discard_unstarted_run(output_dir)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    from hydra.core.hydra_config import HydraConfig

    output_dir = HydraConfig.get().runtime.output_dir
    try:
        # first: a folder left by a kill from here on is known as this run's start (ckpt_path=last starts it afresh)
        mark_run_start(output_dir)
        with user_errors_exit():  # inside too: Hydra would print a line of its own before re-raising
            from musique_models.runs.train import train  # heavy libraries load only once the config has composed

            return train(cfg)
    except RunInterrupted as stop:  # before `train` took the signal over (while its libraries loaded)
        discard_unstarted_run(output_dir)
        raise stopped_before_start(str(stop)) from None


if __name__ == "__main__":
    try:
        with user_errors_exit(config_name="train"):
            main()
    except RunInterrupted as stop:  # while Hydra composed the config, or made the run folder before calling main
        discard_hydra_folder()
        raise stopped_before_start(str(stop)) from None
