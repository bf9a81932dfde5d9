"""Training throughput of dmlbench's fold training against pytorch-metric-learning's own trainer,
compared like with like, and the time one fold takes to converge.

Usage::

    python benchmarks/train_throughput.py [--dataset omniglot] [--data-dir /work/shared/data/omniglot]
        [--budget mini] [--set KEY=VALUE ...] [--loss contrastive] [--threads 1]
        [--iters 30] [--repeats 5] [--variants all] [--convergence]
        [--convergence-losses mfcont,contrastive,proxyanchor] [--max-fold-s 1800] [--skip-throughput]

**Throughput.** Every variant trains the same model (the budget's trunk + 128-d embedder, built
from the same seed), the same loss object type with its default parameters, the same batch size,
the same sampler (dmlbench's m-per-class batches; PML's trainer gets them as its index stream or
batch sampler), the same augmentation math (dmlbench's ``characters`` transform) and the same
``torch.set_num_threads``, on fold ``--fold``'s training images of the budget's configuration.
The variants (``--variants``, comma-separated, default all):

* ``dmlbench``: :func:`benchmark.engine.train.train_with_loss` for one epoch of ``--iters``
  iterations, as a run trains (channels-last on the CPU; with one torch thread its
  ``default_prefetch_depth`` prepares batches in a second OS thread);
* ``dmlbench-noprefetch``: the same with ``prefetch_depth=0``: sampling and augmentation in the
  training thread, one OS thread doing work;
* ``pml``: PML's ``MetricLossOnly`` as its documentation shows it used: the model in the default
  (NCHW) layout, a Dataset that augments each image in ``__getitem__`` (as a torchvision
  transform does; here dmlbench's transform on one image), the DataLoader's per-item fetch and
  default collate, ``dataloader_num_workers=0``;
* ``pml-cl``: the same with the model converted to channels-last (one line for a PML user);
* ``pml-cl-batched``: channels-last and dmlbench's data pipeline: a batch sampler, a Dataset with
  ``__getitems__`` that indexes the whole batch at once, and a collate function that augments it
  with one ``train_batch`` call, ``dataloader_num_workers=0`` (one OS thread, like
  ``dmlbench-noprefetch``);
* ``pml-cl-batched-w1``: the same with ``dataloader_num_workers=1``: one worker process prepares
  batches on another core, as dmlbench's prefetch thread does (the pair of ``dmlbench``).

PML's trainer also gets RMSprop for the model and the loss's parameters as dmlbench builds them and
tqdm's bar disabled. Images per second are measured between the end of the first and the end of
the last training step (each engine's own per-step hook: ``on_step`` and
``end_of_iteration_hook``), so set-up, data-loader and worker start and validation are excluded.
The variants alternate within every repetition (their order reverses each time), ``--repeats``
repetitions (at least 5 for the issue's numbers); medians are printed with the ratios:

* (a) ``dmlbench / pml``: against PML as its documentation shows it used;
* (b) ``dmlbench-noprefetch / pml-cl-batched``: what the engine itself adds, given the same
  layout, augmentation and one OS thread each; (b') ``dmlbench / pml-cl-batched-w1``: the same
  with a second core for batch preparation on both sides.

The header names ``torch.backends.cpu.get_cpu_capability()`` (the host kind the numbers belong
to). Take the numbers on an idle machine; on a shared one read nothing but the ratios, and those
with care.

**Convergence** (``--convergence``): fold ``--fold`` of the budget's MLRC configuration is
trained to its stop for each of ``--convergence-losses`` (default parameters); printed are the
wall seconds, the epochs run, the best epoch and ``stopped_by`` (``patience`` = converged by the
protocol's rule; ``max_epochs`` = the budget's epoch cap came first; ``time`` = ``--max-fold-s``).
This depends on the budget's settings (``--budget``, ``--set``).
"""

from __future__ import annotations

import os

# PML's trainer draws a tqdm bar (its output, not its work; the per-step loss formatting it does
# stays); tqdm reads this when imported, so it is set before anything imports PML.
os.environ.setdefault("TQDM_DISABLE", "1")

import argparse
import dataclasses
import logging
import statistics
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from profile_fold import train_cpu_fold
from torch import nn

from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, parse_set_option, resolve_config
from benchmark.data.augment import AugmentSpec, train_batch
from benchmark.data.base import ImageDataset
from benchmark.data.sampler import MPerClassSampler
from benchmark.data.splits import mlrc_split
from benchmark.engine.train import make_optimizer, remap_labels
from benchmark.losses import LOSSES, LossContext, build_loss
from benchmark.models.trunks import build_model
from benchmark.protocol.run_data import AUGMENTS, cache_dir, fold_data, load_run_dataset

