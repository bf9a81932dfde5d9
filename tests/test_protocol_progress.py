"""Progress between the regular updates: per-step heartbeats of slow epochs, rate-limited."""

from __future__ import annotations

import io
import os
import queue
import time
from typing import Any

import numpy as np
import pytest
import torch

import benchmark.engine.device as device_module
import benchmark.protocol.progress as progress_module
from benchmark.budgets import BUDGETS
from benchmark.config import load_protocol_file, resolve_config
from benchmark.data.base import ImageDataset
from benchmark.engine.parallel import FoldData, FoldExecutor, FoldTask, WorkerSetup
from benchmark.engine.train import train_with_loss
from benchmark.protocol.progress import Progress


def test_a_log_gets_milestones_and_a_heartbeat_not_every_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a terminal: epoch lines are dropped between milestones, unless a heartbeat is due."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])  # the clock Progress reads
    stream = io.StringIO()
    p = Progress(10, stream=stream)
    p.status("search trial 1/10: fold 1/4 done", milestone=True)
    for epoch in range(1, 30):
        p.status(f"search trial 1/10 fold 2/4 epoch {epoch}")
        clock[0] += 1.0
    clock[0] += progress_module.HEARTBEAT_LOG_S
    p.status("search trial 1/10 fold 2/4 epoch 31")  # a minute of silence: shown as a heartbeat
    p.status("search trial 1/10 done", persistent=True)
    assert [line.split(" | ")[0] for line in stream.getvalue().splitlines()] == [
        "search trial 1/10: fold 1/4 done",
        "search trial 1/10 fold 2/4 epoch 31",
        "search trial 1/10 done",
    ]


def test_heartbeat_waits_for_a_quiet_spell(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()  # not a terminal: every shown status is a line of its own
    p = Progress(10, stream=stream)
    p.heartbeat("first")  # nothing shown yet: shown
    p.status("epoch 2 val MAP@R 0.5", milestone=True)
    p.heartbeat("step 3/100")  # right after a status: suppressed
    p.message("a stage header")
    p.heartbeat("step 4/100")  # right after a message: suppressed
    assert [line.split(" | ")[0] for line in stream.getvalue().splitlines()] == [
        "first",
        "epoch 2 val MAP@R 0.5",
        "a stage header",
    ]
    monkeypatch.setattr(progress_module, "HEARTBEAT_LOG_S", 0.0)
    p.heartbeat("step 5/100")
    assert stream.getvalue().splitlines()[-1].startswith("step 5/100 | ETA")


def test_quiet_progress_shows_no_heartbeat() -> None:
    stream = io.StringIO()
    Progress(1, stream=stream, quiet=True).heartbeat("step 1/2")
    assert stream.getvalue() == ""


def test_training_reports_every_step() -> None:
    user = {"train.batch_size": 16, "train.iters_per_epoch": 5, "train.max_epochs": 3, "train.patience": 100}
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("smoke").overrides, user)
    rng = np.random.default_rng(0)
    images = torch.from_numpy(rng.integers(0, 256, (72, 1, 28, 28), dtype=np.uint8))
    data = ImageDataset("toy", images, np.repeat(np.arange(12, dtype=np.int64), 6))
    classes = data.classes().tolist()
    steps: list[tuple[int, int, int]] = []
    train_with_loss(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=data.subset(classes[:8]),
        val=data.subset(classes[8:]),
        augment=None,
        seed=0,
        device=torch.device("cpu"),
        on_step=lambda epoch, step, n: steps.append((epoch, step, n)),
    )
    assert steps == [(e, s, 5) for e in (1, 2, 3) for s in range(1, 6)]


def _recorder(seen: list[tuple[Any, ...]], kind: str, key: tuple[int, int]) -> Any:
    return lambda *args: seen.append((kind, key, *args))


def test_worker_events_reach_the_matching_callback() -> None:
    # The pool's event queue carries both kinds; each goes to its task's callback of that kind. A
    # pooled run holds the same fold of several groups (trials, reps): the key tells them apart.
    config = resolve_config(load_protocol_file("mlrc"), {}, {})[0]
    setup = WorkerSetup(config=config, loss_name="ms", augment=None, device="cpu", threads=1)
    empty = FoldData([], ImageDataset("none", torch.zeros(0, 1, 2, 2, dtype=torch.uint8), np.zeros(0)))
    executor = FoldExecutor(setup, empty, lambda: empty, jobs=2)
    events: Any = queue.Queue()
    sent = [
        ("step", (0, 0), 1, 7, 100),
        ("epoch", (0, 1), 2, 0.5, 0.6),
        ("step", (0, 3), 1, 1, 100),
        ("epoch", (1, 0), 2, 0.4, 0.4),
        ("epoch", (2, 1), 3, 0.3, 0.3),
    ]
    for e in sent:
        events.put(e)
    executor._events = events
    seen: list[tuple[Any, ...]] = []
    keys = [(0, 0), (0, 1), (1, 0)]
    epoch_cbs = {k: _recorder(seen, "epoch", k) for k in keys}
    step_cbs = {k: _recorder(seen, "step", k) for k in keys}
    executor._drain(epoch_cbs, step_cbs)
    # (0, 3) and (2, 1) have no callback here; (1, 0) is not (0, 0) though both are fold 0.
    assert seen == [sent[0], sent[1], sent[3]]
    assert events.empty()


def test_pooled_tasks_need_distinct_keys() -> None:
    config = resolve_config(load_protocol_file("mlrc"), {}, {})[0]
    setup = WorkerSetup(config=config, loss_name="ms", augment=None, device="cpu", threads=1)
    empty = FoldData([], ImageDataset("none", torch.zeros(0, 1, 2, 2, dtype=torch.uint8), np.zeros(0)))
    executor = FoldExecutor(setup, empty, lambda: empty, jobs=2)
    tasks = [FoldTask(0, {}, 1, False, group=3), FoldTask(0, {}, 2, False, group=3)]
    with pytest.raises(ValueError, match=r"distinct \(group, fold\) keys; got \[\(3, 0\), \(3, 0\)\]"):
        next(iter(executor.run(tasks)))


@pytest.mark.parametrize(
    ("cores", "device", "jobs"), [(1, "cpu", 1), (2, "cpu", 2), (3, "cpu", 3), (16, "cpu", 4), (2, "cuda", 1)]
)
def test_default_jobs_one_fold_process_per_core(
    cores: int, device: str, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One fold process per core (two per core time-sliced measured slower with the folds pooled),
    # never more than a trial's 4 folds; one process drives a GPU.
    monkeypatch.setattr(os, "cpu_count", lambda: cores)  # the os module device_module asks
    assert device_module.default_jobs(torch.device(device)) == jobs
