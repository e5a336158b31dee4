"""The report's tables: the paper's layout (table.md, table.tex), every metric per hop (per_hop.md), DiRe beside the
original scores (dire.md), paired tests between groups (significance.md). Rows are groups of runs that differ only
in the seed (`musique_models.report.groups`): mean, its interval over questions where the runs kept per-question
scores (`musique_models.report.uncertainty`), ± std over seeds; only groups comparable with the paper are set beside
its figures."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from musique_models.evaluation.evaluator import format_p_value, is_count_metric
from musique_models.evaluation.intervals import BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, CONFIDENCE, Interval, PairedTest
from musique_models.report.groups import RunGroup, backbones
from musique_models.report.paper import HUMAN_SCORE, HUMAN_UPPER_BOUND, PaperFigure, PaperFigures
from musique_models.report.runs import RunRecord
from musique_models.report.uncertainty import INTERVAL_CONVENTION, group_intervals, group_tests
from musique_models.systems import system_rank

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
# Table 5's columns (the hidden test set)
TEST_COLUMNS = [("musique_ans", "An"), ("musique_ans", "Sp"), ("musique_full", "An+Sf"), ("musique_full", "Sp+Sf")]
# the human-model gap: Table 4's datasets
GAP_DATASETS = ("musique_ans", "hotpotqa_20k", "2wiki_20k")
# rows of the paper's figures alone that are not systems of ours, after the systems, in this order
REFERENCE_ROWS = ("RNN", HUMAN_SCORE, HUMAN_UPPER_BOUND)
MISSING = "–"
# The label mark of a row that holds the paper's figures alone (no run of ours comparable with them).
PAPER_ONLY = "(paper only)"
REPOSITORY_MARK = "†"
HOPS = ("", "_2hop", "_3hop", "_4hop")


def mean_std(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value) of scores in 0..1, both x100."""
    scaled = [100 * value for value in values]
    return statistics.fmean(scaled), (statistics.stdev(scaled) if len(scaled) > 1 else None)


def format_ours(values: Sequence[float], interval: Interval | None = None, latex: bool = False) -> str:
    """`12.3` for one run, `12.3 ± 1.2 (n=3)` for several, `–` for none; with the group's interval over questions
    `12.3 [10.1, 14.5]` and `12.3 [10.1, 14.5] ± 1.2 (n=3)` (`INTERVAL_CONVENTION`). `latex`: the interval in
    small type, `12.3\\,{\\scriptsize [10.1, 14.5]} $\\pm$ 1.2 (n=3)`."""
    if not values:
        return MISSING
    mean, std = mean_std(values)
    text = f"{mean:.1f}"
    if interval is not None:
        bounds = f"[{100 * interval.low:.1f}, {100 * interval.high:.1f}]"
        text += f"\\,{{\\scriptsize {bounds}}}" if latex else f" {bounds}"
    if std is not None:
        plus_minus = "$\\pm$" if latex else "±"
        text += f" {plus_minus} {std:.1f} (n={len(values)})"
    return text


def format_figure(figure: PaperFigure) -> str:
    """`42.3`, or `34.4†` for a figure from the official repository rather than the paper."""
    return f"{figure.value:.1f}" + (REPOSITORY_MARK if figure.source == "repository" else "")


def format_paper_only(figure: PaperFigure | None) -> str:
    """A cell of a paper-only row: `paper: 47.3` (`paper: 34.4†` from the repository), `–` with no figure."""
    return f"paper: {format_figure(figure)}" if figure is not None else MISSING


def format_paper(values: Sequence[float], paper: PaperFigure | None) -> str:
    """`(64.8, -62.0)`: the paper's figure and ours minus it; `(64.8)` with no run, `(–)` with no figure."""
    if paper is None:
        return f"({MISSING})"
    if not values:
        return f"({format_figure(paper)})"
    return f"({format_figure(paper)}, {mean_std(values)[0] - paper.value:+.1f})"


