"""Contract test over every registered trunk: build, one training step, finite loss."""

from __future__ import annotations

import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.models.trunks import TRUNKS, build_model, set_train_mode


@pytest.mark.parametrize("name", TRUNKS.names())
@pytest.mark.parametrize("channels", [1, 3])
def test_trunk_builds_and_trains_one_step(name: str, channels: int) -> None:
    model = build_model(name, channels, 16, pretrained=False, weights_path="", seed=0)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-4)
    set_train_mode(model, freeze_trunk_bn=True)
    x = torch.randn(4, channels, 64, 64)
    emb = model(x)
    assert emb.shape == (4, 16)
    loss = emb.pow(2).mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)
    assert model.embedder.weight.grad is not None


@pytest.mark.parametrize("name", TRUNKS.names())
def test_same_seed_same_init(name: str) -> None:
    a = build_model(name, 1, 8, pretrained=False, weights_path="", seed=3)
    b = build_model(name, 1, 8, pretrained=False, weights_path="", seed=3)
    for (ka, va), (_, vb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(va, vb), ka


def test_frozen_bn_keeps_running_stats() -> None:
    model = build_model("smallcnn", 1, 8, pretrained=False, weights_path="", seed=0)
    bn = next(m for m in model.trunk.modules() if isinstance(m, torch.nn.BatchNorm2d))
    before = bn.running_mean.clone()
    set_train_mode(model, freeze_trunk_bn=True)
    model(torch.randn(8, 1, 28, 28) + 3)
    assert torch.equal(before, bn.running_mean)
    set_train_mode(model, freeze_trunk_bn=False)
    model(torch.randn(8, 1, 28, 28) + 3)
    assert not torch.equal(before, bn.running_mean)


def test_pretrained_without_weights_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"no model\.trunk_weights file"):
        build_model("resnet18", 3, 8, pretrained=True, weights_path="", seed=0)


def test_weights_roundtrip(tmp_path) -> None:  # type: ignore[no-untyped-def]
    src = build_model("resnet18", 3, 8, pretrained=False, weights_path="", seed=1)
    path = tmp_path / "w.pth"
    torch.save(src.trunk.state_dict(), path)
    dst = build_model("resnet18", 3, 8, pretrained=True, weights_path=str(path), seed=2)
    assert torch.equal(src.trunk.conv1.weight, dst.trunk.conv1.weight)
