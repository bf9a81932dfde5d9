"""Trunk networks (feature extractors) and the embedder head.

Each trunk maps images (B, C, H, W) to pooled features (B, F). Pretrained weights come only
from a local file (``model.trunk_weights``): asking for pretrained weights without one is an
error, never a silent random init.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from benchmark.errors import ConfigError
from benchmark.registry import Registry


@dataclass(frozen=True)
class TrunkSpec:
    """A registered trunk: how to build it and what it outputs."""

    name: str
    description: str
    build: Callable[[int], tuple[nn.Module, int]]  # in_channels -> (module, feature dim)
    has_public_weights: bool
    # File names the public ImageNet weights have in the torch hub cache (torch.hub.get_dir()),
    # where torchvision / pretrainedmodels put them when they download them.
    cache_files: tuple[str, ...] = ()


def hub_checkpoint_dir() -> Path:
    """Where torch keeps downloaded checkpoints (``$TORCH_HOME/hub/checkpoints``)."""
    return Path(torch.hub.get_dir()) / "checkpoints"


def cached_weights(spec: TrunkSpec) -> Path | None:
    """The trunk's public weights if a file of theirs is already in the torch hub cache."""
    for name in spec.cache_files:
        path = hub_checkpoint_dir() / name
        if path.is_file():
            return path
    return None


TRUNKS: Registry[TrunkSpec] = Registry("trunk")


class SmallCNN(nn.Module):
    """Four conv-BN-ReLU blocks with max-pooling, global average pooling: the CPU default trunk."""

    def __init__(self, in_channels: int, widths: tuple[int, ...] = (16, 32, 64, 128)) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        prev = in_channels
        for i, w in enumerate(widths):
            layers += [nn.Conv2d(prev, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True)]
            # No pooling after the last block: at 28 px three halvings leave a 3x3 map to average.
            if i < len(widths) - 1:
                layers.append(nn.MaxPool2d(2))
            prev = w
        self.features = nn.Sequential(*layers)
        self.out_dim = prev

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.features(x).mean(dim=(2, 3))
        return out


def _small_cnn(in_channels: int) -> tuple[nn.Module, int]:
    net = SmallCNN(in_channels)
    return net, net.out_dim


def _torchvision_resnet(arch: str) -> Callable[[int], tuple[nn.Module, int]]:
    def build(in_channels: int) -> tuple[nn.Module, int]:
        import torchvision

        net = getattr(torchvision.models, arch)(weights=None)
        if in_channels != 3:
            # Grayscale input: a fresh first conv; pretrained weights (3 channels) are averaged in
            # load_trunk_weights if given.
            net.conv1 = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
        out_dim = int(net.fc.in_features)
        net.fc = nn.Identity()
        return net, out_dim

    return build


def _torchvision_googlenet(in_channels: int) -> tuple[nn.Module, int]:
    import torchvision

    # No auxiliary classifiers: they only serve ImageNet training; their weights are skipped on load.
    net = torchvision.models.googlenet(weights=None, aux_logits=False, init_weights=True)
    if in_channels != 3:
        net.conv1.conv = nn.Conv2d(in_channels, 64, kernel_size=7, stride=2, padding=3, bias=False)
    out_dim = int(net.fc.in_features)
    net.fc = nn.Identity()
    return net, out_dim


TIMM_PREFIX = "timm:"


def _timm_trunk(model_name: str) -> Callable[[int], tuple[nn.Module, int]]:
    def build(in_channels: int) -> tuple[nn.Module, int]:
        timm = _import_timm(model_name)
        # num_classes=0: timm's pooled-feature output; weights only ever from model.trunk_weights.
        net = timm.create_model(model_name, pretrained=False, num_classes=0, in_chans=in_channels)
        return net, int(net.num_features)

    return build


def _import_timm(model_name: str):  # type: ignore[no-untyped-def]
    try:
        import timm
    except ImportError as exc:
        raise ConfigError(
            f"model.trunk = '{TIMM_PREFIX}{model_name}' needs the optional timm package: "
            "pip install 'dmlbench[timm]'."
        ) from exc
    if not timm.is_model(model_name):
        close = difflib.get_close_matches(model_name, timm.list_models(), n=5, cutoff=0.7)
        raise ConfigError(
            f"timm has no model {model_name!r}" + (f"; similar: {', '.join(close)}." if close else ".")
        )
    return timm


