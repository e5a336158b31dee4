"""DiRe probes (Trivedi et al., EMNLP 2020): each question split into two instances that each lack one group of
its supporting paragraphs, written in the dataset's own format.

    python -m musique_models.data.probe dataset=hotpotqa_20k dataset.sample=true split=dev out=probe.json \
        [partition=half|first_vs_rest|rest_vs_last] [min_paragraphs=5]

The two groups partition the supporting paragraphs: for two it is one paragraph each; for three or more the
`partition` option decides (default `half`: the first half of the decomposition's support paragraphs, in step
order, vs the rest). Probe k drops group k. Paragraph idx keep their original values (HotpotQA/2Wiki probes record
them in a `paragraph_idxs` field that the readers honour), every probe row carries `probe` (0 or 1) and the
original question's id. Only answerable questions get probes; `min_paragraphs=N` also skips the questions with
fewer than N paragraphs (the official DiRe conversion skips HotpotQA questions with fewer than 5) and says how many.

Support labels: in our probe rows the supporting labels (`is_supporting`, `supporting_facts`,
`paragraph_support_idx`) mark the supporting paragraphs the probe KEEPS (the other group); the official DiRe probe
files (`convert_datasets.py`, `delete_supporting_paragraph`) keep instead the supporting facts of the REMOVED
paragraph. Every row says which in its `support_labels` field (`"kept"`). DiRe's scores do not depend on it: they
are scored against the original question's full support.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from musique_models.data.formats import DataFormat, get_format
from musique_models.data.schema import Example
from musique_models.errors import DataFormatError, EvaluateConfigError, MusiqueModelsError, user_errors_exit

PARTITIONS = ("half", "first_vs_rest", "rest_vs_last")
USAGE = (
    "python -m musique_models.data.probe dataset=NAME [split=dev] out=PATH [partition=half] [min_paragraphs=N] "
    "[dataset.sample=true]"
)
# The `support_labels` field of every probe row: its supporting labels mark the supporting paragraphs it keeps
# (the official DiRe probe files mark the removed paragraph's supporting facts instead).
SUPPORT_LABELS = "kept"


class ProbeOptionError(MusiqueModelsError, ValueError):
    """A probe option that is missing or unknown."""


def check_partition(partition: str) -> str:
    """`partition` if it is one of `PARTITIONS`, else `ProbeOptionError`."""
    if partition not in PARTITIONS:
        raise ProbeOptionError(f"unknown partition={partition}; expected one of: {', '.join(PARTITIONS)}")
    return partition


def check_min_paragraphs(value: object, option: str = "min_paragraphs") -> int | None:
    """`value` as a paragraph count of at least 1 (an int, or its decimal text), None for None or ''; else
    `ProbeOptionError` naming `option`."""
    if value is None or value == "":
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProbeOptionError(f"{option}={value!r}: expected a whole number of paragraphs, at least 1 (e.g. 5)")
    return value


def dire_min_paragraphs(cfg: Any) -> int | None:
    """evaluate.py's `dire_min_paragraphs` option (`cfg`: its config): None (off) or a paragraph count, refused
    outside `mode=dire`."""
    value = cfg.get("dire_min_paragraphs")
    if value is None:
        return None
    if cfg.mode != "dire":
        raise EvaluateConfigError(
            f"dire_min_paragraphs={value} applies to mode=dire only (it leaves questions out of DiRe)"
        )
    try:
        return check_min_paragraphs(value, "dire_min_paragraphs")
    except ProbeOptionError as error:
        raise EvaluateConfigError(str(error)) from None


def print_dire_skips(metrics: dict[str, float], min_paragraphs: int | None) -> None:
    """Say how many answerable questions `dire_min_paragraphs` left out of DiRe (nothing when it is off)."""
    if min_paragraphs is not None:
        print(
            f"DiRe skipped {metrics['dire_skipped_count']:.0f} answerable question(s) with fewer than {min_paragraphs} "
            f"paragraphs (dire_min_paragraphs={min_paragraphs}); DiRe averages over the other "
            f"{metrics['dire_count']:.0f}"
        )


def has_too_few_paragraphs(paragraph_count: int, min_paragraphs: int | None) -> bool:
    """Whether a question with `paragraph_count` paragraphs is left out of DiRe by the `min_paragraphs` option
    (never when it is None)."""
    return min_paragraphs is not None and paragraph_count < min_paragraphs


def skipped_questions(examples: Iterable[Example], min_paragraphs: int | None) -> list[str]:
    """Ids of the answerable examples that `min_paragraphs` leaves without probes."""
    return [
        example.id
        for example in examples
        if example.answerable and has_too_few_paragraphs(len(example.paragraphs), min_paragraphs)
    ]


def support_groups(example: Example, partition: str = "half") -> tuple[list[int], list[int]]:
    """The two groups of supporting paragraph idx that the two probes remove."""
    check_partition(partition)
    ordered = [step.paragraph_support_idx for step in example.decomposition if step.paragraph_support_idx is not None]
    ordered = list(dict.fromkeys(idx for idx in ordered if idx in set(example.supporting_idxs)))
    ordered += [idx for idx in example.supporting_idxs if idx not in ordered]
    if len(ordered) < 2:
        raise DataFormatError(
            f"{len(ordered)} supporting paragraphs; DiRe probes need at least 2", record_id=example.id
        )
    split = {"half": max(len(ordered) // 2, 1), "first_vs_rest": 1, "rest_vs_last": len(ordered) - 1}[partition]
    return ordered[:split], ordered[split:]


def make_probes(example: Example, partition: str = "half") -> tuple[Example, Example]:
    """The two probe instances of one answerable question: probe k lacks group k's paragraphs."""
    probes = []
    for removed in support_groups(example, partition):
        removed_set = set(removed)
        probes.append(
            replace(
                example,
                paragraphs=[paragraph for paragraph in example.paragraphs if paragraph.idx not in removed_set],
                decomposition=[
                    replace(step, paragraph_support_idx=None) if step.paragraph_support_idx in removed_set else step
                    for step in example.decomposition
                ],
            )
        )
    return probes[0], probes[1]


