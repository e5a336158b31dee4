"""Dataset summary table: `python -m musique_models.data.summary dataset=<name> [dataset.sample=true]
[view=single_hop]`.

`view=questions` (the default) summarises the questions; `view=single_hop` the single-hop questions derived from
their decompositions (`musique_models.data.single_hop`), which Step Execution's executor trains on.
"""

from __future__ import annotations

import statistics
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import datasets
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from musique_models.data.single_hop import single_hop_table
from musique_models.data.source import DatasetSource
from musique_models.errors import ConfigValueError, check_choice, user_errors_exit

VIEWS = ("questions", "single_hop")


@dataclass
class SplitSummary:
    """Figures of one loaded split."""

    split: str
    questions: int
    instances: int
    answerable_share: float
    hops: dict[int, int]
    paragraphs_mean: float
    paragraphs_min: int
    paragraphs_max: int
    supporting_mean: float
    context_tokens_mean: float
    context_tokens_median: float
    context_tokens_max: int


def summarize_split(split: str, table: datasets.Dataset) -> SplitSummary:
    """Count questions, answerability, hops, paragraphs, support and context length (whitespace tokens)."""
    paragraph_counts, supporting_counts, token_counts = [], [], []
    for question, paragraphs in zip(table["question"], table["paragraphs"]):
        paragraph_counts.append(len(paragraphs))
        supporting_counts.append(sum(paragraph["is_supporting"] for paragraph in paragraphs))
        token_counts.append(
            len(question.split()) + sum(len(p["title"].split()) + len(p["text"].split()) for p in paragraphs)
        )
    instances = len(table)
    return SplitSummary(
        split=split,
        questions=len(set(table["id"])),
        instances=instances,
        answerable_share=sum(table["answerable"]) / instances if instances else 0.0,
        hops=dict(sorted(Counter(table["num_hops"]).items())),
        paragraphs_mean=statistics.fmean(paragraph_counts) if instances else 0.0,
        paragraphs_min=min(paragraph_counts, default=0),
        paragraphs_max=max(paragraph_counts, default=0),
        supporting_mean=statistics.fmean(supporting_counts) if instances else 0.0,
        context_tokens_mean=statistics.fmean(token_counts) if instances else 0.0,
        context_tokens_median=statistics.median(token_counts) if instances else 0.0,
        context_tokens_max=max(token_counts, default=0),
    )


def summary_table(source: DatasetSource, summaries: Sequence[SplitSummary]) -> Table:
    """A rich table with one column per split."""
    if source.is_derived:
        kind = "shipped sample, DERIVED (not official data)"
    else:
        kind = "shipped real sample" if source.sample else "official files"
    table = Table(title=escape(f"{source.display_name} [{source.name}] - {kind}"))
    table.add_column("")
    for summary in summaries:
        table.add_column(summary.split, justify="right")
    rows = [
        ("questions", lambda s: f"{s.questions:,}"),
        ("instances", lambda s: f"{s.instances:,}"),
        ("answerable share", lambda s: f"{s.answerable_share:.1%}"),
        ("hops histogram", lambda s: "  ".join(f"{hops}:{count}" for hops, count in s.hops.items())),
        ("paragraphs / question", lambda s: f"{s.paragraphs_mean:.1f} ({s.paragraphs_min}-{s.paragraphs_max})"),
        ("supporting / question", lambda s: f"{s.supporting_mean:.2f}"),
        (
            "tokens / context (mean, median, max)",
            lambda s: f"{s.context_tokens_mean:.0f}, {s.context_tokens_median:.0f}, {s.context_tokens_max}",
        ),
    ]
    for label, cell in rows:
        table.add_row(label, *(cell(summary) for summary in summaries))
    return table


def print_summary(source: DatasetSource, splits: dict[str, datasets.Dataset], console: Console | None = None) -> None:
    """Print the summary table of already loaded splits."""
    summaries = [summarize_split(split, table) for split, table in splits.items()]
    (console or Console()).print(summary_table(source, summaries))


def main(overrides: Sequence[str] | None = None) -> None:
    """Compose the train config with `overrides` (plus this tool's own `view=`), load every split of its dataset
    and print the table of its questions or of their single-hop questions."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from musique_models import PROJECT_ROOT

    arguments = list(sys.argv[1:] if overrides is None else overrides)
    views = [argument.split("=", 1)[1] for argument in arguments if argument.startswith("view=")]
    view = views[-1] if views else "questions"
    check_choice("view", view, VIEWS)
    with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=[argument for argument in arguments if not argument.startswith("view=")])
    source: DatasetSource = instantiate(cfg.dataset)
    # the labelled splits; an unlabelled one (the official test set) when its file is there, never for single-hop
    splits = {
        split if source.is_labelled(split) else f"{split} (unlabelled)": source.load(split)
        for split in source.splits
        if source.is_labelled(split) or (view == "questions" and source.path(split).exists())
    }
    if view == "single_hop":
        if not any(len(steps) for steps in splits["train"]["decomposition"]):
            raise ConfigValueError(f"{source.display_name} has no decompositions: it has no single-hop questions")
        cache = f"{cfg.paths.cache_dir}/features"
        splits = {f"{split} (single-hop)": single_hop_table(table, cache) for split, table in splits.items()}
    print_summary(source, splits)


if __name__ == "__main__":
    with user_errors_exit():  # a bad override, an unknown dataset=, a missing file: one line, exit status 2
        main()
