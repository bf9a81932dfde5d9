"""Checks of values a user passes in, shared by the command line and the Python API (torch-free).

Each function returns the checked value (normalised where stated) or raises a
:class:`~benchmark.errors.ConfigError` naming the option and the value, worded as the command
line's own checks are, so ``api.run(seed=-1)`` and ``dmlbench run --seed -1`` say the same thing.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.errors import ConfigError

#: A name that becomes a path component (protocol, dataset, loss, plugin): letters, digits, ``_``,
#: ``-``, ``+`` and ``.``, starting with a letter, digit or ``_``, at most 100 characters. No ``/``,
#: ``\``, ``:``, spaces, NUL or ``..``: joined to ``--out`` or ``--results-dir`` it stays inside them.
SAFE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}")


def check_name(kind: str, name: object) -> str:
    """``name`` if it is safe as a path component (:data:`SAFE_NAME`), else a ConfigError naming ``kind``."""
    if not isinstance(name, str):
        raise ConfigError(f"The {kind} name must be a string, got {name!r} ({type(name).__name__}).")
    if not SAFE_NAME.fullmatch(name) or ".." in name:
        raise ConfigError(
            f"Invalid {kind} name {name!r}: a name is used in file paths, so it must be 1-100 of the "
            "characters A-Z a-z 0-9 _ - + . (not starting with '.', '-' or '+', no '..')."
        )
    return name


def check_int(flag: str, value: object, minimum: int | None = None, hint: str = "") -> int:
    """``value`` if it is an integer (not a bool) >= ``minimum`` (any without one); ``hint`` follows
    the range in the error."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{flag} must be an integer, got {value!r} ({type(value).__name__}).")
    if minimum is not None and value < minimum:
        raise ConfigError(f"{flag} must be >= {minimum}{hint}, got {value}.")
    return value


def check_bool(flag: str, value: object) -> bool:
    """``value`` if it is True or False (a flag: 0, 1 or "yes" are refused, not guessed)."""
    if not isinstance(value, bool):
        raise ConfigError(f"{flag} must be True or False, got {value!r} ({type(value).__name__}).")
    return value


def check_str(flag: str, value: object) -> str:
    """``value`` if it is a non-empty string without NUL."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(
            f"{flag} must be a non-empty string without NUL, got {value!r} ({type(value).__name__})."
        )
    return value


def check_optional_str(flag: str, value: object) -> str | None:
    """``value`` if it is None or a non-empty string without NUL."""
    return None if value is None else check_str(flag, value)


def check_path(flag: str, value: object) -> Path:
    """``value`` as a Path if it is a non-empty str or os.PathLike without NUL."""
    raw = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(raw, str) or not raw or "\0" in raw:
        raise ConfigError(
            f"{flag} must be a path (str or pathlib.Path), got {value!r} ({type(value).__name__})."
        )
    return Path(raw)


def check_optional_path(flag: str, value: object) -> Path | None:
    """``value`` as a Path if it is a path (see :func:`check_path`); None stays None."""
    return None if value is None else check_path(flag, value)


def check_overrides(value: object) -> dict[str, Any]:
    """``--set`` overrides as a dict: a mapping of dotted string keys to values (checked later, with
    the config, as ``--set`` values are)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            "overrides must be a mapping of --set keys to values, e.g. {'train.lr': 1e-4}, got "
            f"{value!r} ({type(value).__name__})."
        )
    out: dict[str, Any] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key.strip():
            raise ConfigError(f"--set: a key must be a non-empty string like 'train.lr', got {key!r}.")
        out[key] = item
    return out


def check_metrics(value: object) -> list[str] | None:
    """``metrics`` as a list of names; a single string is a list of one (not its characters)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, Sequence) or not all(isinstance(m, str) and m for m in value):
        raise ConfigError(
            f"metrics must be a metric name or a list of them, e.g. ['map_at_r'], got {value!r} "
            f"({type(value).__name__})."
        )
    return list(value) or None
