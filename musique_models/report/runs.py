"""Finished runs as the report sees them: run folders (single runs and multirun jobs), offline wandb run folders,
and online wandb runs, each mapped to one `RunRecord` (system, dataset, sample or not, seed, metrics)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from musique_models.errors import MusiqueModelsError
from musique_models.run_files import (
    CONFIG_FILE,
    EVALUATIONS_FOLDER,
    METRICS_FILE,
    PER_QUESTION_FILE,
    PREDICTIONS_FILE,
    PROVENANCE_FILE,
    SCORING_FILE,
    STATUS_FILE,
)
from musique_models.systems import run_system, system_name

# `evaluate.py run=RUN split=test` writes `evaluations/<dataset>-test/predictions.jsonl`: the leaderboards take
# MuSiQue's (the paper's Table 5)
LEADERBOARD_DATASETS = ("musique_ans", "musique_full")
DIRE_PARTITION = "half"  # the default partition: the one the report shows
# DiRe's official conversion leaves out HotpotQA questions with fewer than 5 paragraphs: the report prefers that
# scoring on HotpotQA where both exist
OFFICIAL_DIRE_MIN_PARAGRAPHS = {"hotpotqa_20k": 5}
# model name in the run's config -> the paper's row; Step Execution depends on its executor
WANDB_METRIC_PREFIX = "test/"


class ReportError(MusiqueModelsError):
    """The report cannot be made as asked (no run found, a path that does not exist)."""


@dataclass
class RunRecord:
    """One finished run: where it comes from, the paper row and dataset it belongs to, its scores, its resolved
    config and its provenance (`provenance.json`; empty for runs made before runs recorded it), and when it was
    made (seconds since the epoch: a run folder's metrics file, a wandb run's start; 0 when unknown), which decides
    which of a repeated seed's runs counts. Run folders only: `per_question_file`, the run's per-question scores
    (None for a run written before runs kept them); `dire_source`, the `evaluations/` folder the DiRe metrics
    (and their per-question scores) come from; `leaderboard_files`, dataset -> the MuSiQue test-set prediction file
    that `evaluate.py run=RUN split=test` wrote."""

    source: str
    system: str
    dataset: str
    sample: bool
    seed: int | None
    metrics: dict[str, float]
    dire_metrics: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    made_at: float = 0.0
    per_question_file: str | None = None
    dire_source: str | None = None
    leaderboard_files: dict[str, LeaderboardFile] = field(default_factory=dict)

    @property
    def dire_per_question_file(self) -> str | None:
        """The per-question scores of the DiRe scoring (None without one, or one written before they were kept)."""
        if self.dire_source is None or not (Path(self.dire_source) / PER_QUESTION_FILE).is_file():
            return None
        return str(Path(self.dire_source) / PER_QUESTION_FILE)


@dataclass(frozen=True)
class LeaderboardFile:
    """A test-set prediction file and what it covers: `note` is empty for the whole official test split, else
    `[sample]`, `[N questions]` or `[unrecorded]` (a folder without `scoring.json`)."""

    path: str
    note: str = ""


def scoring_of(evaluation: Path) -> dict[str, Any] | None:
    """What an `evaluations/` folder predicted (`scoring.json`: dataset, split, sample, eval_size, mode, partition,
    dire_min_paragraphs); None for a folder written before it was recorded."""
    path = evaluation / SCORING_FILE
    return _read_json(path) if path.is_file() else None


def leaderboard_files(folder: Path) -> dict[str, LeaderboardFile]:
    """dataset -> `evaluations/<dataset>-test/predictions.jsonl` of a run folder, for MuSiQue's test splits
    predicted and not scored (the leaderboards score them)."""
    found = {}
    for dataset in LEADERBOARD_DATASETS:
        evaluation = folder / EVALUATIONS_FOLDER / f"{dataset}-test"
        if not (evaluation / PREDICTIONS_FILE).is_file() or (evaluation / METRICS_FILE).is_file():
            continue
        scoring = scoring_of(evaluation)
        if scoring is None:
            note = "[unrecorded]"
        elif scoring.get("sample"):
            note = "[sample]"
        elif scoring.get("eval_size"):
            note = f"[{scoring['eval_size']} questions]"
        else:
            note = ""
        found[dataset] = LeaderboardFile(str(evaluation / PREDICTIONS_FILE), note)
    return found


def own_dire_scoring(folder: Path, config: Mapping[str, Any]) -> Path | None:
    """The `metrics.json` of the DiRe scoring of the run's own evaluation set (its dataset, split, sample or not and
    `eval_size`) with the default partition: on HotpotQA the one without questions of fewer than 5 paragraphs (as
    DiRe's official conversion) where it exists, else the one with every question. A folder without
    `scoring.json` counts by its name alone. None when the run has no such scoring."""
    dataset = (config.get("dataset") or {}).get("name")
    split = config.get("eval_split", "dev")
    expected = {
        "dataset": dataset,
        "split": split,
        "sample": bool((config.get("dataset") or {}).get("sample", False)),
        "eval_size": config.get("eval_size") or None,
        "partition": DIRE_PARTITION,
    }
    preferred = [OFFICIAL_DIRE_MIN_PARAGRAPHS.get(str(dataset)), None]
    for min_paragraphs in dict.fromkeys(preferred):
        name = f"{dataset}-{split}-dire-{DIRE_PARTITION}" + (
            f"-min{min_paragraphs}paragraphs" if min_paragraphs is not None else ""
        )
        evaluation = folder / EVALUATIONS_FOLDER / name
        if not (evaluation / METRICS_FILE).is_file():
            continue
        scoring = scoring_of(evaluation)
        if scoring is None or all(scoring.get(key) == value for key, value in expected.items()):
            return evaluation / METRICS_FILE
    return None


def no_row_warning(source: Any, config: Mapping[str, Any]) -> str:
    """What the report says of a run whose model the registry names no row for."""
    return f"skipped {source}: model {config.get('model_name')} has no row (no `system.name` in its conf/model/ config)"


def record_from_config(
    source: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    dire_metrics: Mapping[str, Any] | None = None,
    provenance: Mapping[str, Any] | None = None,
    made_at: float = 0.0,
) -> RunRecord | None:
    """A `RunRecord` from a resolved run config and its flat metrics; None when the registry names no row for its
    model (`musique_models.systems`). A model that names no supporting paragraphs (`predicts_support: false`) keeps
    no support metric: the evaluator's 0 is not a measurement of it."""
    system = system_name(config)
    dataset = (config.get("dataset") or {}).get("name")
    if system is None or dataset is None:
        return None
    seed = config.get("seed")
    entry = run_system(dict(config))
    if entry is not None and not entry.predicts_support:
        metrics = {key: value for key, value in metrics.items() if "support" not in key}
        dire_metrics = {key: value for key, value in (dire_metrics or {}).items() if "support" not in key}
    return RunRecord(
        source=source,
        system=system,
        dataset=str(dataset),
        sample=bool((config.get("dataset") or {}).get("sample", False)),
        seed=None if seed is None else int(seed),
        # a count stays an int (`is_count_metric`), a score becomes a float
        metrics={key: _number(value) for key, value in metrics.items() if isinstance(value, int | float)},
        dire_metrics={
            key: float(value) for key, value in (dire_metrics or {}).items() if isinstance(value, int | float)
        },
        config=dict(config),
        provenance=dict(provenance or {}),
        made_at=made_at,
    )


def _number(value: int | float) -> int | float:
    return value if isinstance(value, int) and not isinstance(value, bool) else float(value)


def find_run_folders(paths: Iterable[str | Path]) -> tuple[list[RunRecord], list[str]]:
    """The finished runs under each path (searched recursively) and one warning line per skipped folder.

    A run folder holds `config.yaml` and `metrics.json`, and its `status.json` says finished; an unfinished one is
    skipped with a warning, as is a model that has no row in the paper's table (the decomposer alone)."""
    records: list[RunRecord] = []
    warnings: list[str] = []
    for path in map(Path, paths):
        if not path.exists():
            raise ReportError(f"{path}: no such file or folder")
        configs = [path / CONFIG_FILE] if (path / CONFIG_FILE).is_file() else []
        configs += sorted(p for p in path.rglob(CONFIG_FILE) if p.parent != path)
        for config_path in configs:
            folder = config_path.parent
            inner = folder.relative_to(path).parts
            if ".hydra" in inner or "wandb" in inner or "files" in inner:
                continue  # Hydra's own copy of the config, wandb's files
            status = _read_json(folder / STATUS_FILE).get("status")
            if status != "finished" or not (folder / METRICS_FILE).is_file():
                warnings.append(f"skipped {folder}: not finished (status {status or 'missing'})")
                continue
            config = yaml.safe_load(config_path.read_text()) or {}
            dire_path = own_dire_scoring(folder, config)
            dire = _read_json(dire_path) if dire_path else {}
            record = record_from_config(
                str(folder),
                config,
                _read_json(folder / METRICS_FILE),
                dire,
                _read_json(folder / PROVENANCE_FILE),
                (folder / METRICS_FILE).stat().st_mtime,
            )
            if record is None:
                warnings.append(no_row_warning(folder, config))
                continue
            record.dire_source = str(dire_path.parent) if dire_path else None
            if (folder / PER_QUESTION_FILE).is_file():
                record.per_question_file = str(folder / PER_QUESTION_FILE)
            record.leaderboard_files = leaderboard_files(folder)
            records.append(record)
    return records, warnings


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ReportError(f"{path}: not valid JSON ({error})") from None


def metrics_from_wandb_summary(summary: Mapping[str, Any]) -> dict[str, float]:
    """The run's final metrics from a wandb summary: the `test/<metric>` keys `train.py` logs, prefix removed."""
    return {
        key[len(WANDB_METRIC_PREFIX) :]: float(value)
        for key, value in summary.items()
        if key.startswith(WANDB_METRIC_PREFIX) and isinstance(value, int | float)
    }


def config_from_wandb(config: Mapping[str, Any]) -> dict[str, Any]:
    """A wandb run config as the run's own config (its `provenance` key included): wandb's `{"value": ...}`
    wrappers and `_wandb` removed."""
    plain = {}
    for key, value in config.items():
        if key.startswith("_wandb"):
            continue
        plain[key] = value["value"] if isinstance(value, dict) and set(value) <= {"value", "desc"} else value
    return plain


def record_from_wandb_run(run: Any) -> RunRecord | None:
    """A `RunRecord` from a wandb API run (`.config`, `.summary`, `.state`, `.path`); None unless it finished
    with test metrics and its model is a paper system."""
    if getattr(run, "state", "finished") != "finished":
        return None
    metrics = metrics_from_wandb_summary(dict(run.summary))
    if not metrics:
        return None
    path = getattr(run, "path", None)
    source = "wandb:" + ("/".join(path) if isinstance(path, list | tuple) else str(path or getattr(run, "id", "?")))
    config = config_from_wandb(dict(run.config))
    provenance = config.pop("provenance", None)
    return record_from_config(source, config, metrics, provenance=provenance, made_at=_timestamp(run))


def _started(folder: Path) -> float:
    """When an offline wandb run started, from its folder's name (`offline-run-<%Y%m%d_%H%M%S>-<id>`; 0 if not)."""
    try:
        return datetime.strptime(folder.name.split("-")[2], "%Y%m%d_%H%M%S").timestamp()
    except (IndexError, ValueError):
        return 0.0


def _timestamp(run: Any) -> float:
    """When an online wandb run was created (seconds since the epoch; 0 when the API does not say)."""
    created = getattr(run, "created_at", None)
    if not created:
        return 0.0
    return datetime.fromisoformat(str(created).replace("Z", "+00:00")).timestamp()


def find_wandb_online(project: str) -> tuple[list[RunRecord], list[str]]:
    """The finished runs of a wandb project (`entity/project`), through the online API."""
    import wandb

    records, warnings = [], []
    for run in wandb.Api().runs(project):
        record = record_from_wandb_run(run)
        if record is None:
            warnings.append(f"skipped wandb run {getattr(run, 'name', run)}: not finished or no test metrics")
        else:
            records.append(record)
    return records, warnings


def find_wandb_offline(directory: str | Path) -> tuple[list[RunRecord], list[str]]:
    """The finished runs among the offline wandb run folders (`offline-run-*`) under `directory`.

    A folder's config and summary come from `files/config.yaml` and `files/wandb-summary.json` where wandb wrote
    them (synced or older runs), else from the records of its `run-*.wandb` file, which is what an offline run
    keeps until `wandb sync`."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ReportError(f"--wandb-dir {directory}: no such folder")
    records, warnings = [], []
    for folder in sorted(p for p in directory.rglob("offline-run-*") if p.is_dir()):
        config, summary, exit_code = _offline_run_contents(folder)
        metrics = metrics_from_wandb_summary(summary)
        if exit_code not in (0, None) or not metrics:
            warnings.append(f"skipped {folder}: not finished (no test metrics)")
            continue
        plain = config_from_wandb(config)
        provenance = plain.pop("provenance", None)
        record = record_from_config(str(folder), plain, metrics, provenance=provenance, made_at=_started(folder))
        if record is None:
            warnings.append(no_row_warning(folder, config))
        else:
            records.append(record)
    return records, warnings


def _offline_run_contents(folder: Path) -> tuple[dict[str, Any], dict[str, Any], int | None]:
    """(config, summary, exit code) of one offline wandb run folder."""
    files = folder / "files"
    if (files / "config.yaml").is_file() and (files / "wandb-summary.json").is_file():
        config = yaml.safe_load((files / "config.yaml").read_text()) or {}
        return config, _read_json(files / "wandb-summary.json"), None
    config: dict[str, Any] = {}
    summary: dict[str, Any] = {}
    exit_code = None
    for log_file in sorted(folder.glob("run-*.wandb")):
        from wandb.proto import wandb_internal_pb2

        for data in read_wandb_log_records(log_file):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(data)
            kind = record.WhichOneof("record_type")
            if kind == "config":
                for item in record.config.update:
                    key = item.key or "/".join(item.nested_key)
                    config[key] = json.loads(item.value_json)
            elif kind == "summary":
                for item in record.summary.update:
                    key = item.key or "/".join(item.nested_key)
                    summary[key] = json.loads(item.value_json)
            elif kind == "exit":
                exit_code = record.exit.exit_code
    return config, summary, exit_code


WANDB_LOG_HEADER = 7  # ":W&B", magic 0xBEE1, version 0
WANDB_LOG_BLOCK = 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def read_wandb_log_records(path: str | Path) -> list[bytes]:
    """The serialised records of a `.wandb` file (wandb's LevelDB-style log: 32 KiB blocks of records, each a
    7-byte header of checksum, length and type; a record split across blocks comes as FIRST, MIDDLE..., LAST)."""
    raw = Path(path).read_bytes()
    if raw[:4] != b":W&B":
        raise ReportError(f"{path}: not a wandb run file")
    records: list[bytes] = []
    pending = b""
    position = WANDB_LOG_HEADER
    while position + 7 <= len(raw):
        left_in_block = WANDB_LOG_BLOCK - position % WANDB_LOG_BLOCK
        if left_in_block < 7:  # the block's tail is padding
            position += left_in_block
            continue
        _checksum, length, kind = struct.unpack("<IHB", raw[position : position + 7])
        data = raw[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == _FULL:
            records.append(data)
        elif kind == _FIRST:
            pending = data
        elif kind == _MIDDLE:
            pending += data
        elif kind == _LAST:
            records.append(pending + data)
            pending = b""
    return records
