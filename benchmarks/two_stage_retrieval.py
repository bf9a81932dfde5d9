"""Two-stage vs brute-force retrieval (docs/protocols.md §4.3) on closed-set splits of glyphs and omniglot.

For each dataset and class-anchor loss: train the loss quickly on the database (training) images
of a closed-set split with the benchmark's own ``train_fold`` (mini-budget model: small CNN, 28 px,
character augmentation; a fixed number of epochs with one evaluation at the end, so the returned
model is the last one and matches the loss's final anchors), embed database and queries, and
report mAP, P@20, P@100 of brute force and two-stage retrieval plus the time per query of each.
Then the database is scaled synthetically (each real class copied into randomly rotated
subspaces, items jittered) to show where two-stage pays off in time.

Timing: both methods return the top ``--k`` (100) database items of every query; indexes are built
outside the timed region. "batch" = time to search all queries at once / number of queries;
"single" = median time of one query searched alone. Each number is the median of ``--repeats``
runs, both methods in the same process, at each thread count of ``--threads`` (faiss OpenMP,
BLAS and torch limited together).

Usage: python benchmarks/two_stage_retrieval.py [--datasets glyphs omniglot]
       [--losses proxyanchor normsoftmax cam mfcont] [--epochs 16] [--synthetic 10000:100 100000:1000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from threadpoolctl import threadpool_limits
from torch import nn

import benchmark.engine.train as train_module
from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, resolve_config
from benchmark.data import DatasetOptions, ImageDataset, load_dataset
from benchmark.data.augment import CHARACTER_AUGMENT
from benchmark.data.closed_set import closed_set_datasets
from benchmark.losses import LOSSES, build_loss
from benchmark.metrics.knn import Space
from benchmark.metrics.two_stage import (
    BruteForceIndex,
    ClassAnchors,
    TwoStageIndex,
    anchors_from_loss,
    compare_retrieval,
)

OMNIGLOT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "omniglot"


@contextlib.contextmanager
def captured_losses() -> Iterator[list[nn.Module]]:
    """Record every loss module ``train_fold`` builds.

    ``train_fold`` returns the model but not the loss, whose learnable anchors stage 1 needs;
    wrapping the name it calls is the least invasive way to reach them from a script.
    """
    built: list[nn.Module] = []

    def recording(*args: Any, **kwargs: Any) -> nn.Module:
        loss = build_loss(*args, **kwargs)
        built.append(loss)
        return loss

    train_module.build_loss = recording
    try:
        yield built
    finally:
        train_module.build_loss = build_loss
    if not built:
        raise SystemExit("train_fold no longer calls benchmark.engine.train.build_loss; update this script.")


def make_config(dataset: str, epochs: int, iters: int) -> RunConfig:
    """The mini-budget MLRC config with a fixed schedule and a single evaluation at the end."""
    overrides = {
        "data.dataset": dataset,
        "train.max_epochs": epochs,
        "train.eval_every": epochs,
        "train.patience": epochs,
        "train.iters_per_epoch": iters,
    }
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("mini").overrides, overrides)
    return config


def train_and_embed(
    config: RunConfig, loss_name: str, database: ImageDataset, queries: ImageDataset, seed: int
) -> tuple[np.ndarray, np.ndarray, ClassAnchors, float]:
    """Database and query embeddings, the loss's anchors and the training wall time."""
    device = torch.device("cpu")
    # One thread for training: the machine is shared, and training time is not what is measured.
    torch.set_num_threads(1)
    with captured_losses() as built:
        result, model = train_module.train_fold(
            config=config,
            loss_name=loss_name,
            loss_params={},
            train=database,
            val=queries,
            augment=CHARACTER_AUGMENT,
            seed=seed,
            device=device,
        )
    anchors = anchors_from_loss(built[-1], np.unique(database.labels))
    db = train_module.embed(model, database.images, device)
    q = train_module.embed(model, queries.images, device)
    return db, q, anchors, result.wall_s


