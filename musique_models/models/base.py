"""What every model's LightningModule shares: AdamW with a warmup-then-decay schedule, and exact resumption."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytorch_lightning as pl
import torch
from transformers import get_linear_schedule_with_warmup

from musique_models.errors import MusiqueModelsError, check_choice
from musique_models.evaluation.evaluator import score_instance
from musique_models.evaluation.gold import ValidationGold
from musique_models.evaluation.metrics import aggregate
from musique_models.evaluation.predictions import Prediction
from musique_models.evaluation.torchmetric import MultihopQAMetric

SCHEDULES = ("linear", "slanted_triangular")


def slanted_triangular(step: int, total_steps: int, cut_frac: float = 0.1, ratio: float = 32.0) -> float:
    """AllenNLP's `slanted_triangular` multiplier of the peak rate (Howard & Ruder, 2018), the official configs'
    schedule: from 1/`ratio` up to 1 over the first `cut_frac` of the steps, then down to 1/`ratio` at the end."""
    cut = max(int(total_steps * cut_frac), 1)
    proportion = step / cut if step < cut else 1 - (step - cut) / max(total_steps - cut, 1)
    return (1 + max(proportion, 0.0) * (ratio - 1)) / ratio


class QAModule(pl.LightningModule):
    """Base LightningModule: AdamW with the schedule `schedule` names: `linear` (10% linear warmup from 0, then
    linear decay to 0) or `slanted_triangular` (the official configs': rises from lr/32 over the first 10% of the
    steps, then decays to lr/32; `warmup_ratio` is its cut fraction).

    The RNG states of torch, numpy and Python (every rank's, under DDP) are saved in every checkpoint and restored
    on resume, so a run resumed mid-epoch draws the same dropout masks as an uninterrupted one.
    """

    def __init__(
        self, lr: float = 2e-5, weight_decay: float = 0.0, warmup_ratio: float = 0.1, schedule: str = "linear"
    ) -> None:
        super().__init__()
        check_choice("schedule", schedule, SCHEDULES)
        self.lr = lr
        self.weight_decay = weight_decay
        self.warmup_ratio = warmup_ratio
        self.schedule = schedule

    def configure_optimizers(self) -> dict[str, Any]:
        no_decay = ("bias", "LayerNorm.weight", "layer_norm.weight")
        groups = [
            {
                "params": [p for n, p in self.named_parameters() if not any(k in n for k in no_decay)],
                "weight_decay": self.weight_decay,
            },
            {"params": [p for n, p in self.named_parameters() if any(k in n for k in no_decay)], "weight_decay": 0.0},
        ]
        optimizer = torch.optim.AdamW(groups, lr=self.lr)
        total_steps = max(int(self.trainer.estimated_stepping_batches), 1)
        if self.schedule == "slanted_triangular":
            scheduler = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda step: slanted_triangular(step, total_steps, self.warmup_ratio)
            )
        else:
            scheduler = get_linear_schedule_with_warmup(optimizer, int(self.warmup_ratio * total_steps), total_steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        states = _rng_states()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            # every rank draws its own dropout masks: keep each rank's states (rank 0 writes the file)
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, states)
            checkpoint["rng_states_per_rank"] = gathered
        checkpoint["rng_states"] = states

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        states = checkpoint.get("rng_states")
        per_rank = checkpoint.get("rng_states_per_rank")
        if per_rank and torch.distributed.is_available() and torch.distributed.is_initialized():
            rank = torch.distributed.get_rank()
            states = per_rank[rank] if rank < len(per_rank) else states
        if states:
            torch.set_rng_state(states["torch"])
            if states.get("cuda") is not None and torch.cuda.is_available():
                torch.cuda.set_rng_state(states["cuda"])
            kind, keys, position, has_gauss, cached_gaussian = states["numpy"]
            np.random.set_state((kind, np.array(keys, dtype=np.uint32), position, has_gauss, cached_gaussian))
            random.setstate(states["python"])


def require_validation_gold(
    module: pl.LightningModule, validation: ValidationGold | None, needs_context: bool = False
) -> ValidationGold:
    """The gold a module was built with to score its validation epochs; a clear error when it was built without
    (a stage that validates needs it; `validate: false` needs none)."""
    if validation is None or (needs_context and validation.context_of is None):
        what = "ValidationGold(golds, paired, context_of)" if needs_context else "ValidationGold(golds, paired)"
        raise MusiqueModelsError(
            f"{type(module).__name__} scores its validation epochs against the evaluation split's gold: build it "
            f"with validation={what}, or train the stage without validation (validate: false)"
        )
    return validation


def log_validation_scores(module: pl.LightningModule, metric: MultihopQAMetric, validation: ValidationGold) -> None:
    """Log the evaluator's metrics of a validation epoch from `metric`'s rows (every rank's), then reset it. Rows a
    partial validation never reached (fast_dev_run, limit_val_batches) count as empty answers, so that
    MuSiQue-Full's twins stay paired."""
    with metric.sync_context():  # every rank's rows: all ranks score the same
        results = metric.instance_results()
    metric.reset()
    seen = {result.row for result in results}
    results += [
        score_instance(gold, Prediction(gold.id, "", [], True)) for gold in validation.golds if gold.row not in seen
    ]
    metrics = aggregate(sorted(results, key=lambda result: result.row), validation.paired)
    for name, value in metrics.items():
        if not name.startswith("count"):
            # identical on every rank; sync_dist (a mean of equal values) says so to Lightning
            module.log(f"val/{name}", value, prog_bar=name == "answer_f1", sync_dist=True)


def _rng_states() -> dict[str, Any]:
    """torch's (CPU, and the current GPU's when CUDA is in use), numpy's and Python's RNG states as plain Python
    values (checkpoints load with torch's weights-only unpickler)."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() and torch.cuda.is_initialized() else None,
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), position, has_gauss, cached_gaussian],
    }
