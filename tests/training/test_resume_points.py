"""Resume points on a schedule (every N minutes of training, only right after an optimizer step, never on an epoch's
last batch), and how a stop signal is honoured: at once between stages, at the next optimizer step while a stage
trains, at once on a second signal; SLURM's requeue through the launcher's own handler."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest
import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.demos.boring_classes import BoringModel

from musique_models.run_files import STOP_FILE
from musique_models.training import resume
from musique_models.training.resume import BestCheckpoint, ResumePoints, partial_path, save_atomically
from musique_models.training.stop import STOP, RunInterrupted, requeue_slurm_job


class FakeClock:
    """`time.monotonic` that moves `step` seconds at every reading."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def _fit(tmp_path: Path, callback: ResumePoints, epochs: int = 2) -> list[tuple[int, int, bool]]:
    """Fit a small model (8 batches an epoch, 2 per optimizer step); the (epoch, step, end of epoch) of every resume
    point the callback wrote."""
    written: list[tuple[int, int, bool]] = []
    save = callback._save

    def recording_save(trainer: pl.Trainer, reason: str, end_of_epoch: bool = False) -> None:
        save(trainer, reason, end_of_epoch)
        assert callback.path.exists()
        written.append((trainer.current_epoch, trainer.global_step, end_of_epoch))

    callback._save = recording_save  # type: ignore[method-assign]
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=epochs,
        limit_train_batches=8,
        limit_val_batches=0,
        accumulate_grad_batches=2,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(BoringModel())
    return written


def test_every_n_minutes_writes_after_optimizer_steps_and_at_epoch_ends_only(tmp_path: Path, monkeypatch) -> None:
    # the clock is read at the start, after every optimizer step and after every point written: a minute has
    # passed at every second optimizer step after a point
    monkeypatch.setattr(resume.time, "monotonic", FakeClock(step=31.0))
    written = _fit(tmp_path, ResumePoints(dirpath=str(tmp_path / "checkpoints"), every_n_minutes=1.0))
    # 4 optimizer steps an epoch (8 micro-batches): due after steps 2 and 6, never between the two micro-batches of
    # a step nor at an epoch's last step (4), whose end-of-epoch point follows; none after the last epoch
    assert written == [(0, 2, False), (0, 4, True), (1, 6, False)]


def test_without_a_schedule_only_epoch_ends_write(tmp_path: Path) -> None:
    written = _fit(tmp_path, ResumePoints(dirpath=str(tmp_path / "checkpoints"), every_n_minutes=None), epochs=3)
    assert written == [(0, 4, True), (1, 8, True)]


def test_a_signal_between_stages_stops_at_once_and_inside_a_stage_is_recorded(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT)  # Python's own handler; ignored in a job started in the background
    with STOP.handling(), pytest.raises(RunInterrupted, match="SIGTERM received"):
        os.kill(os.getpid(), signal.SIGTERM)
    assert STOP.signal_name == "SIGTERM"
    with STOP.handling():
        assert not STOP.requested  # a new run starts without a request
        with STOP.deferred(tmp_path):
            os.kill(os.getpid(), signal.SIGINT)  # recorded; the stage will stop at its next optimizer step
            assert STOP.requested and (tmp_path / STOP_FILE).read_text() == "SIGINT\n"
            with pytest.raises(RunInterrupted, match="SIGINT received again"):
                os.kill(os.getpid(), signal.SIGINT)
        assert not (tmp_path / STOP_FILE).exists()
    assert signal.getsignal(signal.SIGINT) is before  # restored


def test_a_second_signal_stops_the_child_processes_too(tmp_path: Path) -> None:
    """Under DDP the stage trains in child processes that may not have received the signal: a second one stops
    them with the run, which would otherwise wait for them at exit."""
    child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(60,))
    child.start()
    with STOP.handling(), STOP.deferred(tmp_path):
        os.kill(os.getpid(), signal.SIGTERM)
        assert child.is_alive()  # the first signal only asks the stage to stop at its next optimizer step
        with pytest.raises(RunInterrupted, match="SIGTERM received again"):
            os.kill(os.getpid(), signal.SIGTERM)
    child.join(timeout=5)
    assert not child.is_alive() and child.exitcode == -signal.SIGKILL


def test_a_stage_stops_at_the_next_optimizer_step_after_a_signal(tmp_path: Path) -> None:
    class SignalAtStep(pl.Callback):
        def on_train_batch_start(self, trainer: pl.Trainer, *args) -> None:
            if trainer.global_step == 5 and not STOP.requested:
                os.kill(os.getpid(), signal.SIGINT)

    callback = ResumePoints(dirpath=str(tmp_path / "checkpoints"), every_n_minutes=None)
    trainer = pl.Trainer(
        default_root_dir=str(tmp_path),
        max_epochs=3,
        limit_train_batches=8,
        limit_val_batches=0,
        accumulate_grad_batches=2,
        callbacks=[SignalAtStep(), callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with STOP.handling(), STOP.deferred(tmp_path), pytest.raises(RunInterrupted):
        trainer.fit(BoringModel())
    point = resume.torch.load(callback.path, weights_only=False)
    # the signal came at the first micro-batch of step 6; the point waited for that step's second micro-batch
    assert (point["global_step"], point["resume_point"]["batches_done"]) == (6, 4)
    assert point["resume_point"]["reason"] == "on SIGINT" and not point["resume_point"]["end_of_epoch"]


def test_slurm_requeue_goes_through_the_launchers_own_handler() -> None:
    calls = []
    requeue_slurm_job(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    assert calls == [signal.SIGUSR2]


class _CutWriter:
    """A trainer whose checkpoint write stops halfway (a kill, a full disk): half the bytes, then an error."""

    is_global_zero = True

    def save_checkpoint(self, path: Path, weights_only: bool = False) -> None:
        Path(path).write_bytes(b"PK\x03\x04 half a checkpoint")
        raise OSError(28, "No space left on device")


def test_a_checkpoint_write_cut_short_leaves_the_previous_whole_file(tmp_path: Path) -> None:
    best = tmp_path / "best.ckpt"
    best.write_bytes(b"the previous whole checkpoint")
    with pytest.raises(OSError, match="No space left"):
        save_atomically(_CutWriter(), best, weights_only=True)
    assert best.read_bytes() == b"the previous whole checkpoint"  # the cut bytes went to the partial file only
    assert partial_path(best).exists() and partial_path(best).name == ".best.ckpt.partial"


def test_the_best_checkpoint_keeps_lightnings_state_key() -> None:
    """Resume points written with Lightning's ModelCheckpoint still restore its state into `BestCheckpoint`."""
    settings = {"monitor": "val/answer_f1", "mode": "max", "filename": "best", "save_weights_only": True}
    assert BestCheckpoint(**settings).state_key == ModelCheckpoint(**settings).state_key
