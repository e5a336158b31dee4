"""torch's CPU threads for each phase of a run (`trainer.threads`), chosen and said.

`auto` (the default) takes the cores of the process's CPU set that other processes leave free (measured over 0.2 s
from /proc/stat, capped by a cgroup CPU quota, at least 1): on a busy machine, threads that wait for a core make
every step slower than fewer threads would. The choice is made again at the start of every stage and of prediction,
so a run started while another job held a core takes the core back once that job ends. The count changes how fast a
run goes, not what it computes (`musique_models.models.numerics`). Under DDP with `ddp_spawn`, Lightning gives each
worker process its own share (the cores divided by the processes); the count said is the main process's.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

AUTO = "auto"


@dataclass(frozen=True)
class CoreLoad:
    """What the load on this process's CPU set leaves: its `cores` (capped by the quota), the cores other processes
    kept busy (`busy`, a fraction of cores) and the whole cores left `free` (at least 1)."""

    cores: int
    busy: float
    free: int


def choose_threads(setting: int | str | None, phase: str) -> int:
    """Set torch's CPU threads for `phase` (`stage selector`, `prediction`, ...) from `setting` (a number, `auto`,
    or null for torch's default), say the choice in one line (a warning when the load leaves fewer cores than the
    machine has), and return the count."""
    import torch

    load = core_load() if setting == AUTO else None
    if load is not None:
        torch.set_num_threads(load.free)
    elif isinstance(setting, int) or (isinstance(setting, str) and setting.isdigit()):
        torch.set_num_threads(int(setting))
    threads = torch.get_num_threads()
    if load is not None and load.free < load.cores:
        log.warning(
            "torch CPU threads for %s: %d (auto: other processes keep %.1f of the %d cores busy). Each step takes "
            "longer than on an idle machine; the count is chosen again when the next stage starts, the results are "
            "the same with any count, and trainer.threads=N fixes it",
            phase,
            threads,
            load.busy,
            load.cores,
        )
    elif load is not None:
        log.info("torch CPU threads for %s: %d (auto: %d of %d cores free)", phase, threads, load.free, load.cores)
    elif setting is None:
        log.info("torch CPU threads for %s: %d (torch's default)", phase, threads)
    else:
        log.info("torch CPU threads for %s: %d (trainer.threads=%s)", phase, threads, setting)
    return threads


def core_load(interval: float = 0.2) -> CoreLoad | None:
    """The load other processes put on this process's CPU set, measured over `interval` s while this process waits
    (Linux's /proc/stat, less this process's own CPU time; None elsewhere). See `cores_left_free`."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = set(os.sched_getaffinity(0))
    try:
        before, own_before = cpu_busy_and_total(Path("/proc/stat").read_text(), allowed), time.process_time()
        time.sleep(interval)
        after, own_after = cpu_busy_and_total(Path("/proc/stat").read_text(), allowed), time.process_time()
    except (OSError, ValueError, IndexError):
        return None
    own = (own_after - own_before) * os.sysconf("SC_CLK_TCK")
    return cores_left_free(before, after, len(allowed), cpu_quota(len(allowed)), own)


def cpu_busy_and_total(stat: str, allowed: set[int]) -> tuple[int, int]:
    """Busy and total time (jiffies) of the `allowed` CPUs, summed from the `cpuN` lines of /proc/stat."""
    busy = total = 0
    for line in stat.splitlines():
        name, *values = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in allowed:
            continue
        counts = [int(value) for value in values]
        idle = counts[3] + (counts[4] if len(counts) > 4 else 0)  # idle + iowait
        busy, total = busy + sum(counts) - idle, total + sum(counts)
    return busy, total


def cores_left_free(
    before: tuple[int, int], after: tuple[int, int], cores: int, quota: int, own: float = 0.0
) -> CoreLoad | None:
    """The load between two (busy, total) readings of `cores` CPUs: the cores kept busy by others (less `own`, this
    process's jiffies in between), and the whole cores left free, capped by `quota`, at least 1. None when no time
    passed."""
    (busy_before, total_before), (busy_after, total_after) = before, after
    if total_after <= total_before:
        return None
    others = max(0.0, busy_after - busy_before - own)
    busy = min(float(cores), others / (total_after - total_before) * cores)
    usable = min(cores, quota)
    return CoreLoad(cores=usable, busy=busy, free=max(1, min(usable, round(cores - busy))))


def cpu_quota(cores: int) -> int:
    """The cgroup (v2) CPU quota in whole cores (`cpu.max`), or `cores` when there is none."""
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return cores
    return cores if quota == "max" else max(1, min(cores, int(int(quota) / int(period))))
