"""Contract and robustness tests run on every registered loss (parametrised over the registry).

The contract a plugin's loss must meet too is :mod:`benchmark.testing.losses` (run here over every
registered loss: ``test_loss_contract``); the tests below it are what built-in losses also owe.
What each registered loss must satisfy, whatever its formula:

* its spec is consistent (search keys have defaults inside their ranges, ``param_lr`` exactly
  when it has parameters, the MLRC parameter-lr range);
* built with defaults it runs forward + backward on a batch sampled like the trainer does
  (m images per class from the spec), gradients reach the embeddings and its own parameters;
* values and gradients stay finite in float32 at every corner of its search space, also for
  near-identical and exactly duplicated embeddings;
* it is invariant to permuting the batch and to relabelling the classes (with class-indexed
  parameters permuted to match: relabelling is only a symmetry of the *pair* (labels, proxies));
* cosine-space losses are invariant to the scale of the raw embeddings;
* a batch without any positive pair gives a finite value that backpropagates. Pair-based PML
  losses return PML's zero loss there (no triplets / positive pairs to use), ``contrastive`` /
  ``ms`` / ``snr`` their negative-pair terms only, ``cwms`` its i = j self-pair terms plus the
  negative terms; class-based losses are unaffected (their positives are the class vectors).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

from benchmark.errors import ConfigError, UnknownNameError
from benchmark.losses import LOSSES, LossContext, LossSpec, build_loss, resolve_params
from benchmark.testing.losses import LOSS_CHECKS

torch.set_num_threads(1)

NAMES = LOSSES.names()
BATCH = 32


def trainer_like_labels(spec: LossSpec, num_classes: int, seed: int, batch: int = BATCH) -> Tensor:
    """Labels of a batch as the MLRC sampler draws it: distinct classes, m images each."""
    g = torch.Generator().manual_seed(seed)
    m = spec.m_per_class
    classes = torch.randperm(num_classes, generator=g)[: min(num_classes, batch // m)]
    return classes.repeat_interleave(m)


def build(name: str, ctx: LossContext, params: dict[str, float] | None = None, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)  # parameter initialisation
    return build_loss(name, ctx, params or {})


def assert_finite_forward_backward(loss: nn.Module, emb: Tensor, labels: Tensor, what: str) -> Tensor:
    emb = emb.clone().requires_grad_()
    for p in loss.parameters():
        p.grad = None
    value: Tensor = loss(emb, labels)
    assert value.ndim == 0, f"{what}: loss is not a scalar"
    assert torch.isfinite(value), f"{what}: loss is {value.item()}"
    value.backward()
    assert emb.grad is not None, f"{what}: no gradient reaches the embeddings"
    assert torch.isfinite(emb.grad).all(), f"{what}: non-finite embedding gradient"
    for pname, p in loss.named_parameters():
        if p.grad is not None:
            assert torch.isfinite(p.grad).all(), f"{what}: non-finite gradient of {pname}"
    return value.detach()


# --- the plugin contract, over the registry ---------------------------------------------------


@pytest.mark.parametrize("check", LOSS_CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
@pytest.mark.parametrize("name", NAMES)
def test_loss_contract(name: str, check: Callable[[LossSpec], None]) -> None:
    check(LOSSES.get(name))


# --- spec -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_builtin_spec_says_what_it_is(name: str) -> None:
    spec = LOSSES.get(name)
    assert spec.name == name and spec.description


def test_registry_holds_every_spec_loss() -> None:
    # The one place a list of names is right: docs/protocols.md §3 is the list of what must be registered.
    spec_section_3 = {
        "contrastive", "triplet", "ntxent", "margin", "snr", "ms", "ms-miner", "proxynca",
        "normsoftmax", "cosface", "arcface", "softtriple", "proxyanchor", "mfcont", "cwms",
        "mfcwms", "mfnca", "cam", "mpa", "mpa-dw", "mpa-ap",
    }  # fmt: skip
    assert spec_section_3 <= set(NAMES)


# --- building ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_unknown_hyperparameter_is_a_config_error(name: str) -> None:
    spec = LOSSES.get(name)
    with pytest.raises(ConfigError) as info:
        build_loss(name, LossContext(10, 16), {"no_such_param": 1.0})
    message = str(info.value)
    assert "no_such_param" in message
    assert all(key in message for key in spec.defaults)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "0.5"])
def test_non_numeric_hyperparameter_is_a_config_error(bad: object) -> None:
    spec = LOSSES.get(NAMES[0])
    key = next(iter(spec.defaults))
    with pytest.raises(ConfigError, match=key):
        resolve_params(spec, {key: bad})  # type: ignore[dict-item]


@pytest.mark.parametrize("name", NAMES)
def test_log_scale_hyperparameters_must_be_positive(name: str) -> None:
    spec = LOSSES.get(name)
    for key, dim in spec.search_space.items():
        if dim.log:
            with pytest.raises(ConfigError, match=key):
                build_loss(name, LossContext(10, 16), {key: 0.0})


def test_unknown_loss_lists_choices() -> None:
    with pytest.raises(UnknownNameError, match="mfcont"):
        build_loss("mfcnt", LossContext(10, 16), {})


def test_resolve_params_overrides_defaults() -> None:
    spec = LOSSES.get("mfcont")
    resolved = resolve_params(spec, {"m_n": 1})
    assert resolved == {**spec.defaults, "m_n": 1.0}
    assert isinstance(resolved["m_n"], float)


# --- invariances ------------------------------------------------------------------------------


def relabelled(loss: nn.Module, perm: Tensor, num_classes: int) -> nn.Module:
    """A copy of ``loss`` whose class-indexed parameters follow the relabelling c -> perm[c].

    A parameter axis of length C is a class axis; one of length C*K (K > 1) holds K vectors per
    class, class-major (PML SoftTriple). Shapes are chosen in the tests so that no other axis
    has such a length.
    """
    new = copy.deepcopy(loss)
    with torch.no_grad():
        for pname, p in new.named_parameters():
            axes = [a for a, n in enumerate(p.shape) if n % num_classes == 0 and n > 1]
            assert len(axes) <= 1, f"ambiguous class axis in {pname} {tuple(p.shape)}"
            if not axes:
                continue  # class-independent (e.g. MarginLoss's shared β)
            axis = axes[0]
            k = p.shape[axis] // num_classes
            shape = (*p.shape[:axis], num_classes, k, *p.shape[axis + 1 :])
            blocks = p.data.reshape(shape)
            p.data = torch.empty_like(blocks).index_copy_(axis, perm, blocks).reshape(p.shape)
    return new


@pytest.mark.parametrize("name", NAMES)
def test_invariant_to_relabelling_classes(name: str) -> None:
    spec = LOSSES.get(name)
    num_classes = 7  # coprime to D = 16 and to K = 10 proxies/centres, see relabelled()
    loss = build(name, LossContext(num_classes, 16)).double()
    labels = trainer_like_labels(spec, num_classes, seed=5)
    emb = torch.randn(len(labels), 16, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    perm = torch.randperm(num_classes, generator=torch.Generator().manual_seed(7))
    assert not torch.equal(perm, torch.arange(num_classes))
    want = loss(emb, labels)
    got = relabelled(loss, perm, num_classes)(emb, perm[labels])
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12)


# --- edge cases -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_batch_without_positive_pairs(name: str) -> None:
    loss = build(name, LossContext(40, 16))
    labels = torch.randperm(40, generator=torch.Generator().manual_seed(12))[:BATCH]
    emb = torch.randn(BATCH, 16, generator=torch.Generator().manual_seed(13))
    value = assert_finite_forward_backward(loss, emb, labels, name)
    assert value >= 0  # built-in losses are non-negative; the contract asks finiteness only
