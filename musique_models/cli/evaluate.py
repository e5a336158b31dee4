"""The body of `evaluate.py`, kept in the package so that tests can call it."""

from __future__ import annotations

from omegaconf import DictConfig
from rich.console import Console

from musique_models.evaluation.evaluator import evaluate_dire_files, evaluate_files, metrics_table, write_report


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Score `cfg.predictions` against `cfg.gold` (and DiRe probes with `mode=dire`); write and print metrics."""
    if cfg.mode == "dire":
        if not cfg.probe_predictions:
            raise ValueError("mode=dire needs probe_predictions=PATH")
        report = evaluate_dire_files(cfg.gold, cfg.predictions, cfg.probe_predictions, cfg.dataset)
    elif cfg.mode == "standard":
        report = evaluate_files(cfg.predictions, cfg.gold, cfg.dataset)
    else:
        raise ValueError(f"unknown mode {cfg.mode!r}; expected 'standard' or 'dire'")
    per_question = write_report(report, cfg.output, cfg.per_question_output)
    console = Console()
    console.print(metrics_table(report.metrics, title=f"{cfg.predictions} vs {cfg.gold}"))
    console.print(f"metrics: {cfg.output}\nper-question scores: {per_question}")
    return report.metrics
