"""Running the `dmlbench` CLI as a subprocess from tests (a fresh interpreter, like a user's shell)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmark import faults


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


def stop_at(point: str) -> dict[str, str]:
    """Environment that makes a run freeze itself (SIGSTOP) at kill point ``point``
    (:mod:`benchmark.faults`), so a test acts on a known state instead of racing the run to it."""
    return {faults.ENV: point, faults.SIGNAL_ENV: "STOP"}


def stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped by a signal."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "T"
    except FileNotFoundError:
        return False


def wait_until_stopped(proc: subprocess.Popen[bytes] | subprocess.Popen[str], timeout: float = 300) -> None:
    """Return once ``proc`` froze at its stop point; fail if it ended or ``timeout`` s passed first."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if stopped(proc.pid):
            return
        time.sleep(0.05)
    raise AssertionError(f"the run never reached its stop point (exit code {proc.poll()})")


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie awaiting its reaper is dead)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return "\nState:\tZ" not in status


def children(pid: int) -> list[int]:
    """Pids of the live processes whose parent is ``pid`` (from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if f"\nPPid:\t{pid}\n" in status and alive(int(entry.name)):
                out.append(int(entry.name))
    return out


def wait_gone(pids: list[int], seconds: float) -> list[int]:
    """Wait up to ``seconds`` for ``pids`` to die; the ones still alive then."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    return [p for p in pids if alive(p)]
