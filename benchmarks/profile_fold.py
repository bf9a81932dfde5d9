"""Where one fold's training time goes: forward, loss, backward, optimiser, batch preparation,
finiteness checks, validation embedding, validation metric (faiss), checkpoint copies, the rest.

Usage::

    python benchmarks/profile_fold.py [--dataset omniglot] [--data-dir /work/shared/data/omniglot]
                                      [--budget mini] [--loss mfcont] [--fold 0] [--threads 2]
                                      [--repeats 3] [--set KEY=VALUE ...] [--torch-profiler]

Trains fold ``--fold`` of the budget's MLRC configuration with the protocol's own
``train_with_loss`` (the loss's default parameters), ``--repeats`` times, with timers wrapped
around the pieces the loop calls (monkeypatched in ``benchmark.engine.train`` and hooked on the
model, loss and optimisers; nothing is re-implemented). "Python/other" is the wall time no timer
covers: the loop itself, the sampler, ``zero_grad``, tensor bookkeeping. The timers add a little
overhead of their own (a ``perf_counter`` pair per piece). Medians over the repeats are printed
as a Markdown table. ``--torch-profiler`` also prints torch.profiler's top operators for one
repeat (its own overhead is larger; read it for the operator mix, not the totals).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

import benchmark.engine.train as train_module
from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, parse_set_option, resolve_config
from benchmark.data.splits import mlrc_split
from benchmark.engine.parallel import FoldData
from benchmark.engine.train import FoldResult
from benchmark.losses import LOSSES
from benchmark.models.features import Samples
from benchmark.models.trunks import EmbeddingModel
from benchmark.protocol.run_data import AUGMENTS, cache_dir, fold_data, load_run_dataset


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["train.max_epochs=50", "model.freeze_trunk_bn=true"]`` -> a dict, each value read as
    ``dmlbench run --set`` reads it (TOML: numbers, booleans, lists; bare words are strings)."""
    return dict(parse_set_option(item) for item in items)


def mlrc_folds(dataset_name: str, data_dir: str, budget: str, sets: list[str]) -> tuple[RunConfig, FoldData]:
    """The budget's MLRC configuration of ``dataset_name`` (``--set`` items applied) and its folds."""
    user: dict[str, Any] = {"data.dataset": dataset_name}
    if dataset_name != "glyphs":
        user["data.data_dir"] = data_dir
    user.update(parse_sets(sets))
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get(budget).overrides, user)
    dataset = load_run_dataset(config, cache_dir())
    return config, fold_data(dataset, mlrc_split(dataset.classes().tolist(), config.protocol.n_folds))


def train_cpu_fold(
    config: RunConfig,
    loss_name: str,
    params: Mapping[str, float],
    train: Samples,
    val: Samples,
    seed: int,
    **options: Any,
) -> tuple[FoldResult, EmbeddingModel, nn.Module]:
    """One fold trained on the CPU by the protocol's own ``train_with_loss`` with the config's
    augmentation; ``options`` are its keyword options (``on_step``, ``time_limit_s``, ...)."""
    return train_module.train_with_loss(
        config=config,
        loss_name=loss_name,
        loss_params=params,
        train=train,
        val=val,
        augment=AUGMENTS[config.data.augment],
        seed=seed,
        device=torch.device("cpu"),
        **options,
    )


PIECES = (
    "batch prep (sample + augment)",
    "forward (model)",
    "loss forward",
    "backward",
    "gradient finiteness check",
    "optimiser step",
    "validation embedding",
    "validation metric (faiss MAP@R)",
    "checkpoint copies",
)


