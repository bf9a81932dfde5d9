"""Progress between the regular updates: per-step heartbeats of slow epochs, rate-limited."""

from __future__ import annotations

import io
import queue
from typing import Any

import numpy as np
import pytest
import torch

import benchmark.protocol.progress as progress_module
from benchmark.budgets import BUDGETS
from benchmark.config import load_protocol_file, resolve_config
from benchmark.data.base import ImageDataset
from benchmark.protocol.parallel import FoldData, FoldExecutor, WorkerSetup
from benchmark.protocol.progress import Progress
from benchmark.protocol.train import train_with_loss


def test_heartbeat_waits_for_a_quiet_spell(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()  # not a terminal: every shown status is a line of its own
    p = Progress(10, stream=stream)
    p.heartbeat("first")  # nothing shown yet: shown
    p.status("epoch 2 val MAP@R 0.5")
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


def _recorder(seen: list[tuple[Any, ...]], kind: str, fold: int) -> Any:
    return lambda *args: seen.append((kind, fold, *args))


def test_worker_events_reach_the_matching_callback() -> None:
    # The pool's event queue carries both kinds; each goes to its fold's callback of that kind.
    config = resolve_config(load_protocol_file("mlrc"), {}, {})[0]
    setup = WorkerSetup(config=config, loss_name="ms", augment=None, device="cpu", threads=1)
    empty = FoldData([], ImageDataset("none", torch.zeros(0, 1, 2, 2, dtype=torch.uint8), np.zeros(0)))
    executor = FoldExecutor(setup, empty, lambda: empty, jobs=2)
    events: Any = queue.Queue()
    sent = [
        ("step", 0, 1, 7, 100),
        ("epoch", 1, 2, 0.5, 0.6),
        ("step", 3, 1, 1, 100),
        ("epoch", 0, 2, 0.4, 0.4),
    ]
    for e in sent:
        events.put(e)
    executor._events = events
    seen: list[tuple[Any, ...]] = []
    epoch_cbs = {f: _recorder(seen, "epoch", f) for f in (0, 1)}
    step_cbs = {f: _recorder(seen, "step", f) for f in (0, 1)}
    executor._drain(epoch_cbs, step_cbs)
    assert seen == [sent[0], sent[1], sent[3]]  # fold 3 has no callback here
    assert events.empty()
