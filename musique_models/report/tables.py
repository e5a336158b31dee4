"""The report's tables: the paper's layout (table.md, table.tex), every metric per hop (per_hop.md), DiRe beside the
original scores (dire.md). Runs of one system, dataset and sample setting are one group: mean ± std over seeds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from musique_models.report.runs import SYSTEM_ORDER, RunRecord

PAPER_RESULTS = Path(__file__).with_name("paper_results.yaml")
DATASET_LABELS = {
    "musique_ans": "MuSiQue-Ans",
    "hotpotqa_20k": "HotpotQA",
    "2wiki_20k": "2Wiki",
    "musique_full": "MuSiQue-Full",
}
METRIC_KEYS = {
    "An": "answer_f1",
    "Sp": "support_f1",
    "Sf": "sufficiency_f1",
    "An+Sf": "group_answer_sufficiency_f1",
    "Sp+Sf": "group_support_sufficiency_f1",
}
# the paper's columns: (dataset, metric)
COLUMNS = [
    *((dataset, metric) for dataset in ("musique_ans", "hotpotqa_20k", "2wiki_20k") for metric in ("An", "Sp")),
    *(("musique_full", metric) for metric in ("An", "Sp", "Sf", "An+Sf", "Sp+Sf")),
]
MISSING = "–"
HOPS = ("", "_2hop", "_3hop", "_4hop")
SAMPLE_LABEL = "[sample]"


def load_paper_results(path: str | Path = PAPER_RESULTS) -> dict[tuple[str | None, str, str], float]:
    """The paper's figures: (system, dataset, metric) -> value (F1 x 100)."""
    figures = yaml.safe_load(Path(path).read_text())["figures"]
    return {
        (figure["system"], figure["dataset"], figure["metric"]): float(figure["value"])
        for figure in figures
        if figure.get("value") is not None
    }


@dataclass
class RunGroup:
    """Runs of one system on one dataset, all on the samples or all on the official files."""

    system: str
    dataset: str
    sample: bool
    runs: list[RunRecord]

    @property
    def row_label(self) -> str:
        return f"{self.system} {SAMPLE_LABEL}" if self.sample else self.system

    def values(self, key: str, dire: bool = False) -> list[float]:
        return [
            run.dire_metrics[key] if dire else run.metrics[key]
            for run in self.runs
            if key in (run.dire_metrics if dire else run.metrics)
        ]


def group_runs(runs: Sequence[RunRecord]) -> list[RunGroup]:
    """Runs grouped by (system, dataset, sample), in the paper's system order."""
    groups: dict[tuple[str, str, bool], RunGroup] = {}
    for run in runs:
        key = (run.system, run.dataset, run.sample)
        groups.setdefault(key, RunGroup(run.system, run.dataset, run.sample, [])).runs.append(run)
    return sorted(groups.values(), key=lambda g: (SYSTEM_ORDER.index(g.system), g.sample, g.dataset))


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value) of scores in 0..1, both x100."""
    scaled = [100 * value for value in values]
    return statistics.fmean(scaled), (statistics.stdev(scaled) if len(scaled) > 1 else None)


def format_ours(values: Sequence[float], plus_minus: str = "±") -> str:
    """`12.3` for one run, `12.3 ± 1.2 (n=3)` for several, `–` for none."""
    if not values:
        return MISSING
    mean, std = mean_std(values)
    return f"{mean:.1f}" if std is None else f"{mean:.1f} {plus_minus} {std:.1f} (n={len(values)})"


def format_paper(values: Sequence[float], paper: float | None) -> str:
    """`(64.8, -62.0)`: the paper's figure and ours minus it; `(64.8)` with no run, `(–)` with no figure."""
    if paper is None:
        return f"({MISSING})"
    if not values:
        return f"({paper:.1f})"
    return f"({paper:.1f}, {mean_std(values)[0] - paper:+.1f})"


def table_rows(
    groups: Sequence[RunGroup], paper: dict[tuple[str | None, str, str], float]
) -> list[tuple[str, list[tuple[list[float], float | None]]]]:
    """One row per group (and per paper system with no run): its label and, per column, (our values, paper)."""
    rows = []
    rows_by_system: dict[str, list[RunGroup]] = {}
    for group in groups:
        rows_by_system.setdefault(group.system, []).append(group)
    paper_systems = {system for system, _, metric in paper if system is not None and metric in METRIC_KEYS}
    for system in SYSTEM_ORDER:
        for sample in (False, True):
            mine = [g for g in rows_by_system.get(system, []) if g.sample == sample]
            if not mine and (sample or system not in paper_systems):
                continue
            cells = []
            for dataset, metric in COLUMNS:
                values = [v for g in mine if g.dataset == dataset for v in g.values(METRIC_KEYS[metric])]
                cells.append((values, paper.get((system, dataset, metric))))
            rows.append((f"{system} {SAMPLE_LABEL}" if sample else system, cells))
    return rows


def sample_legend(groups: Sequence[RunGroup]) -> str:
    """The legend line naming the runs made on the shipped samples."""
    sampled = [run.source for group in groups if group.sample for run in group.runs]
    if not sampled:
        return "All runs read the official files (dataset.sample: false)."
    return (
        f"Rows marked {SAMPLE_LABEL} are SAMPLE runs (dataset.sample: true, the shipped samples: a pipeline check, "
        f"not comparable with the paper): {', '.join(sampled)}."
    )


