"""The body of `train.py`: load the data, run the configured recipe, write official predictions and metrics."""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig
from rich.console import Console

from musique_models.data.schema import Example
from musique_models.data.source import DatasetSource
from musique_models.data.summary import print_summary
from musique_models.errors import (
    RunConfigError,
    user_error_message,
)
from musique_models.evaluation.evaluator import evaluate_predictions, metrics_table, write_report
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import write_predictions
from musique_models.io import write_json
from musique_models.recipes.build import instantiate_recipe
from musique_models.run_files import (
    METRICS_FILE,
    PER_QUESTION_FILE,
    PREDICTIONS_FILE,
    STATUS_FILE,
    discard_unstarted_run,
    has_trained,
    holds_only_this_start,
    is_finished,
)
from musique_models.runs.closing import sample_run_lines
from musique_models.training.console import quiet_libraries, show, write_to_log_file
from musique_models.training.interruption import interrupted, interruption_reason, is_interruption
from musique_models.training.run_checks import check_run_config
from musique_models.training.run_folder import (
    damaged_best_checkpoints,
    evaluation_subset,
    folder_megabytes,
    record_evaluation_subset,
    record_provenance,
    run_dir,
    start_run,
)
from musique_models.training.stop import STOP, stopped_before_start

# torch, Lightning and what imports them (the training layer's callbacks and loggers, the recipes) load only once a
# run has passed its checks (imports inside the functions below): a refused run answers in about a second, not ten.
log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> float | None:
    """Load the dataset, train the configured recipe, predict the evaluation split and score it.

    Writes into the run folder `config.yaml`, `provenance.json`, `status.json` (starting / running / finished /
    failed with the error / interrupted with the command that resumes it), `predictions.jsonl` (official format) and
    `metrics.json` (the evaluator's keys); returns `cfg.optimized_metric` for Hydra sweepers (None when no model is
    configured). A run refused or stopped before it starts, or stopped by a user error before any stage trained,
    removes the folder Hydra made for it (and says so); a refusal never touches the status of a run that is already
    in the folder.
    """
    output_dir = run_dir(cfg)
    made_for_this_run = holds_only_this_start(output_dir)
    try:
        check_run_config(cfg, output_dir)
    except BaseException as error:
        stopped = is_interruption(error)
        if made_for_this_run and (stopped or user_error_message(error) is not None):
            discard_unstarted_run(output_dir)
        if stopped:
            raise stopped_before_start(interruption_reason(error)) from None
        raise
    print(f"run folder: {output_dir}", flush=True)  # never wrapped: it is copied into commands
    write_to_log_file(f"run folder: {output_dir}")
    if cfg.get("ckpt_path") == "last" and is_finished(output_dir):
        damaged = damaged_best_checkpoints(output_dir)
        if not damaged:
            log.info("the run in %s already finished: nothing to resume (its metrics: %s)", output_dir, METRICS_FILE)
            return json.loads((output_dir / METRICS_FILE).read_text()).get(cfg.optimized_metric)
        log.warning(
            "the run in %s finished, but a best checkpoint is damaged (%s): its stage is trained again and the "
            "split predicted again",
            output_dir,
            "; ".join(damaged),
        )
    try:
        with STOP.handling(slurm="SLURM_JOB_ID" in os.environ):
            start_run(cfg, output_dir)
            result = _train(cfg, output_dir, Console())
    except BaseException as error:
        if is_interruption(error):
            raise interrupted(output_dir, interruption_reason(error)) from None
        user_error = user_error_message(error) is not None
        if user_error and made_for_this_run and not has_trained(output_dir):
            shutil.rmtree(output_dir, ignore_errors=True)
            error.add_note(f"run folder {output_dir} removed: the run stopped before it trained anything")
            raise
        message = f"{type(error).__name__}: {error}"
        if isinstance(error, RunConfigError):  # a resume refused once its data were read: the run stays as it was
            raise
        if user_error:  # printed once, as one line, by the entry point
            write_to_log_file(f"run failed: {message}", logging.ERROR)
        else:
            log.error("run failed: %s", message)
        write_json(output_dir / STATUS_FILE, {"status": "failed", "error": message})
        raise
    write_json(output_dir / STATUS_FILE, {"status": "finished"})
    return result


