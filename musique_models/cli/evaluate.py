"""The body of `evaluate.py`, kept in the package so that tests can call it."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from musique_models import PROJECT_ROOT
from musique_models.data.formats import FORMATS
from musique_models.data.probe import dire_min_paragraphs, print_dire_skips
from musique_models.errors import EvaluateConfigError
from musique_models.evaluation.evaluator import (
    comparison_table,
    evaluate_dire_files,
    evaluate_files,
    intervals_path,
    metrics_table,
    report_intervals,
    write_intervals,
    write_report,
)
from musique_models.evaluation.intervals import BOOTSTRAP_NOTE, PER_HOP_NOTE, bootstrap_settings, paired_metric_tests
from musique_models.io import write_json
from musique_models.run_files import check_run_folder
from musique_models.settings import dataset_setting

MODES = ("standard", "dire")
_REQUIRED = {
    "predictions": "predictions=PATH (the prediction jsonl to score)",
    "gold": "gold=PATH (the gold file: MuSiQue Ans or Full, HotpotQA or 2Wiki)",
}


# The options that choose what a trained run predicts (`run=`): with prediction files they would change nothing.
RUN_ONLY = ("split", "eval_size", "partition", "threads")


def given_on_command_line() -> set[str]:
    """The keys the command line sets (`key=value`, `+key=value`), as Hydra recorded them; empty outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return set()
    return {str(item).split("=", 1)[0].lstrip("+~") for item in HydraConfig.get().overrides.task}


def gold_layout(cfg: DictConfig) -> tuple[str | None, bool | None]:
    """The gold format and MuSiQue-Full pairing asked for: from `dataset=<config>`, else `format=`, else (None,
    None) for detection from the file."""
    data_format = cfg.get("format")
    if data_format is not None and data_format not in FORMATS:
        hint = ""
        if (PROJECT_ROOT / "conf" / "dataset" / f"{data_format}.yaml").exists():
            hint = f" ({data_format} is a dataset config: use dataset={data_format})"
        raise EvaluateConfigError(f"unknown format={data_format}; expected one of: {', '.join(FORMATS)}{hint}")
    dataset = cfg.get("dataset")
    if dataset is None:
        return data_format, None
    if data_format is not None and data_format != dataset.format:
        raise EvaluateConfigError(
            f"format={data_format} contradicts dataset={dataset.name} (format {dataset.format}); give only one of them"
        )
    return dataset.format, bool(dataset_setting(dataset, "paired"))


def check_options(cfg: DictConfig) -> None:
    """Fail with one clear message on an unknown mode, a missing required path, files given with `run=`, or a bad
    `dire_min_paragraphs`."""
    if cfg.mode not in MODES:
        raise EvaluateConfigError(f"unknown mode={cfg.mode}; expected mode=standard or mode=dire")
    dire_min_paragraphs(cfg)
    if cfg.get("run"):
        given = [key for key in ("predictions", "gold", "probe_predictions", "format", "compare") if _given(cfg, key)]
        if given:
            raise EvaluateConfigError(
                f"run= predicts with a trained run and scores its own predictions; drop {', '.join(given)}= "
                "(or drop run= to score existing files)"
            )
        check_run_folder(cfg.run)
        return
    for key, usage in _REQUIRED.items():
        if OmegaConf.is_missing(cfg, key) or not cfg[key]:
            raise EvaluateConfigError(f"evaluate.py needs {usage}")
    run_only = [key for key in RUN_ONLY if key in given_on_command_line()]
    if run_only:
        raise EvaluateConfigError(
            f"{', '.join(run_only)} apply to run= only (they choose what a trained run predicts); drop them to score "
            "these files, or give run=RUN_DIR instead of predictions= and gold="
        )
    if cfg.mode == "dire" and not cfg.probe_predictions:
        raise EvaluateConfigError("mode=dire needs probe_predictions=PATH (the DiRe probe prediction jsonl)")
    if cfg.get("compare"):
        if cfg.mode == "dire":
            raise EvaluateConfigError("compare= compares the standard metrics of two prediction files: drop mode=dire")
        outputs = [key for key in ("output", "per_question_output", "intervals_output") if cfg.get(key)]
        if outputs:
            raise EvaluateConfigError(
                f"compare= writes the comparison only (compare_output=); drop {', '.join(outputs)}="
            )
    elif cfg.get("compare_output"):
        raise EvaluateConfigError("compare_output= applies with compare=B.jsonl only")


