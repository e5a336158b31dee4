"""DiRe probes (Trivedi et al., EMNLP 2020): each question split into two instances that each lack one group of
its supporting paragraphs, written in the dataset's own format.

    python -m musique_models.data.probe dataset=hotpotqa_20k dataset.sample=true split=dev out=probe.json \
        [partition=half|first_vs_rest|rest_vs_last]

The two groups partition the supporting paragraphs: for two it is one paragraph each; for three or more the
`partition` option decides (default `half`: the first half of the decomposition's support paragraphs, in step
order, vs the rest). Probe k drops group k; the other group stays supporting. Paragraph idx keep their original
values (HotpotQA/2Wiki probes record them in a `paragraph_idxs` field that the readers honour), every probe row
carries `probe` (0 or 1) and the original question's id. Only answerable questions get probes.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from musique_models.data.formats import DataFormat, get_format
from musique_models.data.schema import Example
from musique_models.errors import DataFormatError, MusiqueModelsError, user_errors_exit

PARTITIONS = ("half", "first_vs_rest", "rest_vs_last")
USAGE = "python -m musique_models.data.probe dataset=NAME [split=dev] out=PATH [partition=half] [dataset.sample=true]"


class ProbeOptionError(MusiqueModelsError, ValueError):
    """A probe option that is missing or unknown."""


def check_partition(partition: str) -> str:
    """`partition` if it is one of `PARTITIONS`, else `ProbeOptionError`."""
    if partition not in PARTITIONS:
        raise ProbeOptionError(f"unknown partition={partition}; expected one of: {', '.join(PARTITIONS)}")
    return partition


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


def probe_instances(examples: Iterable[Example], partition: str = "half") -> Iterator[tuple[Example, int, Example]]:
    """(original example, probe number 0 or 1, probe) for both probes of every answerable example, in order."""
    for example in examples:
        if example.answerable:
            for number, probe in enumerate(make_probes(example, partition)):
                yield example, number, probe


def write_probe_file(
    examples: Sequence[Example], data_format: DataFormat | str, output: str | Path, partition: str = "half"
) -> int:
    """Write the probes of every answerable example in `data_format`'s own layout; returns the number of rows."""
    if isinstance(data_format, str):
        data_format = get_format(data_format)
    rows = [data_format.record(probe, probe=number) for _, number, probe in probe_instances(examples, partition)]
    data_format.write(output, rows)
    return len(rows)


def main(argv: Sequence[str] | None = None) -> None:
    """Compose the train config (dataset overrides) and write the probe of `split` to `out`."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from musique_models import PROJECT_ROOT

    arguments = list(sys.argv[1:] if argv is None else argv)
    options = {"split": "dev", "out": None, "partition": "half"}
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
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    source = instantiate(cfg.dataset)
    examples = source.examples(options["split"])
    count = write_probe_file(examples, source.data_format, options["out"], options["partition"])
    print(f"wrote {count} probe rows ({count // 2} questions) of {source.name} {options['split']} to {options['out']}")


if __name__ == "__main__":
    with user_errors_exit():
        main()
