"""Train, test and predict with one model on one dataset: `python train.py model=... dataset=...`."""

from __future__ import annotations

import os

import hydra
from omegaconf import DictConfig

import musique_models  # noqa: F401  (sets PROJECT_ROOT for the configs)
from musique_models.errors import user_errors_exit

# Hydra then raises config errors instead of printing them over several lines: user_errors_exit prints one.
os.environ.setdefault("HYDRA_FULL_ERROR", "1")


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float | None:
    with user_errors_exit():  # inside too: Hydra would print a line of its own before re-raising
        from musique_models.cli.train import train  # heavy libraries load only once the config has composed

        return train(cfg)


if __name__ == "__main__":
    with user_errors_exit():
        main()
