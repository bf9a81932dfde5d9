"""Contract test over every registered trunk: build, one training step, finite loss."""

from __future__ import annotations

from pathlib import Path

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
    assert bn.running_mean is not None  # BatchNorm2d tracks running stats by default
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


def test_weights_roundtrip(tmp_path: Path) -> None:
    src = build_model("resnet18", 3, 8, pretrained=False, weights_path="", seed=1)
    path = tmp_path / "w.pth"
    torch.save(src.trunk.state_dict(), path)
    dst = build_model("resnet18", 3, 8, pretrained=True, weights_path=str(path), seed=2)
    assert torch.equal(src.trunk.get_parameter("conv1.weight"), dst.trunk.get_parameter("conv1.weight"))


def test_googlenet_loads_torchvision_weights_with_aux_classifiers(tmp_path: Path) -> None:
    import torchvision

    # The layout of torchvision's ImageNet checkpoint: aux1/aux2 and fc are not part of the trunk.
    src = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=True)
    path = tmp_path / "googlenet.pth"
    torch.save(src.state_dict(), path)
    dst = build_model("googlenet", 3, 8, pretrained=True, weights_path=str(path), seed=0)
    # get_parameter: nn.Module attribute access is typed Tensor | Module; these are the same parameters.
    branch = "inception5b.branch1.conv.weight"
    assert torch.equal(src.get_parameter(branch), dst.trunk.get_parameter(branch))
    gray = build_model("googlenet", 1, 8, pretrained=True, weights_path=str(path), seed=0)
    assert torch.allclose(
        gray.trunk.get_parameter("conv1.conv.weight"), src.conv1.conv.weight.mean(dim=1, keepdim=True)
    )


def test_timm_trunk_by_name(tmp_path: Path) -> None:
    timm = pytest.importorskip("timm", reason="optional extra dmlbench[timm] not installed")
    model = build_model("timm:resnet10t", 1, 16, pretrained=False, weights_path="", seed=0)
    assert model(torch.randn(2, 1, 64, 64)).shape == (2, 16)
    # A checkpoint with its classifier head (as timm/HF ship them) loads into the headless trunk.
    src = timm.create_model("resnet10t", pretrained=False, num_classes=10)
    path = tmp_path / "resnet10t.pth"
    torch.save(src.state_dict(), path)
    dst = build_model("timm:resnet10t", 3, 16, pretrained=True, weights_path=str(path), seed=1)
    assert torch.equal(src.layer4[0].conv1.weight, dst.trunk.get_parameter("layer4.0.conv1.weight"))


def test_unknown_timm_model_is_a_config_error() -> None:
    pytest.importorskip("timm", reason="optional extra dmlbench[timm] not installed")
    with pytest.raises(ConfigError, match=r"timm has no model 'resnet10tt'.*similar: .*resnet10t"):
        build_model("timm:resnet10tt", 3, 8, pretrained=False, weights_path="", seed=0)


def test_timm_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import builtins

    real_import = builtins.__import__

    def no_timm(name: str, *args: object, **kwargs: object) -> object:
        if name == "timm":
            raise ImportError("No module named 'timm'")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_timm)
    with pytest.raises(ConfigError, match=r"pip install 'dmlbench\[timm\]'"):
        build_model("timm:resnet18", 3, 8, pretrained=False, weights_path="", seed=0)
