"""The machine's heavy-work lock, shared by the scripts that start long runs.

On a 2-core machine two heavy jobs at once slow each other and spoil any timing, so the scripts
that start runs (``sensitivity.py``, ``regenerate_boards.py``) hold one lock file exclusively
around each run. ``DMLBENCH_HEAVY_LOCK`` names the file (default ``/tmp/dmlbench-heavy.lock``);
other work can wait on the same file with ``flock``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def lock_path() -> Path:
    """The lock file: ``$DMLBENCH_HEAVY_LOCK`` or ``/tmp/dmlbench-heavy.lock``."""
    return Path(os.environ.get("DMLBENCH_HEAVY_LOCK", "/tmp/dmlbench-heavy.lock"))


@contextmanager
def heavy_lock(path: Path | None = None) -> Iterator[None]:
    """Hold the heavy-work lock (``path``, default :func:`lock_path`) for the block's duration."""
    lock = path or lock_path()
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def run_heavy(label: str, cmd: Sequence[str], cwd: Path) -> int:
    """Run ``cmd`` in ``cwd`` under the heavy-work lock; print ``label: <command>`` before it and
    ``label: exit <code>`` after it; return its exit code."""
    with heavy_lock():
        print(f"{label}: {' '.join(cmd[1:])}", flush=True)
        code = subprocess.call(list(cmd), cwd=cwd)
    print(f"{label}: exit {code}", flush=True)
    return code
