"""Prediction without a Trainer: a trained module placed on its device once, then run over any number of
featurised tables (Step Execution runs one table per hop; building a Trainer per hop would cost more than the
hop's forward passes on small models)."""

from __future__ import annotations

import contextlib
from typing import Any

import datasets
import pytorch_lightning as pl
import torch
from lightning_utilities.core.apply_func import apply_to_collection
from omegaconf import DictConfig
from transformers import PreTrainedTokenizerFast

from musique_models.training.datamodule import QADataModule


def inference_device(cfg: DictConfig) -> torch.device:
    """The device `cfg.trainer` would predict on: the first GPU unless the trainer asks for the CPU or none is
    present."""
    accelerator = str(cfg.trainer.get("accelerator", "auto"))
    return torch.device("cuda" if accelerator != "cpu" and torch.cuda.is_available() else "cpu")


class BatchPredictor:
    """`module.predict_step` over featurised rows, batched and sorted by length as the datamodule's prediction
    loader, under `torch.inference_mode` in the trainer's precision (bf16 autocast for `bf16*` on a GPU).

    The module is moved to the device and put in eval mode once, at construction; `outputs` can then be called
    for as many tables as needed. Outputs come back on the CPU, one per batch, as `Trainer.predict` returns them.
    """

    def __init__(
        self, module: pl.LightningModule, tokenizer: PreTrainedTokenizerFast, cfg: DictConfig, batch_size: int
    ) -> None:
        self.device = inference_device(cfg)
        self.module = module.to(self.device).eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        precision = str(cfg.trainer.get("precision", "32-true"))
        self.autocast_dtype = torch.bfloat16 if precision.startswith("bf16") and self.device.type == "cuda" else None
        # a list to keep every collated batch in (benchmarks time the bare forward passes over them); None: keep none
        self.recorded: list[list[dict[str, torch.Tensor]]] | None = None

    def batches(self, rows: datasets.Dataset) -> list[dict[str, torch.Tensor]]:
        """The collated batches of `rows` (on the CPU), in prediction order."""
        loader = QADataModule.for_tokenizer(
            self.tokenizer, None, None, rows, eval_batch_size=self.batch_size
        ).predict_dataloader()
        return list(loader)

    def forward(self, batches: list[dict[str, torch.Tensor]]) -> list[Any]:
        """`predict_step` on already collated batches (the bare forward passes, as benchmarks time them)."""
        autocast = (
            torch.autocast(self.device.type, dtype=self.autocast_dtype)
            if self.autocast_dtype is not None
            else contextlib.nullcontext()
        )
        outputs = []
        with torch.inference_mode(), autocast:
            for batch_idx, batch in enumerate(batches):
                batch = apply_to_collection(batch, torch.Tensor, lambda tensor: tensor.to(self.device))
                output = self.module.predict_step(batch, batch_idx)
                outputs.append(apply_to_collection(output, torch.Tensor, lambda tensor: tensor.cpu()))
        return outputs

    def outputs(self, rows: datasets.Dataset) -> list[Any]:
        """`predict_step`'s output for every batch of `rows`."""
        batches = self.batches(rows)
        if self.recorded is not None:
            self.recorded.append(batches)
        return self.forward(batches)