def _given(cfg: DictConfig, key: str) -> bool:
    return not OmegaConf.is_missing(cfg, key) and bool(cfg.get(key))


def default_output(predictions: str | Path) -> Path:
    """Where metrics go when `output` is not given: `<predictions stem>.metrics.json` beside the predictions."""
    predictions = Path(predictions)
    return predictions.with_name(predictions.stem + ".metrics.json")


def default_comparison_output(predictions: str | Path, compare: str | Path) -> Path:
    """Where a comparison goes when `compare_output` is not given: `<predictions stem>.vs.<compare stem>.json`
    beside the predictions."""
    predictions = Path(predictions)
    return predictions.with_name(f"{predictions.stem}.vs.{Path(compare).stem}.json")


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Score `cfg.predictions` against `cfg.gold` (and DiRe probes with `mode=dire`); write and print metrics and
    their intervals. With `compare=`, compare two prediction files instead (`compare_predictions`). With
    `run=RUN_DIR`, predict with that trained run first (`musique_models.runs.score`)."""
    check_options(cfg)
    if cfg.get("run"):
        from musique_models.runs.score import score_run  # loads torch and the models: only when asked

        return score_run(cfg)
    if cfg.get("compare"):
        return compare_predictions(cfg)
    data_format, paired = gold_layout(cfg)
    min_paragraphs = dire_min_paragraphs(cfg)
    if cfg.mode == "dire":
        report = evaluate_dire_files(
            cfg.gold, cfg.predictions, cfg.probe_predictions, data_format, paired, min_paragraphs
        )
    else:
        report = evaluate_files(cfg.predictions, cfg.gold, data_format, paired)
    output = Path(cfg.output) if cfg.output else default_output(cfg.predictions)
    per_question = write_report(report, output, cfg.per_question_output)
    intervals = report_intervals(report)
    intervals_output = Path(cfg.get("intervals_output") or intervals_path(output))
    write_intervals(intervals_output, intervals)
    # plain prints: paths are never wrapped, whatever the terminal's width (they are copied into commands)
    print(f"{cfg.predictions} scored against {cfg.gold}")
    Console().print(metrics_table(report.metrics, title=f"{cfg.mode} metrics", intervals=intervals))
    print(BOOTSTRAP_NOTE.format(**bootstrap_settings()) + PER_HOP_NOTE)
    for line in report.warnings:
        print(f"warning: {line}")
    print_dire_skips(report.metrics, min_paragraphs)
    print(f"metrics: {output}\nper-question scores: {per_question}\nintervals: {intervals_output}")
    return report.metrics


def compare_predictions(cfg: DictConfig) -> dict[str, float]:
    """Score `cfg.predictions` and `cfg.compare` against `cfg.gold` and test each metric's difference (paired
    bootstrap over the same questions); print the comparison and write it as JSON (`compare_output`). Returns the
    first file's metrics."""
    data_format, paired = gold_layout(cfg)
    first = evaluate_files(cfg.predictions, cfg.gold, data_format, paired)
    second = evaluate_files(cfg.compare, cfg.gold, data_format, paired)
    tests = paired_metric_tests(first.per_question, second.per_question)
    output = Path(cfg.get("compare_output") or default_comparison_output(cfg.predictions, cfg.compare))
    settings = bootstrap_settings()
    write_json(
        output,
        {
            "predictions": str(cfg.predictions),
            "compare": str(cfg.compare),
            "gold": str(cfg.gold),
            "bootstrap": {**settings, "p_value": "two-sided paired bootstrap"},
            "metrics": {
                name: {
                    "predictions": first.metrics[name],
                    "compare": second.metrics[name],
                    "difference": test.difference.mean,
                    "low": test.difference.low,
                    "high": test.difference.high,
                    "p_value": test.p_value,
                    "count": test.count,
                }
                for name, test in tests.items()
            },
        },
    )
    labels = [Path(cfg.predictions).stem, Path(cfg.compare).stem]
    if labels[0] == labels[1]:
        labels = ["predictions", "compare"]
    print(f"{cfg.predictions} and {cfg.compare} scored against {cfg.gold}")
    Console().print(comparison_table(first.metrics, second.metrics, tests, labels))
    print(
        BOOTSTRAP_NOTE.format(**settings) + f"; {labels[0]} - {labels[1]} with its paired interval; p: two-sided "
        "paired bootstrap"
    )
    for label, report in zip(labels, (first, second), strict=True):
        for line in report.warnings:
            print(f"warning ({label}): {line}")
    print(f"comparison: {output}")
    return first.metrics
