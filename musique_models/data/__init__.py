"""Data layer: one internal schema, readers for each dataset's official files, caching and subsampling."""

from musique_models.data.readers import detect_format, read_examples
from musique_models.data.schema import FEATURES, DecompositionStep, Example, Paragraph
from musique_models.data.source import DatasetSource

__all__ = ["FEATURES", "DatasetSource", "DecompositionStep", "Example", "Paragraph", "detect_format", "read_examples"]
