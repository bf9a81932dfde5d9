"""Time of one training step of the fold loop, as it is and with candidate speed changes.

Usage::

    python benchmarks/step_variants.py [--loss mfcont] [--batch 32] [--image-size 28]
                                       [--threads 2] [--blocks 7] [--steps 20]

The step is the loop's own sequence (forward, loss, loss finiteness check, zero_grad, backward,
gradient finiteness check, optimiser steps) on the mini budget's model (small CNN, 128-d) with
random uint8 images and m-per-class labels, for:

* ``baseline``: the gradient check as one ``isfinite().all()`` per parameter, RMSprop with
  ``foreach=False`` (the Python loop over parameters; the loop's optimiser before this change);
* ``foreach-opt``: RMSprop with ``foreach=True`` (one multi-tensor call instead of a Python loop
  over parameters; on the CPU torch defaults to the loop), as ``make_optimizer`` now builds it;
* ``cat-check``: the gradient check as one ``isfinite`` over the concatenated gradients;
* ``channels_last``: model and input in channels-last memory format;
* ``both``: foreach-opt + cat-check;
* ``foreach+cl``: foreach-opt + channels_last (:func:`benchmark.engine.train.place_model`);
* ``foreach+cl+fused``: foreach+cl with the fused gradient check of
  :func:`benchmark.engine.train._grads_finite`: the step as the fold loop now runs it on the CPU;
* ``compiled``: foreach+cl+fused with the model wrapped in ``torch.compile`` (inductor, static
  shapes; forward and backward compiled, loss and optimiser eager). Not in the default list: its
  compile time is paid per process, i.e. per fold, so it is printed separately (the warm-up block's
  time; a second run of the script shows the time with inductor's on-disk cache warm).

Variants run in interleaved blocks of ``--steps`` steps (the block order rotates each round, so
load drift on the shared machine hits them alike), after warm-up; per variant the median block
time per step, and its ratio to the baseline's median, are printed. Each variant starts from the
same weights; the final weights are compared with the baseline's to show which changes are
numerically neutral (bit-identical after the same steps) and which are not.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from benchmark.data.augment import CHARACTER_AUGMENT, train_batch
from benchmark.engine.train import _grads_finite
from benchmark.losses import LOSSES, LossContext, build_loss
from benchmark.models.trunks import build_model

VARIANTS = ("baseline", "foreach-opt", "cat-check", "channels_last", "both", "foreach+cl", "foreach+cl+fused")
OPTIONAL_VARIANTS = ("compiled",)


def grads_finite_loop(params: list[nn.Parameter]) -> bool:
    return all(p.grad is None or bool(torch.isfinite(p.grad).all()) for p in params)


def grads_finite_cat(params: list[nn.Parameter]) -> bool:
    grads = [p.grad.reshape(-1) for p in params if p.grad is not None]
    return not grads or bool(torch.isfinite(torch.cat(grads)).all())


class Trainer:
    """One variant's model, loss and optimisers, and its step."""

    def __init__(self, variant: str, args: argparse.Namespace, n_classes: int) -> None:
        self.variant = variant
        self.model = build_model("smallcnn", 1, 128, pretrained=False, weights_path="", seed=0)
        torch.manual_seed(0)
        self.loss = build_loss(args.loss, LossContext(n_classes, 128), {})
        self.params = list(self.model.parameters())
        self.loss_params = [p for p in self.loss.parameters() if p.requires_grad]
        fused_cl = variant in ("foreach+cl+fused", "compiled")
        foreach = fused_cl or variant in ("foreach-opt", "both", "foreach+cl")
        self.opt = self._opt(self.params, 1e-4, 1e-4, foreach)
        self.loss_opt = self._opt(self.loss_params, 1e-3, 0.0, foreach) if self.loss_params else None
        self.check: Callable[[list[nn.Parameter]], bool] = grads_finite_loop
        if variant in ("cat-check", "both"):
            self.check = grads_finite_cat
        elif fused_cl:
            self.check = _grads_finite
        self.channels_last = fused_cl or variant in ("channels_last", "foreach+cl")
        if self.channels_last:
            self.model = self.model.to(memory_format=torch.channels_last)
        # The parameters stay the eager module's (the optimisers hold them); only the call is compiled.
        self.forward: Callable[[torch.Tensor], torch.Tensor] = (
            torch.compile(self.model, dynamic=False) if variant == "compiled" else self.model
        )

    @staticmethod
    def _opt(params: list[nn.Parameter], lr: float, wd: float, foreach: bool) -> torch.optim.Optimizer:
        # Explicit either way: make_optimizer itself now builds the foreach form.
        return torch.optim.RMSprop(params, lr=lr, weight_decay=wd, momentum=0.9, foreach=foreach)

    def step(self, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        loss = self.loss(self.forward(x), y)
        if not torch.isfinite(loss):
            raise RuntimeError("diverged")
        self.opt.zero_grad(set_to_none=True)
        if self.loss_opt is not None:
            self.loss_opt.zero_grad(set_to_none=True)
        loss.backward()
        if not self.check(self.params + self.loss_params):
            raise RuntimeError("diverged")
        self.opt.step()
        if self.loss_opt is not None:
            self.loss_opt.step()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loss", default="mfcont")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=28)
    parser.add_argument("--classes", type=int, default=600)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"also: {', '.join(OPTIONAL_VARIANTS)}"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS + OPTIONAL_VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; valid: {', '.join(VARIANTS + OPTIONAL_VARIANTS)}")
    m = LOSSES.get(args.loss).m_per_class
    rng = np.random.default_rng(0)
    gen = torch.Generator().manual_seed(0)
    n_batches = args.steps * (args.blocks + 1)
    batches = []
    for _ in range(n_batches):
        classes = rng.choice(args.classes, args.batch // m, replace=False)
        y = torch.from_numpy(np.repeat(classes, m).astype(np.int64))
        images = torch.from_numpy(
            rng.integers(0, 256, (len(y), 1, args.image_size, args.image_size), dtype=np.uint8)
        )
        batches.append((train_batch(images, CHARACTER_AUGMENT, gen), y))
    trainers = {v: Trainer(v, args, args.classes) for v in variants}
    # Warm-up: the first block's batches, every variant (for ``compiled``, this is where it compiles).
    warmup_s: dict[str, float] = {}
    for v in variants:
        t0 = time.perf_counter()
        for x, y in batches[: args.steps]:
            trainers[v].step(x, y)
        warmup_s[v] = time.perf_counter() - t0
    per_step: dict[str, list[float]] = {v: [] for v in variants}
    for b in range(args.blocks):
        block = batches[(b + 1) * args.steps : (b + 2) * args.steps]
        order = variants[b % len(variants) :] + variants[: b % len(variants)]
        for v in order:
            t0 = time.perf_counter()
            for x, y in block:
                trainers[v].step(x, y)
            per_step[v].append((time.perf_counter() - t0) / args.steps)
    print(
        f"loss {args.loss}, batch {args.batch}, {args.image_size} px, {args.threads} torch thread(s), "
        f"torch {torch.__version__}; {args.blocks} interleaved blocks of {args.steps} steps\n"
    )
    base = statistics.median(per_step["baseline"]) if "baseline" in per_step else float("nan")
    ref = trainers.get("baseline")
    print(
        "| variant | median ms/step | min-max ms | ratio to baseline (time) | weights vs baseline "
        "| warm-up block s |"
    )
    print("|---|---:|---:|---:|---|---:|")
    for v in variants:
        med = statistics.median(per_step[v])
        same = "–"
        if ref is not None:
            a, b_ = ref.model.state_dict(), trainers[v].model.state_dict()
            equal = all(torch.equal(a[k], b_[k].contiguous()) for k in a)
            same = "bit-identical" if equal else (
                f"differ (max abs {max(float((a[k].float() - b_[k].float()).abs().max()) for k in a):.2e})"
            )  # fmt: skip
        print(
            f"| {v} | {1e3 * med:.2f} | {1e3 * min(per_step[v]):.2f}-{1e3 * max(per_step[v]):.2f} "
            f"| {med / base:.3f} | {same} | {warmup_s[v]:.2f} |"
        )


if __name__ == "__main__":
    main()
