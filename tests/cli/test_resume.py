"""Resume with the DEFAULT callbacks and the default `trainer.threads=auto`: a run SIGKILLed in its first stage's
second epoch, or stopped by SIGINT and SIGTERM mid-epoch, or by SLURM's requeue signal, or killed in its first
moments, or whose resume point or best checkpoint is damaged, resumes and ends with exactly the predictions and
metrics of an uninterrupted run, whatever thread count each attempt chose (benchmarks/kill_resume.py does the same
at many more points, under load)."""

from __future__ import annotations

import csv
import json
import os
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from musique_models import PROJECT_ROOT
from tests.conftest import run_python

RUN = [
    "train.py",
    "backbone=tiny",
    "dataset.sample=true",
    "dataset.train_size=12",
    "eval_size=6",
    "model.selector.max_epochs=2",
    "model.answerer.max_epochs=2",
    "model.answerer.micro_batch_size=2",
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=2",  # rows in the curves within the short first epoch
]
OUTPUTS = ("predictions.jsonl", "metrics.json")


def _signal_at(name: str, step: int, stage: str, signal_name: str) -> list[str]:
    prefix = f"+callbacks.{name}"
    return [
        f"{prefix}._target_=tests.cli.killer.SignalAtStep",
        f"{prefix}.step={step}",
        f"{prefix}.stage={stage}",
        f"{prefix}.signal={signal_name}",
    ]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted run of `RUN` with 2 threads; its cache folder is shared by the other runs of this module
    (which choose their thread count from the load: the default)."""
    root = tmp_path_factory.mktemp("resume")
    result = run_python([*RUN, "trainer.threads=2", f"paths.cache_dir={root}/cache", f"hydra.run.dir={root}/full"])
    assert result.returncode == 0, result.stderr[-3000:]
    return root / "full"


@pytest.mark.slow
def test_the_thread_count_changes_nothing_a_run_computes(uninterrupted: Path, tmp_path: Path) -> None:
    """The same run with 1 thread where the reference had 2: byte-identical (without `models.numerics`, the
    LayerNorm and softmax gradients and the new token's embedding round differently, and these files differ)."""
    one_thread = tmp_path / "one_thread"
    result = _train(uninterrupted, one_thread, "trainer.threads=1")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "torch CPU threads for stage selector: 1 (trainer.threads=1)" in result.stderr + result.stdout
    _assert_same_outputs(one_thread, uninterrupted)


def _train(uninterrupted: Path, run_dir: Path, *extra: str, env: dict[str, str] | None = None):
    cache = uninterrupted.parent / "cache"
    arguments = [*RUN, f"paths.cache_dir={cache}", f"hydra.run.dir='{run_dir}'", *extra]
    return run_python(arguments, env=env, as_a_job=True)


def _batches_per_epoch(uninterrupted: Path, stage: str, epochs: int) -> int:
    return json.loads((uninterrupted / stage / "stage.json").read_text())["global_step"] // epochs


def _logged_steps(csv_folder: Path) -> list[int]:
    with (csv_folder / "metrics.csv").open() as handle:
        return sorted({int(row["step"]) for row in csv.DictReader(handle)})


def _assert_same_outputs(run_dir: Path, uninterrupted: Path) -> None:
    for name in OUTPUTS:
        assert (run_dir / name).read_bytes() == (uninterrupted / name).read_bytes(), name


@pytest.mark.slow
def test_sigkill_in_the_second_epoch_resumes_from_the_first_epochs_resume_point(
    uninterrupted: Path, tmp_path: Path
) -> None:
    per_epoch = _batches_per_epoch(uninterrupted, "selector", 2)
    assert per_epoch >= 4
    killed_dir = tmp_path / "killed"
    # with wandb (offline) too: the resumed attempt continues the killed attempt's wandb run
    killer = _signal_at("killer", per_epoch + per_epoch // 2, "selector", "SIGKILL")
    killed = _train(uninterrupted, killed_dir, *killer, "logger=wandb")
    assert killed.returncode == -signal.SIGKILL
    assert not any((killed_dir / name).exists() for name in OUTPUTS)
    # the default callbacks wrote the first epoch's resume point (and nothing else but the run's files)
    last = torch.load(killed_dir / "selector/checkpoints/last.ckpt", map_location="cpu", weights_only=False)
    assert last["epoch"] == 0 and last["global_step"] == per_epoch and last["resume_point"]["end_of_epoch"]
    assert last["QADataModule"]["train_position"] == {"epoch": 0, "batches_done": per_epoch}
    assert sorted(p.name for p in (killed_dir / "selector/checkpoints").iterdir()) == ["last.ckpt"]

    # the curves up to the resume point reached the disk with it (the CSV logger buffers its rows)
    full_curve = _logged_steps(uninterrupted / "selector/csv/version_0")
    killed_curve = _logged_steps(killed_dir / "selector/csv/version_0")
    assert [step for step in killed_curve if step < per_epoch] == [step for step in full_curve if step < per_epoch]

    resumed = _train(uninterrupted, killed_dir, "logger=wandb", "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # the resumed attempt's curves go on, numbered from the resume point, in the stage's next CSV version
    assert _logged_steps(killed_dir / "selector/csv/version_1") == [step for step in full_curve if step >= per_epoch]
    log = resumed.stderr + resumed.stdout
    assert (
        f"stage selector resumes from {killed_dir / 'selector/checkpoints/last.ckpt'}, written at the end of epoch 0 "
        f"(step {per_epoch}): training goes on with epoch 1"
    ) in log
    assert f"stage answerer has no resume point in {killed_dir / 'answerer/checkpoints'}: it starts afresh" in log
    _assert_same_outputs(killed_dir, uninterrupted)
    # a finished stage keeps only its best weights; the resumed run continued the same (offline) wandb run
    assert [p.name for p in (killed_dir / "selector/checkpoints").iterdir()] == ["best.ckpt"]
    run_id = (killed_dir / "wandb_run_id.txt").read_text().strip()
    assert len(list((killed_dir / "wandb").glob(f"offline-run-*-{run_id}"))) == 2


@pytest.mark.slow
def test_sigint_then_sigterm_mid_epoch_leave_interrupted_runs_that_their_printed_commands_resume(
    uninterrupted: Path, tmp_path: Path
) -> None:
    selector_step = _batches_per_epoch(uninterrupted, "selector", 2) + 2
    answerer_step = _batches_per_epoch(uninterrupted, "answerer", 2) // 2
    run_dir = tmp_path / "stopped_model=x,seed=1"  # a folder name Hydra's override grammar needs quoted
    signals = [
        *_signal_at("ctrl_c", selector_step, "selector", "SIGINT"),
        *_signal_at("sigterm", answerer_step, "answerer", "SIGTERM"),
    ]
    stopped = _train(uninterrupted, run_dir, *signals)
    for signal_name, stage, step in (("SIGINT", "selector", selector_step), ("SIGTERM", "answerer", answerer_step)):
        assert stopped.returncode == 128 + getattr(signal, signal_name), stopped.stderr[-3000:]
        status = json.loads((run_dir / "status.json").read_text())
        assert status["status"] == "interrupted" and status["signal"] == signal_name
        assert status["resume_point"] == f"{stage}/checkpoints/last.ckpt"
        point = torch.load(run_dir / status["resume_point"], map_location="cpu", weights_only=False)
        assert point["global_step"] == step + 1 and not point["resume_point"]["end_of_epoch"]  # at the next step
        command = status["resume_command"]
        assert (
            f"run interrupted ({signal_name}: the stage wrote its resume point and stopped). Resume point: {run_dir / status['resume_point']}"
            in (stopped.stderr + stopped.stdout)
        )
        assert f"resume it with:\n  {command}\n" in stopped.stderr
        arguments = shlex.split(command.split(" && ", 1)[1])
        assert (
            arguments[-2:] == [f"hydra.run.dir='{run_dir}'", "ckpt_path=last"]
            and "trainer.log_every_n_steps=2" in arguments
        )
        # the printed command, as a user pastes it into a shell (the signals do not fire again: they are past)
        stopped = subprocess.run(command, shell=True, capture_output=True, text=True, check=False, env=os.environ)
        assert f"stage {stage} resumes from {run_dir / status['resume_point']}, written in epoch" in (
            stopped.stderr + stopped.stdout
        )
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "finished"
    _assert_same_outputs(run_dir, uninterrupted)


@pytest.mark.slow
def test_slurm_requeue_signal_requeues_the_job_and_the_restarted_job_resumes(
    uninterrupted: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "scontrol.calls"}\n')
    scontrol.chmod(scontrol.stat().st_mode | stat.S_IEXEC)
    slurm = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "4242"}
    run_dir = tmp_path / "slurm"
    step = _batches_per_epoch(uninterrupted, "selector", 2) + 1
    warned = _train(uninterrupted, run_dir, *_signal_at("warning", step, "selector", "SIGUSR1"), env=slurm)
    assert warned.returncode == 128 + signal.SIGUSR1, warned.stderr[-3000:]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "interrupted" and status["requeue"] == "scontrol requeue"
    assert (tmp_path / "scontrol.calls").read_text() == "requeue 4242\n"

    # SLURM starts the same job again, with the same command: it resumes instead of refusing the folder
    restarted = _train(
        uninterrupted,
        run_dir,
        *_signal_at("warning", step, "selector", "SIGUSR1"),
        env={**slurm, "SLURM_RESTART_COUNT": "1"},
    )
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert "SLURM job 4242 restarted (1): resuming the run in" in restarted.stderr + restarted.stdout
    _assert_same_outputs(run_dir, uninterrupted)


@pytest.mark.slow
def test_a_sweep_stopped_in_its_second_job_resumes_with_its_printed_sweep_command(
    uninterrupted: Path, tmp_path: Path
) -> None:
    sweep_dir = tmp_path / "sweep"
    smaller = ["dataset.train_size=12", "eval_size=4", "model.selector.max_epochs=2", "model.answerer.max_epochs=1"]
    # three jobs that differ only in when a SIGINT would come: never, in job 1's second selector epoch, never
    stopped = run_python(
        [
            RUN[0],
            "--multirun",
            *RUN[1:],
            *smaller,
            f"paths.cache_dir={uninterrupted.parent / 'cache'}",
            f"hydra.sweep.dir={sweep_dir}",
            "+callbacks.ctrl_c._target_=tests.cli.killer.SignalAtStep",
            "+callbacks.ctrl_c.step=100000,7,100001",
            "+callbacks.ctrl_c.stage=selector",
            "+callbacks.ctrl_c.signal=SIGINT",
        ]
    )
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    assert json.loads((sweep_dir / "0/selector/stage.json").read_text())["global_step"] == 12  # 6 per epoch
    assert json.loads((sweep_dir / "0/status.json").read_text())["status"] == "finished"
    status = json.loads((sweep_dir / "1/status.json").read_text())
    assert status["status"] == "interrupted"
    assert not (sweep_dir / "2").exists()  # the sweep stopped with the job that was stopped
    command = status["sweep_resume_command"]
    assert f"or resume the whole sweep (finished jobs are kept) with:\n  {command}\n" in stopped.stderr
    arguments = shlex.split(command.split(" && ", 1)[1])
    assert "--multirun" in arguments and arguments[-2:] == [f"hydra.sweep.dir={sweep_dir}", "ckpt_path=last"]
    finished_at = (sweep_dir / "0/metrics.json").stat().st_mtime_ns

    resumed = subprocess.run(command, shell=True, capture_output=True, text=True, check=False, env=os.environ)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = resumed.stderr + resumed.stdout
    assert f"the run in {sweep_dir / '0'} already finished: nothing to resume" in log
    assert f"stage selector resumes from {sweep_dir / '1/selector/checkpoints/last.ckpt'}" in log
    assert f"{sweep_dir / '2'} holds no run yet (the sweep stopped before this job): starting it" in log
    assert (sweep_dir / "0/metrics.json").stat().st_mtime_ns == finished_at  # the finished job was not redone
    for job in ("1", "2"):  # the same run as job 0, which nothing stopped
        assert json.loads((sweep_dir / job / "status.json").read_text())["status"] == "finished"
        _assert_same_outputs(sweep_dir / job, sweep_dir / "0")


@pytest.mark.slow
def test_a_run_killed_before_it_wrote_its_configuration_starts_afresh_there(
    uninterrupted: Path, tmp_path: Path
) -> None:
    """What a SIGKILL in a run's first moments leaves (Hydra's files and the start's status, no config) is that
    run's start: `ckpt_path=last` starts it afresh in its folder, says so, and ends as the uninterrupted run."""
    run_dir = tmp_path / "aborted"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / "train.log").write_text("")
    (run_dir / "status.json").write_text(json.dumps({"status": "starting", "pid": 1, "attempt": "an earlier one"}))
    resumed = _train(uninterrupted, run_dir, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        f"{run_dir} holds a run that stopped before it wrote its configuration (a kill in its first seconds): "
        "starting the run afresh there"
    ) in resumed.stderr + resumed.stdout
    _assert_same_outputs(run_dir, uninterrupted)
    # killed before it marked its start: Hydra's files alone, in a folder made before the resuming attempt began
    earlier = tmp_path / "earlier"
    (earlier / ".hydra").mkdir(parents=True)
    (earlier / "train.log").write_text("")
    resumed = _train(uninterrupted, earlier, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"{earlier} holds a run that stopped before it wrote its configuration" in resumed.stderr + resumed.stdout
    _assert_same_outputs(earlier, uninterrupted)
    # a folder that holds nothing of a run (a mistyped one) is still refused, and not left behind
    refused = _train(uninterrupted, tmp_path / "mistyped", "ckpt_path=last")
    assert refused.returncode == 2 and "holds no run" in refused.stderr and not (tmp_path / "mistyped").exists()


def _signalled_fresh(arguments: list[str], after: float, signal_name: str = "SIGINT") -> subprocess.CompletedProcess:
    """`python train.py ARGUMENTS` in a fresh interpreter (as a user starts it: nothing imported yet), sent a
    signal `after` seconds after it started."""
    process = subprocess.Popen(
        [sys.executable, str(PROJECT_ROOT / "train.py"), *arguments],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)},
        start_new_session=True,
    )
    time.sleep(after)
    process.send_signal(getattr(signal, signal_name))
    stdout, stderr = process.communicate(timeout=120)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.mark.slow
