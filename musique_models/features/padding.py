"""What the collator (`training/loaders.py: PaddingCollator`) pads, declared by the featurisers that write it.

A featuriser module declares each list column it writes with the value a batch pads it with
(`declare_columns(__name__, pad={...})`; `TOKENIZER_PAD`: the tokenizer's padding id) and the columns that hold
floats; the collator reads the declarations (importing every module of this package first), so a new featuriser's columns
need no edit to the training layer. Two
modules that declare one column with different values are an error at import, naming both.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import cache

from musique_models.errors import MusiqueModelsError

TOKENIZER_PAD = None  # pad with the tokenizer's padding id

_PAD_VALUES: dict[str, int | float | None] = {}
_OWNERS: dict[str, str] = {}
_FLOAT_COLUMNS: set[str] = set()


def declare_columns(owner: str, pad: dict[str, int | float | None], floats: Iterable[str] = ()) -> None:
    """Declare the list columns `owner` (a module name) writes with their pad values, and its float columns."""
    for column, value in pad.items():
        if column in _PAD_VALUES and _PAD_VALUES[column] != value:
            raise MusiqueModelsError(
                f"column {column!r}: padded with {_PAD_VALUES[column]!r} by {_OWNERS[column]} and with {value!r} by "
                f"{owner}; one column, one pad value"
            )
        _PAD_VALUES[column] = value
        _OWNERS.setdefault(column, owner)
    _FLOAT_COLUMNS.update(floats)


@cache
def _import_featurisers() -> None:
    """Import every module of this package once, so that every featuriser has declared its columns whatever was
    imported before (a featuriser outside the package declares them when it is imported, before it writes)."""
    package = importlib.import_module(__package__ or "musique_models.features")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def pad_values() -> dict[str, int | float | None]:
    """Every declared list column and its pad value (`TOKENIZER_PAD`: the tokenizer's)."""
    _import_featurisers()
    return dict(_PAD_VALUES)


def float_columns() -> frozenset[str]:
    """The declared columns that hold floats (the rest are integers)."""
    _import_featurisers()
    return frozenset(_FLOAT_COLUMNS)


# What every featuriser's tokenised text has.
declare_columns(
    __name__,
    pad={"input_ids": TOKENIZER_PAD, "attention_mask": 0, "token_type_ids": 0, "labels": -100},  # -100: no loss
)