@dataclass
class TableRow:
    """A row of table.md: its label and system, whether it is set beside the paper, whether it holds the paper's
    figures alone (no run of ours comparable with them), per column (our values, the paper's figure), and per
    column the interval over questions of our values (None without per-question scores)."""

    label: str
    system: str
    comparable: bool
    paper_only: bool
    cells: list[tuple[list[float], PaperFigure | None]]
    intervals: list[Interval | None]


def _row_order(row: TableRow) -> tuple[int, int, bool, str]:
    reference = REFERENCE_ROWS.index(row.system) if row.system in REFERENCE_ROWS else -1
    return (system_rank(row.system), reference, not row.comparable, row.label)


def table_rows(groups: Sequence[RunGroup], paper: PaperFigures) -> list[TableRow]:
    """One row per row label (the groups of one system with the same marker and label, one per dataset), in the
    paper's system order; a system of the paper's tables (the RNN baseline and the human rows included) without a
    comparable group gets a row of its figures alone, after the systems for the rows that are not ours."""
    by_label: dict[str, list[RunGroup]] = {}
    for group in groups:
        by_label.setdefault(group.row_label, []).append(group)
    comparable_systems = {group.system for group in groups if group.comparable}
    rows = []
    for label, members in by_label.items():
        system, comparable = members[0].system, members[0].comparable
        cells, intervals = [], []
        for dataset, metric in COLUMNS:
            values = [v for g in members if g.dataset == dataset for v in g.values(METRIC_KEYS[metric])]
            cells.append((values, paper.main(system, dataset, metric) if comparable else None))
            found = [group_intervals(g).get(METRIC_KEYS[metric]) for g in members if g.dataset == dataset]
            intervals.append(found[0] if len(found) == 1 else None)
        rows.append(TableRow(label, system, comparable, False, cells, intervals))
    for system in paper.systems("dev"):
        if system not in comparable_systems:
            cells = [([], paper.main(system, dataset, metric)) for dataset, metric in COLUMNS]
            rows.append(TableRow(f"{system} {PAPER_ONLY}", system, True, True, cells, [None] * len(COLUMNS)))
    return sorted(rows, key=_row_order)


def legend(groups: Sequence[RunGroup]) -> list[str]:
    """What the markers and labels mean, and each group's runs (seeds, repeats counted once, provenance
    differences)."""
    lines = [
        "Rows are groups of runs that differ in nothing but the seed (same resolved config, same data files, same "
        "evaluation split and size); several seeds: mean ± sample std (n = seeds), each seed counted once. "
        "Only rows without a marker read the official files over the whole dev split with the paper's 20K "
        "training subsample, and only they are set beside the paper's figures. [sample]: the shipped samples "
        "(a pipeline check); [other files]: data files given on the command line; [unrecorded files]: a run made "
        "before runs recorded their data; [N questions], [train_size=N], [<split> split]: official files, "
        "another setup than the paper's. (…): the settings that set a row apart from another of its system.",
        "",
        "Runs:",
    ]
    for group in groups:
        seeds = ", ".join(f"seed {run.seed}: {run.source}{resumed_note(run)}" for run in group.runs)
        components = ", ".join(f"{name} {backbone}" for name, backbone in backbones(group.runs[0]).items())
        dataset = DATASET_LABELS.get(group.dataset, group.dataset)
        lines.append(f"- {group.row_label}, {dataset} ({components or 'backbones not recorded'}): {seeds}")
        for repeat in group.repeats:
            lines.append(f"  - repeat of seed {repeat.seed}, not counted: {repeat.source}{resumed_note(repeat)}")
        for key, values in group.provenance_differences().items():
            lines.append(f"  - the runs differ in {key}: {', '.join(map(str, values))}")
    return lines


def resumed_note(run: RunRecord) -> str:
    """` (resumed once)`, ` (resumed 3 times)` for a run that was stopped and resumed (its provenance's
    `resumptions`), else empty."""
    count = len(run.provenance.get("resumptions") or [])
    return "" if not count else f" (resumed {'once' if count == 1 else f'{count} times'})"


