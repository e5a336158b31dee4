"""Error types raised by musique-models for bad input."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class MusiqueModelsError(Exception):
    """Base class of every error this package raises on purpose."""


class DataFormatError(MusiqueModelsError, ValueError):
    """A data or prediction file does not have the expected content.

    The message names the file, the line (or record number), the record id and the field where known.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | Path | None = None,
        line: int | None = None,
        record_id: str | None = None,
        field: str | None = None,
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.record_id = record_id
        self.field = field
        self.reason = message
        where = []
        if self.path is not None:
            where.append(self.path if line is None else f"{self.path}:{line}")
        if record_id is not None:
            where.append(f"id={record_id!r}")
        if field is not None:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {message}" if where else message)


class ConfigValueError(MusiqueModelsError, ValueError):
    """A setting has a value the code does not accept; the message names the key and the accepted values."""


def check_choice(key: str, value: object, choices: tuple[str, ...]) -> None:
    """Raise `ConfigValueError` naming `key` unless `value` is one of `choices`."""
    if value not in choices:
        raise ConfigValueError(f"{key}={value!r}: expected one of {', '.join(choices)}")


class DatasetNotFoundError(MusiqueModelsError, FileNotFoundError):
    """A configured dataset file is absent; the message says where to get it."""


# Hydra's and OmegaConf's errors that come from what a user typed (a bad override, an unknown option, a missing key).
_CONFIG_ERROR_MODULES = ("hydra.errors", "omegaconf.errors")
_CONFIG_ERRORS = (
    "ConfigCompositionException",
    "OverrideParseException",
    "MissingConfigException",
    "MissingMandatoryValue",
    "ConfigKeyError",
    "ConfigAttributeError",
    "InterpolationResolutionError",
    "InterpolationKeyError",
    "ValidationError",
    "ConfigTypeError",
)


def user_error_message(error: BaseException) -> str | None:
    """The one-line message for an error a user caused (the package's own, or a config error), else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, MusiqueModelsError):
            return str(error)
        if type(error).__module__ in _CONFIG_ERROR_MODULES and type(error).__name__ in _CONFIG_ERRORS:
            unknown = _unknown_setting(error.__cause__) or _unknown_setting(error)
            message = " ".join(str(error).split("Config search path")[0].split())
            if type(error.__cause__).__name__ == "ValidationError":  # a value of the wrong type: say why
                message += f": {str(error.__cause__).splitlines()[0]}"
            return unknown or message
        error = error.__cause__  # instantiate() raises its own error `from` the error of the object it builds
    return None


def unknown_setting_message(key: str, schema: type) -> str:
    """The one line for a setting a typed schema does not have: the key and the schema's settings."""
    from dataclasses import fields

    names = ", ".join(sorted(item.name for item in fields(schema)))
    return f"{key}: {schema.__name__} has no such setting (its settings: {names})"


def _unknown_setting(error: BaseException | None) -> str | None:
    """For OmegaConf's error on a key that a typed (dataclass) config node does not have, `unknown_setting_message`."""
    schema = getattr(error, "object_type", None)
    key = getattr(error, "full_key", None)
    if error is None or key is None or schema is None or "__dataclass_fields__" not in vars(schema):
        return None
    if type(error).__name__ not in ("ConfigAttributeError", "ConfigKeyError"):
        return None
    return unknown_setting_message(key, schema)


@contextmanager
def user_errors_exit() -> Iterator[None]:
    """Turn the errors a user can cause (bad files, missing data, bad overrides) into one line on stderr and exit
    status 2; anything else (a bug) keeps its traceback."""
    try:
        yield
    except Exception as error:
        message = user_error_message(error)
        if message is None:
            raise
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
