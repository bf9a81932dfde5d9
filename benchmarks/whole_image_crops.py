"""Cost of training batches cropped from the whole photo vs from the evaluation's centre square.

Usage::

    python benchmarks/whole_image_crops.py [--images 256] [--batches 8] [--repeats 7]
                                           [--image-size 227] [--jpeg-size 500x375] [--threads N]

Generates a CUB-200-2011-like tree of ``--jpeg-size`` JPEGs (CUB's typical size) in a temporary
folder and times, per batch of 32 (decode + paper augmentation, the work of the training loop's
batch producer), two ways of making a training batch of an on-disk dataset:

* ``centre square`` — before issue 13: decode to the ``S x S`` evaluation crop (shorter side
  ``round(S * 256/227)``, centre crop), then the batched random resized crop inside that square;
* ``whole image``   — now: decode the whole image at shorter side ``round(S * 256/227)``
  (uncropped), then a random resized crop of each image from all of it.

Both orders alternate within a repeat (flipping between repeats) so load drift hits both alike;
median per batch with min-max over repeats. Decoding dominates both and is the same JPEG decode
and resize; the difference is the crop step and the larger uint8 array.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmark.data.augment import PAPER_AUGMENT, train_batch
from benchmark.data.registry import DatasetOptions
from benchmark.data.standard import load_cub200


def make_tree(root: Path, n_images: int, width: int, height: int) -> Path:
    """CUB_200_2011 with ``n_images`` smooth random JPEGs in 8 classes."""
    cub = root / "CUB_200_2011"
    rng = np.random.default_rng(0)
    images, labels, classes = [], [], []
    for c in range(1, 9):
        classes.append(f"{c} {c:03d}.C{c}")
    for i in range(1, n_images + 1):
        c = 1 + (i - 1) % 8
        rel = f"{c:03d}.C{c}/{i}.jpg"
        (cub / "images" / rel).parent.mkdir(parents=True, exist_ok=True)
        small = rng.integers(0, 255, (height // 8, width // 8, 3), dtype=np.uint8)
        Image.fromarray(small).resize((width, height), Image.Resampling.BILINEAR).save(
            cub / "images" / rel, quality=90
        )
        images.append(f"{i} {rel}")
        labels.append(f"{i} {c}")
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--images", type=int, default=256)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--image-size", type=int, default=227)
    parser.add_argument("--jpeg-size", default="500x375")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    width, height = (int(v) for v in args.jpeg_size.split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        root = make_tree(Path(tmp), args.images, width, height)
        dataset = load_cub200(DatasetOptions(root, args.image_size, Path(tmp) / "cache"))
        rng = np.random.default_rng(0)
        batches = [torch.from_numpy(rng.choice(len(dataset), 32, replace=False)) for _ in range(args.batches)]

        def centre_square() -> None:
            gen = torch.Generator().manual_seed(0)
            for idx in batches:
                train_batch(dataset.images[idx], PAPER_AUGMENT, gen)

        def whole_image() -> None:
            gen = torch.Generator().manual_seed(0)
            for idx in batches:
                dataset.images.train_crops(idx, PAPER_AUGMENT, gen)

        ways = {"centre square": centre_square, "whole image": whole_image}
        times: dict[str, list[float]] = {name: [] for name in ways}
        centre_square()  # warm the page cache and thread pools
        for r in range(args.repeats):
            for name in list(ways) if r % 2 == 0 else list(reversed(ways)):
                t0 = time.perf_counter()
                ways[name]()
                times[name].append((time.perf_counter() - t0) / len(batches) * 1000)
        print(
            f"{args.images} JPEGs {width}x{height}, S = {args.image_size}, batch 32, {args.batches} batches "
            f"x {args.repeats} repeats, torch threads {torch.get_num_threads()}, "
            f"decode threads {dataset.decode_threads}"
        )
        base = statistics.median(times["centre square"])
        for name, values in times.items():
            med = statistics.median(values)
            print(
                f"{name:14s} median {med:7.1f} ms/batch (min {min(values):.1f}, max {max(values):.1f}), "
                f"ratio {med / base:.2f}"
            )


if __name__ == "__main__":
    main()
