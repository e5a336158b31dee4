"""Which runs the report puts together: runs of one system on one dataset that differ in nothing but the seed.

Two runs share a group when their resolved configs are equal once the seed, the settings that never change what a
run computes (`is_result_neutral`: paths, loggers, progress bars, ...) and absolute file paths are left out, and
they read the same data (the content fingerprints in their `provenance.json`). The evaluation split and size are
part of the config. Within a group each seed counts once (the newest run of a repeated seed). Where groups share a
system and dataset, each group's label names the settings that set it apart. What a repeat was scored with
(`evaluate.py run=`: DiRe, leaderboard files) and the kept run was not counts for the kept run. A group is compared with the paper's
figures only when its runs read the official files, evaluate the whole dev split and train on the paper's 20K
subsample; samples, other files and subsets are marked as such.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from musique_models.report.runs import RunRecord
from musique_models.systems import system_rank
from musique_models.training.provenance import SEED_KEYS, flatten_config, is_result_neutral, is_under

PAPER_TRAIN_SIZE = 20_000
# Provenance fields compared between the runs of a group (and the attempts of a resumed run).
PROVENANCE_FIELDS = ("code.source_sha", "code.commit", "code.dirty", "versions", "devices.gpus", "devices.platform")
LABEL_SETTINGS = 2


# Where a dataset's files are: their content's sha256 (`data_fingerprints`) stands for them in a group's key.
DATA_LOCATION_KEYS = ("dataset.data_dir", "dataset.files", "dataset.sample_files", "dataset.urls", "dataset.cache_dir")


def result_settings(config: dict[str, Any]) -> dict[str, Any]:
    """The settings that decide a run's result: the flattened config without the seed, the settings that never
    change what a run computes, where the data files are (their content is compared instead) and paths inside the
    run's cache folder (built from settings that are compared: a converted backbone). Other paths stay: a reused
    checkpoint or a local copy of a backbone is part of what the run computed with."""
    flat = flatten_config(config)
    cache_dir = (config.get("paths") or {}).get("cache_dir")
    return {
        key: value
        for key, value in flat.items()
        if key not in SEED_KEYS
        and value is not None  # an absent setting reads as null: a run saved before a setting existed groups as one
        and not is_result_neutral(key)
        and not is_under(key, DATA_LOCATION_KEYS)
        and not (cache_dir and isinstance(value, str) and value.startswith(str(cache_dir)))
    }


def data_fingerprints(run: RunRecord) -> dict[str, str] | None:
    """split -> sha256 of each data file the run read; None when the run recorded no provenance."""
    files = (run.provenance.get("data") or {}).get("files")
    if not files:
        return None
    return {split: str(record.get("sha256")) for split, record in sorted(files.items())}


def origin(run: RunRecord) -> str:
    """`official`, `sample`, `other files`, or `unrecorded` (a run made before runs recorded their data)."""
    recorded = (run.provenance.get("data") or {}).get("origin")
    if recorded:
        return str(recorded)
    return "sample" if run.sample else "unrecorded"


def setup_notes(run: RunRecord) -> list[str]:
    """How the run's evaluation or training set differs from the paper's: a subset of the questions, another
    split, another training subsample."""
    notes = []
    config = run.config
    if config.get("eval_size") is not None:
        notes.append(f"{config['eval_size']} questions")
    if config.get("eval_split", "dev") != "dev":
        notes.append(f"{config['eval_split']} split")
    train_size = (config.get("dataset") or {}).get("train_size")
    if train_size != PAPER_TRAIN_SIZE:
        notes.append(f"train_size={'all' if train_size is None else train_size}")
    return notes


def backbones(run: RunRecord) -> dict[str, str]:
    """Each component's backbone name (`model.selector.backbone` -> `roberta_large`), from the run's config."""
    return {
        key.removesuffix(".backbone.name"): str(value)
        for key, value in flatten_config(run.config.get("model") or {}).items()
        if key.endswith("backbone.name")
    }


def _compared_provenance(provenance: dict[str, Any]) -> dict[str, Any]:
    """The `PROVENANCE_FIELDS` of one attempt's provenance, flattened."""
    flat = flatten_config(provenance)
    return {key: value for key, value in flat.items() if any(key.startswith(f) for f in PROVENANCE_FIELDS)}


