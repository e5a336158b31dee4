"""Each kind of bad input raises one clear `DataFormatError` naming file, line, id and field."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from musique_models.data.source import DatasetSource
from musique_models.errors import DataFormatError, MusiqueModelsError
from tests.conftest import SAMPLES


def _musique_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (SAMPLES / "musique_ans/dev.jsonl").read_text().splitlines()[:3]]


def _load(
    tmp_path: Path,
    rows_or_text: list[dict] | str,
    data_format: str = "musique",
    paired: bool = False,
    name: str = "input.jsonl",
) -> None:
    path = tmp_path / name
    if isinstance(rows_or_text, str):
        path.write_text(rows_or_text)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows_or_text))
    source = DatasetSource(
        name="t",
        display_name="t",
        format=data_format,
        files={"dev": str(path)},
        data_dir="/",
        cache_dir=str(tmp_path / "cache"),
        paired=paired,
    )
    source.load("dev")


def _edit(edit: Callable[[dict], None], row: int = 1) -> list[dict]:
    rows = _musique_rows()
    edit(rows[row])
    return rows


def test_malformed_json_names_file_and_line(tmp_path: Path) -> None:
    text = "".join(json.dumps(row) + "\n" for row in _musique_rows())
    lines = text.splitlines(keepends=True)
    lines[2] = lines[2][:50] + "\n"
    with pytest.raises(DataFormatError) as error:
        _load(tmp_path, "".join(lines))
    assert error.value.line == 3 and "input.jsonl:3" in str(error.value)
    assert not list((tmp_path / "cache").glob("*.arrow"))  # nothing half-written is cached


@pytest.mark.parametrize(
    ("edit", "field", "reason"),
    [
        (lambda r: r.pop("question"), "question", "missing field"),
        (lambda r: r.pop("paragraphs"), "paragraphs", "missing field"),
        (lambda r: r["paragraphs"][4].pop("paragraph_text"), "paragraphs[4].paragraph_text", "missing field"),
        (lambda r: r.__setitem__("answerable", "yes"), "answerable", "expected bool, got str"),
        (lambda r: r["paragraphs"][2].__setitem__("idx", "2"), "paragraphs[2].idx", "expected int, got str"),
        (
            lambda r: r["question_decomposition"][0].__setitem__("paragraph_support_idx", True),
            "question_decomposition[0].paragraph_support_idx",
            "got bool",
        ),
        (lambda r: r.__setitem__("answer_aliases", ["ok", 3]), "answer_aliases", "item 1 is int"),
    ],
)
def test_missing_or_mistyped_field_names_field_and_id(tmp_path: Path, edit, field: str, reason: str) -> None:
    rows = _edit(edit)
    with pytest.raises(DataFormatError) as error:
        _load(tmp_path, rows)
    assert error.value.field == field and error.value.record_id == rows[1]["id"] and error.value.line == 2
    assert reason in str(error.value) and rows[1]["id"] in str(error.value)


def test_duplicate_paragraph_idx(tmp_path: Path) -> None:
    rows = _edit(lambda r: r["paragraphs"][7].__setitem__("idx", 3))
    with pytest.raises(DataFormatError, match="duplicate paragraph idx 3") as error:
        _load(tmp_path, rows)
    assert error.value.field == "paragraphs[7].idx"


def test_supporting_idx_out_of_range(tmp_path: Path) -> None:
    rows = _edit(lambda r: r["question_decomposition"][1].__setitem__("paragraph_support_idx", 20))
    with pytest.raises(DataFormatError, match="supporting idx 20 is not the idx of any paragraph") as error:
        _load(tmp_path, rows)
    assert error.value.field == "question_decomposition[1].paragraph_support_idx"


def test_hotpot_supporting_title_not_in_context(tmp_path: Path) -> None:
    rows = json.loads((SAMPLES / "hotpotqa/dev.json").read_text())[:2]
    rows[0]["supporting_facts"].append(["No Such Title", 0])
    with pytest.raises(DataFormatError, match="'No Such Title' is not the title of any context paragraph"):
        _load(tmp_path, json.dumps(rows), data_format="hotpotqa", name="hotpot.json")


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError, match="the file is empty"):
        _load(tmp_path, "")


def test_hotpot_file_given_to_musique_reader_says_what_it_looks_like(tmp_path: Path) -> None:
    text = (SAMPLES / "hotpotqa/dev.json").read_text()
    with pytest.raises(DataFormatError, match="not a MuSiQue record: it looks like a HotpotQA file"):
        _load(tmp_path, text, name="hotpot_dev_distractor_v1.json")
    with pytest.raises(DataFormatError, match="not a 2WikiMultihopQA record: it looks like a HotpotQA file"):
        _load(tmp_path, text, data_format="2wiki", name="hotpot_dev_distractor_v1.json")


def test_musique_full_with_unpaired_ids_names_them(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (SAMPLES / "musique_full/dev_derived.jsonl").read_text().splitlines()[:8]]
    broken_twin = copy.deepcopy(rows[2])  # answerable twin of the second question, now a third row
    dropped = rows.pop(5)  # the unanswerable twin of the third question
    rows.append(broken_twin)
    with pytest.raises(DataFormatError) as error:
        _load(tmp_path, rows, paired=True)
    message = str(error.value)
    assert "2 of 4 ids break that" in message
    assert f"{rows[2]['id']} (3 rows, 2 answerable)" in message
    assert f"{dropped['id']} (1 rows, 1 answerable)" in message


def test_official_unpaired_full_file_fails_the_pairing_check(tmp_path: Path) -> None:
    text = (SAMPLES / "musique_full/official_unpaired_train20.json").read_text()
    with pytest.raises(DataFormatError, match="20 of 20 ids break that"):
        _load(tmp_path, text, paired=True, name="full.json")


def test_every_error_is_a_package_error() -> None:
    assert issubclass(DataFormatError, MusiqueModelsError) and issubclass(DataFormatError, ValueError)
