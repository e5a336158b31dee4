"""The settings of Beam Retrieval, Beam SA's first stage (`recipes/beam.py`). Light: imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from musique_models.settings import StageSettings


@dataclass
class BeamRetrieverSettings(StageSettings):
    """Beam Retrieval (models/beam_retriever.py): `beam_size` chains kept per hop; hop inputs of at most
    `max_length` tokens; `label_order`: the gold chain is ordered (MuSiQue's decomposition); a batch is
    `micro_batch_size` QUESTIONS; `rows_per_forward` splits a hop's candidates into length-sorted forward passes;
    `gradient_checkpointing` recomputes the encoder's activations in the backward pass (a question's hops hold
    20 to 130 inputs). Gradients clipped by norm at 2.0, as the authors' `max_grad_norm`."""

    config_name: ClassVar[str] = "beam_retriever"

    beam_size: int = 2
    max_length: int = 512
    label_order: bool = False
    gradient_checkpointing: bool = False
    rows_per_forward: Optional[int] = None  # noqa: UP045
    gradient_clip_algorithm: Optional[str] = "norm"  # noqa: UP045
    gradient_clip_val: Optional[float] = 2.0  # noqa: UP045
