"""Would training several folds as one batched model be faster than one process per fold?

Usage::

    python benchmarks/batched_folds.py [--steps 60] [--repeats 5] [--image-size 28]

Issue 12 lists "training the 4 folds of a trial as one batched model (grouped convolutions or
``torch.func``)" as a lever for the CPU engine. This measures it on the training step alone, the
part of a fold that the lever could change (forward, loss, backward, RMSprop step; batch
preparation and validation are per fold either way). Fold-steps per second (one fold-step = one
32-image training step of one fold) are compared for these layouts:

* ``separate``: what ``dmlbench run`` does on the CPU: one process per fold, 1 torch thread each,
  2 processes side by side; the model is the ``mini`` budget's smallcnn + 128-d embedder in
  channels-last layout.
* ``grouped-G xP``: G folds as one model in each of P processes (``threads`` torch threads each).
  Every convolution has ``groups=G`` (fold g's images are input channel g, fold g's filters see
  only its own channels), BatchNorm's per-channel statistics are per fold by construction, the G
  embedders are one batched matrix product, and the loss is summed over the folds, so each fold's
  gradients are its own. The maths per fold is the separate model's; only the kernels differ.

Every layout runs its processes at once (spawned, started together behind a barrier) after 10
warm-up steps; the layouts alternate within each repetition; medians over ``--repeats`` are
printed with the ratio to ``separate``. The images are random (augmentation costs the same in
every layout) and the loss is PML's ContrastiveLoss on 8 classes x 4 images per fold. Before
measuring, a grouped copy of 2 separate models is checked to give their outputs (it does, exactly).

Measured on the idle 2-core CPU (AMD EPYC; torch CPU capability AVX2) on 2026-11-24 (runs 1-2:
``--steps 60 --repeats 5``; run 3: ``--steps 200 --repeats 7``):

| layout | run 1 | run 2 | run 3 |
|---|---:|---:|---:|
| separate (2 x 1 thread), fold-steps/s | 115.4 | 115.3 | 104.0 |
| grouped-2 x2 (1 thread each) | 0.94x | 1.03x | 0.90x |
| grouped-2 x1 (2 threads) | 0.68x | 0.78x | 0.75x |
| grouped-4 x1 (2 threads) | 0.72x | 0.73x | 0.73x |

So batching the folds does not pay here: with one thread per process it is within the noise of
separate processes, and one process with 2 threads is 22-32% slower. A trial's folds also stop
at different epochs, which a batched model would have to handle. ``torch.func.vmap`` over a fold
dimension was not measured apart: its batching rule for convolution also runs a grouped
convolution. Not taken (issue 12).
"""

from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import cast

import torch
from pytorch_metric_learning.losses import ContrastiveLoss
from torch import nn

from benchmark.models.trunks import EmbeddingModel, SmallCNN

WIDTHS = (16, 32, 64, 128)
EMBEDDING_DIM = 128
BATCH = 32


@dataclass(frozen=True)
class Layout:
    """``groups`` folds per model, ``processes`` models side by side, ``threads`` torch threads each."""

    name: str
    groups: int
    processes: int
    threads: int


LAYOUTS = (
    Layout("separate", 1, 2, 1),
    Layout("grouped-2 x2", 2, 2, 1),
    Layout("grouped-2 x1", 2, 1, 2),
    Layout("grouped-4 x1", 4, 1, 2),
)


