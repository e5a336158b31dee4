"""The settings of the decomposer (`recipes/decomposer.py`). Light: imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from musique_models.settings import GenerationSettings


@dataclass
class DecomposerSettings(GenerationSettings):
    """The decomposer: questions of `max_source_tokens`, decompositions of `max_target_tokens`."""

    config_name: ClassVar[str] = "decomposer"

    max_source_tokens: int = 100
    max_target_tokens: int = 100
    num_beams: int = 10
