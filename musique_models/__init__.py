"""musique-models: train and benchmark multihop QA models the way the MuSiQue paper did."""

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent

__version__ = "0.1.0"

# Hydra configs resolve `paths.root_dir` from this variable (as lightning-hydra-template does with rootutils).
import os as _os

_os.environ.setdefault("PROJECT_ROOT", str(PROJECT_ROOT))
