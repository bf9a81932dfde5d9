"""Does one fold train to its patience stop? Fold ``--folds`` of the budget's MLRC configuration,
trained with each loss's default hyperparameters by the protocol's own ``train_with_loss``.

Usage::

    python benchmarks/fold_convergence.py [--dataset omniglot] [--budget mini] [--losses all]
                                          [--folds 0] [--seed 0] [--set KEY=VALUE ...]
                                          [--jsonl FILE]

One line per (loss, fold): best validation MAP@R and its epoch, why training stopped
(``patience`` = converged by MLRC's rule) and after how many epochs, wall seconds (1 torch
thread), then the validation curve. The closing line gives the share stopped by patience and the
median best epoch. ``--jsonl FILE`` appends one JSON line per fold with its full-precision curve
(what ``benchmarks/patience_truncation.py --folds-jsonl`` reads). Used to choose the ``mini``
budget's schedule (issue 12): a fold at a loss's defaults is not a searched trial, so this is
evidence about the schedule, not a substitute for the convergence shares that every run record
carries.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import benchmark.native  # noqa: F401  (faiss before torch, as in runs: the k-NN sums depend on it)

# isort: split
import torch
from profile_fold import mlrc_folds, train_cpu_fold

from benchmark.losses import LOSSES


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="omniglot")
    ap.add_argument("--data-dir", default="../shared/data/omniglot")
    ap.add_argument("--budget", default="mini")
    ap.add_argument("--losses", default="all", help="comma-separated registry names, or 'all'")
    ap.add_argument("--folds", default="0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--jsonl", default=None, help="append one JSON line per fold (full-precision curve)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    config, data = mlrc_folds(args.dataset, args.data_dir, args.budget, args.set)
    names = list(LOSSES.names()) if args.losses == "all" else args.losses.split(",")
    stops: list[str] = []
    best_epochs: list[int] = []
    for name in names:
        params = {k: float(v) for k, v in LOSSES.get(name).defaults.items()}
        for fold in (int(f) for f in args.folds.split(",")):
            train, val = data.folds[fold]
            t0 = time.perf_counter()
            result, _, _ = train_cpu_fold(config, name, params, train, val, args.seed)
            stops.append(result.stopped_by)
            best_epochs.append(result.best_epoch)
            wall = time.perf_counter() - t0
            curve = " ".join(f"{v:.3f}" for _, v in result.curve)
            if args.jsonl:
                line = {
                    "dataset": args.dataset,
                    "loss": name,
                    "fold": fold,
                    "seed": args.seed,
                    "patience": config.train.patience,
                    "eval_every": config.train.eval_every,
                    "iters_per_epoch": config.train.iters_per_epoch,
                    "best_val_map_at_r": result.best_val,
                    "best_epoch": result.best_epoch,
                    "epochs": result.epochs,
                    "stopped_by": result.stopped_by,
                    "wall_s": round(wall, 3),
                    "curve": [[int(e), float(v)] for e, v in result.curve],
                }
                with open(args.jsonl, "a") as out:
                    out.write(json.dumps(line) + "\n")
            print(
                f"{args.dataset} {name} f{fold}: best {result.best_val:.3f}@{result.best_epoch} "
                f"stop {result.stopped_by}@{result.epochs} {wall:.1f}s | {curve}",
                flush=True,
            )
    print(
        f"{args.dataset}, budget {args.budget}: {stops.count('patience')}/{len(stops)} stopped by patience, "
        f"median best epoch {statistics.median(best_epochs)}"
    )


if __name__ == "__main__":
    main()
