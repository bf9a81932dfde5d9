"""Exceptions a user can act on.

Every error raised for bad user input derives from :class:`DmlbenchError`; the CLI turns it
into a one-paragraph message and exit code 2 instead of a traceback.
"""

from __future__ import annotations


class DmlbenchError(Exception):
    """Base class of all user-facing errors."""


class ConfigError(DmlbenchError):
    """A protocol file, budget or ``--set`` override is invalid."""


class UnknownNameError(DmlbenchError):
    """A name was looked up in a registry that does not hold it."""

    def __init__(self, kind: str, name: str, choices: list[str]) -> None:
        import difflib

        self.kind = kind
        self.name = name
        self.choices = choices
        close = difflib.get_close_matches(name, choices, n=3)
        hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        super().__init__(
            f"Unknown {kind} {name!r}.{hint} Valid choices: {', '.join(choices) or '(none registered)'}."
        )


class DataError(DmlbenchError):
    """A dataset is missing, malformed or too small for the protocol."""


class DiskFull(DmlbenchError):
    """A file could not be written: no space (or quota) left on its file system."""


class TrainingDiverged(DmlbenchError):
    """A loss or its gradients became NaN/inf; the fold (and its trial) fails with this reason."""
