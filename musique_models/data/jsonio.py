"""Read JSON-lines or JSON-list files record by record, with the line number of every record."""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from musique_models.errors import DataFormatError, DatasetNotFoundError

_WHITESPACE = re.compile(r"\s*")
_DECODER = json.JSONDecoder()


def iter_json_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_number, record)` for each object of a `.jsonl` file or a JSON-list file (gzip-compressed when
    its name ends in `.gz`).

    The layout is detected from the first character, so a MuSiQue file stored as a JSON list (as some
    copies are) reads the same as the official jsonl. Malformed JSON, an empty file or a record that is not
    an object raise `DataFormatError` naming the file and line; a missing file raises `DatasetNotFoundError`.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetNotFoundError(f"{path}: file not found (check the path)")
    text = gzip.decompress(path.read_bytes()).decode("utf-8") if path.suffix == ".gz" else path.read_text("utf-8")
    start = _WHITESPACE.match(text).end()
    if start == len(text):
        raise DataFormatError("the file is empty", path=path)
    if text[start] == "[":
        yield from _iter_json_list(path, text, start + 1)
    else:
        yield from _iter_json_lines(path, text)


def _iter_json_lines(path: Path, text: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise DataFormatError(f"malformed JSON: {json_error_text(error)}", path=path, line=line_number) from None
        _check_object(record, path, line_number)
        yield line_number, record


def _iter_json_list(path: Path, text: str, position: int) -> Iterator[tuple[int, dict[str, Any]]]:
    line_number = 1 + text.count("\n", 0, position)
    counted_to = position
    position = _skip_whitespace(path, text, position)
    if text[position] != "]":
        while True:
            line_number += text.count("\n", counted_to, position)
            counted_to = position
            try:
                record, position = _DECODER.raw_decode(text, position)
            except json.JSONDecodeError as error:
                raise DataFormatError(
                    f"malformed JSON: {json_error_text(error)}", path=path, line=error.lineno
                ) from None
            _check_object(record, path, line_number)
            yield line_number, record
            position = _skip_whitespace(path, text, position)
            if text[position] == "]":
                break
            if text[position] != ",":
                _raise_decode_error(path, text, position, "expected ',' or ']' after a record")
            position = _skip_whitespace(path, text, position + 1)
    trailing = _WHITESPACE.match(text, position + 1).end()
    if trailing != len(text):
        _raise_decode_error(path, text, trailing, "extra data after the JSON list")


def json_error_text(error: json.JSONDecodeError) -> str:
    """The decoder's message as a whole sentence with its column: `Expecting ',' delimiter at column 12`,
    `Unterminated string starting at column 5` (the bare message ends with "at")."""
    return f"{error.msg.removesuffix(' at')} at column {error.colno}"


def _skip_whitespace(path: Path, text: str, position: int) -> int:
    position = _WHITESPACE.match(text, position).end()
    if position == len(text):
        _raise_decode_error(path, text, position, "unterminated JSON list (missing ']')")
    return position


def _raise_decode_error(path: Path, text: str, position: int, message: str) -> None:
    line_number = 1 + text.count("\n", 0, position)
    raise DataFormatError(f"malformed JSON: {message}", path=path, line=line_number)


def _check_object(record: Any, path: Path, line_number: int) -> None:
    if not isinstance(record, dict):
        raise DataFormatError(
            f"expected a JSON object per record, got {type(record).__name__}", path=path, line=line_number
        )