def _train(cfg: DictConfig, output_dir: Path, console: Console) -> float | None:
    import pytorch_lightning as pl

    from musique_models.training.loggers import close_run_loggers, run_loggers
    from musique_models.training.malloc import keep_freed_memory
    from musique_models.training.threads import choose_threads

    quiet_libraries()
    choose_threads(cfg.trainer.get("threads"), "reading the data")
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    keep_freed_memory()
    source: DatasetSource = instantiate(cfg.dataset)
    splits = {split: source.load(split, run_dir=output_dir) for split in dict.fromkeys(["train", cfg.eval_split])}
    if cfg.get("eval_size"):
        splits[cfg.eval_split] = evaluation_subset(splits[cfg.eval_split], cfg.eval_size)
        record_evaluation_subset(output_dir, splits[cfg.eval_split], cfg)
    provenance = record_provenance(output_dir, source)
    show(console, lambda target: print_summary(source, splits, target))
    if cfg.get("model") is None:
        log.warning(
            "No model is configured (~model): nothing was trained. Choose one with model=<name> (see conf/model/)."
        )
        return None
    loggers = run_loggers(cfg, output_dir, provenance)
    try:
        return _run_recipe(cfg, output_dir, console, source, splits, loggers)
    except BaseException:
        close_run_loggers(loggers, "failed")
        raise


def _run_recipe(
    cfg: DictConfig,
    output_dir: Path,
    console: Console,
    source: DatasetSource,
    splits: dict[str, Any],
    loggers: list[Any],
) -> float | None:
    """Run the configured recipe on the loaded splits; write, log and show its predictions' scores."""
    from musique_models.recipes.base import RunContext
    from musique_models.training.loggers import close_run_loggers, log_run_results
    from musique_models.training.threads import choose_threads

    evaluation = splits[cfg.eval_split]
    context = RunContext(
        cfg=cfg,
        source=source,
        train=splits["train"],
        evaluation=evaluation,
        eval_golds=[gold_from_example(Example.from_dict(row), i) for i, row in enumerate(evaluation)],
        run_dir=output_dir,
        loggers=loggers,
    )
    recipe = instantiate_recipe(cfg)
    predictor = recipe.fit(context)
    choose_threads(cfg.trainer.get("threads"), f"predicting {cfg.eval_split}")
    predictions = predictor.predict(evaluation, output_dir)
    # a recipe that answers nothing (the decomposer alone) predicts None: its metrics are its own
    report = evaluate_predictions(context.eval_golds, predictions) if predictions is not None else None
    metrics = report.metrics if report is not None else {}
    metrics.update(predictor.extra_metrics)
    if predictions is not None:
        write_predictions(output_dir / PREDICTIONS_FILE, predictions)
    if report is not None:  # metrics.json and, for intervals and error analysis, metrics.per_question.jsonl
        write_report(report, output_dir / METRICS_FILE)
    else:
        write_json(output_dir / METRICS_FILE, metrics)
    for logger in loggers:
        logger.log_metrics({f"test/{key}": value for key, value in metrics.items()})
    log_run_results(
        loggers, metrics, [output_dir / PREDICTIONS_FILE, output_dir / METRICS_FILE, output_dir / PER_QUESTION_FILE]
    )
    close_run_loggers(loggers, "success")
    title = f"{cfg.model_name} on {source.name} {cfg.eval_split}"
    show(console, lambda target: target.print(metrics_table(metrics, title=title)))
    for line in report.warnings if report is not None else []:
        log.warning(line)
    log.info("metrics: %s", output_dir / METRICS_FILE)
    if predictions is not None:
        log.info("predictions: %s", output_dir / PREDICTIONS_FILE)
    log.info("disk used by the run folder: %.1f MB", folder_megabytes(output_dir))
    if source.sample:
        lines = sample_run_lines(cfg, output_dir, len(set(context.train["id"])), len(set(evaluation["id"])))
        print("\n" + "\n".join(lines), flush=True)  # plain: the commands are copied, never wrapped
        write_to_log_file("\n" + "\n".join(lines))
    return metrics.get(cfg.optimized_metric)
