"""`DatasetSource`: what a Hydra `dataset` config instantiates; finds, parses, caches and subsamples a split."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import datasets
from datasets.arrow_writer import ArrowWriter

from musique_models.data.features import FEATURES
from musique_models.data.formats import FORMATS, DataFormat, check_musique_full_pairs
from musique_models.data.schema import Example
from musique_models.data.subsample import subsample_indices
from musique_models.errors import DatasetNotFoundError, MusiqueModelsError
from musique_models.io import code_fingerprint, file_sha256, write_json
from musique_models.run_files import subsample_ids_file

log = logging.getLogger(__name__)

# The code whose output the Arrow cache holds: an edit to any of it makes a new cache entry, never a stale reuse.
READER_MODULES = (
    "musique_models.data.formats",
    "musique_models.data.schema",
    "musique_models.data.features",
    "musique_models.data.jsonio",
)
_WRITE_BATCH = 1000


class DatasetConfigError(MusiqueModelsError, ValueError):
    """A dataset config value that cannot work (an unknown format, a non-boolean switch)."""


class UnknownSplitError(MusiqueModelsError, KeyError):
    """A split that the dataset (its official files, or its shipped sample) does not have."""

    def __str__(self) -> str:  # KeyError's own str() quotes the message
        return str(self.args[0]) if self.args else ""


def no_sample_message(name: str, data_dir: str | Path) -> str:
    """The one line for `dataset.sample=true` on a dataset that ships no sample."""
    return (
        f"dataset {name!r} has no shipped sample (its config gives no sample_files): set dataset.sample=false to "
        f"read its files in {data_dir}, or give dataset.sample_files"
    )


class DatasetSource:
    """One dataset: its official files (or the shipped sample), its reader and its training subsample.

    Args:
        name: config name, stored in every example's `dataset` field.
        display_name: human name used in messages.
        format: the `DataFormat` name of its files: 'musique', 'hotpotqa' or '2wiki' (`FORMATS`).
        files: split -> official file path (relative paths are taken under `data_dir`).
        data_dir: folder holding the official files.
        sample: read the small real sample shipped in the repo instead of the official files.
        sample_files: split -> shipped sample path.
        paired: MuSiQue-Full: check that each id occurs once answerable and once not.
        train_size: number of training questions kept (None keeps all).
        seed: seed of the training subsample.
        cache_dir: where parsed splits are cached as Arrow files.
        urls: split -> URL to fetch the official file from when it is absent (users who are online).
        hub_path: a Hugging Face hub dataset whose rows have the official fields (users who are online).
        download_help: where users get the official files; shown when a file is missing.
        derived_sample: the shipped sample is derived data (not official); said in every summary.
        include_title: readers put paragraph titles before the text (HotpotQA, 2Wiki; "title || text").
        yes_no_answers: the dataset has yes/no answers (readers add the `( yes | no )` prefix, or a head).
        unlabelled_splits: splits whose files carry no labels (official test sets: ids, questions, paragraphs);
            only these are read without answers, supports and answerability, and they are predicted, not scored.

    `include_title` and `yes_no_answers` are accepted because the dataset configs carry them, but they are not
    stored: models read them from the config (`cfg.dataset...`), never from here.
    """

    def __init__(
        self,
        name: str,
        display_name: str,
        format: str,
        files: dict[str, str],
        data_dir: str,
        sample: bool = False,
        sample_files: dict[str, str] | None = None,
        paired: bool = False,
        train_size: int | None = None,
        seed: int = 42,
        cache_dir: str = ".cache/datasets",
        urls: dict[str, str] | None = None,
        hub_path: str | None = None,
        download_help: str = "",
        derived_sample: bool = False,
        include_title: bool = False,
        yes_no_answers: bool = False,
        unlabelled_splits: list[str] | tuple[str, ...] = (),
        official: Mapping[str, Any] | None = None,
    ) -> None:
        if format not in FORMATS:
            raise DatasetConfigError(
                f"dataset {name!r}: unknown format {format!r}; set dataset.format to one of: " + ", ".join(FORMATS)
            )
        for option, value in {"sample": sample, "paired": paired, "derived_sample": derived_sample}.items():
            if not isinstance(value, bool):
                raise DatasetConfigError(
                    f"dataset.{option}={value!r} is not a boolean; set dataset.{option}=true or dataset.{option}=false"
                )
        if sample and not sample_files:
            raise DatasetConfigError(no_sample_message(name, data_dir))
        self.name = name
        self.official = official  # the official files' counts, for the plan (`OfficialFacts`); None: unknown
        self.display_name = display_name
        self.format = format
        self.files = dict(files)
        self.data_dir = Path(data_dir)
        self.sample = sample
        self.sample_files = dict(sample_files or {})
        self.paired = paired
        self.train_size = train_size
        self.seed = seed
        self.cache_dir = Path(cache_dir)
        self.urls = dict(urls or {})
        self.hub_path = hub_path
        self.download_help = download_help
        self.derived_sample = derived_sample
        self.unlabelled_splits = tuple(unlabelled_splits)
        # split -> the file it was last read from: path, sha256 of its content, bytes, rows (before subsampling)
        self.read_files: dict[str, dict] = {}

    @property
    def splits(self) -> list[str]:
        """Splits this source can load."""
        return list(self.sample_files if self.sample else self.files)

    @property
    def is_derived(self) -> bool:
        """True when the loaded data is a derived (non-official) sample."""
        return self.sample and self.derived_sample

    def is_labelled(self, split: str) -> bool:
        """False for a split the config declares unlabelled (`unlabelled_splits`: an official test set)."""
        return split not in self.unlabelled_splits

    def path(self, split: str) -> Path:
        """The file that `split` is read from (the sample's when `sample=True`)."""
        files = self.sample_files if self.sample else self.files
        if split not in files:
            where = "shipped sample" if self.sample else "official files"
            raise UnknownSplitError(
                f"dataset {self.name!r} ({where}) has no split {split!r}; choose one of: {', '.join(sorted(files))}"
            )
        path = Path(files[split])
        return path if path.is_absolute() or self.sample else self.data_dir / path

    def load(self, split: str, run_dir: str | Path | None = None) -> datasets.Dataset:
        """The split as a `datasets.Dataset` in the internal schema; the train split is subsampled.

        The parse is cached as Arrow, keyed by the file's content and the reader version, so a second load
        skips parsing. The ids kept by subsampling are written to `run_dir/subsample_<split>_ids.json`.
        """
        if self.hub_path and not self.sample and not self.path(split).exists():
            table = self._load_from_hub(split)
        else:
            table = self._load_file(self._ensure_file(split), split)
        if split == "train" and self.train_size is not None:
            table = table.select(subsample_indices(table["id"], self.train_size, self.seed))
            if run_dir is not None:
                write_json(
                    Path(run_dir) / subsample_ids_file(split),
                    {
                        "dataset": self.name,
                        "seed": self.seed,
                        "train_size": self.train_size,
                        "ids": list(dict.fromkeys(table["id"])),
                    },
                )
        return table

    def examples(self, split: str) -> list[Example]:
        """The split as a list of `Example`s (for evaluation and small-data tools)."""
        return [Example.from_dict(row) for row in self.load(split)]

    def check_readable(self, split: str) -> None:
        """Raise `DatasetNotFoundError` (what to do instead) when `load(split)` could find the split nowhere: not
        on disk, with no URL to download and no hub dataset. Cheap: a run checks it before anything heavy loads."""
        path = self.path(split)
        if path.exists() or (not self.sample and (split in self.urls or self.hub_path)):
            return
        raise DatasetNotFoundError(
            f"{self.display_name} {split} file not found: {path}; get the official files ({self.download_help}) "
            f"and put them in {self.data_dir} (or set dataset.data_dir=...), "
            f"or run on the small real sample shipped in this repo: add dataset.sample=true"
        )

    def _ensure_file(self, split: str) -> Path:
        path = self.path(split)
        if path.exists():
            return path
        if split in self.urls and not self.sample:
            return self._download(self.urls[split], path)
        self.check_readable(split)  # raises: the file is nowhere
        return path

    def _download(self, url: str, path: Path) -> Path:
        log.info("downloading %s -> %s", url, path)
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
        os.close(handle)
        try:
            with urllib.request.urlopen(url) as response, open(tmp_name, "wb") as out:  # a URL the user configured
                shutil.copyfileobj(response, out)
            os.replace(tmp_name, path)
        finally:
            Path(tmp_name).unlink(missing_ok=True)
        return path

    @property
    def data_format(self) -> DataFormat:
        """The `DataFormat` this dataset's files are in."""
        return FORMATS[self.format]

    def _cache_path(self, path: Path, digest: str, labelled: bool = True) -> Path:
        reader = code_fingerprint(*READER_MODULES)
        key = hashlib.sha256(f"{digest}|{self.format}|{self.name}|{self.paired}|{labelled}|reader-{reader}".encode())
        return self.cache_dir / f"{self.name}-{path.stem}-{key.hexdigest()[:20]}.arrow"

    def _load_file(self, path: Path, split: str) -> datasets.Dataset:
        """The parsed split from its Arrow cache (parsed and cached first when absent); records the file read."""
        labelled = self.is_labelled(split)
        digest = file_sha256(path)
        cache_path = self._cache_path(path, digest, labelled)
        if not cache_path.exists():
            examples = self.data_format.read(path, self.name, labelled=labelled)
            if self.paired:
                examples = check_musique_full_pairs(examples, path, labelled)
            write_arrow(examples, cache_path)
        table = datasets.Dataset.from_file(str(cache_path))
        self.read_files[split] = {
            "path": str(path.resolve()),
            "sha256": digest,
            "bytes": path.stat().st_size,
            "rows": len(table),
        }
        return table

    def _load_from_hub(self, split: str) -> datasets.Dataset:
        """Online only: read a hub copy whose rows carry the official fields through the same reader."""
        hub_split = datasets.load_dataset(self.hub_path, split="validation" if split == "dev" else split)
        local = self.cache_dir / f"{self.name}-hub-{split}.jsonl"
        hub_split.to_json(str(local), lines=True, force_ascii=False)
        return self._load_file(local, split)


def write_arrow(examples: Iterable[Example], path: Path) -> None:
    """Stream examples into an Arrow file with the internal `FEATURES`, atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        writer = ArrowWriter(features=FEATURES, path=tmp_name)
        batch: list[dict] = []
        for example in examples:
            batch.append(example.to_dict())
            if len(batch) == _WRITE_BATCH:
                writer.write_batch(_columns(batch))
                batch = []
        if batch:
            writer.write_batch(_columns(batch))
        writer.finalize()
        writer.close()
        os.replace(tmp_name, path)
    finally:
        Path(tmp_name).unlink(missing_ok=True)


def _columns(rows: list[dict]) -> dict[str, list]:
    return {key: [row[key] for row in rows] for key in rows[0]}
