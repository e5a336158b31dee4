"""The settings of the End2End reader (`recipes/end2end.py`). Light: imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from musique_models.settings import SingleInputSettings


@dataclass
class ReaderSettings(SingleInputSettings):
    """The End2End reader; `single_support`: exactly one supporting paragraph (softmax over the markers)."""

    config_name: ClassVar[str] = "reader"

    single_support: bool = False
