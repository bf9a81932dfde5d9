"""The loss contract: declaration, shapes, finiteness, gradient flow and determinism.

Every check takes the :class:`~benchmark.losses.registry.LossSpec` of the loss (a plugin's class
becomes one through :func:`loss_spec_of`, exactly as ``dmlbench run --loss`` turns it into one)
and raises ``AssertionError`` with the loss's name and what failed. Batches are drawn as the
trainer draws them (``m_per_class`` images of each class), embeddings are raw (not normalised).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import ClassVar

import torch
from torch import Tensor, nn

from benchmark.checks import SAFE_NAME
from benchmark.losses.registry import (
    PARAM_LR,
    PARAM_LR_SEARCH,
    LossContext,
    LossSpec,
    adopt_loss,
    resolve_params,
)

__all__ = [
    "LOSS_CHECKS",
    "LossContract",
    "check_batch_of_one_class",
    "check_batch_without_positive_pairs",
    "check_declaration",
    "check_deterministic",
    "check_embedding_scale",
    "check_finite_at_search_space_corners",
    "check_forward_backward",
    "check_more_classes_than_dimensions",
    "check_permuting_the_batch",
    "loss_spec_of",
]

#: The batch size of the checks' batches (the trainer's is larger; the properties do not depend on it).
BATCH = 32


def loss_spec_of(loss: object) -> LossSpec:
    """The spec of a loss plugin's class or spec, checked as dmlbench checks a ``--loss`` plugin."""
    return adopt_loss(loss, getattr(loss, "__name__", type(loss).__name__))


def build(
    spec: LossSpec, ctx: LossContext, params: Mapping[str, float] | None = None, seed: int = 0
) -> nn.Module:
    """The loss built as the trainer builds it, its parameters initialised from ``seed``."""
    torch.manual_seed(seed)
    return spec.factory(ctx, resolve_params(spec, params or {}))


