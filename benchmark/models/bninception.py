"""BN-Inception (Inception v2 with batch normalisation; Ioffe & Szegedy, ICML 2015): the MLRC trunk.

The module's ``state_dict()`` keys and shapes are those of the widely used Caffe-converted ImageNet
weights ``bn_inception-52deb4733.pth`` (Cadene's ``pretrainedmodels``): every convolution is a flat
attribute such as ``conv1_7x7_s2`` or ``inception_3a_double_3x3_1`` with a bias (Caffe convolutions
have one), followed by a BatchNorm called ``<conv>_bn``; the ImageNet classifier is ``last_linear``.
Those weights load with :func:`benchmark.models.trunks.load_trunk_weights` (which drops
``last_linear``). The trunk ends in global average pooling and outputs 1024-d features; at 224 and
227 px the last feature map is 7x7, as in the original network.

Input convention of the pretrained weights (:data:`BNINCEPTION_INPUT`): BGR channel order, pixel
values in [0, 255], minus the per-channel mean (104, 117, 128) in BGR order, no division by a
standard deviation. dmlbench's batches (:mod:`benchmark.data.augment`) are RGB scaled to [-1, 1];
the trunk built by :func:`build_bninception` converts those itself, so that the weights see exactly
what they were trained on.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

from benchmark.errors import ConfigError
from benchmark.models.registry import TRUNKS
from benchmark.models.trunks import pool_feature_map

FEATURE_DIM = 1024


@dataclass(frozen=True)
class InputConvention:
    """What a pretrained trunk expects as input: channel order, value range, mean/std, crop size."""

    channel_order: str
    value_range: tuple[float, float]
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    crop_size: int
    description: str


BNINCEPTION_INPUT = InputConvention(
    channel_order="BGR",
    value_range=(0.0, 255.0),
    mean=(104.0, 117.0, 128.0),
    std=(1.0, 1.0, 1.0),
    crop_size=224,
    description=(
        "BGR, 0-255, minus mean (104, 117, 128) in BGR order, std 1; 224 px (MLRC crops 227 px). "
        "The dmlbench trunk takes RGB in [-1, 1] and converts."
    ),
)


@dataclass(frozen=True)
class _Block:
    """One Inception module, columns as in Table 1 of the BN paper (channel counts; 0 = no branch).

    Stride-2 modules (3c, 4e) have no 1x1 branch and pass the max-pooled input through unprojected.
    """

    name: str
    in_channels: int
    c1x1: int
    c3x3_reduce: int
    c3x3: int
    cdouble_reduce: int
    cdouble: int
    pool: Literal["avg", "max"]
    pool_proj: int
    stride: int

    @property
    def out_channels(self) -> int:
        passthrough = self.in_channels if self.pool_proj == 0 else self.pool_proj
        return self.c1x1 + self.c3x3 + self.cdouble + passthrough


_BLOCKS: tuple[_Block, ...] = (
    _Block("inception_3a", 192, 64, 64, 64, 64, 96, "avg", 32, 1),
    _Block("inception_3b", 256, 64, 64, 96, 64, 96, "avg", 64, 1),
    _Block("inception_3c", 320, 0, 128, 160, 64, 96, "max", 0, 2),
    _Block("inception_4a", 576, 224, 64, 96, 96, 128, "avg", 128, 1),
    _Block("inception_4b", 576, 192, 96, 128, 96, 128, "avg", 128, 1),
    _Block("inception_4c", 576, 160, 128, 160, 128, 160, "avg", 128, 1),
    _Block("inception_4d", 608, 96, 128, 192, 160, 192, "avg", 128, 1),
    _Block("inception_4e", 608, 0, 128, 192, 192, 256, "max", 0, 2),
    _Block("inception_5a", 1056, 352, 192, 320, 160, 224, "avg", 128, 1),
    _Block("inception_5b", 1024, 352, 192, 320, 192, 224, "max", 128, 1),
)


class BNInception(nn.Module):
    """BN-Inception mapping images (B, C, H, W) to pooled 1024-d features (or logits with a classifier).

    ``input_convention="caffe"`` feeds the input to the first convolution unchanged (BGR, 0-255,
    mean-subtracted, see :data:`BNINCEPTION_INPUT`); ``"dmlbench"`` accepts RGB (or grayscale) in
    [-1, 1] and converts to the Caffe convention first. ``num_classes > 0`` adds the ``last_linear``
    classifier and makes ``forward`` return its logits.
    """

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 0,
        input_convention: Literal["caffe", "dmlbench"] = "caffe",
    ) -> None:
        super().__init__()
        if input_convention == "dmlbench" and in_channels not in (1, 3):
            raise ConfigError(
                f"BN-Inception converts RGB or grayscale dmlbench batches; got {in_channels} input channels."
            )
        self.input_convention = input_convention
        self.global_pool = "avg"  # or "avg+max" (model.pooling, the Proxy-Anchor/Mean-Field code's)
        self._convs: list[str] = []  # creation order, for parameter_names() and tests
        self._add_conv("conv1_7x7_s2", in_channels, 64, 7, stride=2, padding=3)
        self._add_conv("conv2_3x3_reduce", 64, 64, 1)
        self._add_conv("conv2_3x3", 64, 192, 3, padding=1)
        for b in _BLOCKS:
            if b.c1x1:
                self._add_conv(f"{b.name}_1x1", b.in_channels, b.c1x1, 1)
            self._add_conv(f"{b.name}_3x3_reduce", b.in_channels, b.c3x3_reduce, 1)
            self._add_conv(f"{b.name}_3x3", b.c3x3_reduce, b.c3x3, 3, stride=b.stride, padding=1)
            self._add_conv(f"{b.name}_double_3x3_reduce", b.in_channels, b.cdouble_reduce, 1)
            self._add_conv(f"{b.name}_double_3x3_1", b.cdouble_reduce, b.cdouble, 3, padding=1)
            self._add_conv(f"{b.name}_double_3x3_2", b.cdouble, b.cdouble, 3, stride=b.stride, padding=1)
            if b.pool_proj:
                self._add_conv(f"{b.name}_pool_proj", b.in_channels, b.pool_proj, 1)
        self.out_dim = _BLOCKS[-1].out_channels
        self.last_linear: nn.Linear | None = nn.Linear(self.out_dim, num_classes) if num_classes > 0 else None
        mean = torch.tensor(BNINCEPTION_INPUT.mean)
        if in_channels == 1:
            mean = mean.mean(dim=0, keepdim=True)
        # Not persistent: the state dict must hold exactly the keys of the published weights.
        self.register_buffer("input_mean", mean.view(1, -1, 1, 1), persistent=False)

    def _add_conv(
        self, name: str, cin: int, cout: int, kernel: int, stride: int = 1, padding: int = 0
    ) -> None:
        self.add_module(name, nn.Conv2d(cin, cout, kernel, stride=stride, padding=padding, bias=True))
        self.add_module(f"{name}_bn", nn.BatchNorm2d(cout))
        self._convs.append(name)

    def conv_names(self) -> list[str]:
        """Names of all convolutions (each has ``<name>_bn``), in forward order."""
        return list(self._convs)

    def _cbr(self, name: str, x: torch.Tensor) -> torch.Tensor:
        """Convolution, batch norm, ReLU: the unit every layer of the network is made of."""
        conv = self.get_submodule(name)
        bn = self.get_submodule(f"{name}_bn")
        return F.relu(bn(conv(x)), inplace=True)

    def _to_caffe(self, x: torch.Tensor) -> torch.Tensor:
        if self.input_convention == "caffe":
            return x
        # [-1, 1] back to [0, 255] (inverse of augment._normalise), RGB -> BGR, minus the mean.
        pixels = (x + 1.0) * 127.5
        if pixels.shape[1] == 3:
            pixels = pixels.flip(1)
        mean = self.get_buffer("input_mean")
        return pixels - mean.to(pixels.dtype)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        """Globally pooled (average, or average + max) 1024-d features of a batch (B, C, H, W)."""
        x = self._cbr("conv1_7x7_s2", self._to_caffe(x))
        # ceil_mode pooling as in Caffe: 224 or 227 px reach the 7x7 map of the original network.
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        x = self._cbr("conv2_3x3", self._cbr("conv2_3x3_reduce", x))
        x = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        for b in _BLOCKS:
            x = self._block(b, x)
        return pool_feature_map(x, self.global_pool)

    def _block(self, b: _Block, x: torch.Tensor) -> torch.Tensor:
        branches: list[torch.Tensor] = []
        if b.c1x1:
            branches.append(self._cbr(f"{b.name}_1x1", x))
        branches.append(self._cbr(f"{b.name}_3x3", self._cbr(f"{b.name}_3x3_reduce", x)))
        double = self._cbr(f"{b.name}_double_3x3_reduce", x)
        branches.append(self._cbr(f"{b.name}_double_3x3_2", self._cbr(f"{b.name}_double_3x3_1", double)))
        if b.stride == 2:
            pooled = F.max_pool2d(x, 3, stride=2, ceil_mode=True)
        elif b.pool == "avg":
            pooled = F.avg_pool2d(x, 3, stride=1, padding=1, ceil_mode=True, count_include_pad=True)
        else:
            pooled = F.max_pool2d(x, 3, stride=1, padding=1, ceil_mode=True)
        branches.append(self._cbr(f"{b.name}_pool_proj", pooled) if b.pool_proj else pooled)
        # Concatenation order 1x1, 3x3, double 3x3, pool: the next layer's weights depend on it.
        return torch.cat(branches, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = self.features(x)
        return feats if self.last_linear is None else self.last_linear(feats)


def build_bninception(in_channels: int) -> tuple[nn.Module, int]:
    """The MLRC trunk: BN-Inception without classifier, taking dmlbench batches, 1024-d output."""
    net = BNInception(in_channels, num_classes=0, input_convention="dmlbench")
    return net, net.out_dim


# The registered spec (benchmark.models.registry, declared without torch) with the builder itself.
BNINCEPTION_SPEC = dataclasses.replace(TRUNKS.get("bninception"), build=build_bninception)
