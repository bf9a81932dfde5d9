"""The machine's heavy-work lock, shared by the scripts that start long runs.

On a 2-core machine two heavy jobs at once slow each other and spoil any timing, so the scripts
that start runs (``sensitivity.py``, ``regenerate_boards.py``) hold one lock file exclusively
around each run. ``DMLBENCH_HEAVY_LOCK`` names the file (default ``/tmp/dmlbench-heavy.lock``);
other work can wait on the same file with ``flock``.

A stop request to a script (Ctrl-C, SIGTERM) is passed on to its run with time to save its work: see
:func:`wait_for`.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

#: Seconds a run asked to stop gets to save its work and exit, before the next, harder request.
STOP_GRACE_S = 60.0


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
    ``label: exit <code>`` after it; return its exit code (130 or 143 when it was stopped)."""
    with heavy_lock():
        print(f"{label}: {' '.join(cmd[1:])}", flush=True)
        code = wait_for(subprocess.Popen(list(cmd), cwd=cwd))
    print(f"{label}: exit {code}", flush=True)
    return code


class _StopRequested(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _StopRequested(signum)


def wait_for(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> int:
    """``proc``'s exit code; a Ctrl-C or SIGTERM meanwhile stops it gently and returns its code.

    Why not ``subprocess.call``: on Ctrl-C it SIGKILLs the child after 0.25 s, before a run has
    stopped its fold workers and saved its timings, and a SIGTERM left the child running alone.
    Here the child first gets ``grace_s`` to stop by itself (a terminal's Ctrl-C, or a signal to
    the process group, reached it too), then the same signal (it was sent to this script only),
    then, ``grace_s`` later, SIGKILL. Further signals meanwhile are ignored here, so the child's
    shutdown is not cut short by a second request.
    """
    main = threading.current_thread() is threading.main_thread()  # only it may set handlers
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    if main and previous[signal.SIGTERM] != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _raise_stop)
    try:
        try:
            return proc.wait()
        except KeyboardInterrupt:
            signum = int(signal.SIGINT)
        except _StopRequested as stop:
            signum = stop.signum
        for sig in previous:
            signal.signal(sig, signal.SIG_IGN)
        return _stop(proc, signum, grace_s)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _stop(proc: subprocess.Popen[bytes], signum: int, grace_s: float) -> int:
    for escalate in (None, signum, signal.SIGKILL):
        if escalate is not None and proc.poll() is None:
            proc.send_signal(escalate)
        try:
            return proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            continue
    return proc.wait()
