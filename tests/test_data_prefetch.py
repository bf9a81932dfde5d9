"""The background batch prefetcher: order, equality with the synchronous loop, error propagation,
clean shutdown when the consumer stops early, actual look-ahead, and bit-identical training.

No test asserts a wall time: overlap is checked through what the producer did while the consumer
was still busy with an earlier item, and every wait is bounded so a bug fails instead of hanging.
"""

from __future__ import annotations

import gc
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from test_divergence import NaNLoss
from test_standard_run import make_cub_tree
from torch import nn

import benchmark.engine.train as train_module
from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, resolve_config
from benchmark.data.augment import CHARACTER_AUGMENT, PAPER_AUGMENT, AugmentSpec, train_batch
from benchmark.data.base import ImageDataset
from benchmark.data.prefetch import Prefetcher
from benchmark.data.registry import DatasetOptions, load_dataset
from benchmark.engine.train import PREFETCH_DEPTH, default_prefetch_depth, train_with_loss
from benchmark.errors import TrainingDiverged
from benchmark.losses import build_loss
from benchmark.models.features import Samples

CPU = torch.device("cpu")
JOIN_S = 10.0  # generous bound for a thread to stop; a healthy one stops in milliseconds


def _stopped(thread: threading.Thread | None) -> bool:
    assert thread is not None
    thread.join(JOIN_S)
    return not thread.is_alive()


def _wait_until(condition: Any, timeout: float = JOIN_S) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


# ------------------------------------------------------------------------------------------------
# The generic prefetcher
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [0, 1, 2, 7])
def test_items_come_in_order(depth: int) -> None:
    with Prefetcher(iter(range(200)), depth) as items:
        assert list(items) == list(range(200))
    assert list(Prefetcher([], depth)) == []


def _augmented_batches(seed: int, n: int) -> Iterator[tuple[np.ndarray, torch.Tensor]]:
    """Sampler-like numpy draws and augmentation from a torch.Generator, as in the training loop."""
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    images = torch.from_numpy(np.random.default_rng(99).integers(0, 256, (40, 3, 24, 24), dtype=np.uint8))
    for _ in range(n):
        idx = rng.choice(40, size=8, replace=False)
        yield idx, train_batch(images[torch.from_numpy(idx)], PAPER_AUGMENT, gen)


def test_batches_equal_the_synchronous_sequence() -> None:
    expected = list(_augmented_batches(3, 25))
    torch.manual_seed(0)
    global_state = torch.get_rng_state()
    with Prefetcher(_augmented_batches(3, 25), depth=2) as batches:
        got = list(batches)
    assert len(got) == len(expected)
    for (idx, x), (idx_ref, x_ref) in zip(got, expected, strict=True):
        np.testing.assert_array_equal(idx, idx_ref)
        assert torch.equal(x, x_ref)
    # The producer drew from its own generators only, never from torch's global RNG.
    assert torch.equal(torch.get_rng_state(), global_state)


def test_producer_exception_is_raised_at_its_position_with_its_traceback() -> None:
    def failing_source() -> Iterator[int]:
        yield from range(3)
        raise ValueError("batch 3 is broken")

    got: list[int] = []
    prefetcher = Prefetcher(failing_source(), depth=2)
    with pytest.raises(ValueError, match="batch 3 is broken") as info, prefetcher:
        for item in prefetcher:
            got.append(item)
    assert got == [0, 1, 2]
    # The traceback still reaches into the source where it raised, not only the consumer's frame.
    frames = [frame.name for frame in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1] == "failing_source"
    assert _stopped(prefetcher.thread)
    with pytest.raises(StopIteration):
        next(prefetcher)  # a failed prefetcher stays finished


def _endless(state: dict[str, Any]) -> Iterator[int]:
    k = 0
    try:
        while True:
            state["started"] = k + 1
            yield k
            k += 1
    finally:
        state["closed_in"] = threading.current_thread()


