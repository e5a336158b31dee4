"""Collect the runs and write every file of the report into one folder."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from musique_models.io import atomic_open
from musique_models.report.groups import group_runs
from musique_models.report.paper import PAPER_RESULTS, load_paper_results
from musique_models.report.plot import plot_report
from musique_models.report.runs import (
    ReportError,
    RunRecord,
    find_run_folders,
    find_wandb_offline,
    find_wandb_online,
)
from musique_models.report.tables import (
    dire_markdown,
    latex_table,
    markdown_table,
    per_hop_markdown,
    reference_markdown,
    significance_markdown,
)

REPORT_FILES = ("table.md", "table.tex", "per_hop.md", "dire.md", "significance.md", "paper.md", "report.png")


def default_out_dir() -> Path:
    """`reports/<time>/` under the current folder."""
    return Path("reports") / time.strftime("%Y-%m-%d_%H-%M-%S")


def collect_runs(
    paths: Sequence[str | Path], wandb_dir: str | Path | None = None, wandb_project: str | None = None
) -> tuple[list[RunRecord], list[str]]:
    """Every finished run from the run-folder paths, the offline wandb folder and the online wandb project, with
    one warning line per skipped run; raises `ReportError` when none is found."""
    runs, warnings = find_run_folders(paths)
    if wandb_dir is not None:
        found, skipped = find_wandb_offline(wandb_dir)
        runs += found
        warnings += skipped
    if wandb_project is not None:
        found, skipped = find_wandb_online(wandb_project)
        runs += found
        warnings += skipped
    if not runs:
        where = [str(p) for p in paths] + [f"--wandb-dir {wandb_dir}"] * (wandb_dir is not None)
        where += [f"--wandb {wandb_project}"] * (wandb_project is not None)
        raise ReportError(f"no finished run found in {', '.join(where) or 'nothing (give a PATH)'}")
    return runs, warnings


def write_report(runs: Sequence[RunRecord], out_dir: str | Path, paper_file: str | Path = PAPER_RESULTS) -> Path:
    """Write table.md, table.tex, per_hop.md, dire.md, significance.md, paper.md and report.png into `out_dir` (each
    atomically)."""
    out_dir = Path(out_dir)
    paper = load_paper_results(paper_file)
    groups = group_runs(runs)
    texts = {
        "table.md": markdown_table(groups, paper),
        "table.tex": latex_table(groups, paper),
        "per_hop.md": per_hop_markdown(groups, paper),
        "dire.md": dire_markdown(groups, paper),
        "significance.md": significance_markdown(groups),
        "paper.md": reference_markdown(paper),
    }
    for name, text in texts.items():
        with atomic_open(out_dir / name) as handle:
            handle.write(text)
    plot_report(groups, paper, out_dir / "report.png")
    return out_dir
