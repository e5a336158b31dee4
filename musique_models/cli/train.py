"""The body of `train.py`: load the data, run the configured recipe, write official predictions and metrics."""

from __future__ import annotations

import copy
import inspect
import io
import json
import logging
import os
import re
import shlex
import shutil
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException
from rich.console import Console

from musique_models import PROJECT_ROOT
from musique_models.cli.closing import sample_run_lines
from musique_models.data.schema import Example
from musique_models.data.source import DatasetSource, no_sample_message
from musique_models.data.subsample import EVALUATION_SUBSET_SEED, evaluation_subset_indices
from musique_models.data.summary import print_summary
from musique_models.errors import (
    MusiqueModelsError,
    no_such_setting_message,
    unknown_setting_message,
    user_error_message,
)
from musique_models.evaluation.evaluator import evaluate_predictions, metrics_table, write_report
from musique_models.evaluation.gold import gold_from_example
from musique_models.evaluation.predictions import write_predictions
from musique_models.io import atomic_open, checkpoint_problem, write_json
from musique_models.models.hub import hub_folder, packaged_path
from musique_models.run_files import (
    CHECKPOINTS_FOLDER,
    CONFIG_FILE,
    METRICS_FILE,
    PER_QUESTION_FILE,
    PREDICTIONS_FILE,
    PROVENANCE_FILE,
    RESUME_FILE,
    STAGE_FILE,
    STATUS_FILE,
    current_attempt,
    discard_unstarted_run,
    holds_only_this_start,
    is_finished,
    run_status,
    subsample_ids_file,
)
from musique_models.settings import unknown_settings
from musique_models.training.provenance import (
    OFFICIAL_FILE_KEYS,
    SAMPLE_FILE_KEYS,
    flatten_config,
    is_result_neutral,
    is_under,
    override_keys,
    run_provenance,
)
from musique_models.training.stop import STOP, RunInterrupted, requeue_slurm_job, stopped_before_start

# torch, Lightning and what imports them (the training layer's callbacks and loggers, the recipes) load only once a
# run has passed its checks: a refused run answers in about a second instead of ten.
if TYPE_CHECKING:
    from musique_models.recipes.base import Recipe
log = logging.getLogger(__name__)


class RunConfigError(MusiqueModelsError):
    """The run's configuration cannot be carried out as asked (resume, split, device)."""


def run_dir(cfg: DictConfig) -> Path:
    """The run folder: Hydra's output folder when run through Hydra, else `paths.output_dir`."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.paths.output_dir)


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


def start_run(cfg: DictConfig, output_dir: Path) -> None:
    """Write the run's `config.yaml` (its first attempt's: what every resume is checked against), then its status
    `running`: a folder that holds a status holds a config, except after a kill in between, which
    `ckpt_path=last` takes for an aborted start."""
    if not (output_dir / CONFIG_FILE).exists():
        with atomic_open(output_dir / CONFIG_FILE) as handle:
            handle.write(OmegaConf.to_yaml(cfg, resolve=True))
    write_json(output_dir / STATUS_FILE, {"status": "running", "pid": os.getpid(), "attempt": current_attempt()})


def is_aborted_start(output_dir: Path) -> bool:
    """Whether `output_dir` holds the start of a run that an earlier attempt began and that stopped before it wrote
    its configuration (a kill in its first seconds): a status, or the beginning of one, from another attempt, and
    no `config.yaml`."""
    if not output_dir.is_dir() or (output_dir / CONFIG_FILE).exists():
        return False
    if any(name.startswith(f".{STATUS_FILE}.") for name in os.listdir(output_dir)):
        return True
    status = run_status(output_dir)
    if not (output_dir / STATUS_FILE).exists():
        return False
    return status is None or status.get("attempt") != current_attempt() or bool(status.get("earlier_start"))


def damaged_best_checkpoints(output_dir: Path) -> list[str]:
    """`<stage>: <file> is <why>` for each finished stage of the run whose best checkpoint is not whole
    (`io.checkpoint_problem`)."""
    damaged = []
    for record in sorted(output_dir.glob(f"*/{STAGE_FILE}")):
        best = output_dir / json.loads(record.read_text())["best_checkpoint"]
        problem = checkpoint_problem(best)
        if problem is not None:
            damaged.append(f"{record.parent.name}: {best} is {problem}")
    return damaged


def has_trained(output_dir: Path) -> bool:
    """Whether any stage of the run in `output_dir` started training (it has checkpoints or a stage record)."""
    return any(output_dir.glob(f"*/{CHECKPOINTS_FOLDER}")) or any(output_dir.glob(f"*/{STAGE_FILE}"))


def is_interruption(error: BaseException) -> bool:
    """Whether the run stopped because it was asked to: a `RunInterrupted` in the error's chain, or, after a stop
    signal, Lightning's own exit on a signal (`KeyboardInterrupt`, `SystemExit`)."""
    if _run_interrupted(error) is not None:
        return True
    return STOP.requested and isinstance(error, KeyboardInterrupt | SystemExit)


