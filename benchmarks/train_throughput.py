"""Training throughput of dmlbench's fold training against pytorch-metric-learning's own trainer,
and the time one fold takes to converge.

Usage::

    python benchmarks/train_throughput.py [--dataset omniglot] [--data-dir /work/shared/data/omniglot]
        [--budget mini] [--set KEY=VALUE ...] [--loss contrastive] [--threads 2]
        [--iters 30] [--repeats 5] [--convergence] [--convergence-losses mfcont,contrastive,proxyanchor]
        [--max-fold-s 1800] [--skip-throughput]

**Throughput.** Both engines train the same model (the budget's trunk + 128-d embedder, built
from the same seed), the same loss object type with its default parameters, the same batch size,
the same sampler (dmlbench's m-per-class sampler; PML's trainer gets its index stream), the same
augmentation (dmlbench's ``characters`` transform; applied per image in PML's Dataset, as a PML
user's torchvision transform is) and the same ``torch.set_num_threads``, on fold ``--fold``'s
training images of the budget's configuration:

* ``dmlbench``: :func:`benchmark.engine.train.train_with_loss` for one epoch of ``--iters``
  iterations (validation on 16 images afterwards, outside the timed window);
* ``pml``: ``pytorch_metric_learning.trainers.MetricLossOnly`` with ``dataloader_num_workers=0``
  (the thread count is the same; worker processes would add cores), RMSprop for the model and
  the loss's parameters as dmlbench builds them, tqdm's bar disabled.

Images per second are measured between the end of the first and the end of the last training
step (each engine's own per-step hook: ``on_step`` and ``end_of_iteration_hook``), so set-up,
data-loader start and validation are excluded from both. The engines alternate within every
repetition (their order flips each time), ``--repeats`` repetitions; the medians and the ratio
dmlbench / PML are printed. On a shared 2-core machine the timings are noisy: read the ratio.

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
import statistics
import time
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


class IndexStream(torch.utils.data.Sampler[int]):
    """dmlbench's m-per-class batches, flattened into the index stream a DataLoader batches."""

    def __init__(self, labels: np.ndarray, m: int, batch: int, iters: int, seed: int) -> None:
        self.labels, self.m, self.batch, self.iters, self.seed = labels, m, batch, iters, seed

    def __len__(self) -> int:
        return self.iters * self.batch

    def __iter__(self) -> Any:
        sampler = MPerClassSampler(self.labels, self.m, self.batch, np.random.default_rng(self.seed))
        for batch in sampler.sample(self.iters):
            yield from (int(i) for i in batch)


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


def pml_images_per_s(config: RunConfig, loss_name: str, train: ImageDataset, iters: int) -> float:
    from pytorch_metric_learning import trainers

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
    stamps: list[float] = []
    trainer = trainers.MetricLossOnly(
        models={"trunk": model, "embedder": nn.Identity()},
        optimizers=optimizers,
        batch_size=tc.batch_size,
        loss_funcs={"metric_loss": PMLLossAdapter(loss)},
        dataset=AugmentedImages(train, labels, AUGMENTS[config.data.augment], SEED),  # type: ignore[arg-type]
        sampler=IndexStream(labels, spec.m_per_class, tc.batch_size, iters, SEED),
        iterations_per_epoch=iters,
        dataloader_num_workers=0,
        data_device=torch.device("cpu"),
        end_of_iteration_hook=lambda _t: stamps.append(time.perf_counter()),
    )
    trainer.train(num_epochs=1)
    return (len(stamps) - 1) * tc.batch_size / (stamps[-1] - stamps[0])


# -- dmlbench's side -----------------------------------------------------------------------------


def dmlbench_images_per_s(
    config: RunConfig, loss_name: str, train: ImageDataset, val: ImageDataset, iters: int
) -> float:
    stamps: list[float] = []
    one_epoch = dataclasses.replace(
        config, train=dataclasses.replace(config.train, iters_per_epoch=iters, max_epochs=1, eval_every=1)
    )

    def stamp(_epoch: int, _step: int, _steps: int) -> None:
        stamps.append(time.perf_counter())

    train_cpu_fold(one_epoch, loss_name, {}, train, val, SEED, on_step=stamp)
    return (len(stamps) - 1) * config.train.batch_size / (stamps[-1] - stamps[0])


# -- main ----------------------------------------------------------------------------------------


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
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--iters", type=int, default=30, help="training steps per timed run")
    parser.add_argument("--repeats", type=int, default=5)
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
        small_val = val.take(np.arange(16))
        rates: dict[str, list[float]] = {"dmlbench": [], "pml": []}
        # Warm-up (allocator, first-call costs) for both, untimed.
        dmlbench_images_per_s(config, args.loss, train, small_val, 5)
        pml_images_per_s(config, args.loss, train, 5)
        for r in range(args.repeats):
            order = ("dmlbench", "pml") if r % 2 == 0 else ("pml", "dmlbench")
            for engine in order:
                if engine == "dmlbench":
                    rates[engine].append(
                        dmlbench_images_per_s(config, args.loss, train, small_val, args.iters)
                    )
                else:
                    rates[engine].append(pml_images_per_s(config, args.loss, train, args.iters))
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(
            f"\nThroughput, loss {args.loss}, {args.iters} steps per run, "
            f"median of {args.repeats} interleaved repeats:"
        )
        print("| engine | median images/s | min-max |")
        print("|---|---:|---:|")
        for k, v in rates.items():
            print(f"| {k} | {med[k]:.1f} | {min(v):.1f}-{max(v):.1f} |")
        print(f"ratio dmlbench / PML MetricLossOnly: {med['dmlbench'] / med['pml']:.2f}x")

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
