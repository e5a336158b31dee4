"""The QA datamodule: cached batched featurisation with the backbone's fast tokenizer, and length-bucketed loaders."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets
import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerFast

from musique_models.io import code_fingerprint
from musique_models.training.loaders import BalancedNegatives, BucketBatchSampler, PaddingCollator, ResumableDataLoader

# The code features depend on: the featurisers and the answer normalisation their labels use (answer types).
FEATURE_CODE = ("musique_models.features", "musique_models.evaluation.metrics")


def featurize(
    table: datasets.Dataset,
    function: Callable[..., dict[str, Any]],
    tokenizer: PreTrainedTokenizerFast,
    cache_dir: str | Path | None,
    name: str,
    batch_size: int = 256,
    features: datasets.Features | None = None,
    **settings: Any,
) -> datasets.Dataset:
    """`table.map(function, batched=True)` cached on disk, keyed by the input's fingerprint, the tokenizer,
    the function, its settings and the source code of the featurisers (an edited featuriser never reuses stale
    features). Declared `features` spare `datasets` inferring the column types of every
    batch. `cache_dir=None` featurises in memory, uncached (tables that live for one prediction: a Step Execution
    hop)."""
    key = json.dumps(
        {
            "input": table._fingerprint,
            "function": f"{function.__module__}.{function.__qualname__}",
            "code": code_fingerprint(*FEATURE_CODE, function.__module__),
            "tokenizer": tokenizer.name_or_path,
            "vocab": len(tokenizer),
            "settings": settings,
        },
        sort_keys=True,
        default=str,
    )
    # Given, the fingerprint also spares `datasets` hashing the function's arguments (pickling the whole tokenizer,
    # about 0.4 s a call on 2 cores).
    fingerprint = hashlib.sha256(key.encode()).hexdigest()[:24]
    common: dict[str, Any] = {
        "batched": True,
        "batch_size": batch_size,
        "with_indices": True,
        "remove_columns": table.column_names,
        "fn_kwargs": {"tokenizer": tokenizer, **settings},
        "features": features or getattr(function, "output_features", None),
        "new_fingerprint": fingerprint,
        "desc": f"featurising {name}",
    }
    if cache_dir is None:
        return table.map(function, keep_in_memory=True, load_from_cache_file=False, **common)
    cache_file = Path(cache_dir) / f"{name}-{fingerprint}.arrow"
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    return table.map(function, cache_file_name=str(cache_file), **common)


class IndexedRows(torch.utils.data.Dataset):
    """Rows of a featurised table, each with `feature_row` (its position), which metrics use to drop DDP repeats."""

    def __init__(self, table: datasets.Dataset) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, row: int) -> dict[str, Any]:
        return {**self.table[row], "feature_row": row}

    def __getitems__(self, rows: list[int]) -> list[dict[str, Any]]:
        columns = self.table[rows]
        return [
            {**{key: values[i] for key, values in columns.items()}, "feature_row": row} for i, row in enumerate(rows)
        ]


class QADataModule(pl.LightningDataModule):
    """Loaders over featurised splits: training batches bucketed by length, shuffled reproducibly per epoch
    and resumable mid-epoch; evaluation and prediction batches sorted by length.

    Args:
        train, evaluation, predict: featurised `datasets.Dataset`s (any may be None).
        pad_token_id: the tokenizer's padding id.
        segment_sep_id: for encoders with segment ids (BERT), the separator id after which segment 1 starts;
            used when the features carry no `token_type_ids`.
        batch_size: training micro-batch size (the effective batch adds gradient accumulation).
        eval_batch_size: evaluation and prediction batch size.
        num_workers: DataLoader worker processes.
        seed: seed of the training order.
        train_subset: draws each epoch's training rows (balanced negatives) instead of using all of them.
    """

    def __init__(
        self,
        train: datasets.Dataset | None,
        evaluation: datasets.Dataset | None,
        predict: datasets.Dataset | None,
        pad_token_id: int,
        batch_size: int = 8,
        eval_batch_size: int = 32,
        num_workers: int = 0,
        seed: int = 42,
        segment_sep_id: int | None = None,
        train_subset: BalancedNegatives | None = None,
    ) -> None:
        super().__init__()
        self.train_subset = train_subset
        self.train, self.evaluation, self.predict = train, evaluation, predict
        self.collator = PaddingCollator(pad_token_id, segment_sep_id)
        self.batch_size, self.eval_batch_size = batch_size, eval_batch_size
        self.num_workers, self.seed = num_workers, seed
        self._train_loader: ResumableDataLoader | None = None
        self._train_position: dict[str, int] | None = None

    @classmethod
    def for_tokenizer(
        cls,
        tokenizer: PreTrainedTokenizerFast,
        train: datasets.Dataset | None,
        evaluation: datasets.Dataset | None,
        predict: datasets.Dataset | None = None,
        **kwargs: Any,
    ) -> QADataModule:
        """A datamodule padding with `tokenizer`'s pad id, with segment ids for encoders that use them (BERT)."""
        segment_sep_id = tokenizer.sep_token_id if "token_type_ids" in tokenizer.model_input_names else None
        return cls(train, evaluation, predict, tokenizer.pad_token_id, segment_sep_id=segment_sep_id, **kwargs)

    @staticmethod
    def _lengths(table: datasets.Dataset) -> list[int]:
        return [len(ids) for ids in table["input_ids"]]

    def _columns(self, table: datasets.Dataset) -> IndexedRows:
        return IndexedRows(table.with_format(None))

    def _generator(self) -> torch.Generator:
        # Each DataLoader iterator draws a worker seed from its generator; without one it draws from the global
        # RNG and shifts the dropout stream, so a resumed run would no longer match an uninterrupted one.
        return torch.Generator().manual_seed(self.seed)

    def train_dataloader(self) -> DataLoader:
        sampler = BucketBatchSampler(
            self._lengths(self.train), self.batch_size, shuffle=True, seed=self.seed, subset=self.train_subset
        )
        self._train_loader = ResumableDataLoader(
            self._columns(self.train),
            sampler,
            collate_fn=self.collator,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            generator=self._generator(),
        )
        if self._train_position is not None:
            self._train_loader.load_state_dict(self._train_position)
        return self._train_loader

    # The training loader's position is saved and restored through the datamodule's own checkpoint hooks: the
    # loader is built (for `estimated_stepping_batches`) before Lightning restores its loop state, so Lightning
    # would not hand it its saved position. Restoring here happens before the loader's first batch is drawn.
    def state_dict(self) -> dict[str, Any]:
        return {"train_position": self._train_loader.state_dict()} if self._train_loader is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._train_position = state_dict.get("train_position")
        if self._train_position is not None and self._train_loader is not None:
            self._train_loader.load_state_dict(self._train_position)

    def _ordered_loader(self, table: datasets.Dataset) -> DataLoader:
        sampler = BucketBatchSampler(self._lengths(table), self.eval_batch_size, shuffle=False)
        return DataLoader(
            self._columns(table),
            batch_sampler=sampler,
            collate_fn=self.collator,
            num_workers=self.num_workers,
            generator=self._generator(),
        )

    def val_dataloader(self) -> DataLoader | list:
        # a stage that does not validate featurises no evaluation rows: no loader (Lightning then skips validation)
        return self._ordered_loader(self.evaluation) if self.evaluation is not None else []

    def predict_dataloader(self) -> DataLoader:
        return self._ordered_loader(self.predict if self.predict is not None else self.evaluation)