def interruption_reason(error: BaseException) -> str:
    """What stopped the run, as the `RunInterrupted` in the error's chain says (`SIGINT received again: stopped at
    once`), else the signal's name."""
    interruption = _run_interrupted(error)
    return str(interruption) if interruption is not None and str(interruption) else STOP.signal_name or "a stop request"


def _run_interrupted(error: BaseException) -> RunInterrupted | None:
    """The first `RunInterrupted` in the error's chain (its causes and contexts), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RunInterrupted):
            return current
        current = current.__cause__ or current.__context__
    return None


def interrupted(output_dir: Path, reason: str) -> SystemExit:
    """Record the stopped run as `interrupted` with its resume point and the command that resumes it, print both,
    requeue the job when SLURM asked (its time-limit or pre-emption signal), and give the exit to raise
    (128 + the signal's number, as a shell reports a process stopped by a signal)."""

    command = resume_command(output_dir)
    record: dict[str, Any] = {"status": "interrupted", "signal": STOP.signal_name, "resume_command": command}
    sweep_command = sweep_resume_command()
    if sweep_command is not None:
        record["sweep_resume_command"] = sweep_command
    points = sorted(output_dir.glob(f"*/{CHECKPOINTS_FOLDER}/{RESUME_FILE}"), key=lambda path: path.stat().st_mtime_ns)
    if points:
        record["resume_point"] = str(points[-1].relative_to(output_dir))
    if STOP.requeue:
        launcher = callable(STOP.previous.get(STOP.signum))
        record["requeue"] = "asked of the launcher's own handler" if launcher else "scontrol requeue"
    write_json(output_dir / STATUS_FILE, record)
    where = (
        "none: every finished stage is kept, the stage that was running starts afresh"
        if has_trained(output_dir)
        else "none yet (no stage had started): resuming starts the run's first stage"
    )
    if points:
        try:  # torch loads here when the stop came before it did (or in the middle of its import): then say less
            from musique_models.training.resume import describe_resume_point

            where = f"{points[-1]}, {describe_resume_point(points[-1])}"
        except Exception:  # the status is written; a point that cannot be described now is only not described
            where = str(points[-1])
    log.warning("run interrupted (%s). Resume point: %s", reason, where)
    print(f"resume it with:\n  {command}", file=sys.stderr, flush=True)
    if sweep_command is not None:
        print(
            f"or resume the whole sweep (finished jobs are kept) with:\n  {sweep_command}", file=sys.stderr, flush=True
        )
    if STOP.requeue:
        requeue_slurm_job(STOP.signum, STOP.previous.get(STOP.signum))
    return SystemExit(128 + int(STOP.signum or 0))


def resume_command(output_dir: Path) -> str:
    """The exact command that resumes the run in `output_dir`: the run's own overrides (a multirun job's, as a
    single run), its folder and `ckpt_path=last`, from the folder it was started in. The folder is quoted for
    Hydra's override grammar where it needs it (a path may hold `=`, `,`, brackets) and the whole for the shell."""
    if HydraConfig.initialized():
        hydra_cfg = HydraConfig.get()
        overrides = [o for o in task_overrides() if o.split("=", 1)[0].lstrip("+~") != "ckpt_path"]
        if in_multirun():
            overrides.append("hydra.mode=RUN")
        cwd = hydra_cfg.runtime.cwd
    else:  # called from Python, not through train.py: the overrides are not known here
        overrides, cwd = ["<the run's overrides>"], os.getcwd()
    arguments = [
        sys.executable,
        str(PROJECT_ROOT / "train.py"),
        *overrides,
        f"hydra.run.dir={hydra_value(str(output_dir.resolve()))}",
        "ckpt_path=last",
    ]
    return shell_command(cwd, arguments)


def in_multirun() -> bool:
    """Whether this is a job of a Hydra multirun (`--multirun`)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def shell_command(cwd: str, arguments: list[str]) -> str:
    """`cd CWD && ARGUMENTS`, quoted for a POSIX shell."""
    return f"cd {shlex.quote(cwd)} && {shlex.join(arguments)}"


def sweep_resume_command() -> str | None:
    """For a job of a multirun started with `train.py --multirun`, the command that resumes the whole sweep: the
    sweep's own command line in its folder (`hydra.sweep.dir`) with `ckpt_path=last`, which keeps the finished
    jobs, resumes the stopped one and starts those not started. None for a single run, or a job run by a launcher
    in another process (its command line is not the sweep's)."""
    if not in_multirun():
        return None
    if Path(sys.argv[0]).resolve() != (PROJECT_ROOT / "train.py").resolve():
        return None
    hydra_cfg = HydraConfig.get()
    kept = [
        argument
        for argument in sys.argv[1:]
        if argument.split("=", 1)[0].lstrip("+~") not in ("ckpt_path", "hydra.sweep.dir")
    ]
    arguments = [
        sys.executable,
        str(PROJECT_ROOT / "train.py"),
        *kept,
        f"hydra.sweep.dir={hydra_value(str(Path(hydra_cfg.sweep.dir).resolve()))}",
        "ckpt_path=last",
    ]
    return shell_command(hydra_cfg.runtime.cwd, arguments)


def hydra_value(text: str) -> str:
    """`text` as a value of Hydra's override grammar: as it is when it holds only characters that need no quoting
    (ASCII letters, digits and `/._-@+`), else single-quoted with its quotes escaped."""
    if re.fullmatch(r"[A-Za-z0-9_/.@+-]+", text):
        return text
    return "'" + text.replace("'", "\\'") + "'"


def task_overrides() -> list[str]:
    """The run's command-line overrides as typed (`seed=${x}` stays as it is: never resolved here); [] outside
    Hydra."""
    if not HydraConfig.initialized():
        return []
    return list(OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False))


def check_run_config(cfg: DictConfig, output_dir: Path) -> None:
    """Refuse, before anything is loaded, what cannot be done as asked: a resume of another run's config, a new
    run over a finished one, a setting a stage does not have (`+model.answerer.lrr=...`: Hydra accepts an added key
    on a typed node), a data file the run would not read (`dataset.files.*` on the samples), an unknown
    evaluation split, a data file that is nowhere (not on disk, no URL, no hub dataset), `eval_size` <= 0, a GPU trainer without a GPU, an interpolation that does not resolve. A SLURM
    job that was requeued (`SLURM_RESTART_COUNT` > 0) and finds its run in its folder resumes it (`ckpt_path=last`); a multirun job
    resumed with `ckpt_path=last` whose folder holds no run yet (the sweep stopped before it) starts it."""
    try:
        OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as error:
        raise RunConfigError(user_error_message(error) or " ".join(str(error).split())) from None
    saved = output_dir / CONFIG_FILE
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    if cfg.get("ckpt_path") is None and restarts > 0:
        job = os.environ.get("SLURM_JOB_ID")
        if saved.exists():
            log.info("SLURM job %s restarted (%d): resuming the run in %s", job, restarts, output_dir)
            cfg.ckpt_path = "last"
        else:
            log.warning(
                "SLURM job %s restarted (%d), but %s holds no run: starting afresh (give the run a folder that "
                "survives a requeue: hydra.run.dir=logs/train/runs/slurm-$SLURM_JOB_ID)",
                job,
                restarts,
                output_dir,
            )
    if cfg.get("ckpt_path") not in (None, "last"):
        raise RunConfigError(
            f"ckpt_path={cfg.ckpt_path}: ckpt_path takes `last` (resume the run in hydra.run.dir); "
            "to reuse a trained selector pass model.selector_checkpoint=PATH"
        )
    check_data_overrides(cfg)
    check_backbones(cfg.get("model"))
    unknown = unknown_settings(cfg.get("model"), "model")
    if unknown:
        raise RunConfigError("; ".join(unknown_setting_message(key, schema) for key, schema in unknown))
    if cfg.get("ckpt_path") == "last" and not saved.exists() and in_multirun():
        log.info("%s holds no run yet (the sweep stopped before this job): starting it", output_dir)
        cfg.ckpt_path = None
    if cfg.get("ckpt_path") == "last" and not saved.exists() and is_aborted_start(output_dir):
        log.warning(
            "%s holds a run that stopped before it wrote its configuration (a kill in its first seconds): "
            "starting the run afresh there",
            output_dir,
        )
        cfg.ckpt_path = None
    if cfg.get("ckpt_path") == "last":
        if not saved.exists():
            raise RunConfigError(
                f"ckpt_path=last resumes the run in hydra.run.dir=<run folder>, but {output_dir} "
                "holds no run (pass hydra.run.dir=logs/train/runs/<time> of the run to resume)"
            )
        differing = config_differences(OmegaConf.load(saved), cfg)
        if differing:
            raise RunConfigError(
                f"{output_dir} holds a run with another configuration; resuming it would mix the "
                f"two. Differing keys: {', '.join(differing)}"
            )
    elif saved.exists():
        raise RunConfigError(
            f"{output_dir} already holds a run; resume it with ckpt_path=last (same arguments) or "
            "choose another hydra.run.dir"
        )
    sample_files = cfg.dataset.get("sample_files") or {}
    if cfg.dataset.get("sample") and not sample_files:
        raise RunConfigError(no_sample_message(cfg.dataset.name, cfg.dataset.data_dir))
    splits = list(sample_files if cfg.dataset.get("sample") else cfg.dataset.files)
    if cfg.eval_split not in splits:
        raise RunConfigError(
            f"eval_split={cfg.eval_split}: {cfg.dataset.name} has no such split here "
            f"(choose one of {', '.join(splits)})"
        )
    if cfg.eval_split in (cfg.dataset.get("unlabelled_splits") or []):
        raise RunConfigError(
            f"eval_split={cfg.eval_split}: {cfg.dataset.name}'s {cfg.eval_split} split is unlabelled and cannot be "
            f"scored; train with eval_split=dev, then predict it: python evaluate.py run=RUN_DIR split={cfg.eval_split}"
        )
    source: DatasetSource = instantiate(cfg.dataset)
    for split in dict.fromkeys(["train", cfg.eval_split]):
        source.check_readable(split)
    if cfg.get("eval_size") is not None and int(cfg.eval_size) <= 0:
        raise RunConfigError(
            f"eval_size={cfg.eval_size}: give a positive number of questions, or eval_size=null for the whole split"
        )
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    if accelerator in ("gpu", "cuda") and not _cuda_available():
        raise RunConfigError(
            f"trainer accelerator={accelerator}, but this machine has no usable GPU "
            "(use trainer=cpu, or trainer=default to pick the device automatically)"
        )


def check_backbones(node: Any, key: str = "model") -> None:
    """Every backbone the model config names (under `key`) can load: a hub one is a local folder, reachable, or in the
    local Hugging Face cache (`models.hub.hub_folder`); a packaged one's distribution is installed, at its pinned
    version, with its pinned checksum (`models.hub.packaged_path`). A run that cannot load one answers in one line
    before anything loads."""
    if not isinstance(node, DictConfig):
        return
    if str(node.get("_target_", "")).endswith("BackboneSpec"):
        source = node.get("source", "hub")
        if source == "hub" and node.get("path"):
            hub_folder(node.name, node.path, bool(node.get("causal")), key)
        elif source == "package":
            inside = f"{node.get('folder_in_distribution')}/{node.get('weights_file', 'model.safetensors')}"
            packaged_path(node.name, node.get("distribution"), inside, node.get("sha256"))
        elif source == "gguf":
            packaged_path(node.name, node.get("distribution"), node.get("file_in_distribution"), node.get("sha256"))
    for name in node:
        check_backbones(node.get(name), f"{key}.{name}")


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def check_data_overrides(cfg: DictConfig) -> None:
    """Refuse a data file or folder given on the command line that the run would not read: the official files'
    (`dataset.files.*`, `dataset.data_dir`, ...) with `dataset.sample=true`, the samples' with `false`."""
    if not HydraConfig.initialized():
        return
    sample = bool(cfg.dataset.get("sample"))
    unread = OFFICIAL_FILE_KEYS if sample else SAMPLE_FILE_KEYS
    ignored = [key for key in override_keys(task_overrides()) if is_under(key, unread)]
    if ignored:
        reads = (
            "the shipped sample (add dataset.sample=false to read"
            if sample
            else "the official files (add dataset.sample=true to read"
        )
        raise RunConfigError(
            f"{', '.join(ignored)} would not be read: dataset.sample={str(sample).lower()} reads {reads} it)"
        )


def config_differences(saved: DictConfig, current: DictConfig) -> list[str]:
    """Keys whose resolved values differ between a saved run config and `current`, leaving out the settings that
    never change what a run computes (`is_result_neutral`: a resume may change them). `current` is resolved with
    the saved run's `paths`, so a moved run folder (or repository) still resumes while a changed data file
    (`dataset.files.train=...`) is caught. A setting absent on one side counts as null (the code reads every
    setting's absence as null: a run saved before a setting existed still resumes)."""
    saved_values = flatten_config(OmegaConf.to_container(saved, resolve=False))
    probe = OmegaConf.to_container(current, resolve=False)
    probe["paths"] = OmegaConf.to_container(saved, resolve=False).get("paths", probe.get("paths"))
    current_values = flatten_config(OmegaConf.to_container(OmegaConf.create(probe), resolve=True))
    return [
        key
        for key in sorted(set(current_values) | set(saved_values))
        if not is_result_neutral(key) and current_values.get(key) != saved_values.get(key)
    ]


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


def record_provenance(output_dir: Path, source: DatasetSource) -> dict[str, Any]:
    """Write the run's `provenance.json` (code, library versions, the data files read, the machine, the overrides)
    when the run starts; a resumed run keeps it and appends the resuming attempt's code, versions and machine to
    its `resumptions`, and is refused (`RunConfigError`) when a data file's content changed since the run started.
    Returns the run's provenance."""
    overrides = task_overrides()
    current = run_provenance(source.read_files, source.sample, overrides)
    path = output_dir / PROVENANCE_FILE
    if path.exists():
        recorded = json.loads(path.read_text())
        for split, read in current["data"]["files"].items():
            before = recorded.get("data", {}).get("files", {}).get(split)
            if before is not None and before.get("sha256") != read["sha256"]:
                raise RunConfigError(
                    f"{read['path']} changed since the run in {output_dir} started (sha256 {before.get('sha256')} "
                    f"then, {read['sha256']} now): resuming would train on other data"
                )
        attempt = {key: current[key] for key in ("code", "versions", "devices")}
        recorded["resumptions"] = [*recorded.get("resumptions", []), attempt]
        current = recorded
    write_json(path, current)
    return current


def instantiate_recipe(cfg: DictConfig) -> Recipe:
    """The recipe `cfg.model` configures (`model=<name>`); its `system` entry is the registry's
    (`musique_models.systems`) and its `paper_settings` table the config's own (read by `${paper_setting:}`),
    not the recipe's."""
    from musique_models.recipes.base import Recipe

    model = copy.copy(cfg.model)  # a shallow copy keeps the root: interpolations still resolve
    with open_dict(model):
        model.pop("system", None)
        model.pop("paper_settings", None)
    recipe_class = get_class(model._target_)
    parameters = inspect.signature(recipe_class).parameters
    if not any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values()):
        # Hydra's own keys (`_target_`, `_convert_`, `_recursive_`, ...) are instantiate's, not the recipe's
        unknown = [str(key) for key in model if not str(key).startswith("_") and key not in parameters]
        if unknown:
            settings = [name for name in parameters if name != "self"]
            raise RunConfigError(
                "; ".join(no_such_setting_message(f"model.{key}", recipe_class.__name__, settings) for key in unknown)
            )
    recipe = instantiate(model, _recursive_=False)
    if not isinstance(recipe, Recipe):
        raise RunConfigError(f"model={cfg.model_name}: {cfg.model._target_} is not a recipe (needs name, fit and load)")
    return recipe