SEED = 0


def parse_sets(items: list[str]) -> dict[str, Any]:
    """``["train.max_epochs=50", "model.freeze_trunk_bn=true"]`` -> a dict, each value read as
    ``dmlbench run --set`` reads it (TOML: numbers, booleans, lists; bare words are strings)."""
    return dict(parse_set_option(item) for item in items)


def load_config(args: argparse.Namespace, extra: dict[str, Any] | None = None) -> RunConfig:
    user: dict[str, Any] = {"data.dataset": args.dataset, **parse_sets(args.set), **(extra or {})}
    if args.dataset != "glyphs":
        user["data.data_dir"] = args.data_dir
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get(args.budget).overrides, user)
    return config


# -- PML's side ----------------------------------------------------------------------------------


class AugmentedImages(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Fold images with dmlbench's training augmentation applied per image (PML's data path)."""

    def __init__(self, data: ImageDataset, labels: np.ndarray, augment: AugmentSpec, seed: int) -> None:
        self.images, self.labels, self.augment = data.images, labels, augment
        self.gen = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return train_batch(self.images[i : i + 1], self.augment, self.gen)[0], int(self.labels[i])


class BatchImages(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """Fold images indexed a whole batch at a time (``__getitems__``): uint8 images and labels."""

    def __init__(self, data: ImageDataset, labels: np.ndarray) -> None:
        self.images, self.labels = data.images, torch.from_numpy(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[i], self.labels[i]

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        # The DataLoader's fetcher calls this with a batch sampler's whole batch, instead of one
        # __getitem__ per index followed by a collate that stacks them.
        idx = torch.tensor(indices)
        return self.images[idx], self.labels[idx]


class AugmentBatch:
    """Collate function: one ``train_batch`` call for the whole batch (dmlbench's augmentation)."""

    def __init__(self, augment: AugmentSpec, seed: int) -> None:
        self.augment = augment
        self.gen = torch.Generator().manual_seed(seed)

    def __call__(self, batch: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels = batch
        return train_batch(images, self.augment, self.gen), labels


def _mpc_batches(labels: np.ndarray, m: int, batch: int, iters: int, seed: int) -> Iterator[list[int]]:
    sampler = MPerClassSampler(labels, m, batch, np.random.default_rng(seed))
    for indices in sampler.sample(iters):
        yield [int(i) for i in indices]


class IndexStream(torch.utils.data.Sampler[int]):
    """dmlbench's m-per-class batches, flattened into the index stream a DataLoader batches."""

    def __init__(self, labels: np.ndarray, m: int, batch: int, iters: int, seed: int) -> None:
        self.labels, self.m, self.batch, self.iters, self.seed = labels, m, batch, iters, seed

    def __len__(self) -> int:
        return self.iters * self.batch

    def __iter__(self) -> Iterator[int]:
        for batch in _mpc_batches(self.labels, self.m, self.batch, self.iters, self.seed):
            yield from batch


class MPerClassBatches(torch.utils.data.BatchSampler):
    """dmlbench's m-per-class batches as a batch sampler (PML's trainer then passes it to its
    DataLoader as ``batch_sampler``)."""

    def __init__(self, labels: np.ndarray, m: int, batch: int, iters: int, seed: int) -> None:
        # BatchSampler's own state (a sampler to group) is not used: batches come whole.
        self.labels, self.m, self.batch, self.iters, self.seed = labels, m, batch, iters, seed

    def __len__(self) -> int:
        return self.iters

    def __iter__(self) -> Iterator[list[int]]:
        yield from _mpc_batches(self.labels, self.m, self.batch, self.iters, self.seed)


class PMLLossAdapter(nn.Module):
    """PML's trainer calls ``loss(embeddings, labels, indices_tuple)``; dmlbench's losses take two."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(
        self, embeddings: torch.Tensor, labels: torch.Tensor, indices_tuple: Any = None
    ) -> torch.Tensor:
        out: torch.Tensor = self.inner(embeddings, labels)
        return out


@dataclasses.dataclass(frozen=True)
class PMLVariant:
    """How PML's side is set up: model layout, data pipeline, DataLoader worker processes."""

    channels_last: bool
    batched: bool
    workers: int


PML_VARIANTS = {
    "pml": PMLVariant(channels_last=False, batched=False, workers=0),
    "pml-cl": PMLVariant(channels_last=True, batched=False, workers=0),
    "pml-cl-batched": PMLVariant(channels_last=True, batched=True, workers=0),
    "pml-cl-batched-w1": PMLVariant(channels_last=True, batched=True, workers=1),
}
DMLBENCH_VARIANTS = {"dmlbench": None, "dmlbench-noprefetch": 0}  # name -> prefetch_depth
VARIANTS = (*DMLBENCH_VARIANTS, *PML_VARIANTS)


def pml_images_per_s(
    config: RunConfig, loss_name: str, train: ImageDataset, iters: int, variant: PMLVariant
) -> float:
    from pytorch_metric_learning import trainers

    # It warns that the identity embedder has no optimiser, on every trainer built; that is meant.
    logging.getLogger("PML").setLevel(logging.ERROR)
    tc = config.train
    labels = remap_labels(train.labels)
    spec = LOSSES.get(loss_name)
    model = build_model(
        config.model.trunk,
        train.images.shape[1],
        config.model.embedding_dim,
        pretrained=config.model.pretrained,
        weights_path=config.model.trunk_weights,
        seed=SEED,
    )
    if variant.channels_last:
        model = model.to(memory_format=torch.channels_last)
    torch.manual_seed(SEED)
    loss = build_loss(loss_name, LossContext(int(labels.max()) + 1, config.model.embedding_dim), {})
    optimizers = {
        "trunk_optimizer": make_optimizer(
            "rmsprop", list(model.parameters()), tc.lr, tc.weight_decay, tc.momentum
        )
    }
    loss_params = [p for p in loss.parameters() if p.requires_grad]
    if loss_params:
        lr = float(spec.defaults.get("param_lr", 1e-3))
        optimizers["metric_loss_optimizer"] = make_optimizer(
            "rmsprop", loss_params, lr, spec.param_weight_decay, tc.param_momentum
        )
    augment = AUGMENTS[config.data.augment]
    if augment is None:
        raise SystemExit("the throughput comparison needs a training augmentation (data.augment)")
    data: Any
    sampler: Any
    if variant.batched:
        data = BatchImages(train, labels)
        sampler = MPerClassBatches(labels, spec.m_per_class, tc.batch_size, iters, SEED)
        collate: Any = AugmentBatch(augment, SEED)
    else:
        data = AugmentedImages(train, labels, augment, SEED)
        sampler = IndexStream(labels, spec.m_per_class, tc.batch_size, iters, SEED)
        collate = None
    stamps: list[float] = []
    trainer = trainers.MetricLossOnly(
        models={"trunk": model, "embedder": nn.Identity()},
        optimizers=optimizers,
        batch_size=tc.batch_size,
        loss_funcs={"metric_loss": PMLLossAdapter(loss)},
        dataset=data,
        sampler=sampler,
        collate_fn=collate,
        iterations_per_epoch=iters,
        dataloader_num_workers=variant.workers,
        data_device=torch.device("cpu"),
        end_of_iteration_hook=lambda _t: stamps.append(time.perf_counter()),
    )
    trainer.train(num_epochs=1)
    return (len(stamps) - 1) * tc.batch_size / (stamps[-1] - stamps[0])


# -- dmlbench's side -----------------------------------------------------------------------------


def dmlbench_images_per_s(
    config: RunConfig,
    loss_name: str,
    train: ImageDataset,
    val: ImageDataset,
    iters: int,
    prefetch_depth: int | None = None,
) -> float:
    stamps: list[float] = []
    one_epoch = dataclasses.replace(
        config, train=dataclasses.replace(config.train, iters_per_epoch=iters, max_epochs=1, eval_every=1)
    )

    def stamp(_epoch: int, _step: int, _steps: int) -> None:
        stamps.append(time.perf_counter())

    train_cpu_fold(one_epoch, loss_name, {}, train, val, SEED, on_step=stamp, prefetch_depth=prefetch_depth)
    return (len(stamps) - 1) * config.train.batch_size / (stamps[-1] - stamps[0])


# -- main ----------------------------------------------------------------------------------------


def images_per_s(
    name: str, config: RunConfig, loss: str, train: ImageDataset, val: ImageDataset, iters: int
) -> float:
    """One timed run of variant ``name`` (see the module docstring)."""
    if name in DMLBENCH_VARIANTS:
        return dmlbench_images_per_s(config, loss, train, val, iters, DMLBENCH_VARIANTS[name])
    return pml_images_per_s(config, loss, train, iters, PML_VARIANTS[name])


#: The ratios the issue asks for: (label, numerator variant, denominator variant).
RATIOS = (
    ("(a) dmlbench / PML as documented", "dmlbench", "pml"),
    ("(b) engine alone, 1 OS thread each: dmlbench-noprefetch / pml-cl-batched", "dmlbench-noprefetch",
     "pml-cl-batched"),
    ("(b') engine alone, 2nd core for batches on both sides: dmlbench / pml-cl-batched-w1", "dmlbench",
     "pml-cl-batched-w1"),
    ("dmlbench / pml-cl", "dmlbench", "pml-cl"),
    ("prefetch: dmlbench / dmlbench-noprefetch", "dmlbench", "dmlbench-noprefetch"),
)  # fmt: skip


def throughput(args: argparse.Namespace, config: RunConfig, train: ImageDataset, val: ImageDataset) -> None:
    """Interleaved repeats of every variant; prints the Markdown table of medians and the ratios."""
    names = list(VARIANTS) if args.variants == "all" else [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        raise SystemExit(f"unknown variant(s) {', '.join(unknown)}; valid: {', '.join(VARIANTS)}")
    rates: dict[str, list[float]] = {name: [] for name in names}
    # Warm-up (allocator, first-call costs, worker start) for every variant, untimed.
    for name in names:
        images_per_s(name, config, args.loss, train, val, args.warmup_iters)
    for r in range(args.repeats):
        for name in names if r % 2 == 0 else reversed(names):
            rates[name].append(images_per_s(name, config, args.loss, train, val, args.iters))
    med = {k: statistics.median(v) for k, v in rates.items()}
    base = med.get("pml")
    print(
        f"\nThroughput, loss {args.loss}, {args.iters} steps per run, median of {args.repeats} "
        f"interleaved repeats; torch CPU capability {torch.backends.cpu.get_cpu_capability()}, "
        f"{args.threads} torch thread(s):\n"
    )
    print("| variant | median images/s | min-max | vs pml |")
    print("|---|---:|---:|---:|")
    for k, v in rates.items():
        vs = f"{med[k] / base:.2f}x" if base else "–"
        print(f"| {k} | {med[k]:.1f} | {min(v):.1f}-{max(v):.1f} | {vs} |")
    print()
    for label, num, den in RATIOS:
        if num in med and den in med:
            print(f"ratio {label}: {med[num] / med[den]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="omniglot")
    parser.add_argument("--data-dir", default="/work/shared/data/omniglot")
    parser.add_argument("--budget", default="mini")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    parser.add_argument("--fold", type=int, default=0)
    parser.add_argument("--loss", default="contrastive", help="loss of the throughput comparison")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--iters", type=int, default=30, help="training steps per timed run")
    parser.add_argument("--warmup-iters", type=int, default=5, help="steps of each variant's untimed warm-up")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", default="all", help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--convergence", action="store_true", help="also time folds to their stop")
    parser.add_argument("--convergence-losses", default="mfcont,contrastive,proxyanchor")
    parser.add_argument("--max-fold-s", type=float, default=None, help="stop a convergence fold after this")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    config = load_config(args)
    dataset = load_run_dataset(config, cache_dir())
    data = fold_data(dataset, mlrc_split(dataset.classes().tolist(), config.protocol.n_folds))
    train, val = data.folds[args.fold]
    assert isinstance(train, ImageDataset) and isinstance(val, ImageDataset)
    tc = config.train
    print(
        f"{args.dataset} fold {args.fold} ({len(train.labels)} train images), budget {args.budget}"
        f"{' ' + ' '.join(args.set) if args.set else ''}: trunk {config.model.trunk}, "
        f"{config.data.image_size} px, batch {tc.batch_size}; {args.threads} torch thread(s), "
        f"torch {torch.__version__}, {os.cpu_count()} CPUs"
    )
    if not args.skip_throughput:
        throughput(args, config, train, val.take(np.arange(16)))

    if args.convergence:
        print(
            f"\nTime to convergence, fold {args.fold}: max_epochs {tc.max_epochs}, "
            f"iters/epoch {tc.iters_per_epoch}, eval every {tc.eval_every}, patience {tc.patience}"
        )
        print("| loss | wall s | epochs | best epoch | best val MAP@R | stopped by |")
        print("|---|---:|---:|---:|---:|---|")
        for loss_name in [x for x in args.convergence_losses.split(",") if x]:
            result, _, _ = train_cpu_fold(
                config, loss_name, {}, train, val, SEED, time_limit_s=args.max_fold_s
            )
            print(
                f"| {loss_name} | {result.wall_s:.1f} | {result.epochs} | {result.best_epoch} "
                f"| {result.best_val:.4f} | {result.stopped_by} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