def markdown_table(groups: Sequence[RunGroup], paper: dict[tuple[str | None, str, str], float]) -> str:
    """table.md: the paper's layout, each cell `ours (paper, ours - paper)`."""
    header = ["system", *(f"{DATASET_LABELS[d]} {m}" for d, m in COLUMNS)]
    lines = [
        "# Results against the paper (F1 x 100, dev)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for label, cells in table_rows(groups, paper):
        lines.append("| " + " | ".join([label, *(f"{format_ours(v)} {format_paper(v, p)}" for v, p in cells)]) + " |")
    lines += [
        "",
        "Each cell: ours (the paper's figure, ours minus the paper). Several seeds: mean ± sample std (n=runs). "
        f"{MISSING}: no run, or no figure found (musique_models/report/paper_results.yaml says where each comes from).",
        "",
        sample_legend(groups),
        "",
    ]
    return "\n".join(lines)


def latex_table(groups: Sequence[RunGroup], paper: dict[tuple[str | None, str, str], float]) -> str:
    """table.tex: the same table as a LaTeX tabular; each cell `ours {\\small (paper, diff)}`."""

    def escape(text: str) -> str:
        return text.replace("&", "\\&").replace("_", "\\_").replace("#", "\\#").replace("%", "\\%")

    def cell(values: list[float], figure: float | None) -> str:
        ours = format_ours(values, plus_minus="$\\pm$").replace("–", "--")
        return f"{ours} {{\\scriptsize {format_paper(values, figure).replace('–', '--')}}}"

    datasets = list(dict.fromkeys(d for d, _ in COLUMNS))
    spans = [sum(1 for d, _ in COLUMNS if d == dataset) for dataset in datasets]
    lines = [
        "% Results against the paper (F1 x 100, dev); cell: ours (paper, ours - paper)",
        "\\begin{tabular}{l" + "r" * len(COLUMNS) + "}",
        "\\toprule",
        " & "
        + " & ".join(f"\\multicolumn{{{n}}}{{c}}{{{DATASET_LABELS[d]}}}" for d, n in zip(datasets, spans))
        + " \\\\",
        "System & " + " & ".join(escape(m) for _, m in COLUMNS) + " \\\\",
        "\\midrule",
    ]
    for label, cells in table_rows(groups, paper):
        lines.append(escape(label) + " & " + " & ".join(cell(v, p) for v, p in cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "% " + escape(sample_legend(groups)), ""]
    return "\n".join(lines)


def _metric_names(metrics: dict[str, float]) -> list[str]:
    return [name for name in metrics if not any(name.endswith(s) for s in HOPS[1:])]


def per_hop_markdown(groups: Sequence[RunGroup]) -> str:
    """per_hop.md: every metric by all / 2 / 3 / 4 hops, per group (mean ± std over its runs)."""
    lines = ["# Every metric by hops (x100; counts as numbers)", ""]
    for group in groups:
        lines += [f"## {group.row_label} on {DATASET_LABELS.get(group.dataset, group.dataset)}", ""]
        lines += [f"Runs: {', '.join(run.source for run in group.runs)}", ""]
        lines += ["| metric | all | 2hop | 3hop | 4hop |", "|---|---|---|---|---|"]
        names = list(dict.fromkeys(name for run in group.runs for name in _metric_names(run.metrics)))
        for name in names:
            cells = []
            for suffix in HOPS:
                values = group.values(name + suffix)
                if name.endswith("count") and values:
                    cells.append(f"{statistics.fmean(values):.0f}")
                else:
                    cells.append(format_ours(values))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# (metric, whether it is a DiRe score): each original beside its DiRe score; joint DiRe has no original counterpart
DIRE_ROWS = [
    ("answer_f1", False),
    ("dire_answer_f1", True),
    ("support_f1", False),
    ("dire_support_f1", True),
    ("dire_joint_f1", True),
]


def dire_markdown(groups: Sequence[RunGroup], paper: dict[tuple[str | None, str, str], float]) -> str:
    """dire.md: for the runs scored with `evaluate.py mode=dire`, the DiRe scores beside the original ones."""
    lines = ["# DiRe probe scores beside the original scores (x100)", ""]
    with_dire = [g for g in groups if any(run.dire_metrics for run in g.runs)]
    if not with_dire:
        lines += ["No run has DiRe scores (`python evaluate.py run=RUN mode=dire` writes them).", ""]
    else:
        lines += ["| run group | metric | all | 2hop | 3hop | 4hop |", "|---|---|---|---|---|---|"]
        for group in with_dire:
            scored = RunGroup(group.system, group.dataset, group.sample, [r for r in group.runs if r.dire_metrics])
            label = f"{group.row_label}, {DATASET_LABELS.get(group.dataset, group.dataset)}"
            for name, is_dire in DIRE_ROWS:
                cells = [format_ours(scored.values(name + suffix, dire=is_dire)) for suffix in HOPS]
                lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
        lines.append("")
    figures = {dataset: value for (_, dataset, metric), value in paper.items() if metric == "DiRe-An"}
    if figures:
        lines.append(
            "The paper's DiRe answer F1 (see paper_results.yaml): "
            + ", ".join(f"{DATASET_LABELS[d]} {v:.1f}" for d, v in figures.items())
            + "."
        )
        lines.append("")
    return "\n".join(lines)


def parse_markdown_table(text: str) -> list[dict[str, Any]]:
    """The rows of the first markdown table in `text` as {header: cell} (used to check the report)."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
