"""Wall time and peak memory of a test-set evaluation: dmlbench's evaluate() vs PML's AccuracyCalculator.

Evaluates SOP-sized random embeddings (default 60,000 x 128, ~11k classes of 2-12 images, like
Stanford Online Products' test split) on MAP@R, P@1 and R-precision in cosine space, once through
``benchmark.metrics.evaluate`` and once through pytorch-metric-learning's ``AccuracyCalculator``
(``k="max_bin_count"``, query = reference with self excluded, an inner-product faiss index on
normalised vectors, labels remapped to 0..C-1), and checks that the two agree.

How memory is measured: each side runs in its own fresh subprocess, which imports the same
modules (torch, faiss, PML, benchmark) and loads the same ``.npy`` files before the measurement,
then reports ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` (the process's peak resident set) before
and after the evaluation. Peak RSS sees every allocation -- numpy, torch and faiss's C++ buffers --
which tracemalloc would miss (it only sees allocations made through Python's allocator hooks,
i.e. not faiss's or torch's). The "eval" column is the increase of the peak over the baseline.

Usage:  python benchmarks/eval_memory.py [--n 60000] [--dim 128] [--threads 1] [--seed 0]

``benchmarks/eval_scaling.py`` runs the same children over a range of N and dimensions, with
faiss's approximate indexes too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

MLRC = ("map_at_r", "precision_at_1", "r_precision")
PML_NAMES = {
    "map_at_r": "mean_average_precision_at_r",
    "precision_at_1": "precision_at_1",
    "r_precision": "r_precision",
}


def make_data(n: int, dim: int, seed: int, out: Path) -> int:
    """Write SOP-like embeddings and labels to ``out``; return the number of classes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # Class sizes 2..12 with mean ~5.3 (SOP test: 60,502 images in 11,316 classes).
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(2 + int(rng.binomial(10, 0.33)))
    sizes[-1] -= sum(sizes) - n
    if sizes[-1] < 2:  # keep every class at >= 2 images, as in SOP
        last = sizes.pop()
        sizes[-1] += last
    labels = rng.permutation(np.repeat(np.arange(len(sizes)), sizes))
    # Class centre plus noise: metrics land in a realistic range instead of near zero.
    centres = rng.standard_normal((len(sizes), dim)).astype(np.float32)
    embeddings = centres[labels] + 1.3 * rng.standard_normal((n, dim)).astype(np.float32)
    # Sparse, non-contiguous class ids, as real datasets have (and as PML must not see).
    np.save(out / "labels.npy", labels.astype(np.int64) * 7 + 11_000_000)
    np.save(out / "embeddings.npy", embeddings)
    return len(sizes)


def child(which: str, data: Path, threads: int, search_json: str = "{}") -> None:
    """Run one side of the comparison and print a JSON line with its timings and values.

    ``which``: ``ours`` (exact search), ``pml``, or ``ivf`` / ``hnsw`` (dmlbench's evaluate()
    through that approximate index; ``search_json`` holds its other KnnSearch fields).
    """
    import resource

    import faiss
    import numpy as np
    import torch
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
    from pytorch_metric_learning.utils.inference import FaissKNN

    from benchmark.metrics import KnnSearch, evaluate
    from benchmark.metrics.knn import l2_normalise

    torch.set_num_threads(threads)
    faiss.omp_set_num_threads(threads)
    embeddings = np.load(data / "embeddings.npy")
    labels = np.load(data / "labels.npy")
    baseline_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    start = time.perf_counter()
    if which == "ours":
        values = evaluate(embeddings, labels, "cosine", MLRC)
    elif which in ("ivf", "hnsw"):
        search = KnnSearch(kind=which, **json.loads(search_json))
        values = evaluate(embeddings, labels, "cosine", MLRC, search=search)
    else:
        _, dense = np.unique(labels, return_inverse=True)  # PML casts labels to float32
        x = torch.from_numpy(l2_normalise(embeddings))
        y = torch.from_numpy(dense)
        calculator = AccuracyCalculator(
            include=tuple(PML_NAMES.values()),
            k="max_bin_count",
            device=torch.device("cpu"),
            knn_func=FaissKNN(index_init_fn=faiss.IndexFlatIP),
        )
        result = calculator.get_accuracy(x, y, x, y, ref_includes_query=True)
        values = {name: float(result[pml]) for name, pml in PML_NAMES.items()}
    seconds = time.perf_counter() - start

    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        json.dumps({"seconds": seconds, "baseline_kib": baseline_kib, "peak_kib": peak_kib, "values": values})
    )


def run_child(which: str, data: Path, threads: int, search: dict[str, int] | None = None) -> dict[str, Any]:
    """One side in a fresh process (see the module docstring): its JSON line as a dict."""
    proc = subprocess.run(
        [
            sys.executable,
            __file__,
            "--child",
            which,
            "--data",
            str(data),
            "--threads",
            str(threads),
            "--search-json",
            json.dumps(search or {}),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=60_000)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--child", choices=["ours", "pml", "ivf", "hnsw"], help=argparse.SUPPRESS)
    parser.add_argument("--data", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--search-json", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.data, args.threads, args.search_json)
        return

    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp)
        n_classes = make_data(args.n, args.dim, args.seed, data)
        print(
            f"{args.n} x {args.dim} float32 embeddings, {n_classes} classes, cosine, {args.threads} thread(s)"
        )
        results = {which: run_child(which, data, args.threads) for which in ("ours", "pml")}

    mib = 1024.0
    print(f"{'':28s} {'wall s':>8s} {'peak RSS MiB':>13s} {'baseline MiB':>13s} {'eval MiB':>9s}")
    for which, label in (("ours", "dmlbench evaluate()"), ("pml", "PML AccuracyCalculator")):
        r = results[which]
        print(
            f"{label:28s} {r['seconds']:8.2f} {r['peak_kib'] / mib:13.0f} {r['baseline_kib'] / mib:13.0f} "
            f"{(r['peak_kib'] - r['baseline_kib']) / mib:9.0f}"
        )
    for name in MLRC:
        ours, pml = results["ours"]["values"][name], results["pml"]["values"][name]
        print(f"{name:16s} ours {ours:.8f}  PML {pml:.8f}  |diff| {abs(ours - pml):.1e}")


if __name__ == "__main__":
    main()
