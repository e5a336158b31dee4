"""Data layer: one internal schema, one `DataFormat` object per official file layout, caching and subsampling.

`DatasetSource` and `FEATURES` load on first use, so that code needing only the readers (the evaluator) does
not import `datasets`.
"""

from typing import Any

from musique_models.data.formats import FORMATS, DataFormat, detect_format, get_format, read_examples
from musique_models.data.schema import DecompositionStep, Example, Paragraph

__all__ = [
    "FEATURES",
    "FORMATS",
    "DataFormat",
    "DatasetSource",
    "DecompositionStep",
    "Example",
    "Paragraph",
    "detect_format",
    "get_format",
    "read_examples",
]


def __getattr__(name: str) -> Any:
    if name == "DatasetSource":
        from musique_models.data.source import DatasetSource

        return DatasetSource
    if name == "FEATURES":
        from musique_models.data.features import FEATURES

        return FEATURES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
