"""Fold-parallel training with and without each worker's prefetch thread: do the prefetch threads
oversubscribe the cores when every core already runs a fold worker? (issue 32 item 3)

Usage::

    python benchmarks/oversubscription.py [--dataset glyphs] [--data-dir DIR] [--budget mini]
                                          [--loss contrastive] [--jobs 2] [--epochs 4]
                                          [--repeats 7] [--set KEY=VALUE ...]

``dmlbench run --jobs N`` trains folds in N spawned processes with one torch thread each
(``benchmark.engine.parallel``), and a 1-thread CPU worker prepares its next batches in a
background thread (``default_prefetch_depth``: depth 2). With N = cores, the N prefetch threads
compete with the N training steps for the cores. This script measures what that costs or gains on
a real fold: each timed call trains, in ``--jobs`` processes at once, fold ``w mod n_folds`` of
the budget's MLRC configuration (worker ``w``; the loss at its default parameters) for exactly
``--epochs`` epochs (no early stop: patience and max_epochs set to ``--epochs``), once with
prefetch depth 2 and once with depth 0 (synchronous), the two alternating within a repeat and their
order flipping between repeats so that drift in the machine's load hits both alike. It prints the
median wall time of a call (min-max), the ratio depth 2 / depth 0, and whether both depths trained
to the same validation score (they must: the batches are bit-identical). Run it on an idle machine;
the ratio is the result, not the seconds.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from profile_fold import mlrc_folds, train_cpu_fold

from benchmark.config import RunConfig
from benchmark.engine.parallel import FoldData
from benchmark.losses import LOSSES

DEPTHS = (2, 0)

# Each spawned worker loads the configuration and the folds once (as a fold worker of
# engine/parallel.py loads its run's data once), then trains the fold it is given per call.
_WORKER: dict[str, Any] = {}


def _worker_init(dataset: str, data_dir: str, budget: str, sets: list[str]) -> None:
    torch.set_num_threads(1)
    config, folds = mlrc_folds(dataset, data_dir, budget, sets)
    _WORKER["config"], _WORKER["folds"] = config, folds


def _train(loss: str, fold: int, depth: int) -> tuple[float, float]:
    """(wall seconds, best validation score) of one fold trained with prefetch ``depth``."""
    config: RunConfig = _WORKER["config"]
    folds: FoldData = _WORKER["folds"]
    train, val = folds.folds[fold]
    params = {k: float(v) for k, v in LOSSES.get(loss).defaults.items()}
    start = time.perf_counter()
    result, _, _ = train_cpu_fold(config, loss, params, train, val, seed=0, prefetch_depth=depth)
    return time.perf_counter() - start, result.best_val


def timed_call(
    pool: ProcessPoolExecutor, jobs: int, n_folds: int, loss: str, depth: int
) -> tuple[float, list[float]]:
    """Wall seconds of ``jobs`` fold trainings running at once, and each one's best score."""
    start = time.perf_counter()
    futures = [pool.submit(_train, loss, w % n_folds, depth) for w in range(jobs)]
    scores = [future.result()[1] for future in futures]
    return time.perf_counter() - start, scores


def fixed_epoch_sets(epochs: int, sets: list[str]) -> list[str]:
    """``--set`` items that train exactly ``epochs`` epochs (the user's items may not override them)."""
    for item in sets:
        if item.split("=", 1)[0].strip() in ("train.max_epochs", "train.patience"):
            raise SystemExit(
                f"--set {item}: this script sets train.max_epochs and train.patience from --epochs"
            )
    return [*sets, f"train.max_epochs={epochs}", f"train.patience={epochs}"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="glyphs")
    parser.add_argument("--data-dir", default="", help="the dataset's folder (not needed for glyphs)")
    parser.add_argument("--budget", default="mini")
    parser.add_argument("--loss", default="contrastive")
    parser.add_argument("--jobs", type=int, default=2, help="fold workers at once (dmlbench run --jobs)")
    parser.add_argument("--epochs", type=int, default=4, help="epochs each fold trains (no early stop)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()
    if args.jobs < 1 or args.epochs < 1 or args.repeats < 1:
        raise SystemExit(
            f"--jobs, --epochs and --repeats must be >= 1, got {args.jobs}, {args.epochs}, {args.repeats}"
        )
    sets = fixed_epoch_sets(args.epochs, args.sets)
    config, _ = mlrc_folds(args.dataset, args.data_dir, args.budget, sets)  # fails early on a bad --set
    n_folds = config.protocol.n_folds

    wall: dict[int, list[float]] = {d: [] for d in DEPTHS}
    scores: dict[int, list[float]] = {d: [] for d in DEPTHS}
    init = (args.dataset, args.data_dir, args.budget, sets)
    with ProcessPoolExecutor(
        args.jobs, mp.get_context("spawn"), initializer=_worker_init, initargs=init
    ) as pool:
        timed_call(
            pool, args.jobs, n_folds, args.loss, DEPTHS[0]
        )  # warm-up: worker start, kernels, allocator
        for repeat in range(args.repeats):
            for depth in DEPTHS if repeat % 2 == 0 else DEPTHS[::-1]:
                seconds, got = timed_call(pool, args.jobs, n_folds, args.loss, depth)
                wall[depth].append(seconds)
                scores[depth] = got
            print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)

    print(
        f"\n{args.jobs} fold worker(s) at once, 1 torch thread each; {args.dataset} {args.budget} "
        f"MLRC, {args.loss} at its defaults, {args.epochs} epochs x {config.train.iters_per_epoch} "
        f"iterations per fold (validation every {config.train.eval_every} epoch(s)); "
        f"torch {torch.__version__}, torch CPU capability {torch.backends.cpu.get_cpu_capability()}; "
        f"median (min-max) of {args.repeats}\n"
    )
    print("| prefetch depth | s/call | vs depth 0 |")
    print("|---:|---:|---:|")
    reference = statistics.median(wall[0])
    for depth in DEPTHS:
        values = wall[depth]
        median = statistics.median(values)
        print(f"| {depth} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) | {median / reference:.3f} |")
    ratios = sorted(a / b for a, b in zip(wall[2], wall[0], strict=True))
    low, mid, high = ratios[0], statistics.median(ratios), ratios[-1]
    print(f"\nratio depth 2 / depth 0, per repeat: median {mid:.3f} (min {low:.3f}, max {high:.3f})")
    same = scores[2] == scores[0]
    print(f"same validation scores at both depths: {'yes' if same else 'NO'} ({scores[2]} vs {scores[0]})")
    if not same:
        raise SystemExit("prefetching changed the trained folds; the batches must be bit-identical")


if __name__ == "__main__":
    main()
