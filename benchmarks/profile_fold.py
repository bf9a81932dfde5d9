"""Where one fold's training time goes: forward, loss, backward, optimiser, batch preparation
(sampling and augmentation), finiteness checks, validation embedding, validation kNN and metric
(faiss MAP@R), checkpoint copies, the rest; and the training step's achieved FLOP rate against the
CPU's peak and a large ``torch.mm``.

Usage::

    python benchmarks/profile_fold.py [--dataset omniglot] [--data-dir /work/shared/data/omniglot]
                                      [--budget mini] [--loss mfcont] [--fold 0] [--threads 1]
                                      [--repeats 3] [--prefetch default|0] [--set KEY=VALUE ...]
                                      [--mm-size 2048] [--fma-units N]
                                      [--vector-bits N] [--clock-ghz F] [--torch-profiler]

Trains fold ``--fold`` of the budget's MLRC configuration with the protocol's own
``train_with_loss`` (the loss's default parameters), ``--repeats`` times, with timers wrapped
around the pieces the loop calls (monkeypatched in ``benchmark.engine.train`` and hooked on the
model, loss and optimisers; nothing is re-implemented). With prefetching (``--prefetch default``:
the loop's own choice, on with one torch thread), batch preparation runs in a background thread:
its time overlaps the step and is shown apart, and the time the loop waited for a batch is the
piece on the critical path. "Python/other" is the wall time no critical-path timer covers: the
loop itself, ``zero_grad``, tensor bookkeeping. The timers add a little overhead of their own (a
``perf_counter`` pair per piece). An untimed one-epoch fold runs first, so that one-time costs of
the process (imports, thread pools) are not counted. Medians over the repeats are printed as a
Markdown table.

**FLOP rate.** The FLOPs of one training step's forward and backward are counted with
``torch.utils.flop_counter.FlopCounterMode`` on one batch of the fold (it counts convolutions and
matrix products, 2 per multiply-add; elementwise work such as BatchNorm, ReLU, pooling and the
optimiser is not counted, so the rate is a lower bound of the work done). The achieved rate is that
count times the steps trained over (i) the training loop's time (wall minus validation and
checkpoint copies) and (ii) the forward + loss + backward time alone. It is compared with

* the theoretical peak of the cores used: threads x FMA units x float32 lanes x 2 flops x clock;
  the lanes come from the vector width (``--vector-bits``, default 512 with avx512f in
  /proc/cpuinfo, else 256), the FMA units (``--fma-units``, default 2: two FMA pipes per core on
  AMD Zen and on Intel cores since Haswell; AMD Zen 4 runs 512-bit FMAs on its two 256-bit pipes,
  so on AMD the default width is 256) and the clock (``--clock-ghz``, default lscpu's "CPU max
  MHz", else /proc/cpuinfo's "cpu MHz", which in a VM is often the nominal clock, not the boost);
  the printed line states the values used;
* a ``torch.mm`` of two ``--mm-size`` square float32 matrices on the same thread count (median of
  5 after a warm-up): the practical ceiling of a dense kernel on this host.

``--torch-profiler`` also profiles one more fold with prefetching off and prints torch.profiler's
top operators and the share of wall time spent outside any torch operator (wall minus the
operators' summed self CPU time; its own overhead is larger, so read it for the operator mix and
that share, not the totals).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

import benchmark.engine.train as train_module
from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, parse_set_option, resolve_config
from benchmark.data.sampler import MPerClassSampler
from benchmark.data.splits import mlrc_split
from benchmark.engine.parallel import FoldData
from benchmark.engine.train import FoldResult
from benchmark.losses import LOSSES, LossContext
from benchmark.models.features import Samples
from benchmark.models.trunks import EmbeddingModel, set_train_mode
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


BATCH_PREP = "batch prep (sample + augment)"
WAIT = "waiting for a prefetched batch"
SETUP = "set-up (model built, weights loaded)"
PIECES = (
    BATCH_PREP,
    "forward (model)",
    "loss forward",
    "backward",
    "gradient finiteness check",
    "optimiser step",
    "validation embedding",
    "validation kNN + metric (faiss MAP@R)",
    "checkpoint copies",
    SETUP,
)
#: Pieces outside the training loop proper (the FLOP rate's training time excludes them).
NOT_TRAINING = ("validation embedding", "validation kNN + metric (faiss MAP@R)", "checkpoint copies", SETUP)


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
    patch("evaluate", timers.wrap("validation kNN + metric (faiss MAP@R)", train_module.evaluate))

    real_prefetcher = train_module.Prefetcher  # type: ignore[attr-defined]

    class TimedPrefetcher(real_prefetcher):  # type: ignore[misc,valid-type]
        """Times how long the loop waits for each batch when a background thread prepares them."""

        def __next__(self) -> Any:
            if self.depth == 0:  # synchronous: batch prep is timed on its own, on the critical path
                return super().__next__()
            with timers.time(WAIT):
                return super().__next__()

    patch("Prefetcher", TimedPrefetcher)

    class TimedCopy:
        @staticmethod
        def deepcopy(x: Any) -> Any:
            with timers.time("checkpoint copies"):
                import copy

                return copy.deepcopy(x)

    patch("copy", TimedCopy)

    real_build_model = train_module.build_fold_model

    def build_model(*args: Any, **kwargs: Any) -> nn.Module:
        with timers.time(SETUP):
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


def training_flops_per_image(
    config: RunConfig, loss_name: str, params: Mapping[str, float], train: Samples, seed: int
) -> float:
    """FLOPs of one training step's forward, loss and backward per image, as FlopCounterMode
    counts them (convolutions and matrix products), on one m-per-class batch of ``train``."""
    from torch.utils.flop_counter import FlopCounterMode

    cpu = torch.device("cpu")
    spec = LOSSES.get(loss_name)
    batch_size = config.train.batch_size
    model = train_module.place_model(train_module.build_fold_model(config, train, seed), cpu)
    set_train_mode(model, config.model.freeze_trunk_bn)
    labels = train_module.remap_labels(train.labels)
    loss_fn = train_module.build_loss(
        loss_name, LossContext(int(labels.max()) + 1, config.model.embedding_dim), params
    )
    sampler = MPerClassSampler(labels, spec.m_per_class, batch_size, np.random.default_rng(seed))
    idx = torch.from_numpy(next(iter(sampler.sample(1))))
    gen = torch.Generator().manual_seed(seed)
    x = train_module._batch_input(train, idx, AUGMENTS[config.data.augment], gen)
    y = torch.from_numpy(labels)[idx]
    with FlopCounterMode(display=False) as counter:
        loss_fn(model(x), y).backward()
    return float(counter.get_total_flops()) / len(idx)


def mm_gflops(size: int, repeats: int = 5) -> float:
    """GFLOP/s of a float32 ``torch.mm`` of two ``size`` x ``size`` matrices (median of ``repeats``
    after one warm-up) on the current torch thread count."""
    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.mm(a, b)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - t0)
    return 2 * size**3 / statistics.median(times) / 1e9


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    out: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return out
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = value.strip()
    return out


def _lscpu_max_mhz() -> float | None:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in text.splitlines():
        if line.startswith("CPU max MHz:"):
            return float(line.split(":", 1)[1])
    return None


def peak_gflops(
    threads: int, fma_units: int | None, vector_bits: int | None, clock_ghz: float | None
) -> tuple[float, str]:
    """The theoretical float32 peak of ``threads`` cores and a line stating how it was derived."""
    info = _cpuinfo()
    flags = set(info.get("flags", "").split())
    model = info.get("model name", "unknown CPU")
    amd = "AMD" in model or info.get("vendor_id") == "AuthenticAMD"
    if vector_bits is None:
        # AMD's AVX-512 (Zen 4) issues 512-bit FMAs on its two 256-bit pipes: 256 bits per pipe.
        vector_bits = 512 if "avx512f" in flags and not amd else 256
    if fma_units is None:
        fma_units = 2
    clock_source = "--clock-ghz"
    if clock_ghz is None:
        max_mhz = _lscpu_max_mhz()
        if max_mhz:
            clock_ghz, clock_source = max_mhz / 1000, "lscpu CPU max MHz"
        else:
            clock_ghz, clock_source = float(info.get("cpu MHz", "0")) / 1000, "/proc/cpuinfo cpu MHz"
    lanes = vector_bits // 32
    peak = threads * fma_units * lanes * 2 * clock_ghz
    how = (
        f"{model}; flags fma {'fma' in flags}, avx512f {'avx512f' in flags}: "
        f"{threads} core(s) x {fma_units} FMA units x {lanes} float32 lanes ({vector_bits}-bit) x 2 flops x "
        f"{clock_ghz:.2f} GHz ({clock_source}) = {peak:.1f} GFLOP/s"
    )
    return peak, how


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="omniglot")
    parser.add_argument("--data-dir", default="/work/shared/data/omniglot")
    parser.add_argument("--budget", default="mini")
    parser.add_argument("--loss", default="mfcont")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prefetch",
        choices=["default", "0"],
        default="default",
        help="default: the loop's own choice; 0: batches prepared in the loop's thread",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--mm-size", type=int, default=2048, help="side of the torch.mm ceiling's matrices")
    parser.add_argument("--fma-units", type=int, default=None, help="FMA units per core (default 2)")
    parser.add_argument(
        "--vector-bits", type=int, default=None, help="FMA width in bits (default: see above)"
    )
    parser.add_argument("--clock-ghz", type=float, default=None, help="clock for the peak (default: lscpu)")
    parser.add_argument("--torch-profiler", action="store_true")
    args = parser.parse_args()
    prefetch_depth = None if args.prefetch == "default" else 0
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

    cpu = torch.device("cpu")
    depth = train_module.default_prefetch_depth(train, cpu) if prefetch_depth is None else prefetch_depth
    prefetching = depth > 0

    def run_once() -> tuple[float, dict[str, float], Any]:
        timers = Timers()
        undo = instrument(timers)
        try:
            t0 = time.perf_counter()
            result, _, _ = train_cpu_fold(
                config, args.loss, params, train, val, args.seed, prefetch_depth=prefetch_depth
            )
            wall = time.perf_counter() - t0
        finally:
            undo()
        return wall, dict(timers.total), result

    # With prefetching, batch preparation runs beside the step: the loop's wait for a batch is
    # on the critical path instead.
    critical = [p for p in PIECES if not (prefetching and p == BATCH_PREP)] + ([WAIT] if prefetching else [])
    # Untimed warm-up epoch: a process's first fold pays one-time costs that are not the fold's
    # (torch imports its compiler stack when the first optimiser is built, about 3 s; kernel and
    # faiss thread-pool start-up).
    warm = dataclasses.replace(tc, max_epochs=1, eval_every=1)
    train_cpu_fold(dataclasses.replace(config, train=warm), args.loss, params, train, val, args.seed)
    walls: list[float] = []
    pieces: dict[str, list[float]] = defaultdict(list)
    for _ in range(args.repeats):
        wall, totals, result = run_once()
        walls.append(wall)
        for piece in (*PIECES, WAIT):
            pieces[piece].append(totals.get(piece, 0.0))
        pieces["Python/other"].append(wall - sum(totals.get(p, 0.0) for p in critical))
        pieces["training loop"].append(wall - sum(totals.get(p, 0.0) for p in NOT_TRAINING))
        pieces["forward + loss + backward"].append(
            sum(totals.get(p, 0.0) for p in ("forward (model)", "loss forward", "backward"))
        )
    wall = statistics.median(walls)
    steps = result.epochs * train_module.iterations_per_epoch(
        tc.iters_per_epoch, len(train.labels), tc.batch_size
    )
    print(f"fold wall time: median {wall:.2f} s (min {min(walls):.2f}, max {max(walls):.2f}); "
          f"epochs {result.epochs} ({steps} training steps), stopped by {result.stopped_by}; "
          f"batch prefetch depth {depth}; torch CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}\n")  # fmt: skip
    print("| piece | median s | share of wall |")
    print("|---|---:|---:|")
    for piece in (*critical, "Python/other"):
        seconds = statistics.median(pieces[piece])
        print(f"| {piece} | {seconds:.3f} | {100 * seconds / wall:.1f}% |")
    if prefetching:
        seconds = statistics.median(pieces[BATCH_PREP])
        print(f"| {BATCH_PREP}, overlapped (prefetch thread; not in the sum) | {seconds:.3f} "
              f"| {100 * seconds / wall:.1f}% |")  # fmt: skip

    flops_image = training_flops_per_image(config, args.loss, params, train, args.seed)
    flops_total = flops_image * tc.batch_size * steps
    loop_s = statistics.median(pieces["training loop"])
    fb_s = statistics.median(pieces["forward + loss + backward"])
    mm = mm_gflops(args.mm_size)
    peak, how = peak_gflops(args.threads, args.fma_units, args.vector_bits, args.clock_ghz)
    print(f"\nFLOP rate of the training step ({args.threads} torch thread(s)); peak: {how}\n")
    print("| quantity | value | of torch.mm | of peak |")
    print("|---|---:|---:|---:|")
    print(f"| FLOPs per training image (forward + backward, FlopCounterMode) | {flops_image / 1e6:.2f} "
          "MFLOP | | |")  # fmt: skip
    for label, seconds in (
        ("achieved over the training loop (wall - validation - checkpoints)", loop_s),
        ("achieved over forward + loss + backward alone", fb_s),
    ):
        rate = flops_total / seconds / 1e9 if seconds > 0 else float("nan")
        print(f"| {label} | {rate:.1f} GFLOP/s | {100 * rate / mm:.0f}% | {100 * rate / peak:.0f}% |")
    print(f"| torch.mm {args.mm_size}x{args.mm_size} float32 (practical ceiling) | {mm:.1f} GFLOP/s | 100% "
          f"| {100 * mm / peak:.0f}% |")  # fmt: skip
    print(f"| theoretical peak | {peak:.1f} GFLOP/s | | 100% |")

    if args.torch_profiler:
        from torch.profiler import ProfilerActivity, profile

        # Prefetching off: one thread's operators, so their self times add up to time in operators.
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            train_cpu_fold(config, args.loss, params, train, val, args.seed, prefetch_depth=0)
            profiled_wall = time.perf_counter() - t0
        averages = prof.key_averages()
        in_ops = sum(event.self_cpu_time_total for event in averages) / 1e6
        print(
            f"\ntorch.profiler, one more fold with prefetching off: wall {profiled_wall:.2f} s, "
            f"{in_ops:.2f} s in torch operators, {100 * (1 - in_ops / profiled_wall):.1f}% of wall "
            "outside any operator (Python, the loop, faiss's search)\n"
        )
        print(averages.table(sort_by="self_cpu_time_total", row_limit=25))


if __name__ == "__main__":
    main()
