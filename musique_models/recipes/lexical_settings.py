"""The settings of Lexical SA's first stage (`recipes/lexical.py`): a BM25 ranker, which trains nothing. Light:
imports no torch (`musique_models.settings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from musique_models.settings import ComponentSettings


@dataclass
class LexicalRankerSettings(ComponentSettings):
    """BM25 over each question's own paragraphs (`features/lexical.py`): `k1` (term-frequency saturation), `b`
    (length normalisation), `method` (`bm25s`'s variant: `lucene`, `robertson`, `bm25l`, `bm25+`, `atire`),
    `include_title` (a paragraph's title is matched with its text). No optimiser, no epochs, no checkpoint."""

    config_name: ClassVar[str] = "lexical_ranker"

    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"
    include_title: bool = True