def test_ctrl_c_in_the_first_seconds_is_honoured(uninterrupted: Path, tmp_path: Path) -> None:
    """SIGINT while the interpreter starts and Hydra composes, and while torch loads: the command stops at once
    (exit 130). Before the run started nothing is left; later the run is `interrupted` and resumes identically."""
    cache = uninterrupted.parent / "cache"
    outcomes = []
    for attempt, after in enumerate((0.3, 0.6, 0.2)):  # while Python starts, Hydra composes and makes the folder
        early = tmp_path / f"early{attempt}"
        stopped = _signalled_fresh([*RUN[1:], f"paths.cache_dir={cache}", f"hydra.run.dir={early}"], after=after)
        assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
        if "before the run started: nothing was written" in stopped.stderr:
            assert not early.exists(), sorted(os.listdir(early))  # not even the folder Hydra made
            outcomes.append("before")
        else:  # the test process was slow to send it (a long pause): the run had started, and is resumable
            assert json.loads((early / "status.json").read_text())["status"] == "interrupted", stopped.stderr[-3000:]
            outcomes.append("started")
    assert "before" in outcomes, outcomes

    later = tmp_path / "later"
    stopped = _signalled_fresh([*RUN[1:], f"paths.cache_dir={cache}", f"hydra.run.dir={later}"], after=2.5)
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    if later.exists():  # the run had started: it is resumable, and resumes as if nothing happened
        status = json.loads((later / "status.json").read_text())
        assert status["status"] == "interrupted" and status["signal"] == "SIGINT"
        resumed = _train(uninterrupted, later, "ckpt_path=last")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        _assert_same_outputs(later, uninterrupted)
    else:  # it came while the libraries loaded, before the run began: nothing kept, and said so
        assert "before the run started: nothing was written" in stopped.stderr


