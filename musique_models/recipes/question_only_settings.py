"""The settings of the Q-only answerer (`recipes/question_only.py`). Light: imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from musique_models.settings import GenerationSettings


@dataclass
class QuestionOnlySettings(GenerationSettings):
    """The Q-only answerer: the question clipped to `max_question_tokens`, answers of `max_answer_tokens`."""

    config_name: ClassVar[str] = "q_only_answerer"

    max_question_tokens: int = 100
    max_answer_tokens: int = 30
