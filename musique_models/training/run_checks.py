"""What `train.py` refuses before anything heavy loads: a resume of another run's config, a new run over a finished
one, unknown settings, backbones that cannot load, data files that are nowhere or would not be read, splits, a GPU
trainer without a GPU. Light: a refused run answers without importing torch."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from musique_models.data.source import DatasetSource, no_sample_message
from musique_models.errors import (
    RunConfigError,
    unknown_setting_message,
    user_error_message,
)
from musique_models.models.hub import hub_folder, packaged_path
from musique_models.run_files import (
    CONFIG_FILE,
    STATUS_FILE,
    current_attempt,
    run_status,
)
from musique_models.settings import unknown_settings
from musique_models.training.interruption import in_multirun, task_overrides
from musique_models.training.provenance import (
    OFFICIAL_FILE_KEYS,
    SAMPLE_FILE_KEYS,
    flatten_config,
    is_result_neutral,
    is_under,
    override_keys,
)
from musique_models.training.run_folder import check_output_dir

log = logging.getLogger(__name__)


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
    check_output_dir(cfg, output_dir)
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
