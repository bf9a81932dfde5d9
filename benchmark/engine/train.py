"""Training of one fold model (docs/protocols.md §2.2): epochs of N iterations, periodic validation MAP@R,
patience-based stopping, best-validation checkpoint, NaN/inf detection.

A fold trains on images (trunk + embedder) or, in frozen-trunk mode, on cached trunk features
(:class:`~benchmark.models.features.FeatureDataset`; the embedder alone). Both go through the
same loop; only how a batch becomes model input and which model is built differ.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from benchmark.analysis.convergence import STOP_REASONS
from benchmark.config import RunConfig
from benchmark.data.augment import AugmentSpec, eval_batch
from benchmark.data.augment import train_batch as train_batch
from benchmark.data.prefetch import Prefetcher
from benchmark.data.sampler import MPerClassSampler, PassSampler
from benchmark.engine.environment import code_identity
from benchmark.engine.training_options import LoopControl, LoopOptions, configure_model
from benchmark.errors import ConfigError, TrainingDiverged
from benchmark.losses import LOSSES, LossContext
from benchmark.losses import build_loss as build_loss
from benchmark.metrics import evaluate as evaluate
from benchmark.metrics.knn import knn_search
from benchmark.models.features import FeatureDataset, Samples
from benchmark.models.trunks import EmbeddingModel, build_head, build_model, set_train_mode

# train_batch, build_loss and evaluate are imported "as" themselves (explicit re-exports for
# mypy): tests and benchmarks/profile_fold.py patch them as attributes of this module.

#: Why a fold's training stopped (``FoldResult.stopped_by``):
#:
#: * ``patience``: validation MAP@R did not strictly improve for ``train.patience`` evaluations
#:   (the protocol's early stop: the fold converged by MLRC's rule);
#: * ``max_epochs``: ``train.max_epochs`` ran out first (training was cut short of its early stop,
#:   unless selection is off by design, as in the cbir protocol where ``eval_every = max_epochs``);
#: * ``diverged``: the loss, a gradient or the validation embeddings became NaN/inf
#:   (:class:`TrainingDiverged`; such a fold has no result, records count it from the failure);
#: * ``time``: the caller's wall-clock limit (``time_limit_s``) ran out at an evaluation.
#: (:data:`~benchmark.analysis.convergence.STOP_REASONS`; the shares per record are computed there.)


@dataclass
class FoldResult:
    """What one fold's training produced."""

    best_val: float
    best_epoch: int
    epochs: int
    wall_s: float
    curve: list[tuple[int, float]] = field(default_factory=list)  # (epoch, val MAP@R)
    stopped_by: str = "max_epochs"  # one of STOP_REASONS
    #: The code that trained the fold (environment.code_identity); "" = not recorded.
    code: str = ""

    def __post_init__(self) -> None:
        if self.stopped_by not in STOP_REASONS:
            raise ValueError(f"internal: stopped_by {self.stopped_by!r} is not one of {STOP_REASONS}")

    def to_dict(self) -> dict[str, object]:
        return {
            "best_val_map_at_r": self.best_val,
            "best_epoch": self.best_epoch,
            "epochs": self.epochs,
            "stopped_by": self.stopped_by,
            "wall_s": round(self.wall_s, 3),
            "curve": [[e, v] for e, v in self.curve],
            "code": self.code,
        }


EpochCallback = Callable[[int, float, float], None]  # (epoch, val MAP@R, best so far)
StepCallback = Callable[[int, int, int], None]  # (epoch, iterations done, iterations per epoch)


def remap_labels(labels: np.ndarray) -> np.ndarray:
    """Map arbitrary class ids to 0..C-1 in sorted order (losses with proxies need dense ids)."""
    _, dense = np.unique(labels, return_inverse=True)
    return dense.astype(np.int64)


