"""Fold-parallel execution: fold trainings (a trial's, a test rep's, or several pooled) in worker processes.

Why processes and not threads: the CPU default trunk is a small CNN whose convolutions do not
scale across intra-op threads (measured on the 2-core machine: one process with 2 threads trained
slower than one with 1 thread), while independent folds scale almost linearly across processes.
Each worker loads the dataset once (from the on-disk cache; in frozen-trunk mode the cached
feature file, never arrays pickled from the parent) and runs single-threaded; a fold's result
depends only on its seed, so ``--jobs`` changes wall time, not numbers.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import queue
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from benchmark.config import RunConfig
from benchmark.data.augment import AugmentSpec
from benchmark.engine.train import EpochCallback, FoldResult, StepCallback, embed_samples, train_fold
from benchmark.errors import TrainingDiverged
from benchmark.metrics.knn import set_search_threads, use_gpu_search
from benchmark.models.features import Samples
from benchmark.orphans import guard, guarded_pool


@dataclass(frozen=True)
class FoldTask:
    """One fold training: which fold, with which hyperparameters and seed, and whether to embed test.

    ``group`` is what the fold belongs to (a search trial's number, a test repetition): one
    :meth:`FoldExecutor.run` call may pool the folds of several groups, and (group, fold) names a
    task there.
    """

    fold: int
    params: dict[str, float]
    seed: int
    embed_test: bool
    group: int = 0

    @property
    def key(self) -> tuple[int, int]:
        return (self.group, self.fold)


@dataclass(frozen=True)
class FoldOutcome:
    task: FoldTask
    result: FoldResult | None
    test_embeddings: np.ndarray | None
    failure: str | None


@dataclass(frozen=True)
class FoldData:
    """What a worker needs to train any fold: the fold sets and the test set (images or features)."""

    folds: list[tuple[Samples, Samples]]
    test: Samples


@dataclass(frozen=True)
class WorkerSetup:
    config: RunConfig
    loss_name: str
    augment: AugmentSpec | None
    device: str
    threads: int


def run_fold(
    setup: WorkerSetup,
    data: FoldData,
    task: FoldTask,
    on_epoch: EpochCallback | None,
    on_step: StepCallback | None = None,
) -> FoldOutcome:
    """Train one fold (and embed the test set if asked); divergence is returned, not raised."""
    device = torch.device(setup.device)
    use_gpu_search(device.type == "cuda")  # worker processes do their own validation searches
    train, val = data.folds[task.fold]
    try:
        result, model = train_fold(
            config=setup.config,
            loss_name=setup.loss_name,
            loss_params=task.params,
            train=train,
            val=val,
            augment=setup.augment,
            seed=task.seed,
            device=device,
            on_epoch=on_epoch,
            on_step=on_step,
        )
    except TrainingDiverged as exc:
        return FoldOutcome(task, None, None, f"fold {task.fold}: {exc}")
    emb = embed_samples(model, data.test, device) if task.embed_test else None
    return FoldOutcome(task, result, emb, None)


# Worker-process globals, set once by the pool initializer.
_SETUP: WorkerSetup | None = None
_DATA: FoldData | None = None
# Queue of progress events for the parent's display: ("epoch", task key, epoch, val MAP@R, best) and
# ("step", task key, epoch, step, steps per epoch).
_EVENTS: Any = None
#: Least seconds between a worker's step events: the parent shows them as heartbeats anyway.
STEP_EVENT_S = 1.0


def _init_worker(setup: WorkerSetup, loader: Callable[[], FoldData], events: Any) -> None:
    """Pool initializer, run by :func:`~benchmark.orphans.guarded_call` once the parent is watched."""
    global _SETUP, _DATA, _EVENTS
    torch.set_num_threads(setup.threads)
    set_search_threads(setup.threads)  # validation kNN: the worker's share of the cores
    _SETUP, _DATA, _EVENTS = setup, loader(), events


def _run_in_worker(task: FoldTask) -> FoldOutcome:
    if _SETUP is None or _DATA is None:
        raise RuntimeError("fold worker used before its initializer ran")
    events = _EVENTS

    last_step = -math.inf

    def report(epoch: int, val_map: float, best: float) -> None:
        events.put(("epoch", task.key, epoch, val_map, best))

    def report_step(epoch: int, step: int, steps: int) -> None:
        nonlocal last_step
        if time.monotonic() - last_step >= STEP_EVENT_S:
            last_step = time.monotonic()
            events.put(("step", task.key, epoch, step, steps))

    return run_fold(_SETUP, _DATA, task, report, report_step)


class FoldExecutor:
    """Runs fold tasks inline (``jobs == 1``) or in a pool of ``jobs`` worker processes."""

    def __init__(self, setup: WorkerSetup, data: FoldData, loader: Callable[[], FoldData], jobs: int) -> None:
        self.setup, self.data, self.jobs = setup, data, jobs
        self._pool: ProcessPoolExecutor | None = None
        self._loader = loader

    def run(
        self,
        tasks: Sequence[FoldTask],
        on_epoch: Callable[[FoldTask], EpochCallback] | None = None,
        on_step: Callable[[FoldTask], StepCallback] | None = None,
    ) -> Iterator[FoldOutcome]:
        """Outcomes in completion order (inline: task order), with per-epoch and per-step callbacks.

        The tasks may pool several groups' folds (their keys must differ): the pool starts a task
        whenever a worker frees up, so no worker idles while one group's last fold finishes.
        """
        keys = [t.key for t in tasks]
        if len(set(keys)) != len(keys):
            raise ValueError(f"fold tasks must have distinct (group, fold) keys; got {keys}")
        if self.jobs <= 1:
            for task in tasks:
                yield run_fold(
                    self.setup,
                    self.data,
                    task,
                    on_epoch(task) if on_epoch else None,
                    on_step(task) if on_step else None,
                )
            return
        if self._pool is None:
            # A plain queue handed over at worker creation (no Manager: its server process would
            # outlive a killed parent). Workers are spawned by the thread that submits (this one).
            self._events = mp.get_context("spawn").Queue()
            self._pool = guarded_pool(self.jobs, guard(_init_worker, self.setup, self._loader), self._events)
        callbacks = {t.key: on_epoch(t) for t in tasks} if on_epoch else {}
        step_callbacks = {t.key: on_step(t) for t in tasks} if on_step else {}
        pending: set[Future[FoldOutcome]] = {self._pool.submit(_run_in_worker, t) for t in tasks}
        try:
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                self._drain(callbacks, step_callbacks)
                for fut in done:
                    yield fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    def _drain(
        self,
        callbacks: dict[tuple[int, int], EpochCallback],
        step_callbacks: dict[tuple[int, int], StepCallback],
    ) -> None:
        while True:
            try:
                kind, key, epoch, a, b = self._events.get_nowait()
            except queue.Empty:
                return
            if kind == "epoch" and key in callbacks:
                callbacks[key](epoch, a, b)
            elif kind == "step" and key in step_callbacks:
                step_callbacks[key](epoch, a, b)

    def close(self, abort: bool = False) -> None:
        """Shut the worker pool down: after its tasks (normal end) or at once (``abort``).

        Abort is for an interrupted run (Ctrl-C, an error): waiting would mean waiting for the
        fold trainings in flight, and for a task already handed to a worker (the pool queues
        one more than it has workers), which at the paper budget take hours. Their trials are
        retried when the run is resumed.
        """
        if self._pool is None:
            return
        if abort:
            # ProcessPoolExecutor has no public way to stop running tasks before Python 3.14
            # (terminate_workers); its process table is the only handle on them.
            procs = list(getattr(self._pool, "_processes", {}).values())
            for p in procs:
                p.terminate()
            self._pool.shutdown(wait=False, cancel_futures=True)
            for p in procs:
                p.join(timeout=10)
        else:
            self._pool.shutdown(wait=True, cancel_futures=True)
        self._events.close()
        self._pool = None


def describe_setup(setup: WorkerSetup, jobs: int) -> dict[str, Any]:
    return {"jobs": jobs, "threads_per_job": setup.threads, "device": setup.device}
