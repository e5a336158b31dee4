"""report.png: grouped bars of An and Sp per system and dataset, the paper's figures as markers."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from musique_models.io import atomic_open
from musique_models.report.tables import DATASET_LABELS, METRIC_KEYS, RunGroup, mean_std

FIGURE_INCHES = (12, 5)
FIGURE_DPI = 100
PLOTTED_METRICS = ("An", "Sp")


def plot_report(groups: Sequence[RunGroup], paper: dict[tuple[str | None, str, str], float], path: str | Path) -> None:
    """Write the bar chart (1200 x 500 px) atomically: one group of bars per system and dataset."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=FIGURE_INCHES, dpi=FIGURE_DPI)
    width = 0.38
    labels = []
    for position, group in enumerate(groups):
        labels.append(f"{group.row_label}\n{DATASET_LABELS.get(group.dataset, group.dataset)}")
        for offset, metric in enumerate(PLOTTED_METRICS):
            values = group.values(METRIC_KEYS[metric])
            x = position + (offset - 0.5) * width
            if values:
                mean, std = mean_std(values)
                axes.bar(x, mean, width, yerr=std or 0, color=f"C{offset}", label=metric if position == 0 else None)
            figure_value = paper.get((group.system, group.dataset, metric))
            if figure_value is not None:
                axes.plot(x, figure_value, marker="D", color="black", linestyle="none")
    axes.plot([], [], marker="D", color="black", linestyle="none", label="paper")
    axes.set_xticks(range(len(groups)), labels, fontsize=8)
    axes.set_ylabel("F1 x 100")
    axes.set_ylim(0, 100)
    axes.set_title("An and Sp per system and dataset (bars: ours, mean ± std; diamonds: the paper)")
    axes.legend(loc="upper right")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=FIGURE_DPI)  # no bbox_inches="tight": the size stays fixed
    plt.close(figure)
    with atomic_open(path, "wb") as handle:
        handle.write(buffer.getvalue())
