"""Seconds per fold epoch of a budget's MLRC fold when P processes train at once on one device.

Usage::

    python benchmarks/fold_epoch_speed.py [--dataset omniglot] [--data-dir ../shared/data/omniglot]
        [--budget mini] [--loss contrastive] [--device cpu|cuda] [--epochs 4] [--procs 1,4,16]
        [--set KEY=VALUE ...]

For each P of ``--procs``, P spawned processes each train one fold (fold ``i mod n_folds`` for
process ``i``) of the budget's MLRC configuration with the protocol's own ``train_with_loss``, the
loss's default parameters and one torch thread: first one untimed epoch (imports, CUDA context,
thread pools), then, released together by a barrier, ``--epochs`` epochs with the stop disabled
(patience set beyond ``--epochs``, so every process trains the same number of epochs, validation
included at the budget's interval). Printed per P: the median, least and greatest seconds per fold
epoch over the processes, and the aggregate fold epochs per second (P over the median).

What it is for: planning where a board's runs go. A fold-parallel run (``--jobs``) or several runs
at once share one device; the aggregate says how many fold epochs per second that device gives, the
per-process figure how long one run's critical path (its folds in sequence) takes. On a GPU the
``mini`` model is tiny, so a step is bound by kernel launches and the host, not by the GPU's
arithmetic; running many processes at once is how the device fills (start the CUDA MPS daemon,
``nvidia-cuda-mps-control -d``, so their kernels can share it). The numbers are wall times of the
machine it ran on: report the device, the CPU capability and the load with them.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))


#: Keys the script sets itself (``--epochs``; the stop is disabled), so ``--set`` may not.
FIXED_KEYS = ("train.max_epochs", "train.patience")


@dataclasses.dataclass(frozen=True)
class Job:
    dataset: str
    data_dir: str
    budget: str
    sets: tuple[str, ...]
    loss: str
    device: str
    epochs: int
    process: int


def train_epochs(job: Job, barrier: Any, results: Any) -> None:
    """One process: an untimed warm-up epoch, the barrier, then ``job.epochs`` timed epochs."""
    import torch
    from profile_fold import mlrc_folds

    from benchmark.engine import train as train_module
    from benchmark.losses import LOSSES
    from benchmark.protocol.run_data import AUGMENTS

    torch.set_num_threads(1)
    config, data = mlrc_folds(job.dataset, job.data_dir, job.budget, list(job.sets))
    train, val = data.folds[job.process % len(data.folds)]
    params = {k: float(v) for k, v in LOSSES.get(job.loss).defaults.items()}
    device = torch.device(job.device)

    def seconds(epochs: int) -> float:
        # Patience beyond the epoch count: the stop rule never ends a timed fold early.
        schedule = dataclasses.replace(config.train, max_epochs=epochs, patience=epochs + 1)
        t0 = time.perf_counter()
        train_module.train_with_loss(
            config=dataclasses.replace(config, train=schedule),
            loss_name=job.loss,
            loss_params=params,
            train=train,
            val=val,
            augment=AUGMENTS[config.data.augment],
            seed=0,
            device=device,
        )
        return time.perf_counter() - t0

    seconds(1)
    barrier.wait()
    results.put(seconds(job.epochs) / job.epochs)


def measure(base: Job, procs: int) -> list[float]:
    """Seconds per fold epoch of each of ``procs`` processes training at once (sorted)."""
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(procs)
    results = ctx.Queue()
    workers = [
        ctx.Process(target=train_epochs, args=(dataclasses.replace(base, process=i), barrier, results))
        for i in range(procs)
    ]
    for w in workers:
        w.start()
    values = sorted(float(results.get()) for _ in workers)
    for w in workers:
        w.join()
        if w.exitcode != 0:
            raise SystemExit(f"a measuring process exited with code {w.exitcode}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="omniglot")
    parser.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "omniglot"))
    parser.add_argument("--budget", default="mini")
    parser.add_argument("--loss", default="contrastive")
    parser.add_argument("--device", default="cpu", help="cpu | cuda[:i]")
    parser.add_argument("--epochs", type=int, default=4, help="timed epochs per process (>= 1)")
    parser.add_argument("--procs", default="1", help="comma-separated process counts, e.g. 1,4,16")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.epochs < 1:
        parser.error(f"--epochs must be >= 1; got {args.epochs}")
    fixed = [item for item in args.set if item.split("=", 1)[0].strip() in FIXED_KEYS]
    if fixed:
        parser.error(
            f"--set {fixed[0]}: this script fixes {', '.join(FIXED_KEYS)} (--epochs sets the epochs; "
            "the stop is off so every process trains them all)"
        )
    counts = [int(p) for p in args.procs.split(",") if p.strip()]
    if not counts or min(counts) < 1:
        parser.error(f"--procs takes positive integers, e.g. 1,4,16; got {args.procs!r}")
    import torch

    print(
        f"{args.dataset} {args.budget} fold epochs, loss {args.loss}, device {args.device}, "
        f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"{args.epochs} timed epochs per process",
        flush=True,
    )
    base = Job(
        args.dataset, args.data_dir, args.budget, tuple(args.set), args.loss, args.device, args.epochs, 0
    )
    for procs in counts:
        values = measure(base, procs)
        median = statistics.median(values)
        print(
            f"P={procs}: s per fold epoch per process median {median:.3f} (min {values[0]:.3f}, "
            f"max {values[-1]:.3f}); aggregate {procs / median:.2f} fold epochs/s",
            flush=True,
        )


if __name__ == "__main__":
    main()