def test_early_break_stops_the_thread_and_closes_the_source() -> None:
    state: dict[str, Any] = {}
    before = threading.active_count()
    with Prefetcher(_endless(state), depth=2) as items:
        thread = items.thread
        for item in items:
            if item == 3:
                break
    assert _stopped(thread)
    assert threading.active_count() == before
    # The generator's clean-up ran, in the thread that ran the generator.
    assert state["closed_in"] is thread
    # It stopped within its look-ahead, not after running on.
    assert state["started"] <= 4 + 2


@pytest.mark.parametrize("error", [TrainingDiverged("loss became nan"), KeyboardInterrupt()])
def test_consumer_exception_stops_the_thread(error: BaseException) -> None:
    state: dict[str, Any] = {}
    with pytest.raises(type(error)), Prefetcher(_endless(state), depth=2) as items:
        thread = items.thread
        for item in items:
            if item == 5:
                raise error
    assert _stopped(thread)
    assert "closed_in" in state


def test_close_without_a_context_manager_is_idempotent() -> None:
    items = Prefetcher(_endless({}), depth=3)
    assert [next(items) for _ in range(4)] == [0, 1, 2, 3]
    items.close()
    items.close()
    assert _stopped(items.thread)
    with pytest.raises(StopIteration):
        next(items)


def test_an_abandoned_prefetcher_stops_its_thread() -> None:
    items = Prefetcher(_endless({}), depth=2)
    next(items)
    thread = items.thread
    del items
    gc.collect()
    assert _stopped(thread)


def test_a_blocked_producer_wakes_up_on_close() -> None:
    # The producer filled its look-ahead and waits for a permit; close() must not wait for a
    # consumer that will never come.
    state: dict[str, Any] = {}
    items = Prefetcher(_endless(state), depth=2)
    assert _wait_until(lambda: state.get("started", 0) >= 2)
    items.close()
    assert _stopped(items.thread)


def test_negative_depth_is_rejected() -> None:
    with pytest.raises(ValueError, match="depth"):
        Prefetcher(range(3), depth=-1)


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_producer_runs_ahead_by_depth_and_no_further(depth: int) -> None:
    consumed = [0]
    ahead: list[int] = []  # for each item, how many items ahead of the consumer it was started
    started = [0]

    def source() -> Iterator[int]:
        for k in range(30):
            ahead.append(k - consumed[0])
            started[0] = k + 1
            time.sleep(0.001)  # some "work" per item
            yield k

    with Prefetcher(source(), depth) as items:
        first = next(items)
        consumed[0] += 1
        # While the consumer still holds item 0 (it is "training"), the producer prepares the
        # next `depth` items on its own: overlap, observed without timing anything.
        assert _wait_until(lambda: started[0] == 1 + depth), (started[0], depth)
        rest = []
        for item in items:
            rest.append(item)
            consumed[0] += 1
            time.sleep(0.001)
    assert [first, *rest] == list(range(30))
    assert max(ahead) <= depth


def test_synchronous_mode_prepares_nothing_ahead() -> None:
    started = [0]

    def source() -> Iterator[int]:
        for k in range(5):
            started[0] = k + 1
            yield k

    with Prefetcher(source(), depth=0) as items:
        assert items.thread is None
        assert next(items) == 0
        time.sleep(0.05)
        assert started[0] == 1
        assert list(items) == [1, 2, 3, 4]


# ------------------------------------------------------------------------------------------------
# In the training loop
# ------------------------------------------------------------------------------------------------


def _config(**overrides: Any) -> RunConfig:
    user = {"train.batch_size": 16, "train.iters_per_epoch": 6, "train.max_epochs": 3, **overrides}
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("smoke").overrides, user)
    return config


def _toy(n_classes: int = 12, per_class: int = 6, size: int = 28) -> ImageDataset:
    rng = np.random.default_rng(1)
    images = torch.from_numpy(rng.integers(0, 256, (n_classes * per_class, 1, size, size), dtype=np.uint8))
    return ImageDataset("toy", images, np.repeat(np.arange(n_classes, dtype=np.int64), per_class))


