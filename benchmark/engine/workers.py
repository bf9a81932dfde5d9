"""``--workers N``: N local search processes sharing one study (several trials at once).

The parent process opens the run (journal repair, stale-trial recovery, Sobol startup points)
before any worker starts, then spawns N workers that only run search trials, shows the global
progress, and runs the test stage itself once every worker has finished. Workers are spawned
(not forked: torch/OpenMP thread pools do not survive a fork) and exit if their parent dies.

CPU: unless ``--jobs`` is given, each worker trains its folds one after another (``jobs=1``)
with ``cores // N`` torch threads (at least 1), so N workers use about the machine's cores.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

from benchmark.errors import DmlbenchError
from benchmark.metrics.knn import set_search_threads
from benchmark.orphans import guard, guarded_call, on_main_thread

#: What one worker process is given (a protocol's run request, e.g.); pickled to the process.
Payload = TypeVar("Payload")


def worker_threads(workers: int, cores: int | None = None) -> int:
    """Torch threads per worker so that ``workers`` single-job workers share the cores."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, cores // max(1, workers))


def worker_main(
    entry: Callable[[Payload], None],
    payload: Payload,
    threads: int,
) -> None:
    """Body of one worker process, run by :func:`~benchmark.orphans.guarded_call` once the
    parent is watched: ``entry(payload)`` (search trials until the budget is taken)."""
    torch.set_num_threads(threads)
    set_search_threads(threads)
    entry(payload)


def run_local_workers(
    payloads: Sequence[Payload],
    entry: Callable[[Payload], None],
    jobs: int,
    on_poll: Callable[[], None],
    poll_s: float = 2.0,
) -> None:
    """Run one process of ``entry`` per payload to completion, calling ``on_poll`` while waiting.

    ``entry`` is a module-level function (spawned processes receive it pickled by name), e.g.
    :func:`benchmark.protocol.mlrc_run.search_worker`; ``jobs`` is each worker's fold jobs (1: it
    gets ``cores // workers`` torch threads, else 1). A worker that exits abnormally stops all
    others (their trials would otherwise wait for the dead worker's RUNNING trial, which only the
    next start of the run can recover).
    """
    threads = worker_threads(len(payloads)) if jobs == 1 else 1
    ctx = mp.get_context("spawn")
    main_thread = on_main_thread()  # see orphans.die_with_parent
    procs = []
    for k, payload in enumerate(payloads, start=1):
        p = ctx.Process(
            # Armed before the worker imports torch (see orphans).
            target=guarded_call,
            args=(os.getpid(), main_thread, guard(worker_main, entry, payload, threads)),
            name=f"dmlbench-worker-{k}",
        )
        p.start()
        procs.append(p)
    try:
        while any(p.is_alive() for p in procs):
            failed = [p for p in procs if p.exitcode not in (None, 0)]
            if failed:
                raise DmlbenchError(
                    f"search worker {failed[0].name} exited with code {failed[0].exitcode}; the other "
                    "workers were stopped. Re-run the same command to resume (finished trials are kept)."
                )
            on_poll()
            time.sleep(poll_s)
        failed = [p for p in procs if p.exitcode != 0]
        if failed:
            raise DmlbenchError(
                f"search worker {failed[0].name} exited with code {failed[0].exitcode}. "
                "Re-run the same command to resume (finished trials are kept)."
            )
        on_poll()
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=10)
