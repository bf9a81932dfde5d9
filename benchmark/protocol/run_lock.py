"""One owner per run directory at a time: an OS file lock (``flock``) on ``<run dir>/owner.lock``.

Two processes in one run directory would both take the other's RUNNING trials for those of a
dead process and train them again, then fail on each other's finished trials. The first process
to lock the directory owns it until it exits; a second one stops at once with a
:class:`RunDirBusy` naming the owner's pid and host (written into the lock file by the owner).

The kernel releases an ``flock`` when its holder dies, however it dies (``kill -9``, the OOM
killer), so a lock left by a killed process is never stale: the next run takes it over, and
overwrites the old owner's details. ``--workers N`` processes do not take the lock; their parent
holds it for them while they run, and they exit with it (benchmark.orphans.watch_parent).
Within one process the lock is re-entrant (a counter per directory): ``flock`` would otherwise
refuse a second open of the same file by the process that already holds it.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import json
import os
import socket
from pathlib import Path

from benchmark.errors import DmlbenchError

LOCK_NAME = "owner.lock"

# Run directory (resolved) -> (open file descriptor holding the flock, times acquired in this process).
_HELD: dict[Path, tuple[int, int]] = {}


class RunDirBusy(DmlbenchError):
    """Another live process owns the run directory."""


def acquire(run_dir: Path) -> Path:
    """Lock ``run_dir`` (created if missing) for this process, or raise :class:`RunDirBusy` at once.

    Returns the key to pass to :func:`release`.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    key = run_dir.resolve()
    if key in _HELD:
        fd, count = _HELD[key]
        _HELD[key] = (fd, count + 1)
        return key
    path = key / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = _read_owner(fd)
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise DmlbenchError(f"Cannot lock run directory {run_dir} ({path}): {exc.strerror}.") from exc
        raise RunDirBusy(
            f"Run directory {run_dir} is in use by another dmlbench process ({owner}). Two processes "
            "in one run directory would train the same trials twice: wait for it to finish, or stop "
            "it (a stopped or killed process frees the directory at once), then re-run to resume."
        ) from None
    owner_info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "since": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    os.ftruncate(fd, 0)
    os.pwrite(fd, (json.dumps(owner_info) + "\n").encode(), 0)
    _HELD[key] = (fd, 1)
    return key


def release(key: Path) -> None:
    """Undo one :func:`acquire` of this process; the last one unlocks the directory."""
    fd, count = _HELD[key]
    if count > 1:
        _HELD[key] = (fd, count - 1)
        return
    del _HELD[key]
    os.close(fd)  # closing the only descriptor releases the flock


def _read_owner(fd: int) -> str:
    """``pid N on host H since T`` from the owner's lock file (it may be still writing it)."""
    try:
        info = json.loads(os.pread(fd, 4096, 0).decode())
        return f"pid {info['pid']} on host {info['host']}, since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its pid is not written yet: it is starting"
