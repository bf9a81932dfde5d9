"""Spawned worker processes that die with their parent, armed before they import anything heavy.

A parent killed with SIGKILL (the OOM killer, a job scheduler) cannot stop its fold-pool,
``--workers`` or figure-saving processes; left alone they would train on for hours beside the
resumed run, or wait for work for ever. Each worker therefore asks the kernel for a parent-death
signal and also watches its parent's pid. Every process the package starts comes from here
(tests/test_worker_orphans.py checks the source).

Why this module imports nothing heavy: a spawned process unpickles its target and arguments
before it runs any of our code, and unpickling a reference to a function of a torch-importing
module imports torch first (seconds; over 18 s under a loaded CI). A parent killed in that window
left workers that only noticed once the import was over. :func:`guarded_call` is the spawned
target instead: it is importable without torch, arms the watch, and only then unpickles and runs
the real call (see :func:`guard`).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any

#: prctl option: the signal this process gets when the thread that created it exits (linux/prctl.h).
PR_SET_PDEATHSIG = 1


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when the thread that spawned it exits; whether it could.

    A kernel guarantee, unlike the polling thread of :func:`watch_parent`, which needs the GIL and
    so can be held off by a long call that keeps it. Only for a process spawned by its parent's
    main thread: the signal follows the spawning *thread*, which for the main thread lives as long
    as the process. Elsewhere than Linux (no prctl) it does nothing.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def watch_parent(parent_pid: int, spawned_by_main_thread: bool = False) -> None:
    """Exit this worker process within a second of its parent ``parent_pid`` dying.

    With ``spawned_by_main_thread`` the kernel also kills it at once (:func:`die_with_parent`).
    """
    if spawned_by_main_thread:
        die_with_parent()
    if os.getppid() != parent_pid:
        os._exit(1)  # the parent died before the death signal was armed

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True, name="watch-parent").start()


def guard(function: Callable[..., Any], *args: Any) -> bytes:
    """``function(*args)`` pickled for :func:`guarded_call` (raises here, in the parent, if it cannot be)."""
    return pickle.dumps((function, args))


def guarded_call(parent_pid: int, spawned_by_main_thread: bool, call: bytes, *live: Any) -> Any:
    """Watch the parent (:func:`watch_parent`), then run ``call`` (from :func:`guard`) with ``live`` appended.

    ``live`` is for what only multiprocessing may pickle (queues, locks: they are handed over at
    spawn time and cannot go into ``call``).
    """
    watch_parent(parent_pid, spawned_by_main_thread)
    function, args = pickle.loads(call)
    return function(*args, *live)


def _nothing() -> None:
    """The call of a pool that needs no set-up of its own."""


def guarded_pool(workers: int, call: bytes | None = None, *live: Any) -> ProcessPoolExecutor:
    """A pool of ``workers`` spawned processes that die with this one, each set up by ``call`` (from
    :func:`guard`, with ``live`` appended; none by default) once its parent is watched.

    Every process pool of dmlbench is one of these: an unwatched pool's idle workers wait for work
    on a pipe that they hold open themselves, so a SIGKILLed parent left them waiting forever (the
    figure-saving pool did, in CI). Spawn, not fork: a forked child of a process whose OpenMP/torch
    thread pools run inherits them in an unusable state and can hang. Workers start in the thread
    that submits the first tasks; create the pool there (see :func:`die_with_parent`).
    """
    return ProcessPoolExecutor(
        workers,
        mp_context=mp.get_context("spawn"),
        initializer=guarded_call,
        initargs=(os.getpid(), on_main_thread(), guard(_nothing) if call is None else call, *live),
    )


def on_main_thread() -> bool:
    """Whether the calling thread is the main thread (then its spawned workers may arm the signal)."""
    return threading.current_thread() is threading.main_thread()
