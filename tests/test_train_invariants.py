"""Direct, fast checks of training invariants that otherwise only a slow end-to-end run touches:
frozen trunk BatchNorm statistics stay frozen, and the best-validation checkpoint is the model
returned. One fold of the smoke setup, a few iterations."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import benchmark.engine.train as train_module
from benchmark.config import RunConfig
from benchmark.models.features import Samples
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest


@pytest.fixture(scope="module")
def fold(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[tuple[RunConfig, Any, Any]]:
    """The smoke run's config and fold 0 (train, val), with a tiny training schedule."""
    tmp = tmp_path_factory.mktemp("train")
    run = MLRCRun(
        RunRequest(
            loss="contrastive",
            budget="smoke",
            out=tmp / "runs",
            results_dir=tmp / "results",
            jobs=1,
            quiet=True,
            overrides={"train.iters_per_epoch": 3},
        )
    )
    run.resolve()
    run.load_data()
    run.split()
    train, val = run.fold_sets[0]
    yield run.config, train, val


def _with(config: RunConfig, section: str, **changes: Any) -> RunConfig:
    return dataclasses.replace(config, **{section: dataclasses.replace(getattr(config, section), **changes)})


def _train(config: RunConfig, train: Samples, val: Samples) -> tuple[Any, nn.Module]:
    result, model, _ = train_module.train_with_loss(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=train,
        val=val,
        augment=None,
        seed=5,
        device=torch.device("cpu"),
    )
    return result, model


def _bn_stats(model: nn.Module) -> dict[str, torch.Tensor]:
    return {
        k: v.clone()
        for k, v in model.state_dict().items()
        if k.startswith("trunk.") and ("running_" in k or "num_batches_tracked" in k)
    }


@pytest.mark.parametrize("frozen", [True, False])
def test_frozen_trunk_batchnorm_statistics_do_not_change(
    fold: tuple[RunConfig, Any, Any], frozen: bool
) -> None:
    """The paper budget freezes the trunk's BatchNorm statistics (MLRC); training must not move them.
    Unfrozen (the CPU budgets' from-scratch trunk) they must move, so the check can fail."""
    base, train, val = fold
    config = _with(_with(base, "model", freeze_trunk_bn=frozen), "train", max_epochs=1, eval_every=1)
    initial = _bn_stats(train_module.build_fold_model(config, train, 5))
    assert initial, "the smoke trunk has no BatchNorm layer to check"
    _, model = _train(config, train, val)
    trained = _bn_stats(model)
    same = {k: torch.equal(initial[k], trained[k]) for k in initial}
    if frozen:
        assert all(same.values()), (
            f"frozen BatchNorm statistics changed: {[k for k, s in same.items() if not s]}"
        )
    else:
        assert not all(same.values())


def test_best_validation_checkpoint_is_restored(
    fold: tuple[RunConfig, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation scores 0.1 (epoch 0, untrained), 0.3, 0.9, 0.5 (scripted): the returned model is
    the one of epoch 2, not the last one, and the result reports epoch 2."""
    base, train, val = fold
    config = _with(base, "train", max_epochs=3, eval_every=1, patience=5)
    scores = iter([0.1, 0.3, 0.9, 0.5])
    snapshots: list[dict[str, torch.Tensor]] = []
    real_embed = train_module.embed_samples

    def embed(
        model: nn.Module, data: Samples, device: torch.device, batch_size: int | None = None
    ) -> np.ndarray:
        snapshots.append(copy.deepcopy(model.state_dict()))  # the model as validated at this epoch
        return real_embed(model, data, device, batch_size)

    monkeypatch.setattr(train_module, "embed_samples", embed)
    monkeypatch.setattr(train_module, "evaluate", lambda *a, **k: {"map_at_r": next(scores)})
    result, model = _train(config, train, val)
    assert len(snapshots) == 4 and (result.best_epoch, result.best_val) == (2, 0.9)
    state = model.state_dict()
    assert all(torch.equal(state[k], snapshots[2][k]) for k in state)
    # Epochs 2 and 3 differ, so a model left at the last epoch fails the check above.
    assert not all(torch.equal(snapshots[2][k], snapshots[3][k]) for k in state)


def test_cpu_fold_training_runs_channels_last(fold: tuple[RunConfig, Any, Any]) -> None:
    """On the CPU the fold loop trains with channels-last convolution weights (the measured 1.6x
    step speed-up, benchmarks/step_variants.py); the returned best-validation model keeps that
    layout, and its embeddings are those of the same weights in the default layout."""
    base, train, val = fold
    config = _with(base, "train", max_epochs=1, eval_every=1)
    _, model = _train(config, train, val)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert convs
    assert all(c.weight.is_contiguous(memory_format=torch.channels_last) for c in convs)
    assert not all(c.weight.is_contiguous() for c in convs)  # not merely 1x1 or single-channel
    plain = copy.deepcopy(model).to(memory_format=torch.contiguous_format)
    assert all(c.weight.is_contiguous() for c in plain.modules() if isinstance(c, nn.Conv2d))
    a = train_module.embed_samples(model, val, torch.device("cpu"))
    b = train_module.embed_samples(plain, val, torch.device("cpu"))
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_cpu_embedding_batch_size_does_not_change_embeddings(fold: tuple[RunConfig, Any, Any]) -> None:
    """Validation and test embeddings use a small batch on the CPU (embed_batch_size, for speed);
    the batch size is a speed setting only: embeddings of several small batches equal those of one
    large batch. GPUs keep 512."""
    base, train, val = fold
    _, model = _train(_with(base, "train", max_epochs=1, eval_every=1), train, val)
    cpu = torch.device("cpu")
    assert 32 < len(val.images) <= 512
    small = train_module.embed_samples(model, val, cpu, batch_size=32)
    whole = train_module.embed_samples(model, val, cpu, batch_size=512)
    np.testing.assert_allclose(small, whole, rtol=1e-5, atol=1e-6)
    assert train_module.embed_batch_size(torch.device("cuda")) == 512


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf"), None])
@pytest.mark.parametrize("where", [0, 3])
def test_gradient_finiteness_check(bad: float | None, where: int) -> None:
    """The fused gradient check finds a NaN/inf in any parameter's gradient (a float64 one too),
    passes finite ones and parameters without a gradient, and leaves gradients bit-identical."""
    params = [nn.Parameter(torch.randn(5, 3)) for _ in range(3)] + [nn.Parameter(torch.randn(4).double())]
    params.append(nn.Parameter(torch.randn(2)))  # no gradient
    for p in params[:4]:
        p.grad = torch.randn_like(p)
    if bad is not None:
        params[where].grad.view(-1)[1] = bad  # type: ignore[union-attr]
    before = [None if p.grad is None else p.grad.clone() for p in params]
    assert train_module._grads_finite(params) is (bad is None)
    for p, b in zip(params, before, strict=True):
        if b is None:
            assert p.grad is None
        else:
            torch.testing.assert_close(p.grad, b, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("bad", [float("nan"), None])
def test_gradient_finiteness_check_without_the_fused_kernel(
    bad: float | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the fused kernel is missing for a device or dtype, the per-gradient check decides."""

    def missing(*_args: object) -> None:
        raise NotImplementedError("no kernel here")

    monkeypatch.setattr(torch, "_amp_foreach_non_finite_check_and_unscale_", missing)
    params = [nn.Parameter(torch.randn(4)) for _ in range(2)]
    for p in params:
        p.grad = torch.randn_like(p)
    if bad is not None:
        params[1].grad.view(-1)[2] = bad  # type: ignore[union-attr]
    assert train_module._grads_finite(params) is (bad is None)
