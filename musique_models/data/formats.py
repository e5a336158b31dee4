"""Dataset formats as objects: one `DataFormat` per official layout (MuSiQue, HotpotQA, 2WikiMultihopQA) that
reads and validates a file into the internal `Example` schema, and writes every file the project writes in that
layout (gold copies, unlabelled test files, DiRe probes, MuSiQue-Full-style contrasts).

Every reader validates the fields it uses and raises `DataFormatError` naming the file, line, id and field.

`labelled=False` reads an UNLABELLED file (an official test set: ids, questions and paragraphs, no answers,
supports, answerability or decompositions): the label fields may be absent (answer "", no supporting paragraph,
answerable, no decomposition). Only a split a dataset config declares unlabelled is read so; a labelled split that
lacks a label is an error.

A new format is a `DataFormat` subclass with its `name` added to `FORMATS`; nothing outside this module asks
which format a file is in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from musique_models.data.jsonio import iter_json_records
from musique_models.data.schema import DecompositionStep, Example, Paragraph
from musique_models.errors import DataFormatError, MusiqueModelsError
from musique_models.io import write_json, write_jsonl


class UnknownFormatError(MusiqueModelsError, ValueError):
    """A data format name that no `DataFormat` handles."""


class _Record:
    """One raw record with its location, to check typed fields with precise errors."""

    def __init__(self, raw: dict[str, Any], path: Path, line: int, id_field: str) -> None:
        self.raw = raw
        self.path = path
        self.line = line
        value = raw.get(id_field)
        self.id = value if isinstance(value, str) else None

    def error(self, message: str, field: str | None = None) -> DataFormatError:
        return DataFormatError(message, path=self.path, line=self.line, record_id=self.id, field=field)

    def get(
        self,
        field: str,
        kind: type | tuple[type, ...],
        *,
        container: dict[str, Any] | None = None,
        name: str | None = None,
        optional: bool = False,
        default: Any = None,
    ) -> Any:
        source = self.raw if container is None else container
        label = name or field
        if field not in source:
            if optional:
                return default
            raise self.error("missing field", label)
        value = source[field]
        # bool is an int subclass: never accept True where an int idx is expected
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise self.error(f"expected {expected}, got {type(value).__name__} {value!r:.60}", label)
        return value

    def string_list(self, field: str, *, optional: bool = False) -> list[str]:
        values = self.get(field, list, optional=optional, default=[])
        for position, value in enumerate(values):
            if not isinstance(value, str):
                raise self.error(f"expected a list of strings, item {position} is {type(value).__name__}", field)
        return values


def _records(path: Path, expected: DataFormat) -> Iterator[_Record]:
    for line, raw in iter_json_records(path):
        record = _Record(raw, path, line, expected.id_field)
        found = detect_format(raw)
        if found is not None and found is not expected:
            raise record.error(
                f"not a {expected.title} record: it looks like a {found.title} file "
                f"(keys: {', '.join(sorted(raw))}); choose the dataset config for {found.title}"
            )
        yield record


def _musique_example(record: _Record, dataset: str, labelled: bool = True) -> Example:
    unlabelled = not labelled
    record.get("id", str)
    paragraphs = []
    seen_idx: set[int] = set()
    for position, raw_paragraph in enumerate(record.get("paragraphs", list)):
        name = f"paragraphs[{position}]"
        if not isinstance(raw_paragraph, dict):
            raise record.error("expected an object", name)
        idx = record.get("idx", int, container=raw_paragraph, name=f"{name}.idx")
        if idx in seen_idx:
            raise record.error(f"duplicate paragraph idx {idx}", f"{name}.idx")
        seen_idx.add(idx)
        paragraphs.append(
            Paragraph(
                idx=idx,
                title=record.get("title", str, container=raw_paragraph, name=f"{name}.title"),
                text=record.get("paragraph_text", str, container=raw_paragraph, name=f"{name}.paragraph_text"),
                is_supporting=record.get(
                    "is_supporting",
                    bool,
                    container=raw_paragraph,
                    name=f"{name}.is_supporting",
                    optional=unlabelled,
                    default=False,
                ),
            )
        )
    decomposition = []
    for position, raw_step in enumerate(record.get("question_decomposition", list, optional=unlabelled, default=[])):
        name = f"question_decomposition[{position}]"
        if not isinstance(raw_step, dict):
            raise record.error("expected an object", name)
        support = record.get(
            "paragraph_support_idx", (int, type(None)), container=raw_step, name=f"{name}.paragraph_support_idx"
        )
        if isinstance(support, bool):
            raise record.error("expected int or null, got bool", f"{name}.paragraph_support_idx")
        if support is not None and support not in seen_idx:
            raise record.error(
                f"supporting idx {support} is not the idx of any paragraph of this question",
                f"{name}.paragraph_support_idx",
            )
        decomposition.append(
            DecompositionStep(
                question=record.get("question", str, container=raw_step, name=f"{name}.question"),
                answer=record.get("answer", str, container=raw_step, name=f"{name}.answer"),
                paragraph_support_idx=support,
            )
        )
    hop_type = record.id.split("__", 1)[0] if "__" in record.id else ""
    return Example(
        id=record.id,
        dataset=dataset,
        question=record.get("question", str),
        paragraphs=paragraphs,
        answer=record.get("answer", str, optional=unlabelled, default=""),
        answer_aliases=record.string_list("answer_aliases", optional=True),
        answerable=record.get("answerable", bool, optional=True, default=True),
        decomposition=decomposition,
        num_hops=len(decomposition) or _hops_from_id(hop_type),
        question_type=hop_type,
    )


def _hops_from_id(hop_type: str) -> int:
    """The hop count a MuSiQue id states (`3hop1__...` -> 3) when there is no decomposition to count (unlabelled
    files); 0 when it states none."""
    match = re.match(r"(\d+)hop", hop_type)
    return int(match.group(1)) if match else 0


class _Instance(Protocol):
    id: str
    answerable: bool


_InstanceT = TypeVar("_InstanceT", bound=_Instance)


def check_musique_full_pairs(
    examples: Iterable[_InstanceT], path: str | Path, labelled: bool = True
) -> Iterator[_InstanceT]:
    """Pass examples through, then check MuSiQue-Full's pairing: every id exactly twice, once answerable and once
    not (unlabelled: exactly twice). Raises `DataFormatError` naming the ids that break it once the input is
    exhausted."""
    by_id: dict[str, list[bool]] = {}
    for example in examples:
        by_id.setdefault(example.id, []).append(example.answerable)
        yield example
    broken = [
        f"{question_id} ({len(flags)} rows, {sum(flags)} answerable)"
        if labelled
        else f"{question_id} ({len(flags)} rows)"
        for question_id, flags in by_id.items()
        if (sorted(flags) != [False, True] if labelled else len(flags) != 2)
    ]
    if broken:
        shown = "; ".join(broken[:10]) + (f"; ... {len(broken) - 10} more" if len(broken) > 10 else "")
        rule = "once answerable, once not" if labelled else "the answerable and the unanswerable twin"
        raise DataFormatError(
            f"MuSiQue-Full needs every id exactly twice ({rule}); "
            f"{len(broken)} of {len(by_id)} ids break that: {shown}",
            path=path,
        )


def _context_example(
    record: _Record,
    dataset: str,
    paragraphs: list[Paragraph],
    decomposition: list[DecompositionStep],
    labelled: bool = True,
) -> Example:
    """HotpotQA and 2Wiki questions are all answerable, have no aliases, and count as 2 hops without a decomposition."""
    return Example(
        id=record.get("_id", str),
        dataset=dataset,
        question=record.get("question", str),
        paragraphs=paragraphs,
        answer=record.get("answer", str, optional=not labelled, default=""),
        answer_aliases=[],
        answerable=True,
        decomposition=decomposition,
        num_hops=len(decomposition) or 2,
        question_type=record.get("type", str, optional=True, default=""),
    )


def _context_paragraphs(record: _Record, labelled: bool = True) -> list[Paragraph]:
    """HotpotQA/2Wiki `context` + `supporting_facts` -> paragraphs with idx = position in `context`."""
    paragraphs = []
    position_by_title: dict[str, int] = {}
    context = record.get("context", list)
    idxs = _paragraph_idxs(record, len(context))
    for position, item in enumerate(context):
        name = f"context[{position}]"
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)):
            raise record.error("expected [title, [sentences]]", name)
        title, sentences = item
        if not all(isinstance(sentence, str) for sentence in sentences):
            raise record.error("expected a list of sentence strings", f"{name}[1]")
        position_by_title.setdefault(title, position)
        # HotpotQA sentences carry their own leading spaces, so joining with "" restores the paragraph.
        paragraphs.append(
            Paragraph(
                idx=idxs[position], title=title, text="".join(sentences), is_supporting=False, sentences=list(sentences)
            )
        )
    for position, fact in enumerate(record.get("supporting_facts", list, optional=not labelled, default=[])):
        name = f"supporting_facts[{position}]"
        if not (
            isinstance(fact, list)
            and len(fact) == 2
            and isinstance(fact[0], str)
            and isinstance(fact[1], int)
            and not isinstance(fact[1], bool)
        ):
            raise record.error("expected [title, sentence_id]", name)
        title, sentence_id = fact
        if title not in position_by_title:
            raise record.error(f"supporting title {title!r} is not the title of any context paragraph", name)
        paragraph = paragraphs[position_by_title[title]]
        paragraph.is_supporting = True
        # The official files hold a few sentence ids past the paragraph's end; the paragraph still supports.
        if 0 <= sentence_id < len(paragraph.sentences) and sentence_id not in paragraph.supporting_sentence_ids:
            paragraph.supporting_sentence_ids.append(sentence_id)
    return paragraphs


def _paragraph_idxs(record: _Record, count: int) -> list[int]:
    """Paragraph idx = position in `context`, unless the record keeps original idx in `paragraph_idxs`.

    DiRe probe files written by `musique_models.data.probe` drop paragraphs but keep the original idx there.
    """
    idxs = record.get("paragraph_idxs", list, optional=True, default=None)
    if idxs is None:
        return list(range(count))
    if len(idxs) != count or not all(isinstance(i, int) and not isinstance(i, bool) for i in idxs):
        raise record.error(f"expected {count} int idx, one per context paragraph", "paragraph_idxs")
    if len(set(idxs)) != count:
        raise record.error("duplicate paragraph idx", "paragraph_idxs")
    return idxs


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def decomposition_from_evidences(evidences: list[list[str]], paragraphs: list[Paragraph]) -> list[DecompositionStep]:
    """Turn 2Wiki evidence triples into MuSiQue-style steps: `"<subject> >> <relation>"`, `#k` for earlier answers.

    Each step's supporting paragraph is the supporting paragraph whose title best matches the triple's
    subject (exact, then word overlap); when no title shares a word, the step gets None.
    """
    supporting = [paragraph for paragraph in paragraphs if paragraph.is_supporting]
    steps: list[DecompositionStep] = []
    for subject, relation, obj in evidences:
        reference = next(
            (f"#{number}" for number, step in enumerate(steps, start=1) if _same_entity(step.answer, subject)),
            subject,
        )
        steps.append(
            DecompositionStep(
                question=f"{reference} >> {relation}",
                answer=obj,
                paragraph_support_idx=_best_title_match(subject, supporting),
            )
        )
    return steps


def _same_entity(left: str, right: str) -> bool:
    return left.strip().lower() == right.strip().lower()


def _best_title_match(subject: str, candidates: list[Paragraph]) -> int | None:
    for paragraph in candidates:
        if _same_entity(paragraph.title, subject):
            return paragraph.idx
    subject_words = _words(subject)
    best_idx, best_score = None, 0.0
    for paragraph in candidates:
        title_words = _words(paragraph.title)
        overlap = len(subject_words & title_words)
        score = overlap / len(subject_words | title_words) if overlap else 0.0
        if score > best_score:
            best_idx, best_score = paragraph.idx, score
    return best_idx


class DataFormat:
    """One official file layout: how to recognise, read and validate its records, and how to write examples,
    unlabelled copies and derived files (probes, contrasts) in it."""

    name: ClassVar[str]
    title: ClassVar[str]
    id_field: ClassVar[str]
    file_suffix: ClassVar[str]
    """The suffix of the files the project writes in this layout ('.jsonl': one record a line; '.json': a list)."""

    def matches(self, record: dict[str, Any]) -> bool:
        """Whether one raw record follows this layout."""
        raise NotImplementedError

    def read(self, path: str | Path, dataset: str, labelled: bool = True) -> Iterator[Example]:
        """The file's examples, validated, in file order."""
        for record in _records(Path(path), self):
            yield self._example(record, dataset, labelled)

    def _example(self, record: _Record, dataset: str, labelled: bool) -> Example:
        raise NotImplementedError

    def example(
        self, raw: dict[str, Any], dataset: str, labelled: bool = True, source: str = "<records>", line: int = 1
    ) -> Example:
        """One raw record held in memory as an example, validated as a file's record is (an error names `source`
        and `line`: the record's place among those given)."""
        return self._example(_Record(raw, Path(source), line, self.id_field), dataset, labelled)

    def record(self, example: Example, **extra: Any) -> dict[str, Any]:
        """The example as one record of this layout, labels included, with `extra` fields added."""
        raise NotImplementedError

    def unlabelled(self, record: dict[str, Any]) -> dict[str, Any]:
        """A raw record as the official test files hold it: no answer, support, answerability or decomposition."""
        raise NotImplementedError

    def write(self, path: str | Path, records: Sequence[dict[str, Any]]) -> None:
        """Write records in this layout's file form (atomically)."""
        if self.file_suffix == ".jsonl":
            write_jsonl(path, records)
        else:
            write_json(path, list(records), indent=None)

    def __repr__(self) -> str:
        return f"<data format {self.name}>"


