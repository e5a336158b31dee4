"""Data layer: one internal schema, readers for each dataset's official files, caching and subsampling.

`DatasetSource` and `FEATURES` load on first use, so that code needing only the readers (the evaluator) does
not import `datasets`.
"""

from typing import Any

from musique_models.data.readers import detect_format, read_examples
from musique_models.data.schema import DecompositionStep, Example, Paragraph

__all__ = ["FEATURES", "DatasetSource", "DecompositionStep", "Example", "Paragraph", "detect_format", "read_examples"]


def __getattr__(name: str) -> Any:
    if name == "DatasetSource":
        from musique_models.data.source import DatasetSource

        return DatasetSource
    if name == "FEATURES":
        from musique_models.data.features import FEATURES

        return FEATURES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