class GroupedSmallCNN(nn.Module):
    """``groups`` independent smallcnn + embedder models evaluated as one: (B, G, H, W) -> (G, B, D)."""

    def __init__(self, groups: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = 1
        for i, w in enumerate(WIDTHS):
            layers += [
                nn.Conv2d(prev * groups, w * groups, 3, padding=1, bias=False, groups=groups),
                nn.BatchNorm2d(w * groups),
                nn.ReLU(inplace=True),
            ]
            if i < len(WIDTHS) - 1:
                layers.append(nn.MaxPool2d(2))
            prev = w
        self.features = nn.Sequential(*layers)
        self.groups = groups
        self.weight = nn.Parameter(torch.randn(groups, WIDTHS[-1], EMBEDDING_DIM) / WIDTHS[-1] ** 0.5)
        self.bias = nn.Parameter(torch.zeros(groups, 1, EMBEDDING_DIM))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = self.features(x).mean(dim=(2, 3))  # (B, G * C), fold-major channels
        per_fold = pooled.view(len(x), self.groups, WIDTHS[-1]).transpose(0, 1)  # (G, B, C)
        return torch.baddbmm(self.bias, per_fold, self.weight)


def grouped_from(models: list[EmbeddingModel]) -> GroupedSmallCNN:
    """A :class:`GroupedSmallCNN` holding copies of ``models``' parameters and BatchNorm statistics."""
    grouped = GroupedSmallCNN(len(models))
    trunks = [cast(SmallCNN, m.trunk) for m in models]
    with torch.no_grad():
        for i, layer in enumerate(grouped.features):
            parts = [t.features[i] for t in trunks]
            for name, tensor in layer.state_dict().items():
                if tensor.dim() > 0:  # every weight/statistic; BatchNorm's step counter is a scalar
                    tensor.copy_(torch.cat([p.state_dict()[name] for p in parts]))
        grouped.weight.copy_(torch.stack([m.embedder.weight.T for m in models]))
        grouped.bias.copy_(torch.stack([m.embedder.bias[None] for m in models]))
    return grouped


def check_equivalence(groups: int = 2, image_size: int = 28) -> float:
    """Largest difference between ``groups`` separate models and their grouped copy, on one
    training-mode forward pass (batch statistics) of different random batches per fold."""
    torch.manual_seed(0)
    models = []
    for _ in range(groups):
        trunk = SmallCNN(1, WIDTHS)
        models.append(EmbeddingModel(trunk, trunk.out_dim, EMBEDDING_DIM))
    grouped = grouped_from(models)
    x = torch.rand(BATCH, groups, image_size, image_size)
    separate = torch.stack([m(x[:, g : g + 1]) for g, m in enumerate(models)])
    return float((grouped(x) - separate).abs().max().detach())


def build(groups: int) -> nn.Module:
    """The layout's model in channels-last layout (as the fold loop places it on the CPU)."""
    model: nn.Module
    if groups == 1:
        trunk = SmallCNN(1, WIDTHS)
        model = EmbeddingModel(trunk, trunk.out_dim, EMBEDDING_DIM)
    else:
        model = GroupedSmallCNN(groups)
    return model.to(memory_format=torch.channels_last)


def worker(
    layout: Layout, steps: int, image_size: int, barrier: Barrier, out: Queue[tuple[float, int]]
) -> None:
    """Train ``steps`` steps after 10 warm-up steps; put (seconds, fold-steps) on ``out``."""
    torch.set_num_threads(layout.threads)
    torch.manual_seed(0)
    model = build(layout.groups)
    loss_fn = ContrastiveLoss()
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-4, weight_decay=1e-4, momentum=0.9, foreach=True)
    labels = torch.arange(BATCH // 4).repeat_interleave(4)
    x = torch.rand(BATCH, layout.groups, image_size, image_size).contiguous(memory_format=torch.channels_last)

    def step() -> None:
        out_emb = model(x)
        if layout.groups == 1:
            loss = loss_fn(out_emb, labels)
        else:
            loss = sum((loss_fn(out_emb[g], labels) for g in range(layout.groups)), torch.zeros(()))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(10):
        step()
    barrier.wait()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    out.put((time.perf_counter() - t0, steps * layout.groups))


def measure(layout: Layout, steps: int, image_size: int) -> float:
    """Fold-steps per second of ``layout``: all its processes' fold-steps over the slowest one's time."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(layout.processes)
    out: Queue[tuple[float, int]] = context.Queue()
    procs = [
        context.Process(target=worker, args=(layout, steps, image_size, barrier, out))
        for _ in range(layout.processes)
    ]
    for p in procs:
        p.start()
    results = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return float(sum(n for _, n in results) / max(s for s, _ in results))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--image-size", type=int, default=28)
    args = ap.parse_args()
    diff = check_equivalence(image_size=args.image_size)
    if diff > 1e-4:
        raise SystemExit(f"the grouped model is not the separate models: outputs differ by {diff:.2e}")
    print(f"grouped-2 model vs 2 separate models: largest output difference {diff:.1e}")
    rates: dict[str, list[float]] = {layout.name: [] for layout in LAYOUTS}
    for rep in range(args.repeats):
        order = LAYOUTS if rep % 2 == 0 else LAYOUTS[::-1]
        for layout in order:
            rates[layout.name].append(measure(layout, args.steps, args.image_size))
        latest = ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items())
        print(f"repeat {rep + 1}/{args.repeats}: {latest}", flush=True)
    base = statistics.median(rates["separate"])
    setting = f"batch {BATCH}, {args.image_size} px, {args.steps} steps"
    print(f"\nfold-steps/s, medians of {args.repeats} ({setting})\n")
    print("| layout | folds per model | processes x threads | fold-steps/s | vs separate |")
    print("|---|---:|---|---:|---:|")
    for layout in LAYOUTS:
        med = statistics.median(rates[layout.name])
        shape = f"{layout.processes} x {layout.threads}"
        print(f"| {layout.name} | {layout.groups} | {shape} | {med:.1f} | {med / base:.2f}x |")


if __name__ == "__main__":
    main()