def trunk_spec(name: str) -> TrunkSpec:
    """The registered trunk ``name``, or ``timm:<model>`` for any timm model (optional extra)."""
    if name.startswith(TIMM_PREFIX):
        model_name = name[len(TIMM_PREFIX) :]
        _import_timm(model_name)
        return TrunkSpec(name, f"timm model {model_name}", _timm_trunk(model_name), True)
    return TRUNKS.get(name)


TRUNKS.register(
    "smallcnn",
    TrunkSpec(
        "smallcnn", "4-block CNN (16-32-64-128 ch), for small grayscale images on CPU", _small_cnn, False
    ),
)
TRUNKS.register(
    "resnet18",
    TrunkSpec(
        "resnet18",
        "torchvision ResNet-18 (512-d)",
        _torchvision_resnet("resnet18"),
        True,
        ("resnet18-f37072fd.pth",),
    ),
)
TRUNKS.register(
    "resnet50",
    TrunkSpec(
        "resnet50",
        "torchvision ResNet-50 (2048-d)",
        _torchvision_resnet("resnet50"),
        True,
        ("resnet50-11ad3fa6.pth", "resnet50-0676ba61.pth"),
    ),
)
TRUNKS.register(
    "googlenet",
    TrunkSpec(
        "googlenet",
        "torchvision GoogLeNet / Inception v1 (1024-d)",
        _torchvision_googlenet,
        True,
        ("googlenet-1378be20.pth",),
    ),
)


def load_trunk_weights(trunk: nn.Module, path: Path) -> None:
    """Load a local state dict into ``trunk`` (classifier keys ignored; shapes must otherwise match)."""
    if not path.is_file():
        raise ConfigError(f"Trunk weights file {path} does not exist (model.trunk_weights).")
    state = torch.load(path, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "state_dict" in state:
        state = state["state_dict"]
    own = trunk.state_dict()
    # Classifier heads (and GoogLeNet's auxiliary classifiers) are not part of a trunk.
    skip = ("fc.", "last_linear.", "aux1.", "aux2.", "head.", "classifier.")
    filtered = {k: v for k, v in state.items() if not (k.startswith(skip) and k not in own)}
    for k, v in list(filtered.items()):
        if k in own and own[k].shape != v.shape and v.ndim == 4 and own[k].shape[1] == 1:
            filtered[k] = v.mean(dim=1, keepdim=True)  # RGB first conv -> grayscale
    missing, unexpected = trunk.load_state_dict(filtered, strict=False)
    if unexpected or [m for m in missing if not m.endswith("num_batches_tracked")]:
        raise ConfigError(
            f"Weights in {path} do not fit the trunk: missing {missing[:5]}, unexpected {unexpected[:5]}."
        )


class EmbeddingModel(nn.Module):
    """Trunk followed by a linear embedder (no activation), as in MLRC."""

    def __init__(self, trunk: nn.Module, trunk_dim: int, embedding_dim: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.embedder = nn.Linear(trunk_dim, embedding_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.embedder(self.trunk(x))
        return out


def build_model(
    trunk_name: str,
    in_channels: int,
    embedding_dim: int,
    *,
    pretrained: bool,
    weights_path: str,
    seed: int,
) -> EmbeddingModel:
    """Build trunk + embedder with parameters drawn from ``seed`` (weights file loaded if pretrained)."""
    spec = trunk_spec(trunk_name)
    if pretrained and not weights_path:
        raise ConfigError(
            f"model.pretrained = true for trunk {trunk_name!r} but no model.trunk_weights file was given; "
            "weights are never downloaded. Pass --set model.trunk_weights=PATH or model.pretrained=false."
        )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        trunk, dim = spec.build(in_channels)
        model = EmbeddingModel(trunk, dim, embedding_dim)
    if pretrained:
        load_trunk_weights(trunk, Path(weights_path))
    return model


def build_head(feature_dim: int, embedding_dim: int, seed: int) -> EmbeddingModel:
    """The embedder alone (identity trunk), for frozen-trunk training on cached features.

    The embedder is the MLRC ``Linear(feature_dim, embedding_dim)``, drawn from ``seed``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return EmbeddingModel(nn.Identity(), feature_dim, embedding_dim)


def set_train_mode(model: EmbeddingModel, freeze_trunk_bn: bool) -> None:
    """Training mode, with the trunk's BatchNorm layers in eval mode when frozen (SPEC §2.2)."""
    model.train()
    if freeze_trunk_bn:
        for module in model.trunk.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.eval()
