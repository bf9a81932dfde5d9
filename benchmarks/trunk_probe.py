"""Frozen-feature probe of ``smallcnn`` trunk weights on every Omniglot character.

How good a starting point is a pretrained trunk for the ``mini`` budget, before any fine-tuning?
Every image of the ``omniglot`` dataset (all classes found in ``--data-dir``, loaded as runs load
it, at the ``mini`` budget's 28 px) is embedded with the eval transform (no augmentation, the
trunk in eval mode, BatchNorm at its stored statistics), and scored query = gallery with the
project's metrics (``benchmark.metrics.evaluate``: exact kNN, P@1 and MAP@R) in ``--space``
(cosine by default, the space of most losses), for two embeddings:

- ``trunk``: the trunk's 128-d pooled features, what pretraining shaped;
- ``model``: the ``mini`` fold model at step 0, trunk + the ``Linear(128, 128)`` embedder drawn
  from ``--seed`` as ``build_fold_model`` draws it (MLRC's epoch-0 validation sees this). The
  embedder is random, so this column is the trunk seen through a random projection.

Rows: ``random`` (the trunk initialised from ``--seed``), every registered built-in weights
(``builtin:smallcnn-symbols`` = v1, ``-v2``, ``-v3`` ...), and each ``--weights LABEL=PATH``
candidate file. Deterministic given ``--seed`` (one torch thread, exact search).

Usage::

    PYTHONPATH=. python benchmarks/trunk_probe.py [--data-dir ../shared/data/omniglot] [--seed 0]
        [--weights v3-candidate=/tmp/w/smallcnn-symbols-v3.pt ...] [--space cosine]
        [--max-classes N] [--max-per-class N] [--threads 1]

Prints a Markdown table (one row per weights: sha256 prefix, P@1 and MAP@R of both embeddings, in
percent) preceded by the torch CPU kind and the data summary.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

import benchmark.native  # noqa: F401  (faiss before torch, as in runs: the k-NN sums depend on it)

# isort: split
import numpy as np
import torch

from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, resolve_config
from benchmark.data import DatasetOptions, load_dataset
from benchmark.engine.train import build_fold_model, embed
from benchmark.metrics import evaluate
from benchmark.metrics.knn import SPACES, Space
from benchmark.models.pretrained import BUILTIN_PREFIX, BUILTIN_WEIGHTS, resolve_weights, sha256_of
from benchmark.protocol.run_data import cache_dir, subsample

OMNIGLOT_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "omniglot"
METRICS = ("precision_at_1", "map_at_r")


def probe_config(weights: str | None, data_dir: Path) -> RunConfig:
    """The ``mini`` MLRC config on omniglot, its trunk weights replaced (None: random init)."""
    overrides: dict[str, object] = {"data.dataset": "omniglot", "data.data_dir": str(data_dir)}
    if weights is None:
        overrides.update({"model.pretrained": False, "model.trunk_weights": ""})
    else:
        overrides.update({"model.pretrained": True, "model.trunk_weights": weights})
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("mini").overrides, overrides)
    return config


def weights_rows(candidates: list[str]) -> list[tuple[str, str | None]]:
    """(label, ``model.trunk_weights`` value or None for random init), in table order."""
    rows: list[tuple[str, str | None]] = [("random", None)]
    rows += [(name, f"{BUILTIN_PREFIX}{name}") for name in BUILTIN_WEIGHTS.names()]
    for item in candidates:
        label, sep, path = item.partition("=")
        if not sep:
            label, path = Path(item).stem, item
        rows.append((label, str(Path(path).expanduser().resolve())))
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=OMNIGLOT_DIR, help="the Omniglot zips or folders")
    ap.add_argument("--seed", type=int, default=0, help="random-init trunk and embedder seed")
    ap.add_argument(
        "--weights", action="append", default=[], metavar="LABEL=PATH", help="a candidate weights file"
    )
    ap.add_argument("--space", choices=SPACES, default="cosine")
    ap.add_argument("--max-classes", type=int, default=0, help="first N classes only (0: all; tests)")
    ap.add_argument("--max-per-class", type=int, default=0, help="first N images per class (0: all; tests)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    space: Space = args.space
    t0 = time.perf_counter()
    dataset = subsample(
        load_dataset("omniglot", DatasetOptions(args.data_dir, 28, cache_dir())),
        args.max_classes,
        args.max_per_class,
    )
    device = torch.device("cpu")
    print(
        f"torch CPU capability {torch.backends.cpu.get_cpu_capability()}, torch {torch.__version__}, "
        f"{platform.processor() or platform.machine()}, {args.threads} thread(s)"
    )
    print(
        f"omniglot from {args.data_dir}: {len(np.unique(dataset.labels))} classes, {len(dataset)} images, "
        f"28 px; query = gallery, {space} space, exact kNN; seed {args.seed}"
    )
    print()
    print("| weights | sha256 | trunk P@1 | trunk MAP@R | model P@1 | model MAP@R |")
    print("|---|---|---:|---:|---:|---:|")
    for label, weights in weights_rows(args.weights):
        digest = "-" if weights is None else sha256_of(resolve_weights(weights))[:8]
        config = probe_config(weights, args.data_dir)
        model = build_fold_model(config, dataset, args.seed).to(device)
        cells = []
        for net in (model.trunk, model):
            scores = evaluate(embed(net, dataset.images, device), dataset.labels, space, METRICS)
            cells += [f"{100 * scores[m]:.2f}" for m in METRICS]
        print(f"| {label} | {digest} | " + " | ".join(cells) + " |", flush=True)
    print()
    print(f"<!-- {time.perf_counter() - t0:.0f} s -->")
    return 0


if __name__ == "__main__":
    sys.exit(main())