def probe_instances(
    examples: Iterable[Example], partition: str = "half", min_paragraphs: int | None = None
) -> Iterator[tuple[Example, int, Example]]:
    """(original example, probe number 0 or 1, probe) for both probes of every answerable example, in order
    (probe 0 first), leaving out the examples with fewer than `min_paragraphs` paragraphs when it is given."""
    for example in examples:
        if example.answerable and not has_too_few_paragraphs(len(example.paragraphs), min_paragraphs):
            for number, probe in enumerate(make_probes(example, partition)):
                yield example, number, probe


def write_probe_file(
    examples: Sequence[Example],
    data_format: DataFormat | str,
    output: str | Path,
    partition: str = "half",
    min_paragraphs: int | None = None,
) -> int:
    """Write the probes of every answerable example (with at least `min_paragraphs` paragraphs, when given) in
    `data_format`'s own layout, each row with `probe` and `support_labels`; returns the number of rows."""
    if isinstance(data_format, str):
        data_format = get_format(data_format)
    rows = [
        data_format.record(probe, probe=number, support_labels=SUPPORT_LABELS)
        for _, number, probe in probe_instances(examples, partition, min_paragraphs)
    ]
    data_format.write(output, rows)
    return len(rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Compose the train config (dataset overrides) and write the probe of `split` to `out`."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from musique_models import PROJECT_ROOT

    arguments = list(sys.argv[1:] if argv is None else argv)
    options = {"split": "dev", "out": None, "partition": "half", "min_paragraphs": None}
    overrides = []
    for argument in arguments:
        key, _, value = argument.partition("=")
        if key in options:
            options[key] = value
        else:
            overrides.append(argument)
    if not options["out"]:
        raise ProbeOptionError(f"out=PATH is required; usage: {USAGE}")
    check_partition(options["partition"])  # before loading anything
    min_paragraphs = check_min_paragraphs(options["min_paragraphs"])
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    source = instantiate(cfg.dataset)
    examples = source.examples(options["split"])
    count = write_probe_file(examples, source.data_format, options["out"], options["partition"], min_paragraphs)
    print(f"wrote {count} probe rows ({count // 2} questions) of {source.name} {options['split']} to {options['out']}")
    if min_paragraphs is not None:
        skipped = len(skipped_questions(examples, min_paragraphs))
        print(f"skipped {skipped} answerable question(s) with fewer than {min_paragraphs} paragraphs (min_paragraphs)")


if __name__ == "__main__":
    with user_errors_exit():
        main()
