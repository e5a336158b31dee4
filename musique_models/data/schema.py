"""The one internal example schema that every reader produces and every model and metric consumes.

The matching `datasets.Features` is `musique_models.data.features.FEATURES` (kept apart so that the readers and
the evaluator do not import `datasets`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Paragraph:
    """One context paragraph; `idx` is the id predictions use (MuSiQue's `idx`, else the position)."""

    idx: int
    title: str
    text: str
    is_supporting: bool
    sentences: list[str] = field(default_factory=list)
    supporting_sentence_ids: list[int] = field(default_factory=list)


@dataclass
class DecompositionStep:
    """One single-hop sub-question; `#k` in `question` refers to the answer of step k (1-based)."""

    question: str
    answer: str
    paragraph_support_idx: int | None


@dataclass
class Example:
    """A multihop question with its context, in the schema shared by every dataset."""

    id: str
    dataset: str
    question: str
    paragraphs: list[Paragraph]
    answer: str
    answer_aliases: list[str]
    answerable: bool
    decomposition: list[DecompositionStep]
    num_hops: int
    question_type: str = ""

    @property
    def supporting_idxs(self) -> list[int]:
        """Idx of the gold supporting paragraphs, in context order."""
        return [paragraph.idx for paragraph in self.paragraphs if paragraph.is_supporting]

    def to_dict(self) -> dict[str, Any]:
        """A plain dict matching `FEATURES` (what the Arrow cache stores).

        Written out field by field: `dataclasses.asdict` deep-copies and was most of the cache-writing time.
        """
        return {
            "id": self.id,
            "dataset": self.dataset,
            "question": self.question,
            "paragraphs": [vars(paragraph) for paragraph in self.paragraphs],
            "answer": self.answer,
            "answer_aliases": self.answer_aliases,
            "answerable": self.answerable,
            "decomposition": [vars(step) for step in self.decomposition],
            "num_hops": self.num_hops,
            "question_type": self.question_type,
        }

    @classmethod
    def from_dict(cls, row: dict[str, Any]) -> Example:
        """Rebuild an `Example` from a row of a cached `datasets.Dataset`."""
        return cls(
            id=row["id"],
            dataset=row["dataset"],
            question=row["question"],
            paragraphs=[Paragraph(**paragraph) for paragraph in row["paragraphs"]],
            answer=row["answer"],
            answer_aliases=list(row["answer_aliases"]),
            answerable=row["answerable"],
            decomposition=[DecompositionStep(**step) for step in row["decomposition"]],
            num_hops=row["num_hops"],
            question_type=row["question_type"],
        )