def markdown_table(groups: Sequence[RunGroup], paper: PaperFigures) -> str:
    """table.md: the paper's layout on the dev split (each cell `ours (paper, ours - paper)` on rows comparable
    with the paper, `ours` on the others), the human-model gap, Table 5 (test) beside our leaderboard files, and the
    legend."""
    header = ["system", *(f"{DATASET_LABELS[d]} {m}" for d, m in COLUMNS)]
    lines = [
        "# Results against the paper (F1 x 100, dev split)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in table_rows(groups, paper):
        rendered = [
            format_paper_only(p)
            if row.paper_only
            else (f"{format_ours(v, i)} {format_paper(v, p)}" if row.comparable else format_ours(v, i))
            for (v, p), i in zip(row.cells, row.intervals, strict=True)
        ]
        lines.append("| " + " | ".join([row.label, *rendered]) + " |")
    lines += [
        "",
        "Each cell: ours (the paper's figure, ours minus the paper). The figures are dev-split figures: the paper's "
        f"Table 4 for MuSiQue-Ans, HotpotQA and 2Wiki; for MuSiQue-Full ({REPOSITORY_MARK}) the official repository's "
        "dev scores of its released predictions (the paper's MuSiQue-Full figures are on the hidden test set, "
        f"Table 5, below). {MISSING}: no run, or no figure in the source. A row `<system> {PAPER_ONLY}` (cells "
        "`paper: 47.3`) holds the source's figures for a system that has no run here comparable with them: not a score "
        "of ours. "
        f"musique_models/report/paper_results.yaml gives each figure's source, table and split.",
        "",
        INTERVAL_CONVENTION + " significance.md tests the differences between rows on the same questions.",
        "",
        *gap_markdown(groups, paper),
        *hidden_test_markdown(groups, paper),
        "## The rows and their runs",
        "",
        *legend(groups),
        "",
    ]
    return "\n".join(lines)


def gap_markdown(groups: Sequence[RunGroup], paper: PaperFigures) -> list[str]:
    """The paper's headline: the human score against the best model, per dataset and metric (Table 4, dev), and
    our best run comparable with the paper against the same human score."""
    lines = [
        "## The human-model gap (F1 x 100, dev split, the paper's Table 4)",
        "",
        "| dataset | metric | human score | human upper bound | the paper's best model | gap | our best run | gap |",
        "|---|---|---|---|---|---|---|---|",
    ]
    models = [system for system in paper.systems("dev") if system not in (HUMAN_SCORE, HUMAN_UPPER_BOUND)]
    for dataset in GAP_DATASETS:
        for metric in ("An", "Sp"):
            human = paper.main(HUMAN_SCORE, dataset, metric)
            if human is None:
                continue
            upper = paper.main(HUMAN_UPPER_BOUND, dataset, metric)
            figures = [f for f in (paper.main(system, dataset, metric) for system in models) if f is not None]
            best = max(figures, key=lambda figure: figure.value, default=None)
            ours = [
                (mean_std(g.values(METRIC_KEYS[metric]))[0], g.row_label)
                for g in groups
                if g.comparable and g.dataset == dataset and g.values(METRIC_KEYS[metric])
            ]
            our_best = max(ours, default=None)
            lines.append(
                "| "
                + " | ".join(
                    [
                        DATASET_LABELS[dataset],
                        metric,
                        format_figure(human),
                        format_figure(upper) if upper else MISSING,
                        f"{format_figure(best)} ({best.system})" if best else MISSING,
                        f"{human.value - best.value:.1f}" if best else MISSING,
                        f"{our_best[0]:.1f} ({our_best[1]})" if our_best else MISSING,
                        f"{human.value - our_best[0]:.1f}" if our_best else MISSING,
                    ]
                )
                + " |"
            )
    lines += [
        "",
        "gap: the human score minus the model's. Our best run: the best mean over seeds of the groups comparable "
        "with the paper (official files, the whole dev split, the 20K training subsample).",
        "",
    ]
    return lines


def hidden_test_markdown(groups: Sequence[RunGroup], paper: PaperFigures) -> list[str]:
    """Table 5 (the hidden test set) in a table of its own, each system beside the leaderboard files its runs wrote
    (`evaluate.py run=RUN split=test`): test figures are never set beside a dev score."""
    files: dict[str, list[str]] = {}
    for group in groups:
        for run in group.runs:
            for dataset, file in sorted(run.leaderboard_files.items()):
                note = f" {file.note}" if file.note else ""
                label = f"{group.row_label}, {DATASET_LABELS.get(dataset, dataset)}{note}: {file.path}"
                files.setdefault(group.system, []).append(label)
    systems = paper.systems("test") + [system for system in files if system not in paper.systems("test")]
    header = ["system", *(f"{DATASET_LABELS[d]} {m}" for d, m in TEST_COLUMNS), "our leaderboard files"]
    lines = [
        "## The hidden test set: the paper's Table 5 beside our leaderboard files (F1 x 100, test split)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for system in sorted(systems, key=system_rank):
        figures = [paper.main(system, dataset, metric, "test") for dataset, metric in TEST_COLUMNS]
        cells = [format_figure(f) if f else MISSING for f in figures]
        lines.append("| " + " | ".join([system, *cells, "<br>".join(files.get(system, [])) or MISSING]) + " |")
    lines += [
        "",
        "The test split's labels are hidden: our runs are scored by the leaderboards (leaderboard.allenai.org) from "
        "the prediction files that `python evaluate.py run=RUN split=test` writes, listed here per system.",
        "",
    ]
    return lines


def latex_table(groups: Sequence[RunGroup], paper: PaperFigures) -> str:
    """table.tex: the same table as a LaTeX tabular; each cell `ours {\\small (paper, diff)}` where comparable."""

    def escape(text: str) -> str:
        return text.replace("&", "\\&").replace("_", "\\_").replace("#", "\\#").replace("%", "\\%")

    def cell(
        values: list[float], figure: PaperFigure | None, interval: Interval | None, comparable: bool, paper_only: bool
    ) -> str:
        if paper_only:
            return format_paper_only(figure).replace("–", "--").replace(REPOSITORY_MARK, "$^\\dagger$")
        ours = format_ours(values, interval, latex=True).replace("–", "--")
        if not comparable:
            return ours
        paper_text = format_paper(values, figure).replace("–", "--").replace(REPOSITORY_MARK, "$^\\dagger$")
        return f"{ours} {{\\scriptsize {paper_text}}}"

    datasets = list(dict.fromkeys(d for d, _ in COLUMNS))
    spans = [sum(1 for d, _ in COLUMNS if d == dataset) for dataset in datasets]
    lines = [
        "% Results against the paper (F1 x 100, dev split); cell: ours (paper, ours - paper) on rows comparable with it;",
        "% the paper's Table 4, and for MuSiQue-Full ($^\\dagger$) the official repository's dev scores",
        "\\begin{tabular}{l" + "r" * len(COLUMNS) + "}",
        "\\toprule",
        " & "
        + " & ".join(f"\\multicolumn{{{n}}}{{c}}{{{DATASET_LABELS[d]}}}" for d, n in zip(datasets, spans))
        + " \\\\",
        "System & " + " & ".join(escape(m) for _, m in COLUMNS) + " \\\\",
        "\\midrule",
    ]
    for row in table_rows(groups, paper):
        cells = " & ".join(
            cell(v, p, i, row.comparable, row.paper_only) for (v, p), i in zip(row.cells, row.intervals, strict=True)
        )
        lines.append(escape(row.label) + " & " + cells + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "% " + escape(INTERVAL_CONVENTION)]
    lines += [*("% " + escape(line) for line in legend(groups) if line), ""]
    return "\n".join(lines)


def _metric_names(metrics: dict[str, float]) -> list[str]:
    return [name for name in metrics if not any(name.endswith(s) for s in HOPS[1:])]


def per_hop_markdown(groups: Sequence[RunGroup], paper: PaperFigures) -> str:
    """per_hop.md: the paper's per-hop figures, then every metric by all / 2 / 3 / 4 hops per group (mean, its
    interval over questions where the runs kept per-question scores, ± std over its seeds), with the paper's per-hop
    figures beside a group comparable with them."""
    lines = ["# Every metric by hops (x100; counts as numbers)", "", INTERVAL_CONVENTION, ""]
    keyed = list(dict.fromkeys((f.system, f.dataset, f.metric) for f in paper if f.hops is not None))
    if keyed:
        lines += [
            "## The paper's per-hop figures (F1 x 100, dev split)",
            "",
            "| system | dataset | metric | all | 2hop | 3hop | 4hop | source |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for system, dataset, metric in keyed:
            cells = _paper_hop_cells(paper, system, dataset, metric)
            sources = "; ".join(
                dict.fromkeys(
                    figure.where
                    for figure in [
                        paper.main(system, dataset, metric),
                        *paper.per_hop(system, dataset, metric).values(),
                    ]
                    if figure is not None
                )
            )
            label = DATASET_LABELS.get(dataset, dataset)
            lines.append(f"| {system} | {label} | {metric} | " + " | ".join(cells) + f" | {sources} |")
        lines.append("")
    for group in groups:
        lines += [f"## {group.row_label} on {DATASET_LABELS.get(group.dataset, group.dataset)}", ""]
        lines += [f"Runs: {', '.join(run.source for run in group.runs)}", ""]
        differences = group.provenance_differences()
        lines += [f"- the runs differ in {key}: {', '.join(map(str, values))}" for key, values in differences.items()]
        lines += [""] if differences else []
        lines += ["| metric | all | 2hop | 3hop | 4hop |", "|---|---|---|---|---|"]
        names = list(dict.fromkeys(name for run in group.runs for name in _metric_names(run.metrics)))
        intervals = group_intervals(group)
        for name in names:
            cells = []
            for suffix in HOPS:
                values = group.values(name + suffix)
                if values and all(is_count_metric(name, value) for value in values):
                    cells.append(f"{statistics.fmean(values):.0f}")
                else:
                    cells.append(format_ours(values, intervals.get(name + suffix)))
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            paper_metric = next((m for m, key in METRIC_KEYS.items() if key == name), None)
            if group.comparable and paper_metric and paper.per_hop(group.system, group.dataset, paper_metric):
                paper_cells = _paper_hop_cells(paper, group.system, group.dataset, paper_metric)
                lines.append(f"| {name}: the paper (dev) | " + " | ".join(paper_cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _paper_hop_cells(paper: PaperFigures, system: str, dataset: str, metric: str) -> list[str]:
    """The paper's figure of all questions and of 2, 3 and 4 hops (`–` where it gives none)."""
    overall = paper.main(system, dataset, metric)
    hops = paper.per_hop(system, dataset, metric)
    cells = [format_figure(overall) if overall else MISSING]
    return cells + [format_figure(hops[n]) if n in hops else MISSING for n in (2, 3, 4)]


# each original score beside its DiRe score; joint DiRe has no original counterpart
DIRE_ROWS = [
    "answer_f1",
    "dire_answer_f1",
    "support_f1",
    "dire_support_f1",
    "dire_joint_f1",
    "dire_count",
    "dire_skipped_count",
]
DIRE_PAPER_METRICS = {"dire_answer_f1": "DiRe An", "dire_support_f1": "DiRe Sp"}


def dire_markdown(groups: Sequence[RunGroup], paper: PaperFigures) -> str:
    """dire.md: for the runs scored with `evaluate.py mode=dire`, the DiRe scores beside the original ones (and
    the paper's, for a group comparable with them); then the paper's DiRe figures."""
    lines = ["# DiRe probe scores beside the original scores (x100)", ""]
    with_dire = [g for g in groups if any(run.dire_metrics for run in g.runs)]
    if not with_dire:
        lines += ["No run has DiRe scores (`python evaluate.py run=RUN mode=dire` writes them).", ""]
    else:
        lines += [INTERVAL_CONVENTION, ""]
        lines += ["| run group | metric | all | 2hop | 3hop | 4hop |", "|---|---|---|---|---|---|"]
        for group in with_dire:
            scored = [run for run in group.runs if run.dire_metrics]
            intervals = group_intervals(group, dire=True)
            label = f"{group.row_label}, {DATASET_LABELS.get(group.dataset, group.dataset)}"
            for name in DIRE_ROWS:
                if name == "dire_skipped_count" and not any(name in r.dire_metrics for r in scored):
                    continue
                cells = []
                for suffix in HOPS:
                    # the DiRe scoring's own metrics, original scores included: the same questions as its DiRe's
                    values = [v for v in (r.dire_metrics.get(name + suffix) for r in scored) if v is not None]
                    is_count = bool(values) and all(is_count_metric(name, value) for value in values)
                    interval = intervals.get(name + suffix)
                    cells.append(f"{statistics.fmean(values):.0f}" if is_count else format_ours(values, interval))
                lines.append(f"| {label} | {name} | " + " | ".join(cells) + " |")
                paper_metric = DIRE_PAPER_METRICS.get(name)
                figure = paper.main(group.system, group.dataset, paper_metric) if paper_metric else None
                if figure is not None and group.comparable:
                    paper_cells = [format_figure(figure), MISSING, MISSING, MISSING]
                    lines.append(f"| {label} | {name}: the paper (dev) | " + " | ".join(paper_cells) + " |")
        lines += [
            "",
            "Each run's scores come from one scoring of its own evaluation set (`evaluate.py run=RUN mode=dire`, "
            "partition half; on HotpotQA the one with `dire_min_paragraphs=5`, as DiRe's official conversion, where "
            "it exists), the original scores included:",
            "",
            *(f"- {run.source}: {run.dire_source}" for group in with_dire for run in group.runs if run.dire_source),
        ]
        lines.append("")
    figures = [f for f in paper if f.metric in DIRE_PAPER_METRICS.values() and f.setting is None]
    if figures:
        lines += [
            "## The paper's DiRe scores (F1 x 100)",
            "",
            "| system | dataset | metric | value | source |",
            "|---|---|---|---|---|",
            *(
                f"| {f.system} | {DATASET_LABELS.get(f.dataset, f.dataset)} | {f.metric} | {format_figure(f)} | "
                f"{f.where} |"
                for f in figures
            ),
            "",
        ]
    return "\n".join(lines)


def significance_markdown(groups: Sequence[RunGroup]) -> str:
    """significance.md: for every two groups on one dataset scored on the same questions, each of the paper's
    metrics of that dataset: both means, the difference with its paired interval, the p-value, n; then the pairs
    of groups that could not be compared, and why."""
    lines = [
        "# Paired tests between run groups (F1 x 100, dev split)",
        "",
        "Every two run groups on one dataset whose runs were scored on the same questions are compared metric by "
        "metric: A and B are the groups' means over their seeds, A - B their difference with its "
        f"{CONFIDENCE:.0%} paired percentile-bootstrap interval over questions (each resample draws the same "
        "questions, MuSiQue-Full: the same twin pairs, for every run of both groups), and p the two-sided "
        "paired-bootstrap p-value, 2 min(share of resampled differences <= 0, share >= 0) with (k + 1) / "
        f"(resamples + 1) shares, never below {2 / (BOOTSTRAP_RESAMPLES + 1):.7f}; {BOOTSTRAP_RESAMPLES} "
        f"resamples, seed {BOOTSTRAP_SEED}. n: questions (MuSiQue-Full: twin pairs).",
        "",
    ]
    not_compared = []
    datasets = list(dict.fromkeys(group.dataset for group in groups))
    for dataset in datasets:
        members = [group for group in groups if group.dataset == dataset]
        metrics = [metric for d, metric in COLUMNS if d == dataset] or ["An", "Sp"]
        label = DATASET_LABELS.get(dataset, dataset)
        rows = []
        for index, first in enumerate(members):
            for second in members[index + 1 :]:
                tests = group_tests(first, second, [METRIC_KEYS[metric] for metric in metrics])
                if isinstance(tests, str):
                    not_compared.append(f"- {first.row_label} and {second.row_label} ({label}): {tests}")
                    continue
                for metric in metrics:
                    test = tests.get(METRIC_KEYS[metric])
                    measured = all(group.values(METRIC_KEYS[metric]) for group in (first, second))
                    if test is not None and measured:
                        rows.append(_significance_row(first, second, metric, test))
        if rows:
            lines += [
                f"## {label}",
                "",
                "| A | B | metric | A mean | B mean | A - B | p | n |",
                "|---|---|---|---|---|---|---|---|",
                *rows,
                "",
            ]
    if not any(line.startswith("## ") for line in lines):
        lines += ["No two run groups on one dataset could be compared.", ""]
    if not_compared:
        lines += ["## Not compared", "", *not_compared, ""]
    return "\n".join(lines)


def _significance_row(first: RunGroup, second: RunGroup, metric: str, test: PairedTest) -> str:
    means = [format_ours(group.values(METRIC_KEYS[metric])) for group in (first, second)]
    difference = test.difference.text()
    cells = [first.row_label, second.row_label, metric, *means, difference, format_p_value(test.p_value)]
    return "| " + " | ".join([*cells, str(test.count)]) + " |"


REFERENCE_TABLES = (
    ("Table 3", "Human performance"),
    ("Table 6", "Ablations of MuSiQue's construction"),
    ("Table 7", "Distractors: how many and which"),
    ("text, Sections 7-8", "Figures from the paper's text"),
)


def reference_markdown(paper: PaperFigures) -> str:
    """paper.md: the paper's tables that no run here reproduces (human performance, the construction ablations, the
    text's figures), each cell with its split, for reference."""
    lines = [
        "# The paper's other figures, for reference (F1 x 100)",
        "",
        "No run here reproduces these setups (the ablations rebuild the dataset). Every figure is read from "
        "musique_models/report/paper_results.yaml, which cites its source, table and split.",
        "",
    ]
    for table, title in REFERENCE_TABLES:
        figures = [f for f in paper.in_table(table) if f.hops is None]
        if not figures:
            continue
        datasets = list(dict.fromkeys(DATASET_LABELS.get(f.dataset, f.dataset) for f in figures))
        if len(datasets) == 1:
            title = f"{title}, {datasets[0]}"
        rows = list(dict.fromkeys(_reference_row(f, len(datasets) > 1) for f in figures))
        columns = list(dict.fromkeys((f.system, f.metric) for f in figures))
        lines += [
            f"## {table}: {title}",
            "",
            "| setting | split | " + " | ".join(f"{system} {metric}" for system, metric in columns) + " |",
            "|---|---|" + "---|" * len(columns),
        ]
        for row in rows:
            cells = []
            for system, metric in columns:
                match = [
                    f
                    for f in figures
                    if (_reference_row(f, len(datasets) > 1), f.system, f.metric) == (row, system, metric)
                ]
                cells.append(", ".join(f"{f.value:+.1f}" if f.kind == "gain" else f"{f.value:.1f}" for f in match))
            row_splits = {f.split or "not stated" for f in figures if _reference_row(f, len(datasets) > 1) == row}
            lines.append(
                f"| {row} | {', '.join(sorted(row_splits))} | " + " | ".join(c or MISSING for c in cells) + " |"
            )
        lines.append("")
    return "\n".join(lines)


def _reference_row(figure: PaperFigure, with_dataset: bool) -> str:
    """A reference table's row: the setting, and its dataset where the table has several
    (`trained on the full training set (HotpotQA)`)."""
    dataset = DATASET_LABELS.get(figure.dataset, figure.dataset)
    if not figure.setting:
        return dataset
    return f"{figure.setting} ({dataset})" if with_dataset else figure.setting


def parse_markdown_tables(text: str) -> list[list[dict[str, Any]]]:
    """Every markdown table in `text`, each as its rows {header: cell} (used to check the report)."""
    tables: list[list[str]] = []
    previous_was_row = False
    for line in text.splitlines():
        is_row = line.startswith("|")
        if is_row and not previous_was_row:
            tables.append([])
        if is_row:
            tables[-1].append(line)
        previous_was_row = is_row
    return [_table_rows(lines) for lines in tables]


def parse_markdown_table(text: str) -> list[dict[str, Any]]:
    """The rows of the first markdown table in `text` as {header: cell} (used to check the report)."""
    return parse_markdown_tables(text)[0]


def _table_rows(lines: list[str]) -> list[dict[str, Any]]:
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]
