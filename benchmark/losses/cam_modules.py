"""The Class Anchor Margin loss module and its factory (declared, with the choices where the paper
is ambiguous, in :mod:`benchmark.losses.cam`; imported on first use).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from benchmark.losses import functional as LF
from benchmark.losses.registry import LossContext, check_positive

__all__ = ["ClassAnchorMarginLoss", "cam", "init_class_anchors"]


def init_class_anchors(num_classes: int, embedding_dim: int, m: float) -> Tensor:
    """Initial anchors (C, D) of norm √2·m: scaled one-hot vectors if C <= D, else random."""
    scale = math.sqrt(2.0) * m
    if num_classes <= embedding_dim:
        return scale * torch.eye(num_classes, embedding_dim)
    return scale * F.normalize(torch.randn(num_classes, embedding_dim), dim=1)


class ClassAnchorMarginLoss(nn.Module):
    """Attractor to a learnable class anchor, anchor repeller with margin 2m, anchor norm >= p."""

    def __init__(self, num_classes: int, embedding_dim: int, m: float = 2.0, p: float = 1.0) -> None:
        super().__init__()
        self.num_classes, self.m, self.p = num_classes, m, p
        self.anchors = nn.Parameter(init_class_anchors(num_classes, embedding_dim, m))

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        return LF.class_anchor_margin(embeddings, labels, self.anchors.to(embeddings.dtype), self.m, self.p)

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, m={self.m}, p={self.p}"


def cam(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("cam", p, "m", "p")
    return ClassAnchorMarginLoss(ctx.num_classes, ctx.embedding_dim, p["m"], p["p"])