def evaluation_subset(table: Any, count: int) -> Any:
    """`count` questions of an evaluation table with its mix of hop counts, the same for every run
    (`data.subsample.evaluation_subset_indices`; MuSiQue-Full's twins stay together)."""
    return table.select(evaluation_subset_indices(table["id"], table["num_hops"], count))


def record_evaluation_subset(output_dir: Path, table: Any, cfg: DictConfig) -> None:
    """Write the ids `eval_size` kept, with their hop counts, as `subsample_<eval_split>_ids.json`."""
    hops = dict(zip(table["id"], table["num_hops"], strict=True))
    write_json(
        output_dir / subsample_ids_file(cfg.eval_split),
        {
            "dataset": cfg.dataset.name,
            "eval_size": cfg.eval_size,
            "seed": EVALUATION_SUBSET_SEED,
            "hops": {str(hop): list(hops.values()).count(hop) for hop in sorted(set(hops.values()))},
            "ids": list(hops),
        },
    )


def folder_megabytes(folder: Path) -> float:
    """Bytes of every file under `folder`, in MB."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file()) / 1e6


def show(console: Console, render: Any) -> None:
    """Print a rich table on the console and write the same text into the run's log file (`train.log`)."""
    recorder = Console(record=True, width=console.width, file=io.StringIO())
    render(recorder)
    render(console)
    write_to_log_file("\n" + recorder.export_text().rstrip())


