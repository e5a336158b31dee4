"""`python evaluate.py run=RUN_DIR ...`: predict with a finished run's best checkpoints (every stage of its recipe,
never training), write the official prediction file and score it; `mode=dire` adds the DiRe probes.

    python evaluate.py run=RUN_DIR                                 # the run's own evaluation split, scored
    python evaluate.py run=RUN_DIR dataset=2wiki_20k dataset.sample=true split=dev   # another dataset's split
    python evaluate.py run=RUN_DIR split=test                      # an unlabelled test set: the leaderboard file
    python evaluate.py run=RUN_DIR mode=dire [partition=half]      # DiRe: the probes of the split, predicted
    python evaluate.py run=RUN_DIR mode=dire dire_min_paragraphs=5 # DiRe without questions of < 5 paragraphs

Everything goes to `output` (default `RUN_DIR/evaluations/<dataset>-<split>[-dire-<partition>[-min<N>paragraphs]]/`):
`predictions.jsonl` (official format, with `predicted_answer_confidence`), `metrics.json`,
`metrics.per_question.jsonl` and `metrics.intervals.json` (each metric's bootstrap interval; none of them for an
unlabelled split), `scoring.json` (what was predicted: dataset, split,
shipped sample or not, `eval_size`, rows, mode, partition, `dire_min_paragraphs`), the recipe's side files (`selector_ranking.json`,
`decompositions.jsonl`, `steps.jsonl`, `generations.jsonl` with `side_files.json`), and with `mode=dire` the probe file in the dataset's own format
(`probe.jsonl` / `probe.json`), `probe_predictions.jsonl` and the probe's side files under `probe/`.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import datasets
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from musique_models.data.features import FEATURES
from musique_models.data.probe import (
    check_partition,
    dire_min_paragraphs,
    print_dire_skips,
    probe_instances,
    write_probe_file,
)
from musique_models.data.schema import Example
from musique_models.data.source import DatasetSource
from musique_models.errors import MusiqueModelsError
from musique_models.evaluation.evaluator import (
    EvaluationReport,
    dire_report,
    evaluate_predictions,
    intervals_path,
    metrics_table,
    report_intervals,
    write_intervals,
    write_report,
)
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.intervals import BOOTSTRAP_NOTE, PER_HOP_NOTE, bootstrap_settings
from musique_models.evaluation.predictions import Prediction, ProbePrediction, read_predictions, write_predictions
from musique_models.io import write_json
from musique_models.recipes.base import Predictor
from musique_models.recipes.build import instantiate_recipe
from musique_models.run_files import (
    CONFIG_FILE,
    EVALUATIONS_FOLDER,
    METRICS_FILE,
    PREDICTIONS_FILE,
    SCORING_FILE,
    check_run_folder,
)
from musique_models.training.console import quiet_libraries
from musique_models.training.run_folder import evaluation_subset
from musique_models.training.threads import choose_threads

log = logging.getLogger(__name__)


class RunScoringError(MusiqueModelsError):
    """A run folder that cannot be predicted with: not a finished run, or a split it cannot predict."""


@dataclass
class TrainedRun:
    """A finished run: its folder, its own config and its recipe's predictor, loaded from the best checkpoints."""

    run_dir: Path
    cfg: DictConfig
    predictor: Predictor


def load_trained_run(run_dir: str | Path) -> TrainedRun:
    """The finished run in `run_dir`, every stage's best checkpoint loaded (nothing trains); `RunScoringError` or
    `StageNotFinishedError` (one line each) for a folder that holds no finished run."""
    run_dir = check_run_folder(run_dir)
    cfg = OmegaConf.load(run_dir / CONFIG_FILE)
    if cfg.get("model") is None:
        raise RunScoringError(f"run={run_dir}: the run trained no model (model=null)")
    predictor = instantiate_recipe(cfg).load(cfg, run_dir)
    return TrainedRun(run_dir, cfg, predictor)


