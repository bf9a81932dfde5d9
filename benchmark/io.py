"""Atomic file writes (a crash never leaves a half-written record, table, cache entry or plot)
and the key diff of two JSON-like mappings (which settings make two runs different)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from benchmark.errors import DiskFull
from benchmark.faults import kill_point

#: errno values of a full file system: no space, and (user or group) quota exceeded.
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


@contextlib.contextmanager
def atomic_write(path: Path, size: int | None = None) -> Iterator[BinaryIO]:
    """Open a binary file whose content replaces ``path`` only when the ``with`` block ends cleanly.

    A full disk (ENOSPC, EDQUOT) is a :class:`~benchmark.errors.DiskFull` naming ``path`` and the
    bytes it needed (``size`` when the caller knows it, else those written when it failed); the
    previous ``path``, if any, is left as it was.

    The data go to a uniquely named temporary file in the same directory (several processes may
    write the same cache entry at once), are flushed to disk, and the file is renamed over
    ``path``; an exception (or Ctrl-C) removes the temporary file and leaves ``path`` as it was.
    The file gets the permissions of any file created under the current umask (mkstemp's are 0600;
    results and caches are meant to be shared like any other output).
    """
    written = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        if exc.errno in DISK_FULL:
            raise _disk_full(exc, path, size, written) from exc
        raise
    try:
        with os.fdopen(fd, "wb") as fh:
            try:
                yield fh
            finally:
                # What the caller handed over (the figure a full disk's error states without ``size``).
                with contextlib.suppress(OSError, ValueError):
                    written = fh.tell()
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        kill_point(f"write:{path.name}")
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in DISK_FULL:
            raise _disk_full(exc, path, size, written) from exc
        raise


def _disk_full(exc: OSError, path: Path, size: int | None, written: int) -> DiskFull:
    """The one-line error of a write of ``path`` that found its file system full."""
    need = f"{size:,} bytes" if size is not None else f"at least {written:,} bytes"
    return DiskFull(
        f"No space left to write {path} ({need}): {exc.strerror or exc}. The file is as it was before "
        f"(never half-written); free space on the file system of {path.parent} and re-run the same "
        "command to resume."
    )


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see :func:`atomic_write`)."""
    data = text.encode("utf-8")
    with atomic_write(path, len(data)) as fh:
        fh.write(data)


def write_json_atomic(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON (NaN written as null)."""
    write_text_atomic(path, json.dumps(_nan_to_none(data), indent=1, sort_keys=False) + "\n")


def read_json(path: Path) -> Any:
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def differing_keys(a: Any, b: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two JSON-like mappings (sorted; ``(root)`` for scalars).

    A key present on one side only is listed as itself; sequences compare as lists (a tuple and
    a list with the same items are equal, as they are once written to JSON).
    """
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        out: list[str] = []
        for k in sorted(set(a) | set(b), key=str):
            key = f"{prefix}.{k}" if prefix else str(k)
            out += [key] if (k not in a or k not in b) else differing_keys(a[k], b[k], key)
        return out
    if isinstance(a, Sequence) and isinstance(b, Sequence) and not isinstance(a, str):
        return [] if list(a) == list(b) else [prefix or "(root)"]
    return [] if a == b else [prefix or "(root)"]


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and obj != obj:
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_nan_to_none(v) for v in obj]
    return obj
