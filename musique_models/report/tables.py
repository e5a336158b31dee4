"""The report's tables: the paper's layout (table.md, table.tex), every metric per hop (per_hop.md), DiRe beside the
original scores (dire.md). Rows are groups of runs that differ only in the seed (`musique_models.report.groups`):
mean ± std over seeds; only groups comparable with the paper are set beside its figures."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from musique_models.report.groups import RunGroup, backbones
from musique_models.systems import system_rank

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

Paper = dict[tuple[str | None, str, str], float]


def load_paper_results(path: str | Path = PAPER_RESULTS) -> Paper:
    """The paper's figures: (system, dataset, metric) -> value (F1 x 100)."""
    figures = yaml.safe_load(Path(path).read_text())["figures"]
    return {
        (figure["system"], figure["dataset"], figure["metric"]): float(figure["value"])
        for figure in figures
        if figure.get("value") is not None
    }


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


# A table row: its label, whether it is set beside the paper, and per column (our values, the paper's figure).
Row = tuple[str, bool, list[tuple[list[float], float | None]]]


def table_rows(groups: Sequence[RunGroup], paper: Paper) -> list[Row]:
    """One row per row label (the groups of one system with the same marker and label, one per dataset), in the
    paper's system order; a paper system without a comparable group gets a row of its figures alone."""
    by_label: dict[str, list[RunGroup]] = {}
    for group in groups:
        by_label.setdefault(group.row_label, []).append(group)
    paper_systems = {system for system, _, metric in paper if system is not None and metric in METRIC_KEYS}
    for system in paper_systems - {g.system for g in groups if g.comparable}:
        by_label.setdefault(system, [])
    rows = []
    for label, members in by_label.items():
        system = members[0].system if members else label
        comparable = not members or members[0].comparable
        cells = []
        for dataset, metric in COLUMNS:
            values = [v for g in members if g.dataset == dataset for v in g.values(METRIC_KEYS[metric])]
            cells.append((values, paper.get((system, dataset, metric)) if comparable else None))
        rows.append((label, comparable, cells))
    return sorted(rows, key=lambda row: (system_rank(row[0].split()[0]), not row[1], row[0]))


def legend(groups: Sequence[RunGroup]) -> list[str]:
    """What the markers and labels mean, and each group's runs (seeds, repeats counted once, provenance
    differences)."""
    lines = [
        "Rows are groups of runs that differ in nothing but the seed (same resolved config, same data files, same "
        "evaluation split and size); several seeds: mean ± sample std (n = seeds), each seed counted once. "
        "Only rows without a marker read the official files over the whole dev split with the paper's 20K "
        "training subsample, and only they are set beside the paper's figures. [sample]: the shipped samples "
        "(a pipeline check); [other files]: data files given on the command line; [unrecorded files]: a run made "
        "before runs recorded their data; [first N questions], [train_size=N], [<split> split]: official files, "
        "another setup than the paper's. (…): the settings that set a row apart from another of its system.",
        "",
        "Runs:",
    ]
    for group in groups:
        seeds = ", ".join(f"seed {run.seed}: {run.source}" for run in group.runs)
        components = ", ".join(f"{name} {backbone}" for name, backbone in backbones(group.runs[0]).items())
        dataset = DATASET_LABELS.get(group.dataset, group.dataset)
        lines.append(f"- {group.row_label}, {dataset} ({components or 'backbones not recorded'}): {seeds}")
        for repeat in group.repeats:
            lines.append(f"  - repeat of seed {repeat.seed}, not counted: {repeat.source}")
        for key, values in group.provenance_differences().items():
            lines.append(f"  - the runs differ in {key}: {', '.join(map(str, values))}")
    return lines