class MusiqueFormat(DataFormat):
    """MuSiQue-Ans and MuSiQue-Full v1.0 (`*.jsonl`, or the same records as a JSON list)."""

    name = "musique"
    title = "MuSiQue"
    id_field = "id"
    file_suffix = ".jsonl"

    def matches(self, record: dict[str, Any]) -> bool:
        return "paragraphs" in record and "question_decomposition" in record

    def _example(self, record: _Record, dataset: str, labelled: bool) -> Example:
        return _musique_example(record, dataset, labelled)

    def record(self, example: Example, **extra: Any) -> dict[str, Any]:
        # step ids are the 1-based step numbers
        return {
            "id": example.id,
            "paragraphs": [
                {"idx": p.idx, "title": p.title, "paragraph_text": p.text, "is_supporting": p.is_supporting}
                for p in example.paragraphs
            ],
            "question": example.question,
            "question_decomposition": [
                {
                    "id": number,
                    "question": step.question,
                    "answer": step.answer,
                    "paragraph_support_idx": step.paragraph_support_idx,
                }
                for number, step in enumerate(example.decomposition, start=1)
            ],
            "answer": example.answer,
            "answer_aliases": list(example.answer_aliases),
            "answerable": example.answerable,
            **extra,
        }

    def unlabelled(self, record: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": record["id"],
            "paragraphs": [
                {"idx": paragraph["idx"], "title": paragraph["title"], "paragraph_text": paragraph["paragraph_text"]}
                for paragraph in record["paragraphs"]
            ],
            "question": record["question"],
        }