def prediction_split(cfg: DictConfig, run_cfg: DictConfig) -> tuple[DatasetSource, str, datasets.Dataset, int | None]:
    """The dataset source, split name, table to predict and the questions it was cut to (None: the whole split):
    `dataset=`/`split=` when given, else the run's own evaluation split (the `eval_size` questions the run
    scored)."""
    own_dataset = cfg.get("dataset") is None
    source: DatasetSource = instantiate(run_cfg.dataset if own_dataset else cfg.dataset)
    split = cfg.get("split") or run_cfg.eval_split
    if split not in source.splits:
        raise RunScoringError(
            f"split={split}: {source.name} has no such split here (choose one of {', '.join(source.splits)})"
        )
    table = source.load(split)
    eval_size = cfg.get("eval_size")
    if eval_size is None and own_dataset and split == run_cfg.eval_split:
        eval_size = run_cfg.get("eval_size")
    return source, split, evaluation_subset(table, eval_size) if eval_size else table, eval_size or None


def default_output_dir(
    run_dir: Path, source: DatasetSource, split: str, mode: str, partition: str, min_paragraphs: int | None = None
) -> Path:
    """`RUN_DIR/evaluations/<dataset>-<split>[-dire-<partition>[-min<N>paragraphs]]`."""
    name = f"{source.name}-{split}"
    if mode == "dire":
        name += f"-dire-{partition}" + (f"-min{min_paragraphs}paragraphs" if min_paragraphs is not None else "")
    return run_dir / EVALUATIONS_FOLDER / name