class Timers:
    """Accumulated seconds per piece."""

    def __init__(self) -> None:
        self.total: dict[str, float] = defaultdict(float)

    @contextmanager
    def time(self, piece: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.total[piece] += time.perf_counter() - t0

    def wrap(self, piece: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            with self.time(piece):
                return fn(*args, **kwargs)

        return wrapped


def _hook_module(module: nn.Module, timers: Timers, piece: str) -> None:
    """Time ``module``'s forward calls (the outermost call only) under ``piece``."""
    start: list[float] = []

    def pre(_m: nn.Module, _args: Any) -> None:
        start.append(time.perf_counter())

    def post(_m: nn.Module, _args: Any, _out: Any) -> None:
        timers.total[piece] += time.perf_counter() - start.pop()

    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post)


def instrument(timers: Timers) -> Callable[[], None]:
    """Patch ``benchmark.engine.train`` so that its loop reports into ``timers``; returns undo."""
    saved: dict[str, Any] = {}

    def patch(name: str, value: Any) -> None:
        saved[name] = getattr(train_module, name)
        setattr(train_module, name, value)

    patch("train_batch", timers.wrap("batch prep (sample + augment)", train_module.train_batch))
    real_epoch_batches = train_module._epoch_batches

    def epoch_batches(*args: Any, **kwargs: Any) -> Iterator[Any]:
        it = real_epoch_batches(*args, **kwargs)
        while True:
            # Sampling, indexing and augmenting one batch (augmentation is also timed alone above,
            # so the piece subtracts it to avoid double counting).
            t0 = time.perf_counter()
            before = timers.total["batch prep (sample + augment)"]
            try:
                item = next(it)
            except StopIteration:
                return
            inner = timers.total["batch prep (sample + augment)"] - before
            timers.total["batch prep (sample + augment)"] += time.perf_counter() - t0 - inner
            yield item

    patch("_epoch_batches", epoch_batches)
    patch("_grads_finite", timers.wrap("gradient finiteness check", train_module._grads_finite))
    patch("embed_samples", timers.wrap("validation embedding", train_module.embed_samples))
    patch("evaluate", timers.wrap("validation metric (faiss MAP@R)", train_module.evaluate))

    class TimedCopy:
        @staticmethod
        def deepcopy(x: Any) -> Any:
            with timers.time("checkpoint copies"):
                import copy

                return copy.deepcopy(x)

    patch("copy", TimedCopy)

    real_build_model = train_module.build_fold_model

    def build_model(*args: Any, **kwargs: Any) -> nn.Module:
        model = real_build_model(*args, **kwargs)
        # Forward in training mode only; validation embedding has its own timer (which covers its
        # forward passes too), so hooks skip eval-mode calls.
        start: list[float] = []

        def pre(m: nn.Module, _a: Any) -> None:
            start.append(time.perf_counter())

        def post(m: nn.Module, _a: Any, _o: Any) -> None:
            t = time.perf_counter() - start.pop()
            if m.training:
                timers.total["forward (model)"] += t

        model.register_forward_pre_hook(pre)
        model.register_forward_hook(post)
        return model

    patch("build_fold_model", build_model)

    real_build_loss = train_module.build_loss

    def build_loss(*args: Any, **kwargs: Any) -> nn.Module:
        loss = real_build_loss(*args, **kwargs)
        _hook_module(loss, timers, "loss forward")
        return loss

    patch("build_loss", build_loss)

    real_make_opt = train_module.make_optimizer

    def make_optimizer(*args: Any, **kwargs: Any) -> torch.optim.Optimizer:
        opt = real_make_opt(*args, **kwargs)
        start: list[float] = []
        opt.register_step_pre_hook(lambda *_: start.append(time.perf_counter()))

        def post(*_: Any) -> None:
            timers.total["optimiser step"] += time.perf_counter() - start.pop()

        opt.register_step_post_hook(post)
        return opt

    patch("make_optimizer", make_optimizer)

    real_backward: Callable[..., None] = torch.Tensor.backward  # torch leaves it unannotated

    def backward(self: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        with timers.time("backward"):
            real_backward(self, *args, **kwargs)

    torch.Tensor.backward = backward  # type: ignore[method-assign]

    def undo() -> None:
        for name, value in saved.items():
            setattr(train_module, name, value)
        torch.Tensor.backward = real_backward  # type: ignore[method-assign]

    return undo


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="omniglot")
    parser.add_argument("--data-dir", default="/work/shared/data/omniglot")
    parser.add_argument("--budget", default="mini")
    parser.add_argument("--loss", default="mfcont")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--torch-profiler", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config, data = mlrc_folds(args.dataset, args.data_dir, args.budget, args.set)
    train, val = data.folds[args.fold]
    params = {k: float(v) for k, v in LOSSES.get(args.loss).defaults.items()}
    tc = config.train
    print(
        f"{args.dataset} fold {args.fold}, loss {args.loss}, budget {args.budget}: "
        f"{len(train.labels)} train / {len(val.labels)} val images, batch {tc.batch_size}, "
        f"{tc.iters_per_epoch} iters/epoch, "
        f"max {tc.max_epochs} epochs (eval every {tc.eval_every}, patience {tc.patience}), "
        f"{args.threads} torch thread(s), torch {torch.__version__}; median of {args.repeats} repeats\n"
    )

    def run_once() -> tuple[float, dict[str, float], Any]:
        timers = Timers()
        undo = instrument(timers)
        try:
            t0 = time.perf_counter()
            result, _, _ = train_cpu_fold(config, args.loss, params, train, val, args.seed)
            wall = time.perf_counter() - t0
        finally:
            undo()
        return wall, dict(timers.total), result

    walls: list[float] = []
    pieces: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeats):
        wall, totals, result = run_once()
        walls.append(wall)
        for piece in PIECES:
            pieces[piece].append(totals.get(piece, 0.0))
        pieces["Python/other"].append(wall - sum(totals.get(p, 0.0) for p in PIECES))
    wall = statistics.median(walls)
    print(f"fold wall time: median {wall:.2f} s (min {min(walls):.2f}, max {max(walls):.2f}); "
          f"epochs {result.epochs}, stopped by {result.stopped_by}\n")  # fmt: skip
    print("| piece | median s | share of wall |")
    print("|---|---:|---:|")
    for piece in (*PIECES, "Python/other"):
        seconds = statistics.median(pieces[piece])
        print(f"| {piece} | {seconds:.3f} | {100 * seconds / wall:.1f}% |")

    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as prof:
            train_cpu_fold(config, args.loss, params, train, val, args.seed)
        print()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
