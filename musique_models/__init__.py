"""musique-models: train and benchmark multihop QA models the way the MuSiQue paper did."""

import os as _os
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent

__version__ = "0.1.0"

# Hydra configs resolve `paths.root_dir` from this variable (as lightning-hydra-template does with rootutils).
_os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
# MKL's strict reproducible mode: matrix products give the same result with any number of threads (no cost in
# speed). MKL reads it at its first call, so it is set here, before anything of the package loads torch
# (`musique_models.models.numerics`).
_os.environ.setdefault("MKL_CBWR", "AUTO,STRICT")

from omegaconf import OmegaConf as _OmegaConf  # noqa: E402

# `${on_sample:${dataset.sample},A,B}` is A on the shipped samples (a few hundred questions) and B on the official
# files: the samples need small batches to get enough optimizer steps, the paper's settings need its batches.
if not _OmegaConf.has_resolver("on_sample"):
    _OmegaConf.register_new_resolver("on_sample", lambda sample, on_sample, on_full: on_sample if sample else on_full)


def _paper_setting(key: str, *, _root_: Any) -> Any:
    # The model's `paper_settings` table: a row per dataset name, and a `default` row for datasets it does not list.
    table = _root_.model.get("paper_settings")
    if table is None:
        raise KeyError(f"${{paper_setting:{key}}} needs a `paper_settings` table in the model config")
    row = table.get(_root_.dataset.name)
    row = table.get("default") if row is None or key not in row else row
    if row is None or key not in row:
        raise KeyError(f"model.paper_settings has no {key!r} for dataset {_root_.dataset.name!r} nor a default")
    return row[key]


# `${paper_setting:KEY}` is the model's setting KEY of the paper's setup for the run's dataset: its config's
# `paper_settings` row for `dataset.name`, else its `default` row (a dataset the model does not list).
if not _OmegaConf.has_resolver("paper_setting"):
    _OmegaConf.register_new_resolver("paper_setting", _paper_setting)


def _paper_grid() -> str:
    from musique_models.systems import paper_grid

    return ",".join(paper_grid())


# `${paper_grid:}`: the paper's grid as a sweep list, from the model configs' `system.paper_experiments`.
if not _OmegaConf.has_resolver("paper_grid"):
    _OmegaConf.register_new_resolver("paper_grid", _paper_grid)

from musique_models.settings import register_stage_settings as _register_stage_settings  # noqa: E402

_register_stage_settings()  # before any config composes: the model configs name the stage schemas
