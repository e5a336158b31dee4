"""Single-hop questions derived from each dataset's decompositions: what Step Execution's executor is trained on.

For every question and every step of its gold decomposition, one `Example`:
- `question`: the step's question with each `#k` replaced by step k's gold answer (MuSiQue's relation steps keep
  their `subject >> relation` form, as the official single-hop data does);
- `paragraphs`: the question's whole context, with only the step's own paragraph marked supporting;
- `answer`: the step's gold answer (the last step also takes the question's aliases when it gives the question's
  answer);
- `answerable`: False only for the step of a MuSiQue-Full unanswerable question whose support was removed
  (`paragraph_support_idx` null); a step of an answerable question without a known paragraph (a 2Wiki triple
  whose subject matches no title) stays answerable, with no supporting paragraph;
- `id`: `<question id>/<step number>` (1-based); MuSiQue-Full twins give the same ids, so single-hop metrics are
  never paired (`evaluate_predictions(..., paired=False)`).

HotpotQA has no decompositions: it yields nothing, and Step Execution refuses it before getting here.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import datasets

from musique_models.data.features import FEATURES
from musique_models.data.schema import DecompositionStep, Example, Paragraph
from musique_models.io import code_fingerprint

_REFERENCE = re.compile(r"#(\d+)")


def fill_references(step_question: str, answers: list[str]) -> str:
    """`step_question` with each `#k` replaced by `answers[k-1]` (the empty string when there is no such answer,
    as the official predictor does), whitespace collapsed."""

    def answer_of(match: re.Match[str]) -> str:
        index = int(match.group(1)) - 1
        return answers[index] if 0 <= index < len(answers) else ""

    return " ".join(_REFERENCE.sub(answer_of, step_question).split())


def single_hop_examples(example: Example) -> list[Example]:
    """The single-hop examples of one question's gold decomposition (see the module docstring)."""
    gold_answers = [step.answer for step in example.decomposition]
    last = len(example.decomposition) - 1
    known_idxs = {paragraph.idx for paragraph in example.paragraphs}
    rows = []
    for position, step in enumerate(example.decomposition):
        support = step.paragraph_support_idx if step.paragraph_support_idx in known_idxs else None
        question = fill_references(step.question, gold_answers[:position])
        aliases = list(example.answer_aliases) if position == last and step.answer == example.answer else []
        rows.append(
            Example(
                id=f"{example.id}/{position + 1}",
                dataset=example.dataset,
                question=question,
                paragraphs=[
                    Paragraph(
                        idx=paragraph.idx,
                        title=paragraph.title,
                        text=paragraph.text,
                        is_supporting=paragraph.idx == support,
                        sentences=list(paragraph.sentences),
                        supporting_sentence_ids=list(paragraph.supporting_sentence_ids)
                        if paragraph.idx == support
                        else [],
                    )
                    for paragraph in example.paragraphs
                ],
                answer=step.answer,
                answer_aliases=aliases,
                answerable=example.answerable or support is not None,
                decomposition=[DecompositionStep(question=question, answer=step.answer, paragraph_support_idx=support)],
                num_hops=1,
                question_type=example.question_type,
            )
        )
    return rows


def _single_hop_batch(batch: dict[str, list]) -> dict[str, list]:
    rows: list[dict[str, Any]] = []
    for values in zip(*batch.values()):
        example = Example.from_dict(dict(zip(batch.keys(), values)))
        rows += [single_hop.to_dict() for single_hop in single_hop_examples(example)]
    return {name: [row[name] for row in rows] for name in FEATURES}


def single_hop_table(table: datasets.Dataset, cache_dir: str | Path) -> datasets.Dataset:
    """Every single-hop example of `table`'s questions, in question then step order, as a `datasets.Dataset` with
    the schema's features; cached in `cache_dir`, keyed by the input's fingerprint and this module's code."""
    key = f"{table._fingerprint}:{code_fingerprint(__name__, 'musique_models.data.schema')}"
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:24]
    cache_file = Path(cache_dir) / f"single-hop-{fingerprint}.arrow"
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    return table.map(
        _single_hop_batch,
        batched=True,
        batch_size=256,
        remove_columns=table.column_names,
        features=FEATURES,
        cache_file_name=str(cache_file),
        new_fingerprint=fingerprint,
        desc="deriving single-hop questions",
    )