@pytest.mark.slow
def test_a_damaged_resume_point_or_best_checkpoint_is_said_and_trained_again(
    uninterrupted: Path, tmp_path: Path
) -> None:
    """A resume point cut short (a full disk, a copy cut short), and a finished stage's best checkpoint with one
    byte changed: each is named in one line and set aside, its stage trains afresh, and the run ends as the
    uninterrupted run; never a traceback from torch.load."""
    per_epoch = _batches_per_epoch(uninterrupted, "answerer", 2)
    run_dir = tmp_path / "damaged"
    killed = _train(uninterrupted, run_dir, *_signal_at("killer", per_epoch + 1, "answerer", "SIGKILL"))
    assert killed.returncode == -signal.SIGKILL
    point = run_dir / "answerer/checkpoints/last.ckpt"
    point.write_bytes(point.read_bytes()[: point.stat().st_size // 2])
    best = run_dir / json.loads((run_dir / "selector/stage.json").read_text())["best_checkpoint"]
    content = bytearray(best.read_bytes())
    content[len(content) // 2] ^= 0xFF
    best.write_bytes(bytes(content))

    resumed = _train(uninterrupted, run_dir, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = resumed.stderr + resumed.stdout
    assert "Traceback" not in log
    assert (
        f"stage selector: its best checkpoint {best} is corrupted (the checksum of its member" in log
        and "set aside as best.ckpt.damaged and the stage is trained again" in log
    )
    assert f"stage answerer: {point} is truncated or not a checkpoint (" in log
    assert "set aside as last.ckpt.damaged and the stage starts afresh" in log
    assert (best.parent / "best.ckpt.damaged").exists() and (point.parent / "last.ckpt.damaged").exists()
    _assert_same_outputs(run_dir, uninterrupted)


@pytest.mark.slow
def test_ctrl_c_during_lora_fine_tuning_resumes_to_the_uninterrupted_predictions(tmp_path: Path) -> None:
    """The generative reader with LoRA adapters (a tiny random Llama): a SIGINT in its second epoch writes a resume
    point holding the adapters and their optimiser state, and the resumed run generates exactly what an
    uninterrupted run generates."""
    lora = [
        "train.py",
        "model=generative_reader",
        "backbone@model.reader.backbone=tiny_llama",
        "model.reader.finetune=lora",
        "model.reader.lr=1e-3",
        "model.reader.max_epochs=2",
        "model.reader.micro_batch_size=2",
        "model.reader.max_paragraph_tokens=16",
        "dataset.sample=true",
        "dataset.train_size=8",
        "eval_size=4",
        "trainer.enable_progress_bar=false",
        f"paths.cache_dir={tmp_path}/cache",
    ]
    full = run_python([*lora, f"hydra.run.dir={tmp_path}/full"], as_a_job=True)
    assert full.returncode == 0, full.stderr[-3000:]
    per_epoch = json.loads((tmp_path / "full/reader/stage.json").read_text())["global_step"] // 2
    stopped_dir = tmp_path / "stopped"
    stopped = run_python(
        [*lora, f"hydra.run.dir={stopped_dir}", *_signal_at("ctrl_c", per_epoch + 1, "reader", "SIGINT")],
        as_a_job=True,
    )
    assert stopped.returncode == 128 + signal.SIGINT, stopped.stderr[-3000:]
    point = torch.load(stopped_dir / "reader/checkpoints/last.ckpt", map_location="cpu", weights_only=False)
    assert point["global_step"] == per_epoch + 2
    # the resume point holds the adapters (not only the frozen base weights) and their optimiser state
    adapters = [name for name in point["state_dict"] if "lora_" in name]
    assert adapters and len(point["optimizer_states"][0]["state"]) == len(adapters)
    resumed = run_python([*lora, f"hydra.run.dir={stopped_dir}", "ckpt_path=last"], as_a_job=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "stage reader resumes from" in resumed.stderr + resumed.stdout
    _assert_same_outputs(stopped_dir, tmp_path / "full")
