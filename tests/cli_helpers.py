"""Running the `dmlbench` CLI as a subprocess from tests (a fresh interpreter, like a user's shell)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


def dmlbench(*args: str, cache: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    """``dmlbench ARGS`` in a new process with ``DMLBENCH_CACHE=cache``; output captured as text."""
    env = {**os.environ, "DMLBENCH_CACHE": str(cache)}
    return subprocess.run(
        [sys.executable, "-m", "benchmark.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def default_sigint() -> None:
    """A ``preexec_fn`` restoring Ctrl-C's default in the child.

    A shell without job control starts background jobs with SIGINT ignored and a child inherits
    that (a CI runner may do this), so a test that interrupts a run would otherwise do nothing.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
