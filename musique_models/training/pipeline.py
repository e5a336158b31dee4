"""The body of `train.py`, kept in the package so that tests can call it."""

from __future__ import annotations

import logging
import random
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig

from musique_models.data.source import DatasetSource
from musique_models.data.summary import print_summary

log = logging.getLogger(__name__)


def run_dir(cfg: DictConfig) -> Path:
    """The run folder: Hydra's output folder when run through Hydra, else `paths.output_dir`."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.paths.output_dir)


def train(cfg: DictConfig) -> float | None:
    """Load the dataset, print its summary, then train the configured model.

    Returns the value of `cfg.optimized_metric` for Hydra sweepers, or None when nothing was trained.
    """
    random.seed(cfg.seed)
    output_dir = run_dir(cfg)
    source: DatasetSource = instantiate(cfg.dataset)
    splits = {split: source.load(split, run_dir=output_dir) for split in source.splits}
    print_summary(source, splits)
    if cfg.get("model") is None:
        log.warning(
            "No model is configured (model=null): nothing was trained. The dataset above loaded and its "
            "summary is printed; choose a model with model=<name> once a model config exists in conf/model/."
        )
        return None
    raise NotImplementedError(f"training model {cfg.model!r} is not available yet")