@dataclass
class RunGroup:
    """Runs of one system on one dataset that differ in nothing but the seed (one run per seed)."""

    system: str
    dataset: str
    origin: str
    settings: dict[str, Any]
    fingerprints: dict[str, str] | None
    runs: list[RunRecord]
    repeats: list[RunRecord] = field(default_factory=list)
    label: str = ""

    @property
    def notes(self) -> list[str]:
        return setup_notes(self.runs[0])

    @property
    def comparable(self) -> bool:
        """Whether the paper's figures are comparable: official files, the whole dev split, the 20K subsample."""
        return self.origin == "official" and not self.notes

    @property
    def marker(self) -> str:
        """`[sample]`, `[other files]`, `[unrecorded files]` or, for official files, what differs from the
        paper's setup (`[100 questions]`); empty for a run comparable with the paper."""
        if self.origin == "official":
            return f"[{', '.join(self.notes)}]" if self.notes else ""
        return "[unrecorded files]" if self.origin == "unrecorded" else f"[{self.origin}]"

    @property
    def row_label(self) -> str:
        """The system, its marker and the settings that set the group apart, e.g. `SA [sample] (backbone=tiny)`."""
        return " ".join(part for part in (self.system, self.marker, f"({self.label})" if self.label else "") if part)

    def values(self, key: str, dire: bool = False) -> list[float]:
        """The group's runs' values of metric `key` (their DiRe metrics with `dire`), one per seed."""
        return [
            run.dire_metrics[key] if dire else run.metrics[key]
            for run in self.runs
            if key in (run.dire_metrics if dire else run.metrics)
        ]

    def provenance_differences(self) -> dict[str, list[Any]]:
        """Provenance fields (commit, dirty tree, library versions, GPUs, platform) that differ between the runs of
        the group or between the attempts of a resumed run: field -> the distinct values, in run order."""
        attempts = []
        for run in self.runs:
            attempts.append(_compared_provenance(run.provenance))
            attempts += [_compared_provenance(resumption) for resumption in run.provenance.get("resumptions") or []]
        differing: dict[str, list[Any]] = {}
        for key in sorted({key for attempt in attempts for key in attempt}):
            values = list(dict.fromkeys(json.dumps(attempt.get(key)) for attempt in attempts))
            if len(values) > 1:
                differing[key] = [json.loads(value) for value in values]
        return differing


def group_runs(runs: Sequence[RunRecord]) -> list[RunGroup]:
    """Runs grouped as the module docstring says, each group's label set, in the order of the report's table rows
    (the paper's system order, the groups comparable with the paper first, then by label and dataset)."""
    groups: dict[str, RunGroup] = {}
    for run in runs:
        settings = result_settings(run.config)
        fingerprints = data_fingerprints(run)
        key = json.dumps([run.system, run.dataset, origin(run), settings, fingerprints], sort_keys=True, default=str)
        group = groups.setdefault(key, RunGroup(run.system, run.dataset, origin(run), settings, fingerprints, []))
        group.runs.append(run)
    for group in groups.values():
        newest_first = sorted(group.runs, key=lambda run: run.made_at, reverse=True)
        kept: dict[Any, RunRecord] = {}
        for run in newest_first:
            if run.seed in kept:
                group.repeats.append(run)
                kept[run.seed] = _with_evaluations_of(kept[run.seed], run)
            else:
                kept[run.seed] = run
        group.runs = sorted(kept.values(), key=lambda run: (run.seed is None, run.seed or 0, run.source))
    ordered = sorted(groups.values(), key=lambda g: (system_rank(g.system), not g.comparable, g.origin, g.dataset))
    _label(ordered)
    return sorted(ordered, key=lambda g: (system_rank(g.system), not g.comparable, g.row_label, g.dataset))


def _with_evaluations_of(kept: RunRecord, repeat: RunRecord) -> RunRecord:
    """The kept run of a seed with what a repeat of it (the same settings and data) scored that it has not: its
    DiRe scoring and its leaderboard files (`evaluate.py run=` on the repeat's folder), each naming its folder."""
    if (kept.dire_metrics or not repeat.dire_metrics) and not set(repeat.leaderboard_files) - set(
        kept.leaderboard_files
    ):
        return kept
    dire = not kept.dire_metrics and bool(repeat.dire_metrics)
    return replace(
        kept,
        dire_metrics=repeat.dire_metrics if dire else kept.dire_metrics,
        dire_source=repeat.dire_source if dire else kept.dire_source,
        leaderboard_files={**repeat.leaderboard_files, **kept.leaderboard_files},
    )


