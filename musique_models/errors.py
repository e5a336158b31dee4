"""Error types raised by musique-models for bad input."""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable, Iterator
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


class RunConfigError(MusiqueModelsError):
    """The run's configuration cannot be carried out as asked (resume, split, device)."""


class EvaluateConfigError(MusiqueModelsError, ValueError):
    """An evaluate.py option that is missing, unknown or contradicts another."""


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
    """The one line for a setting a typed schema does not have (`no_such_setting_message` with its fields)."""
    from dataclasses import fields

    return no_such_setting_message(key, schema.__name__, [item.name for item in fields(schema)])


def no_such_setting_message(key: str, owner: str, names: Iterable[str]) -> str:
    """`model.lrr: SelectAnswer has no such setting; did you mean `model.lr`? (its settings: ...)`: the key, the
    closest of `owner`'s settings `names` when one is close, and all of them."""
    names = sorted(names)
    parent, _, leaf = key.rpartition(".")
    close = difflib.get_close_matches(leaf, names, n=1, cutoff=0.6)
    hint = f"; did you mean `{'.'.join(filter(None, [parent, close[0]]))}`?" if close else ""
    return f"{key}: {owner} has no such setting{hint} (its settings: {', '.join(names)})"


def _unknown_setting(error: BaseException | None) -> str | None:
    """For OmegaConf's error on a key that a typed (dataclass) config node does not have, `unknown_setting_message`."""
    schema = getattr(error, "object_type", None)
    key = getattr(error, "full_key", None)
    if error is None or key is None or schema is None or "__dataclass_fields__" not in vars(schema):
        return None
    if type(error).__name__ not in ("ConfigAttributeError", "ConfigKeyError"):
        return None
    return unknown_setting_message(key, schema)


# Hydra's words for an override of a key the config does not have (its hint, `+key=...`, adds the key: rarely meant).
_UNKNOWN_OVERRIDE = re.compile(r"Could not override '([^']+)'")


# Hydra's command-line flags that take a value (the rest take none), and the one that names the primary config.
_FLAGS_WITH_A_VALUE = {"--config-path", "-cp", "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}
_CONFIG_NAME_FLAGS = {"--config-name", "-cn"}


def command_line_overrides(argv: list[str], config_name: str) -> tuple[list[str], str] | None:
    """The overrides of a command line (`argv` without the program) as one run composes them, and the primary
    config's name: flags (`-m`, `--config-name X`, ...) set apart, a sweep (`seed=1,2`, `range(...)`) replaced by
    its first value. None when the overrides do not parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    kept, arguments = [], iter(argv)
    for argument in arguments:
        flag, _, value = argument.partition("=")
        if flag in _CONFIG_NAME_FLAGS:
            config_name = value or next(arguments, config_name)
        elif flag in _FLAGS_WITH_A_VALUE:
            if not value:
                next(arguments, None)
        elif not argument.startswith("-"):
            kept.append(argument)
    try:
        parsed = OverridesParser.create().parse_overrides(kept)
    except Exception:  # Hydra says what is wrong with them
        return None
    overrides = [
        f"{item.get_key_element()}={next(item.sweep_string_iterator())}"
        if item.is_sweep_override()
        else item.input_line
        for item in parsed
    ]
    return overrides, config_name


def unknown_key_message(key: str, config_name: str, argv: list[str]) -> str | None:
    """For an override of `key`, which the config `config_name` (composed with the command line's other overrides,
    `argv`) does not have: `unknown key `datset`; did you mean `dataset`?`, or the keys its parent has when none is
    close. None when the config cannot be composed without it."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import DictConfig, OmegaConf

    from musique_models import PROJECT_ROOT

    command_line = command_line_overrides(argv, config_name)
    if command_line is None:
        return None
    overrides, config_name = command_line
    kept = [item for item in overrides if item.split("=", 1)[0].lstrip("+~") != key]
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(PROJECT_ROOT / "conf"), version_base="1.3"):
            cfg = compose(config_name, overrides=kept)
    except Exception:  # another override is wrong too: Hydra's own words then
        return None
    parts = key.split(".")
    missing = object()
    depth = next(
        (i for i in range(len(parts)) if OmegaConf.select(cfg, ".".join(parts[: i + 1]), default=missing) is missing),
        len(parts) - 1,
    )
    parent, leaf = ".".join(parts[:depth]), parts[depth]
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return f"unknown key `{key}`: `{parent}` is a value, not a group of settings"
    keys = sorted(str(name) for name in node)
    close = difflib.get_close_matches(leaf, keys, n=1, cutoff=0.6)
    if close:
        return f"unknown key `{key}`; did you mean `{'.'.join([*parts[:depth], close[0], *parts[depth + 1 :]])}`?"
    return f"unknown key `{key}` ({f'`{parent}`' if parent else 'the config'} has: {', '.join(keys)})"


@contextmanager
def user_errors_exit(config_name: str | None = None) -> Iterator[None]:
    """Turn the errors a user can cause (bad files, missing data, bad overrides) into one line on stderr (with the
    error's notes, in parentheses) and exit status 2; anything else (a bug) keeps its traceback. With `config_name`,
    an override of a key the config lacks gets the closest key instead of Hydra's `+key` hint."""
    try:
        yield
    except Exception as error:
        message = user_error_message(error)
        if message is None:
            raise
        unknown = _UNKNOWN_OVERRIDE.match(message) if config_name is not None else None
        if unknown is not None:
            message = unknown_key_message(unknown.group(1), config_name, sys.argv[1:]) or message
        notes = "".join(f" ({note})" for note in getattr(error, "__notes__", ()))
        print(f"error: {message}{notes}", file=sys.stderr)
        raise SystemExit(2) from None
