"""The paper's figures (`paper_results.yaml`): each with its source, table and split, and the one rule that picks the
figure a run is set beside: the same system, dataset, metric and split, from the paper's table where it has one,
else from the official repository's dev scores (MuSiQue-Full dev, which no table of the paper gives)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from musique_models.report.runs import ReportError

PAPER_RESULTS = Path(__file__).with_name("paper_results.yaml")
SPLITS = ("dev", "test", None)
KINDS = ("score", "gain")
HUMAN_SCORE = "Human score"
HUMAN_UPPER_BOUND = "Human upper bound"
# Where a split's main-table figure comes from, in order of preference: the paper's main tables, then the repository.
MAIN_TABLES = {"dev": ("Table 4", "README, Predictions"), "test": ("Table 5",)}
REQUIRED_FIELDS = ("system", "dataset", "metric", "value", "split", "table", "source")


@dataclass(frozen=True)
class PaperFigure:
    """One figure (F1 x 100) of the paper or the official repository, with where it was read."""

    system: str
    dataset: str
    metric: str
    value: float
    split: str | None
    table: str
    source: str
    hops: int | None = None
    setting: str | None = None
    kind: str = "score"

    @property
    def where(self) -> str:
        """`Table 4, dev` / `README, Predictions (repository), dev`: the table and split, for a cell's label."""
        origin = self.table if self.source == "paper" else f"{self.table} ({self.source})"
        return f"{origin}, {self.split or 'split not stated'}"


class PaperFigures:
    """Every figure of the data file, and the look-ups the report makes."""

    def __init__(self, figures: list[PaperFigure], sources: dict[str, dict[str, str]], path: Path) -> None:
        self.figures = figures
        self.sources = sources
        self.path = path

    def __iter__(self) -> Iterator[PaperFigure]:
        return iter(self.figures)

    def main(self, system: str, dataset: str, metric: str, split: str = "dev") -> PaperFigure | None:
        """The figure a run of `system` on `dataset`'s `split` is set beside: the whole split, the paper's setup, a
        score (not a gain), from the split's main tables in their order of preference; None when there is none."""
        for table in MAIN_TABLES[split]:
            for figure in self.figures:
                if (
                    (figure.system, figure.dataset, figure.metric, figure.split, figure.table)
                    == (system, dataset, metric, split, table)
                    and figure.hops is None
                    and figure.setting is None
                    and figure.kind == "score"
                ):
                    return figure
        return None

    def per_hop(self, system: str, dataset: str, metric: str = "An") -> dict[int, PaperFigure]:
        """hops -> the dev figure of the questions with that many hops (the paper gives EX(SA)'s on MuSiQue-Ans)."""
        return {
            figure.hops: figure
            for figure in self.figures
            if figure.hops is not None
            and (figure.system, figure.dataset, figure.metric, figure.split) == (system, dataset, metric, "dev")
        }

    def systems(self, split: str = "dev") -> list[str]:
        """The systems with a main-table figure of `split`, in file order."""
        tables = MAIN_TABLES[split]
        return list(
            dict.fromkeys(
                f.system
                for f in self.figures
                if f.split == split and f.table in tables and f.setting is None and f.hops is None and f.kind == "score"
            )
        )

    def in_table(self, table: str) -> list[PaperFigure]:
        """The figures read from `table`, in file order."""
        return [figure for figure in self.figures if figure.table == table]


def _figure(entry: Any, index: int, sources: dict[str, Any], path: Path) -> PaperFigure:
    def fail(message: str) -> ReportError:
        return ReportError(f"{path}: figures[{index}]: {message}")

    if not isinstance(entry, dict):
        raise fail("expected a mapping")
    missing = [name for name in REQUIRED_FIELDS if name not in entry]
    if missing:
        raise fail(f"missing field {', '.join(missing)}")
    if entry["source"] not in sources:
        raise fail(f"field source: {entry['source']!r} is not one of sources ({', '.join(sources)})")
    if entry["split"] not in SPLITS:
        raise fail(f"field split: {entry['split']!r}; expected dev, test or null")
    if entry.get("kind", "score") not in KINDS:
        raise fail(f"field kind: {entry['kind']!r}; expected {' or '.join(KINDS)}")
    if not isinstance(entry["value"], int | float) or isinstance(entry["value"], bool):
        raise fail(f"field value: {entry['value']!r} is not a number")
    unknown = set(entry) - {*REQUIRED_FIELDS, "hops", "setting", "kind"}
    if unknown:
        raise fail(f"unknown field {', '.join(sorted(unknown))}")
    return PaperFigure(
        system=str(entry["system"]),
        dataset=str(entry["dataset"]),
        metric=str(entry["metric"]),
        value=float(entry["value"]),
        split=entry["split"],
        table=str(entry["table"]),
        source=str(entry["source"]),
        hops=None if entry.get("hops") is None else int(entry["hops"]),
        setting=entry.get("setting"),
        kind=entry.get("kind", "score"),
    )


def load_paper_results(path: str | Path = PAPER_RESULTS) -> PaperFigures:
    """The figures of the data file at `path`; `ReportError` naming the file and entry for a malformed one."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise ReportError(f"{path}: cannot read the paper's figures: {error}") from error
    if (
        not isinstance(data, dict)
        or not isinstance(data.get("figures"), list)
        or not isinstance(data.get("sources"), dict)
    ):
        raise ReportError(f"{path}: expected a mapping with `sources` and a list `figures`")
    sources = data["sources"]
    return PaperFigures([_figure(entry, i, sources, path) for i, entry in enumerate(data["figures"])], sources, path)