def write_to_log_file(text: str, level: int = logging.INFO) -> None:
    """Write `text` as a record into the run's log files only (what the console already shows)."""
    record = logging.LogRecord(log.name, level, __file__, 0, "%s", (text,), None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.emit(record)


# Warnings that say nothing actionable about a run: library deprecations, and Lightning's advice on workers, custom
# batch samplers (ours covers every row) and logging intervals longer than a tiny epoch. Literal message starts.
QUIET_WARNINGS = (
    "`isinstance(treespec",  # ", LeafSpec)` is deprecated" (a comma would break PYTHONWARNINGS)
    "The number of training batches",
    "You are using a custom batch sampler",
    "The '",  # "The 'train_dataloader' does not have many workers"
    "Total length of `list` across ranks is zero",  # a stage that does not validate has no validation loader
    "Checkpoint directory",  # "... exists and is not empty": a resumed stage's folder holds its resume point
)


def quiet_libraries() -> None:
    """Route warnings into the log, keep known noise out (here and in DDP worker processes, through
    PYTHONWARNINGS), and keep libraries' advertising and notices out of the console."""
    logging.captureWarnings(True)
    for name in (
        "pytorch_lightning.utilities.rank_zero",
        "lightning.pytorch.utilities.rank_zero",
        "lightning_fabric.utilities.rank_zero",
        "lightning.fabric.utilities.rank_zero",
    ):
        logging.getLogger(name).setLevel(logging.WARNING)
    for message in QUIET_WARNINGS:
        warnings.filterwarnings("ignore", message=re.escape(message))
    inherited = [os.environ["PYTHONWARNINGS"]] if os.environ.get("PYTHONWARNINGS") else []
    os.environ["PYTHONWARNINGS"] = ",".join(
        inherited + [f"ignore:{message}" for message in QUIET_WARNINGS if "," not in message and ":" not in message]
    )
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()  # "Loading weights" bars: the weights are local and load at once
