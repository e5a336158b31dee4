"""The experiment loggers shared by every stage of a run (wandb: one run per job, resumed with the job)."""

from __future__ import annotations

import uuid
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from pytorch_lightning.loggers import Logger

WANDB_ID_FILE = "wandb_run_id.txt"


def shared_loggers(cfg: DictConfig, run_dir: Path) -> list[Logger]:
    """Loggers that span the whole run. The wandb run id is kept in the run folder, so that `ckpt_path=last`
    continues the same wandb run; each multirun job gets its own folder, hence its own run."""
    loggers: list[Logger] = []
    wandb_cfg = (cfg.get("logger") or {}).get("wandb")
    if wandb_cfg is not None:
        id_file = run_dir / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.parent.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id)
        logger = instantiate(wandb_cfg, id=run_id, resume="allow", save_dir=str(run_dir))
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
        loggers.append(logger)
    return loggers
