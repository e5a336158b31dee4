"""The settings of Select+Answer's stages (`recipes/select_answer.py`): the paragraph selector and the answerer. Light: imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Optional

from musique_models.settings import SingleInputSettings, StageSettings


@dataclass
class SelectorSettings(StageSettings):
    """The paragraph selector: `question SEP paragraph` texts of at most `max_length` tokens; a batch is
    `micro_batch_size` QUESTIONS with their gold paragraphs and as many negatives; `rows_per_forward` splits a
    batch's forward pass into length-sorted chunks (same gradient, less padding; null: one pass)."""

    config_name: ClassVar[str] = "selector"

    max_length: int = 300
    rows_per_forward: Optional[int] = None  # noqa: UP045


@dataclass
class AnswererSettings(SingleInputSettings):
    """Select+Answer's answerer over the selector's top K: as one input (`input: single`, or `auto` with a backbone
    of more than 512 positions) or through windows of `max_length` tokens overlapping by `stride` (`windows`)."""

    config_name: ClassVar[str] = "answerer"

    input: str = "auto"
    max_paragraph_tokens: int = 400
    max_length: int = 512
    stride: int = 128