@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Limit faiss (OpenMP), BLAS and torch to ``n`` threads."""
    old_torch, old_faiss = torch.get_num_threads(), faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    torch.set_num_threads(n)
    try:
        with threadpool_limits(limits=n):
            yield
    finally:
        torch.set_num_threads(old_torch)
        faiss.omp_set_num_threads(old_faiss)


def median_time(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of ``fn()`` over ``repeats`` runs after one warm-up run."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_per_query(
    search: Callable[[np.ndarray, int], object], queries: np.ndarray, k: int, repeats: int, n_single: int
) -> dict[str, float]:
    """Milliseconds per query: batched (all queries in one call) and single (one query per call)."""
    q = np.ascontiguousarray(queries, dtype=np.float32)
    rows = q[np.linspace(0, len(q) - 1, min(n_single, len(q))).astype(int)]

    def one_by_one() -> object:
        return [search(rows[i : i + 1], k) for i in range(len(rows))]

    return {
        "batch": 1000 * median_time(lambda: search(q, k), repeats) / len(q),
        "single": 1000 * median_time(one_by_one, repeats) / len(rows),
    }


def synthetic_scale(
    db: np.ndarray,
    db_labels: np.ndarray,
    q: np.ndarray,
    q_labels: np.ndarray,
    anchors: ClassAnchors,
    n_items: int,
    n_classes: int,
    n_queries: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, ClassAnchors]:
    """A database of ``n_items`` in ``n_classes`` classes grown from trained embeddings.

    Synthetic class j copies real class j mod C through a random rotation (one per copy), so
    each copy keeps the trained geometry of the classes and their anchors; items and queries
    are real ones of the base class plus Gaussian jitter (norm ~10% of the median distance of a
    database item to its class mean). One anchor per class only (multi-anchor losses are not in
    this table). Caveat: anchors of other copies are random directions to a query, and where a
    loss's anchors are only loosely aligned with its embeddings (low query-anchor similarity)
    hundreds of such directions out-score the right anchor, so stage-1 accuracy of learned
    anchors drops with the number of copies; class-mean anchors are shown alongside.
    """
    rng = np.random.default_rng(seed)
    classes = np.unique(db_labels)
    d = db.shape[1]
    n_copies = -(-n_classes // classes.size)
    rotations = [np.linalg.qr(rng.standard_normal((d, d)))[0].astype(np.float32) for _ in range(n_copies)]
    base = classes[np.arange(n_classes) % classes.size]
    copy = np.arange(n_classes) // classes.size
    if np.unique(anchors.classes).size != anchors.classes.size:
        raise SystemExit("synthetic_scale takes one anchor per class")
    anchor_of = {int(c): anchors.vectors[i] for i, c in enumerate(anchors.classes)}
    new_anchors = np.stack([anchor_of[int(b)] @ rotations[c] for b, c in zip(base, copy, strict=True)])
    # Jitter of 10% of the typical distance of an item to its class mean (spread over d axes):
    # enough to make every synthetic item distinct, small against the class structure.
    means = {int(c): db[db_labels == c].mean(axis=0) for c in classes}
    radius = np.median(np.linalg.norm(db - np.stack([means[int(c)] for c in db_labels]), axis=1))
    jitter = 0.1 * float(radius) / np.sqrt(d)

    def grow(x: np.ndarray, labels: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        new_labels = np.sort(np.arange(n) % n_classes)
        by_class = {int(c): np.flatnonzero(labels == c) for c in classes}
        picks = np.array([rng.choice(by_class[int(base[j])]) for j in new_labels])
        out = np.empty((n, d), dtype=np.float32)
        for c in range(n_copies):
            rows = np.flatnonzero(copy[new_labels] == c)
            out[rows] = x[picks[rows]] @ rotations[c]
        out += jitter * rng.standard_normal(out.shape).astype(np.float32)
        return out, new_labels.astype(np.int64)

    big_db, big_db_labels = grow(db, db_labels, n_items)
    big_q, big_q_labels = grow(q, q_labels, n_queries)
    return big_db, big_db_labels, big_q, big_q_labels, ClassAnchors.one_per_class(new_anchors)


def pct(x: float) -> str:
    return f"{100 * x:.2f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["glyphs", "omniglot"])
    p.add_argument("--losses", nargs="+", default=["proxyanchor", "normsoftmax", "cam", "mfcont"])
    p.add_argument("--epochs", type=int, default=16, help="training epochs (default 16)")
    p.add_argument("--iters", type=int, default=100, help="iterations per epoch (default 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--query-fraction", type=float, default=0.25)
    p.add_argument("--k", type=int, default=100, help="list length returned in timings (default 100)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--single", type=int, default=100, help="queries timed one at a time (default 100)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument(
        "--synthetic",
        nargs="*",
        default=["10000:100", "100000:1000"],
        help="ITEMS:CLASSES databases grown from the first dataset/loss (default 10000:100 100000:1000)",
    )
    p.add_argument("--synthetic-queries", type=int, default=1000)
    p.add_argument("--omniglot-dir", type=Path, default=OMNIGLOT_DIR)
    args = p.parse_args()

    cache = Path(os.environ.get("DMLBENCH_CACHE", Path.home() / ".cache" / "dmlbench"))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs visible, "
        f"torch {torch.__version__}, faiss {faiss.__version__}, numpy {np.__version__}\n",
        flush=True,
    )
    header = (
        "| data | loss | space | N db / Q / C | threads | method | mAP | P@20 | P@100 "
        "| stage-1 acc. | ms/query batch | ms/query single |"
    )
    rule = "|---|---|---|---|---|---|---|---|---|---|---|---|"
    first: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, ClassAnchors, str, str] | None = None

    def add_rows(
        data: str,
        loss: str,
        space: Space,
        db: np.ndarray,
        db_labels: np.ndarray,
        q: np.ndarray,
        q_labels: np.ndarray,
        anchors: ClassAnchors,
        with_class_means: bool = False,
    ) -> None:
        variants = [("two-stage", anchors)]
        if with_class_means:
            classes = np.unique(db_labels)
            means = np.stack([db[db_labels == c].mean(axis=0) for c in classes])
            variants.append(("two-stage, class means", ClassAnchors.one_per_class(means, classes)))
        brute = BruteForceIndex.build(db, space)
        size = f"{len(db)} / {len(q)} / {np.unique(db_labels).size}"
        methods: list[tuple[str, dict[str, float], Callable[[np.ndarray, int], object]]] = []
        for name, a in variants:
            scores = compare_retrieval(q, q_labels, db, db_labels, a, space, ks=(20, 100))
            if not methods:
                methods.append(("brute force", scores["brute_force"], brute.search))
            methods.append((name, scores["two_stage"], TwoStageIndex.build(db, db_labels, a, space).search))
        for t in args.threads:
            for method, s, search in methods:
                with threads(t):
                    ms = time_per_query(search, q, args.k, args.repeats, args.single)
                acc = pct(s["stage1_accuracy"]) if "stage1_accuracy" in s else ""
                line = (
                    f"| {data} | {loss} | {space} | {size} | {t} | {method} | {pct(s['map'])} | "
                    f"{pct(s['precision_at_20'])} | {pct(s['precision_at_100'])} | {acc} | "
                    f"{ms['batch']:.4f} | {ms['single']:.4f} |"
                )
                print(line, flush=True)

    print(header)
    print(rule, flush=True)
    for data in args.datasets:
        data_dir = args.omniglot_dir if data == "omniglot" else None
        dataset = load_dataset(data, DatasetOptions(data_dir, 28, cache))
        database, queries = closed_set_datasets(dataset, seed=args.seed, query_fraction=args.query_fraction)
        config = make_config(data, args.epochs, args.iters)
        for loss in args.losses:
            space: Space = LOSSES.get(loss).embedding_space
            db, q, anchors, wall = train_and_embed(config, loss, database, queries, args.seed)
            print(f"<!-- trained {loss} on {data}: {wall:.1f} s -->", flush=True)
            add_rows(data, loss, space, db, database.labels, q, queries.labels, anchors, True)
            if first is None:
                first = (db, database.labels, q, queries.labels, anchors, data, loss)

    if first is not None:
        db, db_labels, q, q_labels, anchors, data, loss = first
        space = LOSSES.get(loss).embedding_space
        for spec in args.synthetic:
            n_items, n_classes = (int(v) for v in spec.split(":"))
            big = synthetic_scale(
                db, db_labels, q, q_labels, anchors, n_items, n_classes, args.synthetic_queries, args.seed
            )
            add_rows(f"synthetic from {data}", loss, space, *big, with_class_means=True)


if __name__ == "__main__":
    main()