def score_run(cfg: DictConfig) -> dict[str, float]:
    """Predict (and score, when labelled) a split with the run in `cfg.run`; see the module docstring. Returns the
    metrics (empty for an unlabelled split)."""
    quiet_libraries()
    partition = check_partition(cfg.get("partition") or "half")
    min_paragraphs = dire_min_paragraphs(cfg)
    run = load_trained_run(cfg.run)
    choose_threads(
        cfg.get("threads") if cfg.get("threads") is not None else run.cfg.trainer.get("threads"), "prediction"
    )
    source, split, table, eval_size = prediction_split(cfg, run.cfg)
    labelled = source.is_labelled(split)
    if cfg.mode == "dire" and not labelled:
        raise RunScoringError(f"mode=dire: {source.name} {split} is unlabelled; DiRe probes need supporting paragraphs")
    if cfg.mode == "dire" and run.cfg.model_name == "decomposer":
        raise RunScoringError("mode=dire: the decomposer alone predicts no answers, so it has no DiRe scores")
    output_dir = (
        Path(cfg.output)
        if cfg.get("output")
        else default_output_dir(run.run_dir, source, split, cfg.mode, partition, min_paragraphs)
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    scoring = {
        "dataset": source.name,
        "split": split,
        "sample": bool(source.sample),
        "eval_size": eval_size,
        "rows": len(table),
        "mode": cfg.mode,
        "partition": partition if cfg.mode == "dire" else None,
        "dire_min_paragraphs": min_paragraphs,
    }
    (output_dir / SCORING_FILE).unlink(missing_ok=True)  # written again once the folder holds what it says
    # plain prints: paths are never wrapped, whatever the terminal's width (they are copied into commands)
    print(f"predicting {source.name} {split} ({len(table)} rows) with {run.run_dir} -> {output_dir}", flush=True)

    predictions = run.predictor.predict(table, output_dir)
    extra_metrics = dict(run.predictor.extra_metrics)  # before the probes are predicted (Step Execution's counts)
    predictions_path = output_dir / PREDICTIONS_FILE
    if predictions is not None:
        write_predictions(predictions_path, predictions)
    if not labelled:
        if predictions is None:  # the decomposer alone
            print(f"{source.name} {split} is unlabelled: NOT scored; decompositions in {output_dir}")
            return {}
        check_prediction_ids(predictions_path, table)
        (output_dir / METRICS_FILE).unlink(missing_ok=True)  # nothing is scored: no figures, never stale ones
        intervals_path(output_dir / METRICS_FILE).unlink(missing_ok=True)
        write_json(output_dir / SCORING_FILE, scoring)
        print(
            f"{source.name} {split} is unlabelled: NOT scored. The official prediction file ({len(table)} rows, "
            f"in the test file's order, ids checked) is {predictions_path}"
        )
        return {}
    golds = [gold_from_example(Example.from_dict(row), index) for index, row in enumerate(table)]
    if predictions is None:  # the decomposer alone: its own scores
        report = EvaluationReport({})
    elif cfg.mode == "dire":
        report = dire_scores(run.predictor, source, table, golds, predictions, output_dir, partition, min_paragraphs)
    else:  # a MuSiQue-Full file not in twins (`dataset.paired=false`) gets the unpaired metrics, not An+Sf
        report = evaluate_predictions(golds, predictions, paired=bool(source.paired))
    report.metrics.update(extra_metrics)
    per_question = write_report(report, output_dir / METRICS_FILE)
    intervals = report_intervals(report)
    write_intervals(intervals_path(output_dir / METRICS_FILE), intervals)
    write_json(output_dir / SCORING_FILE, scoring)
    title = f"{run.cfg.model_name} on {source.name} {split}"
    Console().print(metrics_table(report.metrics, title=title, intervals=intervals))
    print(BOOTSTRAP_NOTE.format(**bootstrap_settings()) + PER_HOP_NOTE)
    for line in report.warnings:
        print(f"warning: {line}")
    if cfg.mode == "dire":
        print_dire_skips(report.metrics, min_paragraphs)
    print(
        f"metrics: {output_dir / METRICS_FILE}\nper-question scores: {per_question}\n"
        f"intervals: {intervals_path(output_dir / METRICS_FILE)}"
    )
    return report.metrics


def check_prediction_ids(path: Path, table: datasets.Dataset) -> None:
    """The written prediction file holds one row per row of `table`, with its id, in its order (what a leaderboard
    checks); a mismatch names the first differing line."""
    written = [prediction.id for _, prediction in read_predictions(path)]
    expected = list(table["id"])
    if written != expected:
        line = next(
            (i for i, (a, b) in enumerate(zip(written, expected), start=1) if a != b),
            min(len(written), len(expected)) + 1,
        )
        raise RunScoringError(
            f"{path}: line {line} does not match the test file ({len(written)} rows for {len(expected)})"
        )


def probe_table(
    examples: list[Example], partition: str, min_paragraphs: int | None = None
) -> tuple[datasets.Dataset, list[tuple[str, int]]]:
    """Both DiRe probes of every answerable example (with at least `min_paragraphs` paragraphs, when given) as one
    schema table, and each row's (question id, probe)."""
    pairs = list(probe_instances(examples, partition, min_paragraphs))
    table = datasets.Dataset.from_list([probe.to_dict() for _, _, probe in pairs], features=FEATURES)
    return table, [(example.id, number) for example, number, _ in pairs]


def dire_scores(
    predictor: Predictor,
    source: DatasetSource,
    table: datasets.Dataset,
    golds: list,
    predictions: list[Prediction],
    output_dir: Path,
    partition: str,
    min_paragraphs: int | None = None,
) -> EvaluationReport:
    """Predict both probes of every answerable question (those with at least `min_paragraphs` paragraphs, when
    given), write them beside the predictions and score DiRe against the original predictions (`dire_report`:
    answer, support and joint DiRe, per hop, with the dataset format's answer rules)."""
    examples = [Example.from_dict(row) for row in table]
    probe_file = output_dir / f"probe{source.data_format.file_suffix}"
    write_probe_file(examples, source.data_format, probe_file, partition, min_paragraphs)
    probes, keys = probe_table(examples, partition, min_paragraphs)
    # every question skipped by min_paragraphs: nothing to predict
    probe_outputs = predictor.predict(probes, output_dir / "probe") if keys else []
    assert probe_outputs is not None
    probe_predictions = [
        ProbePrediction(
            id=question_id,
            probe=number,
            predicted_answer=prediction.predicted_answer,
            predicted_answer_confidence=confidence_of(prediction),
            predicted_support_idxs=prediction.predicted_support_idxs,
        )
        for (question_id, number), prediction in zip(keys, probe_outputs, strict=True)
    ]
    probe_path = output_dir / "probe_predictions.jsonl"
    write_predictions(probe_path, probe_predictions)
    return dire_report(
        golds,
        predictions,
        list(enumerate(probe_predictions, start=1)),
        probe_path,
        source.data_format.name,
        min_paragraphs,
    )


def confidence_of(prediction: Prediction) -> float:
    """The prediction's answer confidence, which DiRe needs to pick each probe's answer."""
    if prediction.predicted_answer_confidence is None:
        raise RunScoringError(f"prediction {prediction.id}: the recipe gave no predicted_answer_confidence")
    return prediction.predicted_answer_confidence
