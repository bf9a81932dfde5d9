"""Forward + backward time of every registered loss on one trainer-like batch.

Usage::

    python benchmarks/loss_timing.py [--batch 32] [--dim 128] [--num-classes 100] [--repeats 50]
                                     [--threads 1] [--device cpu]

Each loss is built with its defaults; the batch is sampled like the MLRC trainer does (m images
per class from the loss's spec). The time covers ``loss(emb, labels).backward()`` only (no model),
reported as the median over ``--repeats`` runs after a few warm-up runs, as a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from benchmark.losses import LOSSES, LossContext, build_loss


def time_loss(name: str, args: argparse.Namespace) -> float:
    """Median seconds of one forward + backward of loss ``name``."""
    spec = LOSSES.get(name)
    device = torch.device(args.device)
    torch.manual_seed(0)
    loss = build_loss(name, LossContext(args.num_classes, args.dim), {}).to(device)
    m = spec.m_per_class
    classes = torch.randperm(args.num_classes)[: args.batch // m]
    labels = classes.repeat_interleave(m).to(device)
    emb = torch.randn(len(labels), args.dim, device=device, requires_grad=True)

    def step() -> None:
        emb.grad = None
        loss.zero_grad(set_to_none=True)
        loss(emb, labels).backward()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(args.warmup):
        step()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--num-classes", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--losses", nargs="*", default=None, help="subset of loss names (default: all)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    names = args.losses or LOSSES.names()
    print(
        f"batch {args.batch}, dim {args.dim}, C = {args.num_classes}, device {args.device}, "
        f"{args.threads} thread(s), torch {torch.__version__}; median of {args.repeats}\n"
    )
    print("| loss | m | forward+backward (ms) |")
    print("|---|---:|---:|")
    for name in names:
        seconds = time_loss(name, args)
        print(f"| {name} | {LOSSES.get(name).m_per_class} | {1e3 * seconds:.3f} |")


if __name__ == "__main__":
    main()
