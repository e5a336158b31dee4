from __future__ import annotations

from pathlib import Path

import pytest

from musique_models.data.jsonio import iter_json_records
from musique_models.errors import DataFormatError, DatasetNotFoundError


def test_jsonl_and_json_list_give_line_numbers(tmp_path: Path) -> None:
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert list(iter_json_records(jsonl)) == [(1, {"a": 1}), (3, {"a": 2})]
    listed = tmp_path / "b.json"
    listed.write_text('[\n  {"a": 1},\n  {\n    "a": 2\n  }\n]\n')
    assert list(iter_json_records(listed)) == [(2, {"a": 1}), (3, {"a": 2})]
    empty_list = tmp_path / "c.json"
    empty_list.write_text("[ ]")
    assert list(iter_json_records(empty_list)) == []


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ('{"a": 1}\n{"a": 2,\n', 2),
        ('[\n{"a": 1},\n{"a": }\n]', 3),
        ('[\n{"a": 1}\n{"a": 2}\n]', 3),
        ('[\n{"a": 1},\n', 3),
        ('[{"a": 1}] x', 1),
    ],
)
def test_malformed_json_names_file_and_line(tmp_path: Path, text: str, line: int) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(DataFormatError) as error:
        list(iter_json_records(path))
    assert error.value.path == str(path) and error.value.line == line
    assert f"{path}:{line}" in str(error.value) and "malformed JSON" in str(error.value)


def test_empty_file_and_non_object_records(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("  \n")
    with pytest.raises(DataFormatError, match="empty"):
        list(iter_json_records(path))
    path.write_text("[1, 2]")
    with pytest.raises(DataFormatError, match="expected a JSON object"):
        list(iter_json_records(path))


def test_missing_file_is_a_package_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetNotFoundError, match="missing.jsonl: file not found"):
        list(iter_json_records(tmp_path / "missing.jsonl"))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"id": "a", "question": "unterminated}\n', "malformed JSON: Unterminated string starting at column 25"),
        ('[\n{"id": "a" "b": 1}\n]', "malformed JSON: Expecting ',' delimiter at column 12"),
    ],
)
def test_a_malformed_json_message_is_a_whole_sentence_with_its_column(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(text)
    with pytest.raises(DataFormatError) as error:
        list(iter_json_records(path))
    assert error.value.reason == reason
