"""`trainer.threads=auto`: the arithmetic of the cores left free (only the CPU set counts, the quota caps, this
process's own threads are not "other processes", never fewer than 1), one thread when every core is kept busy, and
the line that says the choice."""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time

import pytest
import torch

from musique_models.training import threads
from musique_models.training.threads import CoreLoad, choose_threads, core_load, cores_left_free, cpu_busy_and_total

STAT = "cpu  0 0 0 0 0\ncpu0 {b0} 0 0 {i0} 0\ncpu1 {b1} 0 0 {i1} 0\ncpu2 {b2} 0 0 {i2} 0\ncpu3 {b3} 0 0 {i3} 0\n"


def _reading(busy: list[int], idle: list[int], allowed: set[int]) -> tuple[int, int]:
    values = {f"b{n}": busy[n] for n in range(4)} | {f"i{n}": idle[n] for n in range(4)}
    return cpu_busy_and_total(STAT.format(**values), allowed)


def test_free_cores_arithmetic_counts_only_the_allowed_cpus_the_quota_and_others_load() -> None:
    start = _reading([0] * 4, [0] * 4, {0, 1, 2, 3})
    one_busy = _reading([100, 0, 0, 0], [0, 100, 100, 100], {0, 1, 2, 3})  # cpu0 busy the whole time
    assert cores_left_free(start, one_busy, cores=4, quota=4) == CoreLoad(cores=4, busy=1.0, free=3)
    assert cores_left_free(start, one_busy, cores=4, quota=2).free == 2  # a cgroup quota of 2 cores
    # the busy core was this process's own (its threads between two stages): nothing is taken from the run
    assert cores_left_free(start, one_busy, cores=4, quota=4, own=100) == CoreLoad(cores=4, busy=0.0, free=4)
    assert cores_left_free(start, one_busy, cores=4, quota=4, own=50).free == 4  # half a core rounds to free
    idle = _reading([0] * 4, [100] * 4, {0, 1, 2, 3})
    assert cores_left_free(start, idle, cores=4, quota=4).free == 4
    # a CPU set of cpu2 and cpu3: cpu0's load is another set's business
    allowed = {2, 3}
    assert (
        cores_left_free(
            _reading([0] * 4, [0] * 4, allowed), _reading([100, 0, 0, 0], [0, 100, 100, 100], allowed), cores=2, quota=2
        ).free
        == 2
    )
    all_busy = _reading([100] * 4, [0] * 4, {0, 1, 2, 3})
    assert cores_left_free(start, all_busy, cores=4, quota=4).free == 1  # never fewer than one thread
    assert cores_left_free(start, start, cores=4, quota=4) is None  # no time passed


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_auto_takes_one_thread_when_other_processes_keep_every_core_busy(caplog: pytest.LogCaptureFixture) -> None:
    cores = len(os.sched_getaffinity(0))
    spinners = [multiprocessing.Process(target=_spin, args=(3.0,)) for _ in range(cores)]
    for spinner in spinners:
        spinner.start()
    time.sleep(0.5)
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger=threads.__name__):
            assert choose_threads("auto", "stage selector") == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
        for spinner in spinners:
            spinner.join()
    (line,) = [record for record in caplog.records if record.name == threads.__name__]
    assert line.levelno == logging.WARNING
    message = line.getMessage()
    assert message.startswith("torch CPU threads for stage selector: 1 (auto: other processes keep")
    assert f"of the {cores} cores busy)" in message and "chosen again when the next stage starts" in message


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_this_process_own_threads_do_not_count_as_load() -> None:
    """A stage's own busy threads (here a thread multiplying matrices, which releases the GIL) are not another
    process's load: auto keeps every core."""
    stop = threading.Event()

    def multiply() -> None:
        matrix = torch.randn(256, 256)
        while not stop.is_set():
            matrix @ matrix

    before = torch.get_num_threads()
    others = core_load(0.5)  # what other processes keep busy (other jobs on a shared machine), without the worker
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    worker = threading.Thread(target=multiply)
    worker.start()
    try:
        time.sleep(0.3)
        load = core_load(0.5)
    finally:
        stop.set()
        worker.join()
        torch.set_num_threads(before)
    assert others is not None and load is not None
    # the worker keeps a whole core busy; none of it may count (a margin for the others' load to move)
    assert load.busy < others.busy + 0.5, (others, load)
    if others.busy < 0.2:  # an idle machine: every core is free
        assert load.free == load.cores, load


def test_a_fixed_count_is_said_with_its_setting(caplog: pytest.LogCaptureFixture) -> None:
    before = torch.get_num_threads()
    try:
        with caplog.at_level(logging.INFO, logger=threads.__name__):
            assert choose_threads(1, "prediction") == 1
    finally:
        torch.set_num_threads(before)
    assert "torch CPU threads for prediction: 1 (trainer.threads=1)" in caplog.text