class HotpotQAFormat(DataFormat):
    """HotpotQA distractor files (`hotpot_train_v1.1.json`, `hotpot_dev_distractor_v1.json`): a JSON list of
    records with `context` and `supporting_facts`."""

    name = "hotpotqa"
    title = "HotpotQA"
    id_field = "_id"
    file_suffix = ".json"

    def matches(self, record: dict[str, Any]) -> bool:
        return "context" in record and "supporting_facts" in record and "evidences" not in record

    def _example(self, record: _Record, dataset: str, labelled: bool) -> Example:
        return _context_example(record, dataset, _context_paragraphs(record, labelled), [], labelled)

    def record(self, example: Example, **extra: Any) -> dict[str, Any]:
        # `paragraph_idxs` keeps the original idx of a context that lost paragraphs (the readers honour it)
        return {
            "_id": example.id,
            "question": example.question,
            "answer": example.answer,
            "type": example.question_type,
            "context": [
                [paragraph.title, list(paragraph.sentences) or [paragraph.text]] for paragraph in example.paragraphs
            ],
            "supporting_facts": [
                [paragraph.title, sentence]
                for paragraph in example.paragraphs
                if paragraph.is_supporting
                for sentence in (paragraph.supporting_sentence_ids or [0])
            ],
            "paragraph_idxs": [paragraph.idx for paragraph in example.paragraphs],
            **extra,
        }

    def unlabelled(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"_id": record["_id"], "question": record["question"], "context": record["context"]}


