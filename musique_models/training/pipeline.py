"""The body of `train.py`, kept in the package so that tests can call it."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import datasets
import pytorch_lightning as pl
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import Logger
from rich.console import Console

from musique_models.data.schema import Example
from musique_models.data.source import DatasetSource
from musique_models.data.summary import print_summary
from musique_models.evaluation.evaluator import evaluate_predictions, metrics_table
from musique_models.evaluation.gold import GoldInstance, gold_from_example
from musique_models.evaluation.predictions import write_predictions
from musique_models.io import write_json
from musique_models.training.loggers import shared_loggers
from musique_models.training.malloc import keep_freed_memory

log = logging.getLogger(__name__)


@dataclass
class RunContext:
    """What a model recipe gets: the config, the data, the run folder and the run's loggers."""

    cfg: DictConfig
    source: DatasetSource
    train: datasets.Dataset
    evaluation: datasets.Dataset
    eval_golds: list[GoldInstance]
    run_dir: Path
    loggers: list[Logger]


def run_dir(cfg: DictConfig) -> Path:
    """The run folder: Hydra's output folder when run through Hydra, else `paths.output_dir`."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.paths.output_dir)


def first_questions(table: datasets.Dataset, count: int) -> datasets.Dataset:
    """The rows of the first `count` distinct question ids (MuSiQue-Full twins stay together)."""
    kept = set(list(dict.fromkeys(table["id"]))[:count])
    return table.select([row for row, question_id in enumerate(table["id"]) if question_id in kept])


def train(cfg: DictConfig) -> float | None:
    """Load the dataset, train the configured model, predict the evaluation split and score it.

    Writes `predictions.jsonl` (official format) and `metrics.json` (the evaluator's keys) into the run folder
    and returns `cfg.optimized_metric` for Hydra sweepers (None when no model is configured).
    """
    pl.seed_everything(cfg.seed, workers=True)
    keep_freed_memory()
    output_dir = run_dir(cfg)
    source: DatasetSource = instantiate(cfg.dataset)
    splits = {split: source.load(split, run_dir=output_dir) for split in source.splits}
    if cfg.get("eval_size"):
        splits[cfg.eval_split] = first_questions(splits[cfg.eval_split], cfg.eval_size)
    print_summary(source, splits)
    if cfg.get("model") is None:
        log.warning("No model is configured (~model): nothing was trained. Choose one with model=<name> "
                    "(see conf/model/).")
        return None
    OmegaConf.save(cfg, output_dir / "config.yaml", resolve=True)
    evaluation = splits[cfg.eval_split]
    context = RunContext(cfg=cfg, source=source, train=splits["train"], evaluation=evaluation,
                         eval_golds=[gold_from_example(Example.from_dict(row), i) for i, row in enumerate(evaluation)],
                         run_dir=output_dir, loggers=shared_loggers(cfg, output_dir))
    recipe = instantiate(cfg.model, _recursive_=False)
    predictions = recipe.run(context)
    report = evaluate_predictions(context.eval_golds, predictions)
    write_predictions(output_dir / "predictions.jsonl", predictions)
    write_json(output_dir / "metrics.json", report.metrics)
    for logger in context.loggers:
        logger.log_metrics({f"test/{key}": value for key, value in report.metrics.items()})
        logger.finalize("success")
    Console().print(metrics_table(report.metrics, title=f"{cfg.model_name} on {source.name} {cfg.eval_split}"))
    log.info("predictions: %s  metrics: %s", output_dir / "predictions.jsonl", output_dir / "metrics.json")
    return report.metrics.get(cfg.optimized_metric)