def trainer_like_labels(spec: LossSpec, num_classes: int, seed: int, batch: int = BATCH) -> Tensor:
    """Labels of a batch as the sampler draws it: distinct classes, ``m_per_class`` images each."""
    g = torch.Generator().manual_seed(seed)
    m = spec.m_per_class
    classes = torch.randperm(num_classes, generator=g)[: min(num_classes, batch // m)]
    return classes.repeat_interleave(m)


def forward_backward(loss: nn.Module, emb: Tensor, labels: Tensor, what: str) -> Tensor:
    """The loss value of one step, after checking it is a finite scalar with finite gradients that
    reach the embeddings."""
    emb = emb.clone().requires_grad_()
    for p in loss.parameters():
        p.grad = None
    value = loss(emb, labels)
    assert isinstance(value, Tensor) and value.ndim == 0, f"{what}: the loss is not a scalar tensor"
    assert torch.isfinite(value), f"{what}: the loss is {value.item()}"
    value.backward()
    assert emb.grad is not None, f"{what}: no gradient reaches the embeddings"
    assert torch.isfinite(emb.grad).all(), f"{what}: non-finite embedding gradient"
    for pname, p in loss.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), f"{what}: non-finite gradient of {pname}"
    return value.detach()


# --- the checks ---------------------------------------------------------------------------------


def check_declaration(spec: LossSpec) -> None:
    """The declaration is consistent: a usable name, searched keys with defaults inside their
    ranges, ``param_lr`` exactly when the loss has parameters (searched on MLRC's range)."""
    name = spec.name
    assert SAFE_NAME.fullmatch(name) and ".." not in name, f"{name!r} cannot be a file-path component"
    assert spec.display_name, f"{name}: empty display_name"
    assert set(spec.search_space) <= set(spec.defaults), f"{name}: searched keys without a default"
    for key, dim in spec.search_space.items():
        assert dim.low <= spec.defaults[key] <= dim.high, (
            f"{name}: default {key} outside [{dim.low}, {dim.high}]"
        )
    assert spec.has_parameters == (PARAM_LR in spec.defaults), f"{name}: {PARAM_LR} iff has_parameters"
    if PARAM_LR in spec.search_space:
        assert spec.search_space[PARAM_LR] == PARAM_LR_SEARCH, f"{name}: {PARAM_LR} not on MLRC's range"
    assert spec.m_per_class == (4 if spec.pair_based else 1)
    assert spec.embedding_space in ("cosine", "euclidean"), (
        f"{name}: embedding_space {spec.embedding_space!r}"
    )
    assert spec.param_weight_decay >= 0, f"{name}: negative param_weight_decay"
    for dataset, values in spec.dataset_defaults.items():
        assert set(values) <= set(spec.defaults), f"{name}: dataset_defaults[{dataset!r}] without defaults"


def check_forward_backward(spec: LossSpec) -> None:
    """Built with its defaults, one step on a trainer-like batch: a finite scalar, gradients reach
    the embeddings, and the loss's own parameters exist (and get a gradient) exactly when declared."""
    loss = build(spec, LossContext(10, 16))
    labels = trainer_like_labels(spec, 10, seed=1)
    emb = torch.randn(len(labels), 16, generator=torch.Generator().manual_seed(2))
    forward_backward(loss, emb, labels, spec.name)
    params = [p for p in loss.parameters() if p.requires_grad]
    if spec.has_parameters:
        assert params, f"{spec.name} declares parameters but has none"
        assert all(p.grad is not None for p in params), f"{spec.name}: a parameter gets no gradient"
        assert any(bool(p.grad.abs().sum() > 0) for p in params if p.grad is not None), (
            f"{spec.name}: every parameter gradient is zero"
        )
    else:
        assert not params, f"{spec.name} has parameters but does not declare them (has_parameters)"


def check_finite_at_search_space_corners(spec: LossSpec) -> None:
    """Finite values and gradients in float32 at every corner of the search space, on random,
    near-identical, identical and large-norm embeddings."""
    dims = {k: d for k, d in spec.search_space.items() if k != PARAM_LR}  # lr: not in the forward pass
    g = torch.Generator().manual_seed(3)
    labels = trainer_like_labels(spec, 10, seed=4)
    base = torch.randn(1, 16, generator=g)
    batches = {
        "random": torch.randn(len(labels), 16, generator=g),
        "near-identical": base + 1e-4 * torch.randn(len(labels), 16, generator=g),
        "identical": base.expand(len(labels), 16).clone(),
        "large-norm": 1e3 * torch.randn(len(labels), 16, generator=g),
    }
    for values in itertools.product(*((d.low, d.high) for d in dims.values())):
        params = dict(zip(dims, values, strict=True))
        loss = build(spec, LossContext(10, 16), params)
        for kind, emb in batches.items():
            forward_backward(loss, emb, labels, f"{spec.name} {params} {kind}")


def check_deterministic(spec: LossSpec) -> None:
    """Built twice from one seed, the loss gives the same value; calling it twice changes nothing."""
    labels = trainer_like_labels(spec, 10, seed=5)
    emb = torch.randn(len(labels), 16, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    first = build(spec, LossContext(10, 16)).double()
    second = build(spec, LossContext(10, 16)).double()
    want = first(emb, labels)
    torch.testing.assert_close(
        first(emb, labels), want, rtol=0, atol=0, msg=f"{spec.name}: a second call differs"
    )
    torch.testing.assert_close(
        second(emb, labels), want, rtol=0, atol=0, msg=f"{spec.name}: a rebuild differs"
    )


def check_permuting_the_batch(spec: LossSpec) -> None:
    """The value does not depend on the order of the batch."""
    loss = build(spec, LossContext(10, 16)).double()
    labels = trainer_like_labels(spec, 10, seed=8)
    g = torch.Generator().manual_seed(9)
    emb = torch.randn(len(labels), 16, generator=g, dtype=torch.float64)
    order = torch.randperm(len(labels), generator=g)
    torch.testing.assert_close(
        loss(emb[order], labels[order]), loss(emb, labels), rtol=1e-9, atol=1e-12,
        msg=f"{spec.name}: the value depends on the order of the batch",
    )  # fmt: skip


def check_embedding_scale(spec: LossSpec) -> None:
    """A cosine-space loss ignores the scale of the raw embeddings (a euclidean one: nothing to check)."""
    if spec.embedding_space != "cosine":
        return
    loss = build(spec, LossContext(10, 16)).double()
    labels = trainer_like_labels(spec, 10, seed=10)
    emb = torch.randn(len(labels), 16, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    torch.testing.assert_close(
        loss(3.7 * emb, labels), loss(emb, labels), rtol=1e-9, atol=1e-12,
        msg=f"{spec.name}: a cosine-space loss depends on the embeddings' scale",
    )  # fmt: skip


def check_batch_without_positive_pairs(spec: LossSpec) -> None:
    """A batch of distinct classes (no positive pair) gives a finite value that backpropagates."""
    loss = build(spec, LossContext(40, 16))
    labels = torch.randperm(40, generator=torch.Generator().manual_seed(12))[:BATCH]
    emb = torch.randn(BATCH, 16, generator=torch.Generator().manual_seed(13))
    forward_backward(loss, emb, labels, f"{spec.name} (no positive pair)")


def check_batch_of_one_class(spec: LossSpec) -> None:
    """A batch of one class (no negative pair) gives a finite value that backpropagates."""
    loss = build(spec, LossContext(10, 16))
    labels = torch.full((4 * spec.m_per_class,), 3)
    emb = torch.randn(len(labels), 16, generator=torch.Generator().manual_seed(14))
    forward_backward(loss, emb, labels, f"{spec.name} (one class)")


def check_more_classes_than_dimensions(spec: LossSpec) -> None:
    """More classes than embedding dimensions (wide proxy matrices, non-orthogonal anchors) work."""
    loss = build(spec, LossContext(50, 8))
    labels = trainer_like_labels(spec, 50, seed=15)
    emb = torch.randn(len(labels), 8, generator=torch.Generator().manual_seed(16))
    forward_backward(loss, emb, labels, f"{spec.name} (C > D)")


#: Every check of the contract, in the order a failure is most telling.
LOSS_CHECKS: tuple[Callable[[LossSpec], None], ...] = (
    check_declaration,
    check_forward_backward,
    check_deterministic,
    check_finite_at_search_space_corners,
    check_permuting_the_batch,
    check_embedding_scale,
    check_batch_without_positive_pairs,
    check_batch_of_one_class,
    check_more_classes_than_dimensions,
)


class LossContract:
    """Subclass as ``class TestMyLoss(LossContract): loss = MyLoss`` for one pytest test per check."""

    #: The loss under test: a ``torch.nn.Module`` subclass declaring the plugin attributes, or a LossSpec.
    loss: ClassVar[object]

    def spec(self) -> LossSpec:
        return loss_spec_of(self.loss)

    def test_declaration(self) -> None:
        check_declaration(self.spec())

    def test_forward_backward(self) -> None:
        check_forward_backward(self.spec())

    def test_deterministic(self) -> None:
        check_deterministic(self.spec())

    def test_finite_at_search_space_corners(self) -> None:
        check_finite_at_search_space_corners(self.spec())

    def test_permuting_the_batch(self) -> None:
        check_permuting_the_batch(self.spec())

    def test_embedding_scale(self) -> None:
        check_embedding_scale(self.spec())

    def test_batch_without_positive_pairs(self) -> None:
        check_batch_without_positive_pairs(self.spec())

    def test_batch_of_one_class(self) -> None:
        check_batch_of_one_class(self.spec())

    def test_more_classes_than_dimensions(self) -> None:
        check_more_classes_than_dimensions(self.spec())
