"""report.png: bars of An and Sp per run group (system, dataset and what sets the group apart), each bar labelled
with its value and its error bar the 95% bootstrap interval over questions (the std over seeds for runs without
per-question scores); a zero is drawn as a visible zero and a missing score as "n/a"; the paper's figures as diamonds
beside the groups comparable with the paper (hollow: the official repository's MuSiQue-Full dev scores) and the
paper's human score (Table 4, dev) as a dashed line across each of their bars."""

from __future__ import annotations

import io
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from musique_models.evaluation.intervals import CONFIDENCE, Interval
from musique_models.io import atomic_open
from musique_models.report.groups import RunGroup
from musique_models.report.paper import HUMAN_SCORE, PaperFigures
from musique_models.report.tables import DATASET_LABELS, METRIC_KEYS, mean_std
from musique_models.report.uncertainty import group_intervals

FIGURE_INCHES = (12, 5)
FIGURE_DPI = 100
PLOTTED_METRICS = ("An", "Sp")
BAR_WIDTH = 0.38
# A zero score still shows: a sliver of this height (F1 x 100) with a dark edge, labelled 0.0 (so is any score
# below it, with its own label).
ZERO_BAR = 0.6
# Characters of tick label that fit across the figure's width at the ticks' font size: a group's label wraps
# at its share of them.
TICK_CHARACTERS = 180


def error_bar(mean: float, std: float | None, interval: Interval | None) -> tuple[float, float]:
    """How far the error bar of a bar at `mean` (x100) reaches below and above it: to the ends of the interval
    over questions where there is one, else the std over seeds (0 for one seed)."""
    if interval is None:
        return std or 0.0, std or 0.0
    return max(0.0, mean - 100 * interval.low), max(0.0, 100 * interval.high - mean)


def plot_report(groups: Sequence[RunGroup], paper: PaperFigures, path: str | Path) -> None:
    """Write the bar chart (1200 x 500 px) atomically: one group of bars per run group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=FIGURE_INCHES, dpi=FIGURE_DPI)
    draw_report(axes, groups, paper)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI)  # no bbox_inches="tight": the size stays fixed
    plt.close(figure)
    with atomic_open(path, "wb") as handle:
        handle.write(buffer.getvalue())


def draw_report(axes: Any, groups: Sequence[RunGroup], paper: PaperFigures) -> None:
    """Draw the bars, their value labels, the paper's diamonds and the human score's lines on matplotlib `axes`."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    legend = [Patch(facecolor=f"C{offset}", edgecolor="black", label=m) for offset, m in enumerate(PLOTTED_METRICS)]
    labels = []
    drew_paper = drew_repository = drew_human = False
    drew_interval = False
    for position, group in enumerate(groups):
        intervals = group_intervals(group)
        label = f"{group.row_label}, {DATASET_LABELS.get(group.dataset, group.dataset)}"
        labels.append(textwrap.fill(label, width=max(12, TICK_CHARACTERS // max(1, len(groups)))))
        for offset, metric in enumerate(PLOTTED_METRICS):
            x = position + (offset - 0.5) * BAR_WIDTH
            values = group.values(METRIC_KEYS[metric])
            if values:
                mean, std = mean_std(values)
                height = max(mean, ZERO_BAR)
                below, above = error_bar(mean, std, intervals.get(METRIC_KEYS[metric]))
                drew_interval = drew_interval or METRIC_KEYS[metric] in intervals
                axes.bar(x, height, BAR_WIDTH, yerr=[[below], [above]], color=f"C{offset}", edgecolor="black")
                axes.text(x, max(height, mean + above) + 1, f"{mean:.1f}", ha="center", va="bottom", fontsize=7)
            else:
                axes.text(x, 1, "n/a", ha="center", va="bottom", fontsize=7, color="gray")
            if not group.comparable:  # the paper's figures stand beside runs of its setup only
                continue
            figure = paper.main(group.system, group.dataset, metric)
            if figure is not None:
                from_paper = figure.source == "paper"
                axes.plot(
                    x,
                    figure.value,
                    marker="D",
                    color="black",
                    fillstyle="full" if from_paper else "none",
                    linestyle="none",
                )
                drew_paper = drew_paper or from_paper
                drew_repository = drew_repository or not from_paper
            human = paper.main(HUMAN_SCORE, group.dataset, metric)
            if human is not None:
                half = BAR_WIDTH / 2
                axes.hlines(human.value, x - half, x + half, colors=f"C{offset}", linestyles="dashed", linewidth=1.5)
                drew_human = True
    if drew_paper:
        legend.append(Line2D([], [], marker="D", color="black", linestyle="none", label="the paper"))
    if drew_repository:
        legend.append(
            Line2D([], [], marker="D", color="black", fillstyle="none", linestyle="none", label="official repo (dev)")
        )
    if drew_human:
        legend.append(Line2D([], [], color="gray", linestyle="dashed", label="human score (paper, dev)"))
    axes.set_xticks(range(len(groups)), labels, fontsize=7)
    axes.set_ylabel("F1 x 100")
    axes.set_ylim(0, 118)  # room above 100 for the legend, in one row
    title = "An and Sp per run group (bars: ours, the mean over seeds; error bars: " + (
        f"{CONFIDENCE:.0%} bootstrap interval over questions, else ± std over seeds"
        if drew_interval
        else "± std over seeds"
    )
    title += "; diamonds: the paper" * (drew_paper or drew_repository) + "; dashed: the human score" * drew_human
    axes.set_title(title + ")")
    axes.legend(handles=legend, loc="upper center", ncol=len(legend), fontsize=8)
