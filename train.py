"""Train, test and predict with one model on one dataset: `python train.py model=... dataset=...`."""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

import musique_models  # noqa: F401  (sets PROJECT_ROOT for the configs)
from musique_models.cli import user_errors_exit
from musique_models.training.pipeline import train


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    with user_errors_exit():
        return train(cfg)


if __name__ == "__main__":
    main()