def markdown_table(groups: Sequence[RunGroup], paper: Paper) -> str:
    """table.md: the paper's layout; each cell `ours (paper, ours - paper)` on rows comparable with the paper,
    `ours` on the others."""
    header = ["system", *(f"{DATASET_LABELS[d]} {m}" for d, m in COLUMNS)]
    lines = [
        "# Results against the paper (F1 x 100, dev)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for label, comparable, cells in table_rows(groups, paper):
        rendered = [f"{format_ours(v)} {format_paper(v, p)}" if comparable else format_ours(v) for v, p in cells]
        lines.append("| " + " | ".join([label, *rendered]) + " |")
    lines += [
        "",
        "Each cell: ours (the paper's figure, ours minus the paper). "
        f"{MISSING}: no run, or no figure found (musique_models/report/paper_results.yaml says where each comes from). "
        f"A row named by the system alone with cells `{MISSING} (figure)` holds the paper's figures for a system that "
        "has no run here comparable with the paper.",
        "",
        *legend(groups),
        "",
    ]
    return "\n".join(lines)


def latex_table(groups: Sequence[RunGroup], paper: Paper) -> str:
    """table.tex: the same table as a LaTeX tabular; each cell `ours {\\small (paper, diff)}` where comparable."""

    def escape(text: str) -> str:
        return text.replace("&", "\\&").replace("_", "\\_").replace("#", "\\#").replace("%", "\\%")

    def cell(values: list[float], figure: float | None, comparable: bool) -> str:
        ours = format_ours(values, plus_minus="$\\pm$").replace("–", "--")
        if not comparable:
            return ours
        return f"{ours} {{\\scriptsize {format_paper(values, figure).replace('–', '--')}}}"

    datasets = list(dict.fromkeys(d for d, _ in COLUMNS))
    spans = [sum(1 for d, _ in COLUMNS if d == dataset) for dataset in datasets]
    lines = [
        "% Results against the paper (F1 x 100, dev); cell: ours (paper, ours - paper) on rows comparable with it",
        "\\begin{tabular}{l" + "r" * len(COLUMNS) + "}",
        "\\toprule",
        " & "
        + " & ".join(f"\\multicolumn{{{n}}}{{c}}{{{DATASET_LABELS[d]}}}" for d, n in zip(datasets, spans))
        + " \\\\",
        "System & " + " & ".join(escape(m) for _, m in COLUMNS) + " \\\\",
        "\\midrule",
    ]
    for label, comparable, cells in table_rows(groups, paper):
        lines.append(escape(label) + " & " + " & ".join(cell(v, p, comparable) for v, p in cells) + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", *("% " + escape(line) for line in legend(groups) if line), ""]
    return "\n".join(lines)


def _metric_names(metrics: dict[str, float]) -> list[str]:
    return [name for name in metrics if not any(name.endswith(s) for s in HOPS[1:])]


def per_hop_markdown(groups: Sequence[RunGroup]) -> str:
    """per_hop.md: every metric by all / 2 / 3 / 4 hops, per group (mean ± std over its seeds)."""
    lines = ["# Every metric by hops (x100; counts as numbers)", ""]
    for group in groups:
        lines += [f"## {group.row_label} on {DATASET_LABELS.get(group.dataset, group.dataset)}", ""]
        lines += [f"Runs: {', '.join(run.source for run in group.runs)}", ""]
        differences = group.provenance_differences()
        lines += [f"- the runs differ in {key}: {', '.join(map(str, values))}" for key, values in differences.items()]
        lines += [""] if differences else []
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


def dire_markdown(groups: Sequence[RunGroup], paper: Paper) -> str:
    """dire.md: for the runs scored with `evaluate.py mode=dire`, the DiRe scores beside the original ones."""
    lines = ["# DiRe probe scores beside the original scores (x100)", ""]
    with_dire = [g for g in groups if any(run.dire_metrics for run in g.runs)]
    if not with_dire:
        lines += ["No run has DiRe scores (`python evaluate.py run=RUN mode=dire` writes them).", ""]
    else:
        lines += ["| run group | metric | all | 2hop | 3hop | 4hop |", "|---|---|---|---|---|---|"]
        for group in with_dire:
            scored = [run for run in group.runs if run.dire_metrics]
            label = f"{group.row_label}, {DATASET_LABELS.get(group.dataset, group.dataset)}"
            for name, is_dire in DIRE_ROWS:
                cells = []
                for suffix in HOPS:
                    key = name + suffix
                    values = [(r.dire_metrics if is_dire else r.metrics).get(key) for r in scored]
                    cells.append(format_ours([v for v in values if v is not None]))
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