class TwoWikiFormat(HotpotQAFormat):
    """2WikiMultihopQA (`train.json`, `dev.json`): HotpotQA's layout plus `evidences` triples, from which the
    decomposition is derived."""

    name = "2wiki"
    title = "2WikiMultihopQA"

    def matches(self, record: dict[str, Any]) -> bool:
        return "context" in record and "supporting_facts" in record and "evidences" in record

    def _example(self, record: _Record, dataset: str, labelled: bool) -> Example:
        paragraphs = _context_paragraphs(record, labelled)
        evidences = record.get("evidences", list, optional=not labelled, default=[])
        for position, triple in enumerate(evidences):
            if not (isinstance(triple, list) and len(triple) == 3 and all(isinstance(x, str) for x in triple)):
                raise record.error("expected [subject, relation, object] strings", f"evidences[{position}]")
        decomposition = decomposition_from_evidences(evidences, paragraphs)
        return _context_example(record, dataset, paragraphs, decomposition, labelled)

    def record(self, example: Example, **extra: Any) -> dict[str, Any]:
        # the decomposition's `subject >> relation` steps back to triples, `#k` references resolved
        answers: list[str] = []
        evidences = []
        for step in example.decomposition:
            subject, relation = step.question.split(" >> ", 1)
            if subject.startswith("#") and subject[1:].isdigit():
                subject = answers[int(subject[1:]) - 1]
            evidences.append([subject, relation, step.answer])
            answers.append(step.answer)
        return {**super().record(example), "evidences": evidences, **extra}


FORMATS: dict[str, DataFormat] = {fmt.name: fmt for fmt in (MusiqueFormat(), HotpotQAFormat(), TwoWikiFormat())}
MUSIQUE = FORMATS["musique"]


def get_format(name: str, what: str = "data format") -> DataFormat:
    """The `DataFormat` called `name`, else `UnknownFormatError` listing the formats there are."""
    if name not in FORMATS:
        raise UnknownFormatError(f"unknown {what} {name!r}; expected one of: {', '.join(FORMATS)}")
    return FORMATS[name]


def detect_format(record: dict[str, Any]) -> DataFormat | None:
    """The format whose layout one raw record follows, or None."""
    return next((fmt for fmt in FORMATS.values() if fmt.matches(record)), None)


def read_examples(
    path: str | Path, data_format: str, dataset: str, require_pairs: bool = False, labelled: bool = True
) -> list[Example]:
    """Read a whole file in `data_format`; MuSiQue-Full's pairing is checked when asked."""
    examples = get_format(data_format).read(path, dataset, labelled=labelled)
    return list(check_musique_full_pairs(examples, path, labelled) if require_pairs else examples)
