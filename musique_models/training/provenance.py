"""Where a run came from (`provenance.json` in its folder): the code, the libraries, the data files and the machine.

The report groups runs by their configuration and data, never by these alone, but shows where the runs of one group
differ here (another commit, another torch, another GPU).
"""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

import musique_models
from musique_models import PROJECT_ROOT
from musique_models.io import code_fingerprint

# The libraries whose versions can change a run's numbers.
LIBRARIES = ("torch", "transformers", "pytorch-lightning", "datasets", "tokenizers", "hydra-core", "numpy")
# Settings that do not change what a run computes (beyond the rounding of floating-point sums: thread counts, batch
# sizes of prediction): where files are, names, how progress is shown and logged, when resume points are written. A
# resume may change them; the report groups runs that differ only in them (and in the seed).
RESULT_NEUTRAL_KEYS = (
    "ckpt_path",
    "task_name",
    "experiment_name",
    "optimized_metric",
    "paths",
    "callbacks",
    "logger",
    "trainer.enable_progress_bar",
    "trainer.threads",
    "model.num_workers",
    "model.eval_batch_size",
    "model.system",  # the registry entry: how the report names the model
    "model.paper_settings",  # per-dataset tables: what they decide is in the settings that read them
    "dataset.paper_settings",  # the same tables where older runs' configs held them
)
# ... except these, which decide which weights a stage keeps and when it stops.
RESULT_DECIDING_KEYS = ("callbacks.model_checkpoint", "callbacks.early_stopping")
# The run's seed, and the settings that take their value from it.
SEED_KEYS = ("seed", "dataset.seed")
# Dataset settings that, given on the command line, make a run read other files: with `dataset.sample=false` (the
# official files' place) and with `dataset.sample=true` (the shipped samples' place).
OFFICIAL_FILE_KEYS = ("dataset.files", "dataset.data_dir", "dataset.urls", "dataset.hub_path")
SAMPLE_FILE_KEYS = ("dataset.sample_files",)


def code_state(root: Path = PROJECT_ROOT) -> dict[str, Any]:
    """The project's code: a fingerprint of the package's source (`code_fingerprint`, whatever git knows), and the
    git commit and whether the checkout differs from it, untracked files included (both None outside a git
    checkout of this project, for example an installed wheel, or one inside another repository)."""

    def git(*arguments: str) -> str | None:
        try:
            result = subprocess.run(
                ["git", "-C", str(root), *arguments], capture_output=True, text=True, timeout=10, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return result.stdout.strip() if result.returncode == 0 else None

    state: dict[str, Any] = {"source_sha": code_fingerprint("musique_models"), "commit": None, "dirty": None}
    top = git("rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return state
    status = git("status", "--porcelain")
    return {**state, "commit": git("rev-parse", "HEAD"), "dirty": None if status is None else bool(status)}


def library_versions() -> dict[str, str | None]:
    """Python's version and each of `LIBRARIES`' installed version (None when not installed)."""
    versions: dict[str, str | None] = {
        "python": platform.python_version(),
        "musique-models": musique_models.__version__,
    }
    for name in LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def devices() -> dict[str, Any]:
    """The machine: its platform, CPU count and GPUs (names; empty without CUDA)."""
    import torch  # here: the report reads this module's constants without loading torch

    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []
    )
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "gpus": gpus,
        "cuda": torch.version.cuda if gpus else None,
    }


def data_origin(sample: bool, overrides: list[str]) -> str:
    """`other files` (a file or folder of the kind the run reads given on the command line), `sample` (the shipped
    samples) or `official` (the files the dataset config names, under its data folder wherever `paths.data_dir`
    puts it: the content is not checked here, the recorded sha256s let a reader check it)."""
    read = SAMPLE_FILE_KEYS if sample else OFFICIAL_FILE_KEYS  # the other kind is not read (train.py refuses it)
    if any(is_under(key, read) for key in override_keys(overrides)):
        return "other files"
    return "sample" if sample else "official"


def override_keys(overrides: list[str]) -> list[str]:
    """The keys that command-line overrides set (`+`, `++` and `~` removed)."""
    return [override.lstrip("+~").split("=", 1)[0] for override in overrides]


def run_provenance(data_files: dict[str, dict[str, Any]], sample: bool, overrides: list[str]) -> dict[str, Any]:
    """What `provenance.json` holds: `code` (git commit, dirty tree), `versions`, `data` (origin and, per split,
    each file read: path, sha256, bytes, rows), `devices` and the command-line `overrides`."""
    return {
        "code": code_state(),
        "versions": library_versions(),
        "data": {"origin": data_origin(sample, overrides), "files": data_files},
        "devices": devices(),
        "overrides": list(overrides),
    }


def flatten_config(value: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as `{"model.selector.lr": 1e-4, ...}` (an empty mapping stays as `{}` under its key)."""
    if isinstance(value, dict):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten_config(item, f"{prefix}{key}."))
        return flat or {prefix.rstrip("."): {}}
    return {prefix.rstrip("."): value}


def is_under(key: str, prefixes: tuple[str, ...]) -> bool:
    """Whether a flattened key is one of `prefixes` or lies under one (`dataset.files.dev` under `dataset.files`)."""
    return any(key == prefix or key.startswith(f"{prefix}.") for prefix in prefixes)


def is_result_neutral(key: str) -> bool:
    """Whether a (flattened) setting never changes what a run computes (`RESULT_NEUTRAL_KEYS`)."""
    return is_under(key, RESULT_NEUTRAL_KEYS) and not is_under(key, RESULT_DECIDING_KEYS)
