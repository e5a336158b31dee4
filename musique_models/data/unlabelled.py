"""Unlabelled copies of labelled files, in the layout of the official test sets: what `split=test` predictions are
made from when the official test files are not at hand (tests, the shipped sample's `test` split).

    python -m musique_models.data.unlabelled IN OUT [count=N]

MuSiQue records keep `id`, `question` and `paragraphs[{idx, title, paragraph_text}]` (the official MuSiQue-Ans and
MuSiQue-Full test files' fields: no answer, aliases, support, answerability or decomposition); HotpotQA and 2Wiki
records keep `_id`, `question` and `context`. `count=N` keeps the first N question ids (MuSiQue-Full: both twins).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from musique_models.data.formats import FORMATS, DataFormat, detect_format
from musique_models.data.jsonio import iter_json_records
from musique_models.errors import DataFormatError, MusiqueModelsError, user_errors_exit

USAGE = "python -m musique_models.data.unlabelled IN OUT [count=N]"


def write_unlabelled(source: str | Path, output: str | Path, count: int | None = None) -> int:
    """Write the unlabelled copy of the first `count` question ids of `source` (all when None), in its own
    layout (jsonl for MuSiQue, a JSON list otherwise); returns the number of records written."""
    records: list[dict[str, Any]] = []
    kept: set[str] = set()
    data_format: DataFormat | None = None
    for line, record in iter_json_records(Path(source)):
        data_format = data_format or detect_format(record)
        if data_format is None:
            titles = ", ".join(fmt.title for fmt in FORMATS.values())
            raise DataFormatError(f"not a record of any known format ({titles})", path=source, line=line)
        question_id = record.get("id", record.get("_id"))
        if count is not None and question_id not in kept and len(kept) == count:
            continue
        kept.add(question_id)
        records.append(data_format.unlabelled(record))
    if data_format is None:
        raise DataFormatError("no record to copy", path=source)
    data_format.write(output, records)
    return len(records)


def main(argv: Sequence[str] | None = None) -> None:
    arguments = list(sys.argv[1:] if argv is None else argv)
    options = dict(argument.split("=", 1) for argument in arguments if "=" in argument)
    paths = [argument for argument in arguments if "=" not in argument]
    if len(paths) != 2 or set(options) - {"count"}:
        raise MusiqueModelsError(f"usage: {USAGE}")
    count = int(options["count"]) if "count" in options else None
    written = write_unlabelled(paths[0], paths[1], count)
    print(f"wrote {written} unlabelled records to {paths[1]}")


if __name__ == "__main__":
    with user_errors_exit():
        main()
