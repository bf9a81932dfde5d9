"""How evaluation cost grows with N: exact search, faiss's approximate indexes and PML's
AccuracyCalculator, wall time and peak memory, with fitted growth exponents and the cost of one
SOP-sized validation at the ``paper`` budget.

Usage::

    python benchmarks/eval_scaling.py [--n 10000,30000,60000,120000,240000] [--dims 128,512]
        [--threads 1] [--indexes ivf,hnsw] [--max-pml-n 60000] [--max-exact-n 0]
        [--ivf-nprobe 16] [--hnsw-m 32] [--hnsw-ef-search 128] [--sop-n 120000] [--seed 0]

**Data.** Synthetic embeddings with a class structure, as ``benchmarks/eval_memory.py`` makes
them (SOP-like class sizes of 2-12 images, mean about 5.3; a Gaussian class centre per class plus
noise of 1.3 times its scale, in ``dim`` dimensions), one set per (N, dim) with ``--seed``.
Synthetic clusters are not trained embeddings: the approximate indexes' errors on real
embeddings can differ (and exact search's cost does not depend on the values).

**Measurements.** Each evaluation (MAP@R, P@1 and R-precision in cosine space, query = gallery)
runs in its own fresh process through ``eval_memory.py``'s children: time of the evaluation call,
and the increase of the process's peak RSS over its baseline after loading the data (numpy,
torch and faiss buffers included). Methods: ``exact`` (dmlbench's ``evaluate``, the default
search), ``ivf`` / ``hnsw`` (``evaluate`` with ``eval.knn`` set to that index; their MAP@R error
is against exact search on the same data), and ``pml`` (PML's AccuracyCalculator with a faiss
inner-product index, up to ``--max-pml-n``: its memory grows with N·k and with its own copies).
``--max-exact-n`` (0 = no limit) skips exact search above that N (the approximate indexes' error
column is then empty). One run per cell: run on an idle machine and read the growth, not the
last digit.

**Fits.** For each method and dim, least squares of log(time) and log(memory increase) on log(N)
over the N measured (at least two): time ≈ a·N^b. Exact search's flops are 2·N²·D, so b tends to
2 at large N; smaller N are dominated by per-call and per-query costs.

**SOP at the paper budget.** The fitted exact-search law is evaluated at ``--sop-n`` (the issue's
120k images, one evaluation over all of SOP) and at the MLRC split's sizes: the test set (half of
the classes, about N/2, 128-d per fold model and the 512-d concatenation) and one fold's
validation set (a quarter of the training half, about N/8). The count of validations is that of
the paper budget with SOP's MLRC schedule (``max_epochs / eval_every`` per fold at most, times
``n_folds x (n_trials + reps)`` fold trainings): an upper bound, since patience stops folds earlier.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from eval_memory import make_data, run_child

MIB = 1024.0  # ru_maxrss is in KiB on Linux


def parse_ints(text: str) -> list[int]:
    """``"10000,30000"`` -> ``[10000, 30000]``."""
    return [int(x) for x in text.split(",") if x.strip()]


def fit_power(ns: list[int], values: list[float]) -> tuple[float, float] | None:
    """Least-squares ``(a, b)`` of ``value = a * N^b`` on a log-log scale; None with < 2 points."""
    points = [(n, v) for n, v in zip(ns, values, strict=True) if v > 0]
    if len(points) < 2:
        return None
    x = np.log([p[0] for p in points])
    y = np.log([p[1] for p in points])
    b, log_a = np.polyfit(x, y, 1)
    return float(math.exp(log_a)), float(b)


def sop_schedule() -> dict[str, int]:
    """The paper budget's MLRC schedule on SOP (its dataset settings applied): counts only."""
    from benchmark.budgets import BUDGETS
    from benchmark.config import load_protocol_file, resolve_config
    from benchmark.data.registry import DATASETS

    config, _ = resolve_config(
        load_protocol_file("mlrc"),
        BUDGETS.get("paper").overrides,
        {"data.dataset": "sop", "data.data_dir": "/unused"},
        dataset_settings=lambda dataset, protocol: DATASETS.get(dataset).settings_for(protocol),
    )
    t = config.train
    return {
        "max_epochs": t.max_epochs,
        "eval_every": t.eval_every,
        "patience": t.patience,
        "n_folds": config.protocol.n_folds,
        "n_trials": config.search.n_trials,
        "reps": config.test.reps,
    }


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One row per (dim, N, method): seconds, MiB over baseline, MAP@R (and error vs exact)."""
    search_params = {
        "ivf": {"ivf_nlist": args.ivf_nlist, "ivf_nprobe": args.ivf_nprobe},
        "hnsw": {"hnsw_m": args.hnsw_m, "hnsw_ef_search": args.hnsw_ef_search},
    }
    rows: list[dict[str, Any]] = []
    for dim in parse_ints(args.dims):
        for n in parse_ints(args.n):
            with tempfile.TemporaryDirectory() as tmp:
                data = Path(tmp)
                n_classes = make_data(n, dim, args.seed, data)
                methods = []
                if not args.max_exact_n or n <= args.max_exact_n:
                    methods.append("exact")
                methods += [m for m in args.indexes.split(",") if m]
                if n <= args.max_pml_n:
                    methods.append("pml")
                exact_map: float | None = None
                for method in methods:
                    which = "ours" if method == "exact" else method
                    r = run_child(which, data, args.threads, search_params.get(method))
                    map_r = float(r["values"]["map_at_r"])
                    if method == "exact":
                        exact_map = map_r
                    row = {
                        "dim": dim,
                        "n": n,
                        "classes": n_classes,
                        "method": method,
                        "seconds": float(r["seconds"]),
                        "mib": (r["peak_kib"] - r["baseline_kib"]) / MIB,
                        "map_at_r": map_r,
                        "error": None if exact_map is None else map_r - exact_map,
                    }
                    rows.append(row)
                    shown = method != "exact" and row["error"] is not None
                    err = f", MAP@R - exact {row['error']:+.4f}" if shown else ""
                    print(
                        f"  dim {dim} N {n} {method}: {row['seconds']:.2f} s, +{row['mib']:.0f} MiB, "
                        f"MAP@R {map_r:.4f}{err}",
                        flush=True,
                    )
    return rows


def print_tables(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The measurement table, the fitted exponents and the SOP extrapolation, as Markdown."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    print("\n| dim | N | classes | " + " | ".join(f"{m} s | {m} +MiB" for m in methods) + " | "
          + " | ".join(f"{m} MAP@R error" for m in methods if m not in ("exact", "pml")) + " |")  # fmt: skip
    n_cols = 3 + 2 * len(methods) + len([m for m in methods if m not in ("exact", "pml")])
    print("|" + "---|" * 3 + "---:|" * (n_cols - 3))
    cells: dict[tuple[int, int], dict[str, dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["dim"], r["n"]), {})[r["method"]] = r
    for (dim, n), by_method in cells.items():
        classes = next(iter(by_method.values()))["classes"]
        parts = [str(dim), f"{n:,}", f"{classes:,}"]
        for m in methods:
            cell = by_method.get(m)
            parts += [f"{cell['seconds']:.2f}", f"{cell['mib']:.0f}"] if cell else ["–", "–"]
        for m in methods:
            if m in ("exact", "pml"):
                continue
            cell = by_method.get(m)
            parts.append(f"{cell['error']:+.4f}" if cell and cell["error"] is not None else "–")
        print("| " + " | ".join(parts) + " |")

    print("\nGrowth, least squares on log-log (time ≈ a·N^b; memory increase ≈ c·N^e):\n")
    print("| method | dim | N range | b (time) | e (memory) |")
    print("|---|---|---|---:|---:|")
    fits: dict[tuple[str, int], tuple[float, float]] = {}
    for m in methods:
        for dim in dict.fromkeys(r["dim"] for r in rows):
            sel = [r for r in rows if r["method"] == m and r["dim"] == dim]
            ns = [r["n"] for r in sel]
            time_fit = fit_power(ns, [r["seconds"] for r in sel])
            mem_fit = fit_power(ns, [r["mib"] for r in sel])
            if time_fit is None:
                continue
            fits[(m, dim)] = time_fit
            mem = f"{mem_fit[1]:.2f}" if mem_fit else "–"
            print(f"| {m} | {dim} | {min(ns):,}-{max(ns):,} | {time_fit[1]:.2f} | {mem} |")

    sched = sop_schedule()
    per_fold = sched["max_epochs"] // sched["eval_every"]
    fold_trainings = sched["n_folds"] * (sched["n_trials"] + sched["reps"])
    print(
        f"\nSOP at the paper budget (MLRC schedule on SOP: eval every {sched['eval_every']} epochs, "
        f"patience {sched['patience']}, max {sched['max_epochs']} epochs; {sched['n_folds']} folds x "
        f"({sched['n_trials']} trials + {sched['reps']} reps) = {fold_trainings} fold trainings, at most "
        f"{per_fold} validations each = {per_fold * fold_trainings:,} validations at most), "
        f"{args.threads} thread(s), from the fitted exact-search law (extrapolated beyond the N measured):\n"
    )
    print("| evaluation | N | dim | exact s per evaluation | at most per run (h) |")
    print("|---|---:|---:|---:|---:|")
    sop = args.sop_n
    cases = [
        (f"all of SOP (--sop-n {sop:,})", sop, 128, 1),
        ("one fold's validation set (≈ N/8)", sop // 8, 128, per_fold * fold_trainings),
        ("test set, per fold model (≈ N/2)", sop // 2, 128, sched["n_folds"] * sched["reps"]),
        ("test set, concatenated (≈ N/2)", sop // 2, 512, sched["reps"]),
    ]
    for label, n, dim, count in cases:
        fit = fits.get(("exact", dim))
        if fit is None:
            print(f"| {label} | {n:,} | {dim} | (no exact fit at {dim}-d) | – |")
            continue
        seconds = fit[0] * n ** fit[1]
        print(f"| {label} | {n:,} | {dim} | {seconds:.1f} | {seconds * count / 3600:.1f} |")
    measured = [r for r in rows if r["method"] == "exact" and r["n"] == sop]
    if measured:
        print(
            f"\nMeasured exact search at N = {sop:,}: "
            + ", ".join(f"{r['dim']}-d {r['seconds']:.1f} s" for r in measured)
        )
    errors = [abs(r["error"]) for r in rows if r["error"] is not None and r["method"] not in ("exact", "pml")]
    if errors:
        print(f"Largest |MAP@R error| of an approximate index: {max(errors):.4f} "
              f"(median {statistics.median(errors):.4f})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", default="10000,30000,60000,120000,240000", help="comma-separated N")
    parser.add_argument("--dims", default="128,512", help="comma-separated dimensions")
    parser.add_argument("--threads", type=int, default=1, help="torch and faiss threads per evaluation")
    parser.add_argument("--indexes", default="ivf,hnsw", help="approximate indexes ('' = none)")
    parser.add_argument("--max-pml-n", type=int, default=60_000, help="PML only up to this N (0 = never)")
    parser.add_argument("--max-exact-n", type=int, default=0, help="exact search only up to this N (0 = all)")
    parser.add_argument("--ivf-nlist", type=int, default=0, help="0 = 4·sqrt(N)")
    parser.add_argument("--ivf-nprobe", type=int, default=16)
    parser.add_argument("--hnsw-m", type=int, default=32)
    parser.add_argument("--hnsw-ef-search", type=int, default=128)
    parser.add_argument("--sop-n", type=int, default=120_000, help="SOP's image count for the extrapolation")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(
        f"Evaluation scaling: N {args.n}, dims {args.dims}, {args.threads} thread(s), indexes "
        f"{args.indexes or 'none'} (IVF nlist {args.ivf_nlist or '4·sqrt(N)'} nprobe {args.ivf_nprobe}; "
        f"HNSW M {args.hnsw_m} efSearch {args.hnsw_ef_search}), PML up to N {args.max_pml_n:,}; "
        "synthetic SOP-like clustered embeddings, one fresh process per evaluation"
    )
    rows = measure(args)
    print_tables(rows, args)


if __name__ == "__main__":
    main()
