"""The untrained model as the first checkpoint candidate (MLRC's "best0", issue 27): the fold loop
validates the model before training as epoch 0, keeps it when training only makes validation
worse, counts patience from it, and does not let that validation change the training itself."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import benchmark.engine.train as train_module
from benchmark.analysis.convergence import derive_stop
from benchmark.config import RunConfig
from benchmark.losses import LossContext
from benchmark.models.features import Samples
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest

CPU = torch.device("cpu")
SEED = 7


@pytest.fixture(scope="module")
def fold(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[tuple[RunConfig, Any, Any]]:
    """The smoke run's config (glyphs) and its fold 0 (train, val)."""
    tmp = tmp_path_factory.mktemp("epoch0")
    run = MLRCRun(
        RunRequest(
            loss="contrastive",
            budget="smoke",
            out=tmp / "runs",
            results_dir=tmp / "results",
            jobs=1,
            quiet=True,
            overrides={"train.iters_per_epoch": 4},
        )
    )
    run.resolve()
    run.load_data()
    run.split()
    train, val = run.fold_sets[0]
    yield run.config, train, val


def _schedule(config: RunConfig, **changes: Any) -> RunConfig:
    return dataclasses.replace(config, train=dataclasses.replace(config.train, **changes))


class Inverted(nn.Module):
    """A metric loss turned around: pushes same-class embeddings apart and pulls different classes
    together, so retrieval gets worse than from the random initialisation."""

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        e = F.normalize(embeddings, dim=1)
        sim = e @ e.T
        same = labels[:, None] == labels[None, :]
        return sim[same].mean() - sim[~same].mean()


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _differing(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> list[str]:
    assert a.keys() == b.keys()
    return [k for k in a if not torch.equal(a[k], b[k])]


def test_a_loss_that_only_hurts_keeps_the_untrained_model(
    fold: tuple[RunConfig, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Training with an inverted metric loss lowers validation MAP@R at every epoch: the MLRC fold
    (train_fold, as the search and test stages call it) returns the untrained weights bit for bit
    and its result, as stored in records, says best epoch 0."""
    base, train, val = fold
    # lr 1e-3 instead of the smoke budget's value: the damage must be visible within 3 epochs.
    # BatchNorm statistics frozen (as in MLRC's paper setting): from scratch, their update alone
    # would raise validation MAP@R whatever the loss.
    config = _schedule(base, max_epochs=3, eval_every=1, patience=5, lr=1e-3)
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, freeze_trunk_bn=True))
    untrained = _state(train_module.place_model(train_module.build_fold_model(config, train, SEED), CPU))

    def build(name: str, ctx: LossContext, params: Mapping[str, float]) -> nn.Module:
        return Inverted()

    last_validated: list[dict[str, torch.Tensor]] = []
    real_embed = train_module.embed_samples

    def embed(
        model: nn.Module, data: Samples, device: torch.device, batch_size: int | None = None
    ) -> np.ndarray:
        last_validated[:] = [_state(model)]
        return real_embed(model, data, device, batch_size)

    monkeypatch.setattr(train_module, "build_loss", build)
    monkeypatch.setattr(train_module, "embed_samples", embed)
    result, model = train_module.train_fold(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=train,
        val=val,
        augment=None,
        seed=SEED,
        device=CPU,
    )
    epochs = [e for e, _ in result.curve]
    values = [v for _, v in result.curve]
    assert epochs == [0, 1, 2, 3], f"validated epochs {epochs}, expected epoch 0 (untrained) then 1..3"
    assert all(v < values[0] for v in values[1:]), (
        f"the inverted loss did not lower validation MAP@R at every epoch: curve {result.curve}; "
        "the test needs a loss that only hurts"
    )
    assert (result.best_epoch, result.best_val, result.stopped_by) == (0, values[0], "max_epochs")
    stored = result.to_dict()
    assert stored["best_epoch"] == 0 and stored["curve"] == [[e, v] for e, v in result.curve]
    # Training did move the weights (the last validated model is not the untrained one) ...
    assert _differing(last_validated[0], untrained), "training left the weights unchanged"
    # ... and the returned model is the untrained one, bit for bit.
    assert _differing(_state(model), untrained) == []


def _scripted(
    monkeypatch: pytest.MonkeyPatch,
    fold: tuple[RunConfig, Any, Any],
    scores: list[float],
    schedule: Mapping[str, int],
    validate_untrained: bool = True,
) -> tuple[train_module.FoldResult, int]:
    """Train with ``schedule`` (train.* settings) and validation MAP@R scripted as ``scores`` (in
    validation order); also return how many validations ran."""
    base, train, val = fold
    seq = iter(scores)
    calls: list[float] = []

    def evaluate(
        emb: np.ndarray, labels: np.ndarray, space: str, metrics: list[str], **_: object
    ) -> dict[str, float]:
        calls.append(next(seq))
        return {"map_at_r": calls[-1]}

    monkeypatch.setattr(train_module, "evaluate", evaluate)
    result, _, _ = train_module.train_with_loss(
        config=_schedule(base, **schedule),
        loss_name="contrastive",
        loss_params={},
        train=train,
        val=val,
        augment=None,
        seed=SEED,
        device=CPU,
        validate_untrained=validate_untrained,
    )
    return result, len(calls)


@pytest.mark.parametrize(("eval_every", "stop_epoch"), [(1, 2), (2, 4)])
def test_patience_counts_from_the_epoch_0_validation(
    fold: tuple[RunConfig, Any, Any], monkeypatch: pytest.MonkeyPatch, eval_every: int, stop_epoch: int
) -> None:
    """Untrained 0.5, then 0.4 and a tie 0.5 (not a strict improvement): patience 2 runs out at the
    second validation after epoch 0, and the convergence code derives the same reason."""
    train = {"max_epochs": 10, "eval_every": eval_every, "patience": 2}
    result, n = _scripted(monkeypatch, fold, [0.5, 0.4, 0.5, 0.9], train)
    assert (result.best_epoch, result.epochs, result.stopped_by, n) == (0, stop_epoch, "patience", 3)
    assert result.curve == [(0, 0.5), (eval_every, 0.4), (2 * eval_every, 0.5)]
    assert derive_stop(result.to_dict(), train) == "patience"


def test_an_improvement_on_epoch_0_resets_patience(
    fold: tuple[RunConfig, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Untrained 0.5, then 0.4 and 0.6: epoch 2 is the new best and patience counts again from it."""
    schedule = {"max_epochs": 10, "eval_every": 1, "patience": 2}
    result, n = _scripted(monkeypatch, fold, [0.5, 0.4, 0.6, 0.55, 0.5], schedule)
    assert (result.best_epoch, result.best_val, result.epochs, n) == (2, 0.6, 4, 5)
    assert result.stopped_by == "patience"


def test_without_the_untrained_candidate_the_first_validation_is_after_training(
    fold: tuple[RunConfig, Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """validate_untrained=False (the traditional and cbir protocols): no epoch 0 in the curve, and
    the first trained epoch is the best even when it scores low."""
    schedule = {"max_epochs": 10, "eval_every": 1, "patience": 2}
    result, n = _scripted(monkeypatch, fold, [0.1, 0.05, 0.02], schedule, validate_untrained=False)
    assert (result.best_epoch, result.epochs, n) == (1, 3, 3)
    assert [e for e, _ in result.curve] == [1, 2, 3]


def test_validating_epoch_0_leaves_the_training_unchanged(fold: tuple[RunConfig, Any, Any]) -> None:
    """The same fold with and without the epoch-0 validation: every later validation and the
    returned weights are bit-identical (model init, loss init, sampler and augmentation streams
    are not shifted by the extra evaluation)."""
    base, train, val = fold
    config = _schedule(base, max_epochs=3, eval_every=1, patience=5)
    runs = {}
    for flag in (True, False):
        result, model, loss_fn = train_module.train_with_loss(
            config=config,
            loss_name="proxyanchor",  # learnable proxies: their init draws from the global RNG
            loss_params={},
            train=train,
            val=val,
            augment=None,
            seed=SEED,
            device=CPU,
            validate_untrained=flag,
        )
        runs[flag] = (result, _state(model), copy.deepcopy(loss_fn.state_dict()))
    with_0, without = runs[True], runs[False]
    assert with_0[0].curve[0][0] == 0 and with_0[0].curve[1:] == without[0].curve
    assert with_0[0].best_epoch == without[0].best_epoch != 0, (
        f"best epochs {with_0[0].best_epoch} / {without[0].best_epoch}: the check needs a fold that "
        "improves on its untrained model"
    )
    assert _differing(with_0[1], without[1]) == []
    assert _differing(with_0[2], without[2]) == []