def embed_batch_size(device: torch.device) -> int:
    """Images per forward pass when embedding for evaluation on ``device``.

    On the CPU small batches run faster: measured on the 2-core CPU (smallcnn at 28 px, channels
    last, 1 thread, the 1536 validation images of a glyphs fold, median of 11), 128 images per
    pass took 0.16 s against 0.26 s with 512 (the activations of a small batch stay in cache);
    the embeddings were bit-identical at 64, 128, 256 and 512. Accelerators keep large batches.
    """
    return 128 if device.type == "cpu" else 512


@torch.no_grad()
def embed(
    model: nn.Module, images: torch.Tensor, device: torch.device, batch_size: int | None = None
) -> np.ndarray:
    """Embeddings (N, D) float32 of uint8 images in eval mode, raw (normalisation is the metric's job).

    ``batch_size`` None: :func:`embed_batch_size` for ``device``.
    """
    if batch_size is None:
        batch_size = embed_batch_size(device)
    model.eval()
    # Not done: folding BatchNorm into the convolutions for evaluation (torch's fuse_conv_bn_eval
    # on a copy). Measured on glyphs fold 0 (mfcont, 1 thread, benchmarks/profile_fold.py), the
    # validation embedding took 2.82 s instead of 3.05 s of a 20.6 s fold (1.1%), and the folded
    # weights round differently (embeddings differ by up to 2e-6), which would change every record.
    out = []
    for start in range(0, len(images), batch_size):
        x = eval_batch(images[start : start + batch_size].to(device))
        out.append(model(x).float().cpu())
    return torch.cat(out).numpy()


def embed_samples(
    model: nn.Module, data: Samples, device: torch.device, batch_size: int | None = None
) -> np.ndarray:
    """Embeddings (N, D) of a fold's images, or of its cached trunk features in frozen-trunk mode."""
    if batch_size is None:
        batch_size = embed_batch_size(device)
    # Images in memory or decoded lazily from disk (standard datasets) both index like a tensor;
    # only cached features skip the trunk.
    if not isinstance(data, FeatureDataset):
        return embed(model, data.images, device, batch_size)
    with torch.no_grad():
        model.eval()
        out = [
            model(data.features[start : start + batch_size].to(device)).float().cpu()
            for start in range(0, len(data), batch_size)
        ]
    return torch.cat(out).numpy()


def place_model(model: EmbeddingModel, device: torch.device) -> EmbeddingModel:
    """``model`` on ``device``, in the memory layout the fold loop trains fastest with there.

    On the CPU the convolution weights go channels-last (NHWC), which oneDNN runs without the
    layout conversions it does around every NCHW convolution: measured on the 2-core CPU, one
    training step of smallcnn at 28 px, batch 32, 1 thread took 15.4 ms instead of 24.6 ms (1.6x)
    and validation embedding ran 2.6x faster (benchmarks/step_variants.py). Not numerically neutral:
    other kernels, other float rounding; equally exact. GPUs keep the default layout (not measured
    here). Non-4D parameters (linear layers, cached-feature heads) are unaffected.
    """
    model = model.to(device)
    if device.type == "cpu":
        model = model.to(memory_format=torch.channels_last)
    return model


def build_fold_model(config: RunConfig, data: Samples, seed: int) -> EmbeddingModel:
    """The model for one fold, initialised from ``seed``.

    On images: trunk + embedder. On cached features (frozen trunk): the embedder alone behind an
    identity trunk, since the trunk already ran when the features were computed.
    """
    if isinstance(data, FeatureDataset):
        if not config.model.frozen_trunk:
            raise ValueError("internal: feature data given to a run without model.frozen_trunk")
        head = build_head(int(data.features.shape[1]), config.model.embedding_dim, seed)
        return configure_model(head, config.model, seed)
    if config.model.frozen_trunk:
        raise ValueError("internal: model.frozen_trunk is set but the fold data are images, not features")
    model = build_model(
        config.model.trunk,
        data.images.shape[1],
        config.model.embedding_dim,
        pretrained=config.model.pretrained,
        weights_path=config.model.trunk_weights,
        seed=seed,
    )
    # Pooling, embedder init, BatchNorm γ/β freezing (off for MLRC; see training_options).
    return configure_model(model, config.model, seed)