def _train(
    config: RunConfig,
    data: Samples,
    augment: AugmentSpec | None,
    depth: int,
    loss: str = "contrastive",
    sampling: str = "m_per_class",
) -> tuple[dict[str, object], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    classes = data.classes()
    train, val = data.subset(classes[:8].tolist()), data.subset(classes[8:].tolist())
    result, model, loss_fn = train_with_loss(
        config=config,
        loss_name=loss,
        loss_params={},
        train=train,
        val=val,
        augment=augment,
        seed=11,
        device=CPU,
        optimizer="rmsprop" if sampling == "m_per_class" else "adam",
        sampling=sampling,
        prefetch_depth=depth,
    )
    summary = result.to_dict()
    summary.pop("wall_s")
    return summary, model.state_dict(), loss_fn.state_dict()


def _assert_identical(a: Any, b: Any) -> None:
    assert a[0] == b[0]
    for mine, theirs in ((a[1], b[1]), (a[2], b[2])):
        assert mine.keys() == theirs.keys()
        for key in mine:
            assert torch.equal(mine[key], theirs[key]), key


def _no_batch_threads() -> bool:
    return _wait_until(lambda: not any(t.name == "dmlbench-batches" for t in threading.enumerate()))


@pytest.mark.parametrize(
    ("loss", "sampling", "augment"),
    [("contrastive", "m_per_class", CHARACTER_AUGMENT), ("proxyanchor", "pass", None)],
)
def test_training_is_bit_identical_with_and_without_prefetch(
    loss: str, sampling: str, augment: AugmentSpec | None
) -> None:
    config = _config()
    data = _toy()
    synchronous = _train(config, data, augment, depth=0, loss=loss, sampling=sampling)
    prefetched = _train(config, data, augment, depth=2, loss=loss, sampling=sampling)
    _assert_identical(prefetched, synchronous)
    assert _no_batch_threads()


def test_lazy_on_disk_training_is_bit_identical_with_and_without_prefetch(tmp_path: Path) -> None:
    cub = make_cub_tree(tmp_path / "data", n_classes=12, per_class=4)
    data = load_dataset("cub200", DatasetOptions(cub, 32, tmp_path / "cache"))
    config = _config(**{"data.image_size": 32, "data.augment": "paper"})
    synchronous = _train(config, data, PAPER_AUGMENT, depth=0)
    prefetched = _train(config, data, PAPER_AUGMENT, depth=2)
    _assert_identical(prefetched, synchronous)
    assert _no_batch_threads()


def test_default_depth_is_synchronous_only_for_in_memory_data_on_a_multithreaded_cpu(tmp_path: Path) -> None:
    cub = make_cub_tree(tmp_path / "data", n_classes=2, per_class=2)
    lazy = load_dataset("cub200", DatasetOptions(cub, 16, tmp_path / "cache"))
    memory = _toy()
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            assert default_prefetch_depth(lazy, CPU) == PREFETCH_DEPTH > 0
            assert default_prefetch_depth(memory, torch.device("cuda")) == PREFETCH_DEPTH
        torch.set_num_threads(1)
        assert default_prefetch_depth(memory, CPU) == PREFETCH_DEPTH
        # Several torch threads: the producer would only compete with the step for the same cores.
        torch.set_num_threads(2)
        assert default_prefetch_depth(memory, CPU) == 0
    finally:
        torch.set_num_threads(threads)


def test_divergence_leaves_no_prefetch_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    def build(name: str, ctx: Any, params: Mapping[str, float]) -> nn.Module:
        return NaNLoss(build_loss(name, ctx, params))

    monkeypatch.setattr(train_module, "build_loss", build)
    with pytest.raises(TrainingDiverged, match="loss became nan"):
        _train(_config(), _toy(), CHARACTER_AUGMENT, depth=2)
    assert _no_batch_threads()
