"""Error types raised by musique-models for bad input."""

from __future__ import annotations

from pathlib import Path


class MusiqueModelsError(Exception):
    """Base class of every error this package raises on purpose."""


class DataFormatError(MusiqueModelsError, ValueError):
    """A data or prediction file does not have the expected content.

    The message names the file, the line (or record number), the record id and the field where known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        record_id: str | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.record_id = record_id
        self.field = field
        self.reason = message
        where = []
        if self.path is not None:
            where.append(self.path if line is None else f"{self.path}:{line}")
        if record_id is not None:
            where.append(f"id={record_id!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class DatasetNotFoundError(MusiqueModelsError, FileNotFoundError):
    """A configured dataset file is absent; the message says where to get it."""