def _batch_input(
    data: Samples, idx: torch.Tensor, augment: AugmentSpec | None, gen: torch.Generator
) -> torch.Tensor:
    """Model input for the rows ``idx``: cached features as they are, or (augmented) images."""
    if isinstance(data, FeatureDataset):
        return data.features[idx]
    train_crops = getattr(data.images, "train_crops", None)
    if augment is not None and train_crops is not None:
        # Photos decoded from disk: crops come from the whole image (shorter side 256), not from
        # the evaluation's centre square (docs/protocols.md §2.2; benchmark.data.standard.LazyImages).
        crops: torch.Tensor = train_crops(idx, augment, gen)
        return crops
    images = data.images[idx]
    # augment None ("none"): train on the eval transform, e.g. for frozen-feature ablations.
    return eval_batch(images) if augment is None else train_batch(images, augment, gen)


#: Batches prepared ahead of the training step (see :class:`~benchmark.data.prefetch.Prefetcher`):
#: the next batch's decoding (lazy on-disk datasets) and augmentation run in a background thread
#: while the current batch trains. Two rather than one absorbs batches that take longer than usual
#: (a cold page cache, larger JPEGs) at the cost of one more batch in memory. A module constant
#: and not a config key: it changes speed only, never results (the batches are bit-identical).
PREFETCH_DEPTH = 2


def default_prefetch_depth(data: Samples, device: torch.device) -> int:
    """:data:`PREFETCH_DEPTH`, or 0 (synchronous) where overlapping batch preparation costs time.

    Prefetching pays when a batch is decoded from disk (PIL releases the GIL) or the step runs on
    an accelerator and leaves the CPU free. With in-memory data on the CPU a batch takes only a few
    ms to augment, and the producer competes with the step for the cores: measured on the 2-core
    machine (benchmarks/prefetch_speed.py), one process with 2 torch threads trained 8-10% slower
    with prefetching (probably because the producer's kernels run their own team of intra-op
    threads on cores the step already fills), while 1-thread processes (fold-parallel jobs,
    regress) gained 3-8%. Hence in-memory CPU training prefetches only with one torch thread.
    """
    in_memory = isinstance(data, FeatureDataset) or isinstance(data.images, torch.Tensor)
    if device.type != "cpu" or not in_memory:
        return PREFETCH_DEPTH
    return PREFETCH_DEPTH if torch.get_num_threads() == 1 else 0


