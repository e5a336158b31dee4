"""musique-models: train and benchmark multihop QA models the way the MuSiQue paper did."""

import os as _os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

__version__ = "0.1.0"

# Hydra configs resolve `paths.root_dir` from this variable (as lightning-hydra-template does with rootutils).
_os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))

from omegaconf import OmegaConf as _OmegaConf  # noqa: E402

# `${on_sample:${dataset.sample},A,B}` is A on the shipped samples (a few hundred questions) and B on the official
# files: the samples need small batches to get enough optimizer steps, the paper's settings need its batches.
if not _OmegaConf.has_resolver("on_sample"):
    _OmegaConf.register_new_resolver("on_sample", lambda sample, on_sample, on_full: on_sample if sample else on_full)

from musique_models.settings import register_stage_settings as _register_stage_settings  # noqa: E402

_register_stage_settings()  # before any config composes: the model configs name the stage schemas
