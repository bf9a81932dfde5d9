"""Mean-field losses (Mean-Field DML papers, SPEC §3): ``mfcont``, ``cwms``, ``mfcwms``, ``mfnca``.

The formulas live in :mod:`benchmark.losses.functional`; this module wraps them as
``nn.Module`` s owning their mean fields and registers them.

Choices where the papers are ambiguous (documented in SPEC §3, which follows the authors'
implementation rather than the printed equations):

* **Normalisation of the sample terms.** Eq. 8 of the ICLR paper averages per class and then
  over classes, ``(1/|C|) Σ_c (1/|D_c|) Σ_{i∈c}``; SPEC (and this code) uses the batch mean
  ``(1/B) Σ_i`` for ``mfcont`` and the cross-entropy mean for ``mfnca``. With the sampler of the
  MLRC protocol (every class of a batch has the same number m of images) the two coincide; they
  differ only for unbalanced batches, where the batch mean weights classes by their size.
* **Similarity vs distance.** ``cwms`` / ``mfcwms`` follow SPEC §3, written with the
  similarity ``S = e·e'`` and base δ (``exp(-α(S - δ))`` for positives, ``exp(β(S - δ))`` for
  negatives). The printed eqs. 9/10 use the distance ``d = 1 - S``, i.e. their δ corresponds to
  ``1 - δ`` here (and eq. 9 excludes ``i = j`` where SPEC includes it). The ``mfcwms`` defaults
  (α, β, δ, λ_MF) = (0.01, 80, 0.8, 0) are SPEC's, in SPEC's (similarity) convention.
* **Mean fields** are free ``nn.Parameter`` s initialised N(0, 1) and L2-normalised inside the
  loss, so only their direction matters (the trainer applies weight decay 1e-4 to the raw
  vectors, which only rescales them).
* **λ_MF = 0** (the paper default) skips the O(C²) constraint term entirely; any non-zero value
  computes it exactly.
* ``cwms`` is pair-based (m = 4 images per class); the mean-field losses are class-based
  (m = 1), as the Mean-Field paper states.
* Batches without a positive pair: the mean-field losses are unaffected (a sample's positive is
  its class's mean field). In ``cwms`` every singleton class keeps its ``i = j`` self-pair,
  ``P_c = exp(-α(1 - δ))``, a constant; the value is that constant plus the negative terms.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

from benchmark.losses import functional as LF
from benchmark.losses.base import (
    DEFAULT_PARAM_LR,
    PARAM_LR,
    PARAM_LR_SEARCH,
    LossContext,
    LossSpec,
    SearchDim,
    check_positive,
    register_loss,
)

__all__ = [
    "ClassWiseMultiSimilarityLoss",
    "MeanFieldClassWiseMultiSimilarityLoss",
    "MeanFieldContrastiveLoss",
    "MeanFieldNCALoss",
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


# --- registration ------------------------------------------------------------------------------


def _mfcont(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    return MeanFieldContrastiveLoss(ctx.num_classes, ctx.embedding_dim, p["m_p"], p["m_n"], p["lambda_mf"])


def _cwms(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("cwms", p, "alpha", "beta")
    return ClassWiseMultiSimilarityLoss(p["alpha"], p["beta"], p["delta"])


def _mfcwms(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("mfcwms", p, "alpha", "beta")
    return MeanFieldClassWiseMultiSimilarityLoss(
        ctx.num_classes, ctx.embedding_dim, p["alpha"], p["beta"], p["delta"], p["lambda_mf"]
    )


def _mfnca(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("mfnca", p, "alpha")
    return MeanFieldNCALoss(ctx.num_classes, ctx.embedding_dim, p["alpha"])


register_loss(
    LossSpec(
        name="mfcont",
        display_name="MeanFieldContrastive",
        factory=_mfcont,
        defaults={"m_p": 0.02, "m_n": 0.3, "lambda_mf": 0.0, PARAM_LR: DEFAULT_PARAM_LR},
        search_space={
            "m_p": SearchDim(0.0, 1.0),
            "m_n": SearchDim(0.0, 2.0),
            "lambda_mf": SearchDim(0.0, 1.0),
            PARAM_LR: PARAM_LR_SEARCH,
        },
        pair_based=False,
        has_parameters=True,
        embedding_space="cosine",
        source="dmlbench",
        description="Contrastive loss against learnable per-class mean fields (Mean-Field DML eq. 8).",
    )
)

register_loss(
    LossSpec(
        name="cwms",
        display_name="ClassWiseMultiSimilarity",
        factory=_cwms,
        # SPEC gives no defaults; the authors' code (mft-in-dml train.py: --alpha 0.01, --beta 80,
        # --mrg 0.8, passed to ClassWiseMultiSimilarityLoss as alpha, beta, base) does, the same
        # values as mfcwms. They matter for the protocols without search (traditional, cbir).
        defaults={"alpha": 0.01, "beta": 80.0, "delta": 0.8},
        search_space={
            "alpha": SearchDim(0.01, 100.0, log=True),
            "beta": SearchDim(0.01, 100.0, log=True),
            "delta": SearchDim(-1.0, 1.0),
        },
        pair_based=True,
        has_parameters=False,
        embedding_space="cosine",
        source="dmlbench",
        description="MultiSimilarity variant with class-wise positive/negative pair sums (eq. 9).",
    )
)

register_loss(
    LossSpec(
        name="mfcwms",
        display_name="MeanFieldClassWiseMultiSimilarity",
        factory=_mfcwms,
        defaults={"alpha": 0.01, "beta": 80.0, "delta": 0.8, "lambda_mf": 0.0, PARAM_LR: DEFAULT_PARAM_LR},
        search_space={
            "alpha": SearchDim(0.01, 100.0, log=True),
            "beta": SearchDim(0.01, 100.0, log=True),
            "delta": SearchDim(-1.0, 1.0),
            "lambda_mf": SearchDim(0.0, 1.0),
            PARAM_LR: PARAM_LR_SEARCH,
        },
        pair_based=False,
        has_parameters=True,
        embedding_space="cosine",
        source="dmlbench",
        description="ClassWiseMultiSimilarity expanded around learnable mean fields (eq. 10).",
    )
)

register_loss(
    LossSpec(
        name="mfnca",
        display_name="MeanFieldNCA",
        factory=_mfnca,
        # SPEC gives no default α. 16 puts the cosine logits in the usual range of normalised
        # softmax losses (NormSoftmax's 1/0.05 = 20, CosFace/ArcFace use 30-64 on larger C).
        defaults={"alpha": 16.0, PARAM_LR: DEFAULT_PARAM_LR},
        search_space={"alpha": SearchDim(0.01, 100.0, log=True), PARAM_LR: PARAM_LR_SEARCH},
        pair_based=False,
        has_parameters=True,
        embedding_space="cosine",
        source="dmlbench",
        description="ProxyNCA on mean fields plus the mean-field/sample NCA term (ICLR eq. 21).",
    )
)
