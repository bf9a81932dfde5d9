"""The mean-field loss modules and their factories (declared, with defaults, search spaces and the
choices where the papers are ambiguous, in :mod:`benchmark.losses.meanfield`; imported on first use
so that the declarations need no torch).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from benchmark.losses import functional as LF
from benchmark.losses.registry import LossContext, check_positive

__all__ = [
    "ClassWiseMultiSimilarityLoss",
    "MeanFieldClassWiseMultiSimilarityLoss",
    "MeanFieldContrastiveLoss",
    "MeanFieldNCALoss",
    "cwms",
    "mfcont",
    "mfcwms",
    "mfnca",
]


class _MeanFieldLoss(nn.Module):
    """A loss owning one mean field per class, ``mean_fields`` of shape (C, D), N(0, 1) init."""

    def __init__(self, num_classes: int, embedding_dim: int) -> None:
        super().__init__()
        self.num_classes = num_classes
        self.mean_fields = nn.Parameter(torch.randn(num_classes, embedding_dim))

    def _fields(self, embeddings: Tensor) -> Tensor:
        # Follow the embeddings' dtype (float64 checks, half precision) like PML's losses do.
        return self.mean_fields.to(embeddings.dtype)


class MeanFieldContrastiveLoss(_MeanFieldLoss):
    """MeanFieldContrastive: contrastive loss between samples and per-class mean fields."""

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        m_p: float = 0.02,
        m_n: float = 0.3,
        lambda_mf: float = 0.0,
    ) -> None:
        super().__init__(num_classes, embedding_dim)
        self.m_p, self.m_n, self.lambda_mf = m_p, m_n, lambda_mf

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        return LF.mean_field_contrastive(
            embeddings, labels, self._fields(embeddings), self.m_p, self.m_n, self.lambda_mf
        )

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, m_p={self.m_p}, m_n={self.m_n}, lambda_mf={self.lambda_mf}"


class ClassWiseMultiSimilarityLoss(nn.Module):
    """ClassWiseMultiSimilarity: a MultiSimilarity variant symmetric in the pair members."""

    def __init__(self, alpha: float = 2.0, beta: float = 50.0, delta: float = 0.5) -> None:
        super().__init__()
        self.alpha, self.beta, self.delta = alpha, beta, delta

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        return LF.class_wise_multi_similarity(embeddings, labels, self.alpha, self.beta, self.delta)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}, delta={self.delta}"


class MeanFieldClassWiseMultiSimilarityLoss(_MeanFieldLoss):
    """MeanFieldClassWiseMultiSimilarity: ClassWiseMultiSimilarity expanded around mean fields."""

    def __init__(
        self,
        num_classes: int,
        embedding_dim: int,
        alpha: float = 0.01,
        beta: float = 80.0,
        delta: float = 0.8,
        lambda_mf: float = 0.0,
    ) -> None:
        super().__init__(num_classes, embedding_dim)
        self.alpha, self.beta, self.delta, self.lambda_mf = alpha, beta, delta, lambda_mf

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        return LF.mean_field_class_wise_multi_similarity(
            embeddings, labels, self._fields(embeddings), self.alpha, self.beta, self.delta, self.lambda_mf
        )

    def extra_repr(self) -> str:
        return (
            f"num_classes={self.num_classes}, alpha={self.alpha}, beta={self.beta}, "
            f"delta={self.delta}, lambda_mf={self.lambda_mf}"
        )


class MeanFieldNCALoss(_MeanFieldLoss):
    """MeanFieldNCA: ProxyNCA on mean fields plus a mean-field-to-samples NCA term."""

    def __init__(self, num_classes: int, embedding_dim: int, alpha: float = 16.0) -> None:
        super().__init__(num_classes, embedding_dim)
        self.alpha = alpha

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        return LF.mean_field_nca(embeddings, labels, self._fields(embeddings), self.alpha)

    def extra_repr(self) -> str:
        return f"num_classes={self.num_classes}, alpha={self.alpha}"


# --- factories ---------------------------------------------------------------------------------


def mfcont(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    return MeanFieldContrastiveLoss(ctx.num_classes, ctx.embedding_dim, p["m_p"], p["m_n"], p["lambda_mf"])


def cwms(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("cwms", p, "alpha", "beta")
    return ClassWiseMultiSimilarityLoss(p["alpha"], p["beta"], p["delta"])


def mfcwms(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("mfcwms", p, "alpha", "beta")
    return MeanFieldClassWiseMultiSimilarityLoss(
        ctx.num_classes, ctx.embedding_dim, p["alpha"], p["beta"], p["delta"], p["lambda_mf"]
    )


def mfnca(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("mfnca", p, "alpha")
    return MeanFieldNCALoss(ctx.num_classes, ctx.embedding_dim, p["alpha"])