def _epoch_batches(
    sampler: MPerClassSampler | PassSampler,
    iters: int,
    data: Samples,
    labels: torch.Tensor,
    augment: AugmentSpec | None,
    gen: torch.Generator,
    pin: bool,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """One epoch's (input, label) batches on the CPU, in the order the sampler draws them.

    Runs in the prefetch thread: it alone draws from the sampler's numpy RNG and from ``gen`` (the
    augmentation takes all its randomness from ``gen``, never from torch's global RNG, which the
    training step uses), so the draws happen in the same order as in a synchronous loop.
    """
    for batch in sampler.sample(iters):
        idx = torch.from_numpy(batch)
        x, y = _batch_input(data, idx, augment, gen), labels[idx]
        if pin:
            # Page-locked memory lets the consumer's copy to the GPU run asynchronously.
            x, y = x.pin_memory(), y.pin_memory()
        yield x, y


def _grads_finite(params: list[nn.Parameter]) -> bool:
    """Whether every gradient of ``params`` is finite (no NaN/inf), with one host sync per
    (device, dtype) group.

    Uses the fused multi-tensor check behind ``torch.amp.GradScaler`` (its unscale multiplies by
    exactly 1.0 here, so the gradients are unchanged bit for bit): measured on the 2-core CPU for
    smallcnn's parameters, 43 us per check against 430-880 us for one ``isfinite().all()`` per
    parameter, i.e. 3-5% of a 15 ms training step. Falls back to that loop where the fused op is
    unavailable for a group.
    """
    groups: dict[tuple[torch.device, torch.dtype], list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            groups.setdefault((p.grad.device, p.grad.dtype), []).append(p.grad)
    for (device, _), grads in groups.items():
        found = torch.zeros(1, device=device)
        try:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones(1, device=device))
        except (RuntimeError, NotImplementedError):  # e.g. a dtype or device the kernel lacks
            if not all(bool(torch.isfinite(g).all()) for g in grads):
                return False
            continue
        if found.item() != 0:
            return False
    return True


def train_fold(
    *,
    config: RunConfig,
    loss_name: str,
    loss_params: Mapping[str, float],
    train: Samples,
    val: Samples,
    augment: AugmentSpec | None,
    seed: int,
    device: torch.device,
    on_epoch: EpochCallback | None = None,
    optimizer: str = "rmsprop",
    sampling: str = "m_per_class",
    on_step: StepCallback | None = None,
) -> tuple[FoldResult, EmbeddingModel]:
    """Train one fold model and return its result and the best-validation model.

    ``optimizer`` and ``sampling`` are the protocol's (see :func:`train_with_loss`). Raises
    :class:`TrainingDiverged` when the loss or a gradient becomes NaN/inf.
    """
    result, model, _ = train_with_loss(
        config=config,
        loss_name=loss_name,
        loss_params=loss_params,
        train=train,
        val=val,
        augment=augment,
        seed=seed,
        device=device,
        on_epoch=on_epoch,
        optimizer=optimizer,
        sampling=sampling,
        on_step=on_step,
    )
    return result, model


#: Optimisers a protocol may train with: MLRC's RMSprop (with momentum), the traditional
#: protocol's AdamW and the Class-Anchor-Margin paper's Adam. The loss's own parameters get the
#: same kind of optimiser with ``lr = param_lr``.
OPTIMIZERS = ("rmsprop", "adamw", "adam")

#: How batches are drawn: ``m_per_class`` (MLRC: m images of each of batch/m classes) or
#: ``pass`` (class-based losses of the traditional/cbir protocols: shuffled passes over the
#: training images, as the Proxy-Anchor and CAM code bases do; pair-based losses keep m = 4).
SAMPLINGS = ("m_per_class", "pass")


def make_optimizer(
    kind: str, params: list[nn.Parameter], lr: float, weight_decay: float, momentum: float
) -> torch.optim.Optimizer:
    """The optimiser ``kind`` (one of :data:`OPTIMIZERS`) over ``params``."""
    if kind == "rmsprop":
        # foreach: one multi-tensor call per update instead of a Python loop over the parameters
        # (torch uses the loop by default on the CPU). The same arithmetic, bit-identical weights
        # (benchmarks/step_variants.py), fewer dispatches: measured 0.66x (2 threads) and 0.97x
        # (1 thread) of the loop's step time on the loaded 2-core machine.
        return torch.optim.RMSprop(params, lr=lr, weight_decay=weight_decay, momentum=momentum, foreach=True)
    if kind == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ConfigError(f"Unknown optimizer {kind!r}; valid: {', '.join(OPTIMIZERS)}.")


def iterations_per_epoch(config_iters: int, n_train: int, batch_size: int) -> int:
    """Iterations of one epoch: ``config_iters``, or with 0 one pass over ``n_train`` images
    (full batches only, at least one: a last batch of one image would break BatchNorm)."""
    if config_iters > 0:
        return config_iters
    return max(1, n_train // batch_size)


def train_with_loss(
    *,
    config: RunConfig,
    loss_name: str,
    loss_params: Mapping[str, float],
    train: Samples,
    val: Samples,
    augment: AugmentSpec | None,
    seed: int,
    device: torch.device,
    on_epoch: EpochCallback | None = None,
    optimizer: str = "rmsprop",
    sampling: str = "m_per_class",
    prefetch_depth: int | None = None,
    on_step: StepCallback | None = None,
    time_limit_s: float | None = None,
    val_score: Callable[[EmbeddingModel], float] | None = None,
    validate_untrained: bool = True,
    loop: LoopOptions | None = None,
) -> tuple[FoldResult, EmbeddingModel, nn.Module]:
    """As :func:`train_fold`, also returning the loss module (its anchors/proxies) as it was at
    the best validation epoch.

    ``train.iters_per_epoch = 0`` makes an epoch one pass over the training images.
    ``on_step`` is called after every training step (for progress on slow epochs; cheap calls only).
    ``prefetch_depth`` batches are prepared ahead in a background thread (0: synchronously in this
    thread; None: :func:`default_prefetch_depth`); the results do not depend on it.
    ``time_limit_s`` (None: no limit) stops training at the first validation after that many
    wall seconds, with ``stopped_by = "time"`` (never a protocol setting: a fold cut by time has
    not converged; benchmarks use it to bound a measurement).
    ``val_score`` (None: MAP@R of ``val`` with query = gallery) scores the model in eval mode for
    early stopping instead, e.g. In-Shop's query → gallery MAP@R; it raises TrainingDiverged on
    non-finite embeddings itself.
    ``validate_untrained`` (MLRC; the default) validates the model before the first training step
    as epoch 0, a candidate for the best checkpoint like any later epoch: powerful-benchmarker
    validates the untrained model ("best0") and keeps it when training never beats it. Patience
    then counts the evaluations without strict improvement from epoch 0 on, and the curve starts
    at epoch 0. False: the first validation is after epoch ``eval_every`` (the traditional
    protocol, whose authors' loop does not validate before training, and the cbir protocol, which
    selects nothing).
    ``loop`` (None: MLRC's loop) adds a warm-up, step lr decay and gradient clipping
    (:class:`~benchmark.engine.training_options.LoopOptions`; the traditional protocol's settings).
    """
    spec = LOSSES.get(loss_name)
    tc = config.train
    t0 = time.perf_counter()
    if isinstance(train, FeatureDataset) and augment is not None:
        # Cached features are of un-augmented images; silently ignoring augmentation would hide it.
        raise ConfigError(
            "model.frozen_trunk = true trains on cached features, so data.augment must be 'none'."
        )
    model = place_model(build_fold_model(config, train, seed), device)
    train_labels = remap_labels(train.labels)
    n_classes = int(train_labels.max()) + 1
    torch.manual_seed(seed)  # loss parameter init (proxies, mean fields) draws from the global RNG
    loss_fn = build_loss(loss_name, LossContext(n_classes, config.model.embedding_dim), loss_params).to(
        device
    )

    model_params = list(model.parameters())
    opt = make_optimizer(optimizer, model_params, tc.lr, tc.weight_decay, tc.momentum)
    loss_param_list = [p for p in loss_fn.parameters() if p.requires_grad]
    loss_opt = None
    if loss_param_list:
        loss_opt = make_optimizer(
            optimizer,
            loss_param_list,
            float(loss_params.get("param_lr", spec.defaults.get("param_lr", 1e-3))),
            spec.param_weight_decay,
            tc.param_momentum,
        )
    # Warm-up, step lr decay, gradient clipping (all off for MLRC; see training_options).
    control = LoopControl(loop or LoopOptions(), model, [opt] if loss_opt is None else [opt, loss_opt])

    rng = np.random.default_rng(seed)
    sampler: MPerClassSampler | PassSampler
    if sampling == "pass" and not spec.pair_based:
        sampler = PassSampler(len(train_labels), tc.batch_size, rng)
    elif sampling in SAMPLINGS:
        sampler = MPerClassSampler(train_labels, spec.m_per_class, tc.batch_size, rng)
    else:
        raise ConfigError(f"Unknown sampling {sampling!r}; valid: {', '.join(SAMPLINGS)}.")
    iters = iterations_per_epoch(tc.iters_per_epoch, len(train_labels), tc.batch_size)
    gen = torch.Generator().manual_seed(seed)
    labels_t = torch.from_numpy(train_labels)
    # Pinned batches and asynchronous copies only on CUDA; elsewhere .to(device) stays a plain copy.
    pin = device.type == "cuda"
    depth = default_prefetch_depth(train, device) if prefetch_depth is None else prefetch_depth

    def validate(epoch: int) -> float:
        """Validation MAP@R of the model as it is after ``epoch`` (eval mode)."""
        if val_score is not None:
            return val_score(model)
        emb = embed_samples(model, val, device)
        if not np.isfinite(emb).all():
            raise TrainingDiverged(f"non-finite embeddings at epoch {epoch}")
        scores = evaluate(emb, val.labels, spec.embedding_space, ["map_at_r"], search=knn_search(config.eval))
        return float(scores["map_at_r"])

    best_val, best_epoch, since_best = -math.inf, 0, 0
    best_state = copy.deepcopy(model.state_dict())
    best_loss_state = copy.deepcopy(loss_fn.state_dict())
    curve: list[tuple[int, float]] = []
    if validate_untrained:
        # Epoch 0: the untrained model is the first candidate (best_state already holds it). The
        # torch RNG state is restored afterwards so that validating cannot shift a draw of the
        # training that follows; the sampler and the augmentation have their own generators.
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            best_val = validate(0)
        curve.append((0, best_val))
        if on_epoch is not None:
            on_epoch(0, best_val, best_val)
    epoch = 0
    stopped_by = "max_epochs"  # unless a rule below ends the loop first
    for epoch in range(1, tc.max_epochs + 1):
        set_train_mode(model, config.model.freeze_trunk_bn)
        loss_fn.train()
        control.start_epoch(epoch)
        # One prefetcher per epoch: the producer never draws past the epoch's batches, so a
        # patience stop leaves no batch half-prepared, and validation does not compete with it.
        with Prefetcher(
            _epoch_batches(sampler, iters, train, labels_t, augment, gen, pin), depth, name="batches"
        ) as batches:
            for step, (x_cpu, y_cpu) in enumerate(batches, 1):
                x = x_cpu.to(device, non_blocking=pin)
                y = y_cpu.to(device, non_blocking=pin)
                loss = loss_fn(model(x), y)
                if not torch.isfinite(loss):
                    raise TrainingDiverged(f"loss became {loss.item()} at epoch {epoch}")
                opt.zero_grad(set_to_none=True)
                if loss_opt is not None:
                    loss_opt.zero_grad(set_to_none=True)
                loss.backward()
                if not _grads_finite(model_params + loss_param_list):
                    raise TrainingDiverged(f"non-finite gradient at epoch {epoch}")
                control.after_backward()
                opt.step()
                if loss_opt is not None:
                    loss_opt.step()
                if on_step is not None:
                    on_step(epoch, step, iters)
        control.end_epoch()
        if epoch % tc.eval_every and epoch != tc.max_epochs:
            continue
        val_map = validate(epoch)
        curve.append((epoch, val_map))
        # Strict improvement resets patience (MLRC); ties do not.
        if val_map > best_val:
            best_val, best_epoch, since_best = val_map, epoch, 0
            best_state = copy.deepcopy(model.state_dict())
            best_loss_state = copy.deepcopy(loss_fn.state_dict())
        else:
            since_best += 1
        if on_epoch is not None:
            on_epoch(epoch, val_map, best_val)
        # Patience first: a fold whose patience runs out at the last epoch still stopped by the rule.
        if since_best >= tc.patience:
            stopped_by = "patience"
            break
        if time_limit_s is not None and epoch < tc.max_epochs and time.perf_counter() - t0 >= time_limit_s:
            stopped_by = "time"
            break
    control.finish()
    model.load_state_dict(best_state)
    loss_fn.load_state_dict(best_loss_state)
    result = FoldResult(
        best_val, best_epoch, epoch, time.perf_counter() - t0, curve, stopped_by, code=code_identity()
    )
    return result, model, loss_fn