def _label(groups: list[RunGroup]) -> None:
    """Set each group's `label` to the settings that set it apart from the other groups of its system and dataset
    (with the same marker): the fewest that tell every group apart, picked one at a time, the one that separates
    the most groups first (ties: a backbone's name, then the shorter key), filled up to `LABEL_SETTINGS`. A backbone
    shows by its name (what its name implies, such as its size, rate and path, is not counted), and of several
    settings that vary together across the groups only the first counts; every other differing setting is counted
    in `+N more`."""
    peers: dict[tuple[str, str, str], list[RunGroup]] = {}
    for group in groups:
        peers.setdefault((group.system, group.dataset, group.marker), []).append(group)
    for members in peers.values():
        if len(members) < 2:
            continue
        keys = {key for group in members for key in group.settings}
        differing = sorted(
            (k for k in keys if len({json.dumps(g.settings.get(k), default=str) for g in members}) > 1),
            key=lambda k: (not _is_backbone_name(k), k.count("."), k),
        )
        named = {key.removesuffix(".name") for key in differing if key.endswith(".name")}
        shown: list[tuple[str, list[str]]] = []
        shown_columns: set[tuple[str, ...]] = set()
        implied_columns: set[tuple[str, ...]] = set()
        hidden = 0  # differing settings not shown because they vary as a shown one does
        for key in differing:
            column = tuple(json.dumps(g.settings.get(key), default=str) for g in members)
            if any(key.startswith(name + ".") and key != name + ".name" for name in named):
                implied_columns.add(column)  # implied by a component's name (a backbone's path, rate, size)
            elif column in implied_columns or (column in shown_columns and key.endswith(".name")):
                continue  # follows a backbone's choice (a stage's rate, a component's backbone)
            elif column in shown_columns:
                hidden += 1  # varies exactly as a setting shown (eval_size and train_size set together)
            else:
                shown_columns.add(column)
                shown.append((key.removesuffix(".name"), [_short(g.settings.get(key)) for g in members]))
        if len({json.dumps(g.fingerprints) for g in members}) > 1:
            shown.append(("data", [_data_label(g.fingerprints) for g in members]))
        chosen = _separating_settings([values for _, values in shown], len(members))
        more = len(shown) - len(chosen) + hidden
        for index, group in enumerate(members):
            parts = [f"{shown[i][0]}={shown[i][1][index]}" for i in chosen]
            if more:
                parts.append(f"+{more} more")
            group.label = ", ".join(parts)
        labels = [group.label for group in members]
        for index, group in enumerate(members):
            if labels.count(group.label) > 1:  # nothing shown tells them apart (values cut short): number them
                group.label = f"{group.label}, config {index + 1}".lstrip(", ")


def _separating_settings(columns: list[list[str]], groups: int) -> list[int]:
    """Indices of `columns` (each: one value per group, in order of preference) that tell the `groups` apart:
    greedily, the column that separates the most groups next (ties: the earlier), until every group is apart or no
    column separates more; then the earliest others up to `LABEL_SETTINGS`. In column order."""

    def distinct(indices: list[int]) -> int:
        return len({tuple(columns[i][row] for i in indices) for row in range(groups)})

    chosen: list[int] = []
    while distinct(chosen) < groups:
        candidates = [i for i in range(len(columns)) if i not in chosen]
        if not candidates:
            break
        best = max(candidates, key=lambda i: (distinct([*chosen, i]), -i))
        if distinct([*chosen, best]) == distinct(chosen):
            break
        chosen.append(best)
    chosen += [i for i in range(len(columns)) if i not in chosen][: max(0, LABEL_SETTINGS - len(chosen))]
    return sorted(chosen)


def _is_backbone_name(key: str) -> bool:
    stem = key.removesuffix(".name")
    return key.endswith(".name") and (stem == "backbone" or stem.endswith(".backbone"))


def _short(value: Any, width: int = 24) -> str:
    text = "null" if value is None else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _data_label(fingerprints: dict[str, str] | None) -> str:
    if fingerprints is None:
        return "unrecorded"
    return hashlib.sha256(json.dumps(fingerprints, sort_keys=True).encode()).hexdigest()[:8]
