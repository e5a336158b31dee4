"""Batching: per-batch padding, length bucketing, and a DataLoader that resumes mid-epoch.

Lightning saves the state of a training DataLoader that has `state_dict`/`load_state_dict` and restores it on
resume, so a run killed mid-epoch continues with exactly the batches it had not seen yet.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Sampler

from musique_models.features.padding import TOKENIZER_PAD, float_columns, pad_values


class PaddingCollator:
    """Pads the list columns the featurisers declared (`features/padding.py`) to the longest row of the batch; stacks `offset_start`/`offset_end` into `offset_mapping`
    (batch, tokens, 2); adds `marker_mask` when markers are present, and `global_attention_mask` (batch, tokens)
    from `global_positions` (Longformer's global attention). Rows without `attention_mask` get one from their
    length, and, when `segment_sep_id` is set, `token_type_ids` = 1 after the first separator."""

    def __init__(self, pad_token_id: int, segment_sep_id: int | None = None) -> None:
        self.pad_token_id = pad_token_id
        self.segment_sep_id = segment_sep_id

    def __call__(self, rows: Sequence[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch: dict[str, torch.Tensor] = {}
        padded, floats = pad_values(), float_columns()  # what the featurisers declared (features/padding.py)
        for key in rows[0]:
            if key == "global_positions":
                continue
            values = [row[key] for row in rows]
            dtype = torch.float32 if key in floats else torch.long
            if key in padded:
                pad = self.pad_token_id if padded[key] is TOKENIZER_PAD else padded[key]
                batch[key] = _pad(values, pad, dtype)
            else:
                batch[key] = torch.tensor(values, dtype=dtype)
        if "attention_mask" not in batch:
            lengths = torch.tensor([len(row["input_ids"]) for row in rows])
            batch["attention_mask"] = (torch.arange(batch["input_ids"].shape[1])[None, :] < lengths[:, None]).long()
            if self.segment_sep_id is not None and "token_type_ids" not in batch:
                after_first_sep = (
                    torch.cumsum(batch["input_ids"] == self.segment_sep_id, dim=1)
                    - (batch["input_ids"] == self.segment_sep_id).long()
                    >= 1
                )
                batch["token_type_ids"] = (after_first_sep & batch["attention_mask"].bool()).long()
        if "offset_start" in batch:
            batch["offset_mapping"] = torch.stack([batch.pop("offset_start"), batch.pop("offset_end")], dim=-1)
        if "marker_positions" in batch:
            lengths = torch.tensor([len(row["marker_positions"]) for row in rows])
            batch["marker_mask"] = torch.arange(batch["marker_positions"].shape[1])[None, :] < lengths[:, None]
        if "global_positions" in rows[0]:
            batch["global_attention_mask"] = torch.zeros_like(batch["input_ids"])
            for row, positions in enumerate(rows):
                batch["global_attention_mask"][
                    row, torch.as_tensor(positions["global_positions"], dtype=torch.long)
                ] = 1
        return batch


def _pad(values: list[list], pad: float, dtype: torch.dtype) -> torch.Tensor:
    longest = max((len(value) for value in values), default=0)
    return torch.tensor([list(value) + [pad] * (longest - len(value)) for value in values], dtype=dtype)


class BalancedNegatives:
    """Per-epoch training rows for a pair classifier: every group's positive rows plus as many of its negative
    rows, drawn afresh each epoch (from `seed` and the epoch), so that over the epochs the model sees many
    different negatives instead of one fixed draw (the official selector's `balance`). The number of rows is the
    same every epoch.

    Args:
        labels: 1.0 for a positive row, 0.0 for a negative one.
        groups: the group (question) of each row.
        seed: seed of the draws.
    """

    def __init__(self, labels: Sequence[float], groups: Sequence[int], seed: int) -> None:
        self.seed = seed
        positives: dict[int, list[int]] = defaultdict(list)
        negatives: dict[int, list[int]] = defaultdict(list)
        for row, (label, group) in enumerate(zip(labels, groups)):
            (positives if label > 0.5 else negatives)[group].append(row)
        # a question without a positive row (none of its paragraphs supports) draws no row at all
        self.groups = [(positives[group], negatives[group]) for group in sorted(positives)]
        self.size = sum(len(pos) + min(len(pos), len(neg)) for pos, neg in self.groups)

    def grouped_rows(self, epoch: int) -> list[list[int]]:
        """The rows of `epoch`, one list per question (its positives, then its drawn negatives)."""
        rng = random.Random(f"{self.seed}:{epoch}")
        return [
            positive + rng.sample(negative, min(len(positive), len(negative))) for positive, negative in self.groups
        ]

    def rows(self, epoch: int) -> list[int]:
        """The rows of `epoch`, grouped by question."""
        return [row for group in self.grouped_rows(epoch) for row in group]

    def __len__(self) -> int:
        return self.size


class BucketBatchSampler(Sampler[list[int]]):
    """Batches of rows of similar length (less padding), reproducible from `seed` and the epoch.

    Training (`shuffle=True`): the epoch's units are shuffled, cut into chunks of `bucket_batches` batches, each
    chunk sorted by length and cut into batches, and the batches shuffled (as AllenNLP's bucket sampler over chunks
    of `max_instances_in_memory`, which takes the chunks in file order without the global shuffle). A unit is a row; with `subset` (balanced negatives) it is a QUESTION with the rows
    `subset` draws for it this epoch, so that `batch_size` counts questions, as the official selector's batches
    do. Evaluation: rows sorted by length, in order.
    Under torch.distributed each rank takes every world-size-th batch; the list is padded with repeats so that
    every rank gets as many batches (the metrics drop repeated rows).
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int,
        shuffle: bool,
        seed: int = 0,
        bucket_batches: int = 50,
        subset: BalancedNegatives | None = None,
    ) -> None:
        self.lengths = list(lengths)
        self.subset = subset
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.bucket_batches = bucket_batches
        self.epoch = 0
        self.skip_batches = 0

    def batches(self) -> list[list[int]]:
        """All batches of the current epoch, in order."""
        if not self.shuffle:
            order = sorted(range(len(self.lengths)), key=self.lengths.__getitem__)
            return [order[i : i + self.batch_size] for i in range(0, len(order), self.batch_size)]
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        units = (
            self.subset.grouped_rows(self.epoch)
            if self.subset is not None
            else [[row] for row in range(len(self.lengths))]
        )
        order = [units[i] for i in torch.randperm(len(units), generator=generator).tolist()]
        chunk = self.batch_size * self.bucket_batches
        batches = []
        for start in range(0, len(order), chunk):
            bucket = sorted(order[start : start + chunk], key=lambda unit: max(self.lengths[row] for row in unit))
            batches += [
                [row for unit in bucket[i : i + self.batch_size] for row in unit]
                for i in range(0, len(bucket), self.batch_size)
            ]
        permutation = torch.randperm(len(batches), generator=generator).tolist()
        return [batches[i] for i in permutation]

    @staticmethod
    def _world() -> tuple[int, int]:
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
        return 0, 1

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches()
        rank, world = self._world()
        if world > 1:
            per_rank = math.ceil(len(batches) / world)
            batches = (batches + batches[: per_rank * world - len(batches)])[rank::world]
        batches = batches[self.skip_batches :]
        self.skip_batches = 0
        yield from batches

    def __len__(self) -> int:
        units = len(self.subset.groups) if self.subset is not None and self.shuffle else len(self.lengths)
        batches = (units + self.batch_size - 1) // self.batch_size
        return math.ceil(batches / self._world()[1])


class ResumableDataLoader(DataLoader):
    """A DataLoader over a `BucketBatchSampler` whose position in the epoch survives a checkpoint.

    `state_dict` records the epoch being iterated and how many of its batches were handed out (Lightning does
    not fetch ahead from a loader of known length, so that is the number trained on when a checkpoint is
    written). Each new iterator starts the next epoch (a new shuffle), or the restored epoch minus the batches
    already done.
    """

    def __init__(self, dataset: Any, batch_sampler: BucketBatchSampler, **kwargs: Any) -> None:
        super().__init__(dataset, batch_sampler=batch_sampler, **kwargs)
        self.epoch = -1
        self.served = 0
        self._next_epoch = 0

    def __iter__(self) -> Iterator[Any]:
        sampler: BucketBatchSampler = self.batch_sampler  # type: ignore[assignment]
        self.epoch = sampler.epoch = self._next_epoch
        self._next_epoch += 1
        self.served = sampler.skip_batches
        for batch in super().__iter__():
            self.served += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "batches_done": self.served}

    def load_state_dict(self, state: dict[str, int]) -> None:
        sampler: BucketBatchSampler = self.batch_sampler  # type: ignore[assignment]
        if state["batches_done"] >= len(sampler):
            self._next_epoch, sampler.skip_batches = state["epoch"] + 1, 0
        else:
            self._next_epoch, sampler.skip_batches = state["epoch"], state["batches_done"]
