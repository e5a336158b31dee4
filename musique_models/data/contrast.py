"""Unanswerable contrasts made as MuSiQue-Full makes its own, for any dataset in the internal schema.

MuSiQue-Full pairs every answerable question with an unanswerable twin: the supporting paragraph of one hop
is replaced by a distractor that does not contain that hop's answer, so the context keeps its size but the
question can no longer be answered. That hop's `paragraph_support_idx` becomes null and the paragraph is no
longer supporting. `make_full_pairs` does this for a list of examples; the result is derived data, never
official MuSiQue-Full.

    python -m musique_models.data.contrast --input FILE --format musique --output OUT.jsonl [--seed 13] [--source TEXT]
"""

from __future__ import annotations

import argparse
import random
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from musique_models.data.formats import FORMATS, MUSIQUE, read_examples
from musique_models.data.schema import Example, Paragraph
from musique_models.errors import DatasetNotFoundError, MusiqueModelsError, user_errors_exit

_CANDIDATES_PER_CONTRAST = 400
_WORD = re.compile(r"\w+")


class ContrastError(MusiqueModelsError, ValueError):
    """A question that cannot get an unanswerable contrast (no supporting paragraph, or no fitting distractor)."""


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def pool_words(distractor_pool: Sequence[Paragraph]) -> list[set[str]]:
    """Each pool paragraph's words (title and text), computed once for every contrast drawn from the pool."""
    return [_words(paragraph.title + " " + paragraph.text) for paragraph in distractor_pool]


def make_contrast(
    example: Example,
    distractor_pool: Sequence[Paragraph],
    rng: random.Random,
    words: Sequence[set[str]] | None = None,
) -> Example:
    """The unanswerable twin of `example`: one hop's supporting paragraph swapped for a pool distractor.

    The hop is a decomposition step with a supporting paragraph, chosen with `rng` (or, for datasets without
    a decomposition such as HotpotQA, one supporting paragraph). The distractor is the pool paragraph, among a
    random sample of candidates, with the largest word overlap with the removed paragraph's title and the
    hop's question, whose title is not already in the context and whose text holds neither the hop's answer
    nor the question's answer. `words`: `pool_words(distractor_pool)`, when several contrasts share the pool.
    """
    steps = [step for step in example.decomposition if step.paragraph_support_idx is not None]
    if steps:
        step = rng.choice(steps)
        removed_idx, hop_answers, hop_question = step.paragraph_support_idx, [step.answer], step.question
    else:
        supporting = example.supporting_idxs
        if not supporting:
            raise ContrastError(f"question {example.id!r} has no supporting paragraph to remove")
        removed_idx, hop_answers, hop_question = rng.choice(supporting), [], example.question
    removed = next(paragraph for paragraph in example.paragraphs if paragraph.idx == removed_idx)
    forbidden = [answer.lower() for answer in [*hop_answers, example.answer, *example.answer_aliases] if answer.strip()]
    titles_in_context = {paragraph.title for paragraph in example.paragraphs}
    target_words = _words(removed.title) | _words(re.sub(r"#\d+", " ", hop_question))

    words = pool_words(distractor_pool) if words is None else words
    # sampled positions pick the same paragraphs as sampling the pool itself would
    chosen = rng.sample(range(len(distractor_pool)), min(_CANDIDATES_PER_CONTRAST, len(distractor_pool)))
    best, best_score = None, -1
    for position in chosen:
        candidate = distractor_pool[position]
        if candidate.title in titles_in_context:
            continue
        lowered = candidate.text.lower()
        if any(answer in lowered for answer in forbidden):
            continue
        score = len(target_words & words[position])
        if score > best_score:
            best, best_score = candidate, score
    if best is None:
        raise ContrastError(
            f"no distractor in the pool fits question {example.id!r}; the pool is the other "
            "questions' paragraphs: give a larger input file"
        )

    distractor = Paragraph(
        idx=removed_idx, title=best.title, text=best.text, is_supporting=False, sentences=list(best.sentences)
    )
    return replace(
        example,
        paragraphs=[distractor if paragraph.idx == removed_idx else paragraph for paragraph in example.paragraphs],
        decomposition=[
            replace(step, paragraph_support_idx=None) if step.paragraph_support_idx == removed_idx else step
            for step in example.decomposition
        ],
        answerable=False,
    )


def make_full_pairs(examples: Sequence[Example], seed: int = 13) -> Iterator[tuple[Example, Example]]:
    """Yield `(answerable, unanswerable_contrast)` for every answerable example, reproducibly from `seed`.

    Distractors come from the non-supporting paragraphs of the other questions in `examples`.
    """
    # The example's own paragraphs are in the pool too; make_contrast skips them (their titles are in context).
    pool = [paragraph for example in examples for paragraph in example.paragraphs if not paragraph.is_supporting]
    words = pool_words(pool)
    for example in examples:
        if example.answerable:
            yield example, make_contrast(example, pool, random.Random(f"{seed}:{example.id}"), words)


def write_full_style_file(examples: Sequence[Example], output: str | Path, seed: int, source: str) -> int:
    """Write answerable/unanswerable pairs as a MuSiQue-Full-format jsonl marked as derived; returns rows."""
    rows = []
    for answerable, contrast in make_full_pairs(examples, seed):
        rows.append(MUSIQUE.record(answerable, origin=f"real: {source}"))
        rows.append(
            MUSIQUE.record(
                contrast,
                origin=f"DERIVED unanswerable contrast of {source} (musique_models.data.contrast, seed={seed})",
            )
        )
    MUSIQUE.write(output, rows)
    return len(rows)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, help="an official file of MuSiQue-Ans, HotpotQA or 2Wiki")
    parser.add_argument("--format", required=True, choices=list(FORMATS))
    parser.add_argument("--output", required=True, help="MuSiQue-Full-format jsonl to write")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--source", help="what the input is, recorded in each row's `origin` (default: its file name)")
    args = parser.parse_args(argv)
    if not Path(args.input).is_file():
        raise DatasetNotFoundError(
            f"--input {args.input}: file not found; give the path of an official MuSiQue-Ans, "
            "HotpotQA or 2WikiMultihopQA file"
        )
    examples = read_examples(args.input, args.format, dataset=f"{args.format}_contrast")
    count = write_full_style_file(examples, args.output, args.seed, source=args.source or Path(args.input).name)
    print(f"wrote {count} rows ({count // 2} answerable/unanswerable pairs) to {args.output}")


if __name__ == "__main__":
    with user_errors_exit():  # a missing or malformed input file: one line, exit status 2
        main()
