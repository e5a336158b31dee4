"""The files of a run folder that `train.py` writes around the recipe: its folder, config and status at the start,
its provenance, the evaluation subset it scored, and what it finds damaged on a resume."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from musique_models.data.source import DatasetSource
from musique_models.data.subsample import EVALUATION_SUBSET_SEED, evaluation_subset_indices
from musique_models.errors import (
    RunConfigError,
)
from musique_models.io import atomic_open, checkpoint_problem, write_json
from musique_models.run_files import (
    CONFIG_FILE,
    PROVENANCE_FILE,
    STAGE_FILE,
    STATUS_FILE,
    current_attempt,
    subsample_ids_file,
)
from musique_models.training.interruption import task_overrides
from musique_models.training.provenance import run_provenance

log = logging.getLogger(__name__)


def run_dir(cfg: DictConfig) -> Path:
    """The run folder: Hydra's output folder when run through Hydra, else `paths.output_dir`."""
    if HydraConfig.initialized():
        return Path(HydraConfig.get().runtime.output_dir)
    return Path(cfg.paths.output_dir)


def check_output_dir(cfg: DictConfig, output_dir: Path) -> None:
    """Refuse a `paths.output_dir` other than the run folder `output_dir` (through Hydra, the run goes into Hydra's
    folder, which it has made already: `hydra.run.dir=` chooses it)."""
    asked = (cfg.get("paths") or {}).get("output_dir")
    if asked is not None and Path(str(asked)).expanduser().resolve() != output_dir.resolve():
        raise RunConfigError(
            f"paths.output_dir={asked}: train.py writes a run into Hydra's run folder; choose it with "
            f"hydra.run.dir={asked} instead"
        )


def start_run(cfg: DictConfig, output_dir: Path) -> None:
    """Write the run's `config.yaml` (its first attempt's: what every resume is checked against), then its status
    `running`: a folder that holds a status holds a config, except after a kill in between, which
    `ckpt_path=last` takes for an aborted start."""
    if not (output_dir / CONFIG_FILE).exists():
        with atomic_open(output_dir / CONFIG_FILE) as handle:
            handle.write(OmegaConf.to_yaml(cfg, resolve=True))
    write_json(output_dir / STATUS_FILE, {"status": "running", "pid": os.getpid(), "attempt": current_attempt()})


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
