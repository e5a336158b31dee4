"""Command-line helpers shared by train.py, evaluate.py and the `python -m` tools."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from musique_models.errors import MusiqueModelsError


@contextmanager
def user_errors_exit() -> Iterator[None]:
    """Turn the package's own errors (bad files, missing data) into a readable message and exit status 2."""
    try:
        yield
    except MusiqueModelsError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
