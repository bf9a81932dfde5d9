"""The trunk registry: what each trunk is, where its public weights live, how to build it.

Importable without torch (``dmlbench list trunks`` and config validation use it): each spec's
``build`` is a lazily imported callable (:mod:`benchmark.lazy`) into :mod:`benchmark.models.trunks`
or :mod:`benchmark.models.bninception`, which import torch when a trunk is first built.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from benchmark.errors import ConfigError
from benchmark.lazy import lazy_callable
from benchmark.registry import Registry

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class HFWeights:
    """A Hugging Face hub repository holding a trunk's weights, and its file names in load order."""

    repo_id: str
    revision: str | None  # None: the "main" branch, as huggingface_hub resolves it
    files: tuple[str, ...]


@dataclass(frozen=True)
class TrunkSpec:
    """A registered trunk: how to build it and what it outputs."""

    name: str
    description: str
    build: Callable[[int], tuple[nn.Module, int]]  # in_channels -> (module, feature dim)
    has_public_weights: bool
    # File names the public ImageNet weights have in the torch hub cache (torch.hub.get_dir()),
    # where torchvision / pretrainedmodels (and timm < 0.9, for its URL weights) put them.
    cache_files: tuple[str, ...] = ()
    # The same weights as timm >= 0.9 downloads them, into the Hugging Face hub cache.
    hf_weights: HFWeights | None = None
    # Classifier modules a checkpoint may hold beyond the headless trunk (timm's pretrained_cfg
    # "classifier"); their keys are skipped on load, on top of the usual classifier names.
    head_names: tuple[str, ...] = ()


def adopt_trunk(obj: object, shown: str) -> TrunkSpec:
    """What a trunk plugin names, checked: a :class:`TrunkSpec` (else a ConfigError)."""
    if not isinstance(obj, TrunkSpec):
        raise ConfigError(f"Plugin {shown!r} is a {type(obj).__name__}; a trunk plugin must be a TrunkSpec.")
    if not callable(obj.build):
        raise ConfigError(
            f"Plugin {shown!r}: TrunkSpec.build must be callable (in_channels -> (module, dim))."
        )
    return obj


TRUNKS: Registry[TrunkSpec] = Registry("trunk", group="dmlbench.trunks", adopt=adopt_trunk)

TIMM_PREFIX = "timm:"
# Any timm model (optional extra): its spec is made on demand; timm and torch only for timm trunks.
TRUNKS.register_prefix(TIMM_PREFIX, "benchmark.models.trunks:timm_spec")


def trunk_spec(name: str) -> TrunkSpec:
    """The registered trunk ``name``, or ``timm:<model>`` for any timm model (optional extra)."""
    return TRUNKS.get(name)


def _lazy_build(target: str) -> Callable[[int], tuple[nn.Module, int]]:
    build: Callable[[int], tuple[nn.Module, int]] = lazy_callable(target)
    return build


TRUNKS.register(
    "smallcnn",
    TrunkSpec(
        "smallcnn",
        "4-block CNN (16-32-64-128 ch), for small grayscale images on CPU",
        _lazy_build("benchmark.models.trunks:small_cnn"),
        False,
    ),
)
TRUNKS.register(
    "resnet18",
    TrunkSpec(
        "resnet18",
        "torchvision ResNet-18 (512-d)",
        _lazy_build("benchmark.models.trunks:torchvision_resnet18"),
        True,
        ("resnet18-f37072fd.pth",),
    ),
)
TRUNKS.register(
    "resnet50",
    TrunkSpec(
        "resnet50",
        "torchvision ResNet-50 (2048-d)",
        _lazy_build("benchmark.models.trunks:torchvision_resnet50"),
        True,
        ("resnet50-11ad3fa6.pth", "resnet50-0676ba61.pth"),
    ),
)
TRUNKS.register(
    "googlenet",
    TrunkSpec(
        "googlenet",
        "torchvision GoogLeNet / Inception v1 (1024-d)",
        _lazy_build("benchmark.models.trunks:torchvision_googlenet"),
        True,
        ("googlenet-1378be20.pth",),
    ),
)
TRUNKS.register(
    "bninception",
    TrunkSpec(
        "bninception",
        "BN-Inception / Inception v2 (1024-d), the MLRC trunk; loads Cadene's bn_inception-52deb4733.pth",
        _lazy_build("benchmark.models.bninception:build_bninception"),
        True,
        ("bn_inception-52deb4733.pth",),
    ),
)
