"""Gold instances reduced to what the metrics need, read from any supported gold file.

MuSiQue jsonl gold files (1.2 GB for 100,000 MuSiQue-Full instances) are streamed line by line with `msgspec`
structs that declare only the scored fields, so paragraph texts are skipped, never built as Python strings.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec

from musique_models.data.formats import FORMATS, DataFormat, check_musique_full_pairs, detect_format, get_format
from musique_models.data.jsonio import iter_json_records
from musique_models.data.schema import Example
from musique_models.errors import DataFormatError


@dataclass(frozen=True, slots=True)
class GoldInstance:
    """One gold row: its answers, support, paragraph idx, answerability and hop count."""

    row: int
    id: str
    answers: tuple[str, ...]
    support_idxs: tuple[int, ...]
    paragraph_idxs: range | frozenset[int]
    answerable: bool
    num_hops: int
    step_support_idxs: tuple[int | None, ...] = ()


@dataclass(frozen=True)
class ValidationGold:
    """What a module scores its validation predictions against, given to its constructor: the evaluation split's
    gold instances (instance i is the split's row i, the features' `example_row`), whether its unanswerable
    questions come in twins (MuSiQue-Full's paired metrics; single-hop questions do not), and, for span readers,
    each row's context (`context_of(row)`: the text the reader read, to decode spans from)."""

    golds: Sequence[GoldInstance]
    paired: bool = True
    context_of: Callable[[int], str] | None = None


def _compact_idxs(idxs: Sequence[int]) -> range | frozenset[int]:
    # Nearly every question numbers its paragraphs 0..n-1: a range costs 48 bytes instead of a 20-int set.
    return range(len(idxs)) if list(idxs) == list(range(len(idxs))) else frozenset(idxs)


def gold_from_example(example: Example, row: int) -> GoldInstance:
    """The gold view of an `Example` (used by the Lightning metrics, from the loaded dataset)."""
    return GoldInstance(
        row=row,
        id=example.id,
        answers=(example.answer, *example.answer_aliases),
        support_idxs=tuple(example.supporting_idxs),
        paragraph_idxs=_compact_idxs([paragraph.idx for paragraph in example.paragraphs]),
        answerable=example.answerable,
        num_hops=example.num_hops,
        step_support_idxs=tuple(step.paragraph_support_idx for step in example.decomposition),
    )


class _LeanParagraph(msgspec.Struct):
    idx: int
    is_supporting: bool


class _LeanStep(msgspec.Struct):
    paragraph_support_idx: int | None = None


class _LeanMusique(msgspec.Struct):
    id: str
    paragraphs: list[_LeanParagraph]
    answer: str
    question_decomposition: list[_LeanStep]
    answer_aliases: list[str] = []
    answerable: bool = True


_LEAN_DECODER = msgspec.json.Decoder(_LeanMusique)


def _lean_to_gold(record: _LeanMusique, row: int, path: Path, line: int) -> GoldInstance:
    idxs = [paragraph.idx for paragraph in record.paragraphs]
    if len(set(idxs)) != len(idxs):
        raise DataFormatError("duplicate paragraph idx", path=path, line=line, record_id=record.id, field="paragraphs")
    return GoldInstance(
        row=row,
        id=record.id,
        answers=(record.answer, *record.answer_aliases),
        support_idxs=tuple(paragraph.idx for paragraph in record.paragraphs if paragraph.is_supporting),
        paragraph_idxs=_compact_idxs(idxs),
        answerable=record.answerable,
        num_hops=len(record.question_decomposition),
        step_support_idxs=tuple(step.paragraph_support_idx for step in record.question_decomposition),
    )


def msgspec_error(error: msgspec.ValidationError, path: Path, line: int, raw: bytes | str) -> DataFormatError:
    """A `DataFormatError` naming file, line, id and field from a msgspec validation error."""
    message = str(error)
    field = None
    if "missing required field `" in message:
        field = message.split("missing required field `", 1)[1].split("`", 1)[0]
    if " - at `$." in message:
        field = message.rsplit(" - at `$.", 1)[1].rstrip("`")
        message = message.rsplit(" - at ", 1)[0]
    record_id = None
    with contextlib.suppress(ValueError, AttributeError):
        record_id = json.loads(raw).get("id")
    return DataFormatError(
        message, path=path, line=line, record_id=record_id if isinstance(record_id, str) else None, field=field
    )


def _stream_musique_jsonl(path: Path) -> Iterator[GoldInstance]:
    row = 0
    with open(path, "rb") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                record = _LEAN_DECODER.decode(line)
            except msgspec.ValidationError as error:
                raise msgspec_error(error, path, line_number, line) from None
            except msgspec.DecodeError as error:
                raise DataFormatError(f"malformed JSON: {error}", path=path, line=line_number) from None
            yield _lean_to_gold(record, row, path, line_number)
            row += 1


# Formats whose jsonl gold files have a streaming reader of the scored fields only; every other gold file is read
# by its format's own reader.
LEAN_JSONL_READERS: dict[str, Callable[[Path], Iterator[GoldInstance]]] = {"musique": _stream_musique_jsonl}


def sniff_format(path: str | Path) -> DataFormat:
    """The dataset format of a gold file, from its first record."""
    path = Path(path)
    with open(path, encoding="utf-8") as handle:
        head = handle.read(1 << 16).lstrip()
    if not head:
        raise DataFormatError("the file is empty", path=path)
    if head.startswith("["):
        _, first = next(iter_json_records(path), (None, None))
        found = detect_format(first) if first is not None else None
    else:
        try:
            found = detect_format(json.loads(head.split("\n", 1)[0]))
        except json.JSONDecodeError:
            raise DataFormatError("malformed JSON in the first record", path=path, line=1) from None
    if found is None:
        titles = ", ".join(fmt.title for fmt in FORMATS.values())
        raise DataFormatError(f"not a file of any known format ({titles}): format not recognised", path=path)
    return found


# Every row of a probe file written by `musique_models.data.probe` says how its support is labelled.
_PROBE_ROW = re.compile(rb'"support_labels"\s*:\s*"[a-z]+"')


def is_probe_file(path: str | Path) -> bool:
    """Whether `path` is a DiRe probe file (`musique_models.data.probe`): its first MiB holds a row's
    `support_labels` field."""
    with open(path, "rb") as handle:
        return _PROBE_ROW.search(handle.read(1 << 20)) is not None


def read_gold(path: str | Path, data_format: str | None = None, paired: bool | None = None) -> list[GoldInstance]:
    """All gold instances of a file, in file order.

    `data_format` is 'musique', 'hotpotqa' or '2wiki' (detected from the first record when None). `paired` says
    whether the file must be MuSiQue-Full (every id once answerable, once not): True requires that pairing, False
    rejects unanswerable rows, None (detect) checks the pairing whenever a row is unanswerable.
    """
    path = Path(path)
    if not path.exists():
        raise DataFormatError("gold file not found", path=path)
    if is_probe_file(path):
        raise DataFormatError(
            "this is a DiRe probe file (its rows carry `probe` and `support_labels`), not a gold file: gold= takes the "
            "original split the probes were made from; the probes' predictions go to probe_predictions= with "
            "mode=dire",
            path=path,
        )
    gold_format = get_format(data_format, "gold format") if data_format else sniff_format(path)
    with open(path, "rb") as handle:
        is_json_list = handle.read(4096).lstrip().startswith(b"[")
    lean_reader = LEAN_JSONL_READERS.get(gold_format.name)
    if lean_reader is not None and not is_json_list:
        golds = list(lean_reader(path))
    else:
        golds = [
            gold_from_example(example, row)
            for row, example in enumerate(gold_format.read(path, dataset=gold_format.name))
        ]
    unanswerable = sum(not gold.answerable for gold in golds)
    if paired is True and not unanswerable:
        raise DataFormatError(
            "a paired (MuSiQue-Full) dataset was chosen but no gold row is unanswerable: "
            "is this a MuSiQue-Ans file? choose its dataset (e.g. dataset=musique_ans)",
            path=path,
        )
    if paired is False and unanswerable:
        raise DataFormatError(
            f"{unanswerable} gold rows are unanswerable (a MuSiQue-Full file?) but the chosen "
            "dataset is not paired: choose dataset=musique_full, or give no dataset",
            path=path,
        )
    if unanswerable:
        for _ in check_musique_full_pairs(golds, path):
            pass
    return golds
