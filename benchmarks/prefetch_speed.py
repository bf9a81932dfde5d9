"""Training time with and without background batch prefetching (``train_with_loss(prefetch_depth=...)``).

Usage::

    python benchmarks/prefetch_speed.py [--iters 15] [--repeats 5] [--image-size 128]
                                        [--jpeg-size 300] [--threads 1] [--jobs 1] [--depths 2,0]

Generates a CUB-200-2011-like tree of ``--jpeg-size``-px JPEGs in a temporary folder, then times:

1. Whole ``train_with_loss`` calls (one epoch of ``--iters`` iterations, batch 32, paper
   augmentation, small CNN trunk from scratch, validation on 20 images) on ``lazy``, the on-disk
   dataset decoded on every batch (the standard datasets' path), and ``memory``, the same images
   decoded once into a tensor (the glyphs/omniglot path). The "preparation alone" column is the
   time to sample, decode and augment the call's batches without training: perfect overlap can
   save at most that much (or the training time, if smaller). ``--jobs 2`` runs each timed call
   in 2 processes at once, as fold-parallel training does (one torch thread each by default).
2. The prefetcher with the same real batch preparation but a simulated accelerator step: the
   consumer sleeps as long as one batch takes to prepare, leaving the CPU to the producer as a
   process waiting on a GPU does. This is the case prefetching is for; on this CPU-only machine
   the CNN step itself keeps the cores busy, so (1) can gain little.

Depths alternate within a repeat (their order flips between repeats) so that drift in the
machine's load hits all of them alike; medians, with min-max, and the ratio to depth 0
(synchronous). On a shared 2-core machine the timings are noisy: read the ratios, not the digits.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image

from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, resolve_config
from benchmark.data.augment import PAPER_AUGMENT, train_batch
from benchmark.data.base import ImageDataset
from benchmark.data.prefetch import Prefetcher
from benchmark.data.registry import DatasetOptions, load_dataset
from benchmark.data.sampler import MPerClassSampler
from benchmark.engine.train import remap_labels, train_with_loss

BATCH = 32
LOSS = "contrastive"


def make_jpeg_tree(root: Path, n_classes: int, per_class: int, side: int) -> Path:
    """A CUB_200_2011 layout of ``side``-px JPEGs: a smooth per-class gradient plus noise, so that
    the files decode like photos (neither trivially flat nor pure noise)."""
    cub = root / "CUB_200_2011"
    rng = np.random.default_rng(0)
    images, labels, classes = [], [], []
    ramp = np.linspace(0.0, 1.0, side)
    i = 1
    for c in range(1, n_classes + 1):
        name = f"{c:03d}.Bird_{c}"
        classes.append(f"{c} {name}")
        base, tilt = rng.uniform(40, 200, 3), rng.uniform(-60, 60, 3)
        for k in range(per_class):
            rel = f"{name}/img_{k}.jpg"
            path = cub / "images" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            gradient = base + tilt * (ramp[:, None, None] + ramp[None, :, None]) / 2
            pixels = np.clip(gradient + rng.normal(0, 25, (side, side, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(path, quality=90)
            images.append(f"{i} {rel}")
            labels.append(f"{i} {c}")
            i += 1
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    return cub


def run_config(image_size: int, iters: int) -> RunConfig:
    """MLRC with the smoke budget, shrunk to one epoch of ``iters`` iterations on photos."""
    user = {
        "data.image_size": image_size,
        "data.augment": "paper",
        "model.trunk": "smallcnn",
        "model.pretrained": False,
        "train.batch_size": BATCH,
        "train.iters_per_epoch": iters,
        "train.max_epochs": 1,
        "train.eval_every": 1,
    }
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("smoke").overrides, user)
    return config


def time_training(config: RunConfig, train: ImageDataset, val: ImageDataset, depth: int) -> float:
    """Wall seconds of one ``train_with_loss`` call."""
    start = time.perf_counter()
    train_with_loss(
        config=config,
        loss_name=LOSS,
        loss_params={},
        train=train,
        val=val,
        augment=PAPER_AUGMENT,
        seed=0,
        device=torch.device("cpu"),
        prefetch_depth=depth,
    )
    return time.perf_counter() - start


def prepared_batches(train: ImageDataset, iters: int) -> Iterator[torch.Tensor]:
    """``iters`` training batches as the trainer prepares them: sampled, decoded, augmented."""
    sampler = MPerClassSampler(remap_labels(train.labels), 4, BATCH, np.random.default_rng(0))
    gen = torch.Generator().manual_seed(0)
    for batch in sampler.sample(iters):
        yield train_batch(train.images[torch.from_numpy(batch)], PAPER_AUGMENT, gen)


def time_preparation(train: ImageDataset, iters: int) -> float:
    """Wall seconds to prepare ``iters`` batches without training on them."""
    start = time.perf_counter()
    for _ in prepared_batches(train, iters):
        pass
    return time.perf_counter() - start


def time_simulated_step(train: ImageDataset, iters: int, depth: int, step_s: float) -> float:
    """Wall seconds of ``iters`` real batch preparations consumed by a simulated accelerator step.

    The step sleeps ``step_s``: like a process waiting on a GPU kernel, it leaves the CPU to the
    producer, which no CPU training step here does.
    """
    start = time.perf_counter()
    with Prefetcher(prepared_batches(train, iters), depth) as batches:
        for _ in batches:
            time.sleep(step_s)
    return time.perf_counter() - start


Split = tuple[ImageDataset, ImageDataset]


def load_splits(cub: Path, image_size: int, cache: Path) -> dict[str, Split]:
    """(train, val) of the ``lazy`` and ``memory`` datasets: all classes but two for training, 20
    images of the last two for validation (part of every timed call, so kept small)."""
    # Typed ImageDataset, as the runner sees it; at run time a LazyImageDataset (decodes on indexing).
    lazy = load_dataset("cub200", DatasetOptions(cub, image_size, cache))
    memory = ImageDataset("cub200-in-memory", lazy.images[:], lazy.labels.copy())
    splits = {}
    for source, data in (("lazy", lazy), ("memory", memory)):
        classes = data.classes()
        val = data.subset(classes[-2:].tolist())
        splits[source] = (data.subset(classes[:-2].tolist()), val.take(np.arange(min(20, len(val)))))
    return splits


# --jobs N: each timed call runs in N spawned processes at once, like fold-parallel training
# (benchmark.engine.parallel: one process per core, one torch thread each). Each worker builds
# its datasets once, from the shared JPEG tree.
_WORKER: dict[str, Any] = {}


def _worker_init(cub: Path, image_size: int, iters: int, threads: int, cache: Path) -> None:
    torch.set_num_threads(threads)
    _WORKER["config"] = run_config(image_size, iters)
    _WORKER["splits"] = load_splits(cub, image_size, cache)


def _worker_train(source: str, depth: int) -> float:
    train, val = _WORKER["splits"][source]
    return time_training(_WORKER["config"], train, val, depth)


def timed_calls(pool: ProcessPoolExecutor | None, jobs: int, source: str, depth: int) -> float:
    """Wall seconds of ``jobs`` simultaneous ``train_with_loss`` calls (one in-process without a pool)."""
    if pool is None:
        return _worker_train(source, depth)
    start = time.perf_counter()
    for future in [pool.submit(_worker_train, source, depth) for _ in range(jobs)]:
        future.result()
    return time.perf_counter() - start


def row(label: str, depth: int, values: list[float], reference: float, per: int, extra: str) -> str:
    median = statistics.median(values)
    return (
        f"| {label} | {depth} | {median:.2f} ({min(values):.2f}-{max(values):.2f}) "
        f"| {1e3 * median / per:.0f} | {median / reference:.2f} | {extra} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--iters", type=int, default=15, help="training iterations per timed call")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--image-size", type=int, default=128, help="data.image_size (decoded side)")
    parser.add_argument("--jpeg-size", type=int, default=300, help="side of the generated JPEGs")
    parser.add_argument("--classes", type=int, default=20)
    parser.add_argument("--per-class", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (fold workers use 1)")
    parser.add_argument("--jobs", type=int, default=1, help="simultaneous training processes per call")
    parser.add_argument("--depths", default="2,0", help="prefetch depths to compare (0 = synchronous)")
    parser.add_argument("--sources", default="lazy,memory", help="comma-separated: lazy, memory")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    depths = sorted({int(d) for d in args.depths.split(",")} | {0}, reverse=True)  # 0: the reference
    sources = args.sources.split(",")

    with tempfile.TemporaryDirectory(prefix="prefetch_speed_") as tmp:
        cub = make_jpeg_tree(Path(tmp), args.classes, args.per_class, args.jpeg_size)
        cache = Path(tmp) / "cache"
        _worker_init(cub, args.image_size, args.iters, args.threads, cache)
        splits: dict[str, Split] = _WORKER["splits"]
        pool = None
        if args.jobs > 1:
            pool = ProcessPoolExecutor(
                args.jobs,
                mp.get_context("spawn"),
                initializer=_worker_init,
                initargs=(cub, args.image_size, args.iters, args.threads, cache),
            )
        try:
            # Warm-up (page cache, torch kernels, allocator, worker start); it also sets the
            # simulated step to one lazy batch's preparation, where overlap can at best halve the total.
            for source in sources:
                timed_calls(pool, args.jobs, source, depths[0])
            sim_iters = 3 * args.iters  # the simulated step is cheap; more batches, steadier numbers
            step_s = time_preparation(splits["lazy"][0], sim_iters) / sim_iters

            train_s: dict[tuple[str, int], list[float]] = {(s, d): [] for s in sources for d in depths}
            prep_s: dict[str, list[float]] = {s: [] for s in sources}
            sim_s: dict[int, list[float]] = {d: [] for d in depths}
            for repeat in range(args.repeats):
                order = depths if repeat % 2 == 0 else depths[::-1]
                for source in sources:
                    for depth in order:
                        train_s[(source, depth)].append(timed_calls(pool, args.jobs, source, depth))
                    prep_s[source].append(time_preparation(splits[source][0], args.iters))
                for depth in order:
                    sim_s[depth].append(time_simulated_step(splits["lazy"][0], sim_iters, depth, step_s))
                print(f"repeat {repeat + 1}/{args.repeats} done", flush=True)
        finally:
            if pool is not None:
                pool.shutdown()

    print(
        f"\n1. train_with_loss: {args.iters} iterations/call, batch {BATCH}, {args.jpeg_size}px JPEGs -> "
        f"{args.image_size}px, paper augmentation, smallcnn, {args.jobs} process(es) x {args.threads} torch "
        f"thread(s) per call, torch {torch.__version__}; median (min-max) of {args.repeats}\n"
    )
    if args.jobs > 1:
        print(f"(s/call and ms/iter: wall time of {args.jobs} identical calls running at once)\n")
    print("| data | prefetch depth | s/call | ms/iter | vs depth 0 | preparation alone (s/call) |")
    print("|---|---:|---:|---:|---:|---:|")
    for source in sources:
        reference = statistics.median(train_s[(source, 0)])
        prep = f"{statistics.median(prep_s[source]):.2f}"
        for depth in depths:
            print(row(source, depth, train_s[(source, depth)], reference, args.iters, prep))
    print(
        f"\n2. lazy batch preparation + simulated accelerator step of {1e3 * step_s:.0f} ms "
        f"(= one batch's preparation), {sim_iters} batches; ideal with overlap: 0.50\n"
    )
    print("| data | prefetch depth | s/run | ms/batch | vs depth 0 | step alone (s/run) |")
    print("|---|---:|---:|---:|---:|---:|")
    reference = statistics.median(sim_s[0])
    for depth in depths:
        print(row("lazy", depth, sim_s[depth], reference, sim_iters, f"{sim_iters * step_s:.2f}"))


if __name__ == "__main__":
    main()
