"""The PML-based loss modules and their factories (declared, with defaults and search spaces, in
:mod:`benchmark.losses.pml`; imported on first use so that the declarations need no torch).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses, miners, regularizers
from pytorch_metric_learning.utils import common_functions as c_f
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu
from torch import Tensor, nn

from benchmark.losses.functional import multi_proxy_regulariser
from benchmark.losses.registry import LossContext, check_integer, check_positive

__all__ = [
    "BlockSparseCentersRegularizer",
    "LogSpaceProxyNCALoss",
    "MinedLoss",
    "NormalizedInputLoss",
    "arcface",
    "contrastive",
    "cosface",
    "margin",
    "ms",
    "ms_miner",
    "normsoftmax",
    "ntxent",
    "proxyanchor",
    "proxynca",
    "snr",
    "softtriple",
    "triplet",
]


class MinedLoss(nn.Module):
    """A PML loss applied to the tuples its miner selects from the batch."""

    def __init__(self, loss: nn.Module, miner: nn.Module) -> None:
        super().__init__()
        self.loss = loss
        self.miner = miner

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        out: Tensor = self.loss(embeddings, labels, self.miner(embeddings, labels))
        return out


class BlockSparseCentersRegularizer(regularizers.SparseCentersRegularizer):  # type: ignore[misc]
    """PML's SparseCentersRegularizer (SoftTriple's centre regulariser) computed on each class's
    K x K block of centre similarities instead of on the full (C·K) x (C·K) matrix.

    The regulariser only reads same-class pairs, but PML forms every pair's cosine similarity and
    then masks it, with masks of (C·K)² booleans built in a Python loop per loss. On omniglot (91
    training classes per fold, K = 10: 910 centres) that made SoftTriple's training step about
    twice that of the other class-based losses, and its mini run the only one over 10 minutes
    (617 s). Same terms, in PML's order (class by class, row by row of the upper triangle), same
    divisor; the block products round differently from the full one (float32 eps).
    """

    def set_class_masks(self, num_classes: int, centers_per_class: int) -> None:
        # Instead of PML's two (C·K)² masks: the block layout is all compute_loss needs.
        self.num_classes = num_classes
        self.centers_per_class = centers_per_class

    def compute_loss(self, weights: Tensor) -> dict[str, dict[str, object]]:
        # The regulariser is MPA's (functional.multi_proxy_regulariser, same terms, order and
        # divisor C·K·(K-1)). Only PML's sqrt guard differs: it adds float32's tiny to 2, which
        # rounds away, so for distinct centres the two agree bit for bit.
        centers = weights.view(self.num_classes, self.centers_per_class, -1)
        return {
            "loss": {
                "losses": multi_proxy_regulariser(centers),
                "indices": None,
                "reduction_type": "already_reduced",
            }
        }


class LogSpaceProxyNCALoss(losses.ProxyNCALoss):  # type: ignore[misc]  # PML is untyped
    """PML's ProxyNCALoss evaluated in log space.

    PML computes ``-log(Σ_{same class} softmax(scale · -d²))`` as a softmax followed by a log.
    At large ``softmax_scale`` (the MLRC range reaches 100, i.e. logits down to -400) the softmax
    underflows to denormals whose log has a gradient of ~1e40, i.e. inf in float32. Here the same
    quantity is ``logsumexp_{same class} - logsumexp_{all}``: identical values, finite gradients.
    PML also drops samples whose probability underflowed to exactly 0; nothing underflows here,
    so every sample counts.
    """

    def nca_computation(
        self,
        query: Tensor,
        reference: Tensor,
        query_labels: Tensor,
        reference_labels: Tensor,
        indices_tuple: object,
    ) -> dict[str, dict[str, object]]:
        miner_weights = lmu.convert_to_weights(indices_tuple, query_labels, dtype=query.dtype)
        mat = self.distance(query, reference)
        if not self.distance.is_inverted:
            mat = -mat
        logits = self.softmax_scale * mat
        same = query_labels.unsqueeze(1) == reference_labels.unsqueeze(0)
        log_same = torch.logsumexp(logits.masked_fill(~same, -math.inf), dim=1)
        loss = (torch.logsumexp(logits, dim=1) - log_same) * miner_weights
        return {
            "loss": {
                "losses": loss,
                "indices": c_f.torch_arange_from_size(query),
                "reduction_type": "element",
            }
        }


class NormalizedInputLoss(nn.Module):
    """A loss called on L2-normalised embeddings (for terms that would see the raw norm)."""

    def __init__(self, loss: nn.Module) -> None:
        super().__init__()
        self.loss = loss

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        out: Tensor = self.loss(F.normalize(embeddings, dim=1), labels)
        return out


# --- factories ---------------------------------------------------------------------------------


def contrastive(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = losses.ContrastiveLoss(pos_margin=p["pos_margin"], neg_margin=p["neg_margin"])
    return loss


def triplet(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = losses.TripletMarginLoss(margin=p["margin"], triplets_per_anchor="all")
    return loss


def ntxent(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("ntxent", p, "temperature")
    loss: nn.Module = losses.NTXentLoss(temperature=p["temperature"])
    return loss


def margin(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = losses.MarginLoss(
        margin=p["margin"], nu=0.0, beta=p["beta"], triplets_per_anchor="all", learn_beta=True
    )
    return loss


def snr(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = NormalizedInputLoss(
        losses.SignalToNoiseRatioContrastiveLoss(
            pos_margin=p["pos_margin"],
            neg_margin=p["neg_margin"],
            embedding_regularizer=regularizers.ZeroMeanRegularizer(),
            embedding_reg_weight=p["reg_weight"],
        )
    )
    return loss


def ms(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("ms", p, "alpha", "beta")
    loss: nn.Module = losses.MultiSimilarityLoss(alpha=p["alpha"], beta=p["beta"], base=p["base"])
    return loss


def ms_miner(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    return MinedLoss(ms(ctx, p), miners.MultiSimilarityMiner(epsilon=p["epsilon"]))


def proxynca(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = LogSpaceProxyNCALoss(
        num_classes=ctx.num_classes, embedding_size=ctx.embedding_dim, softmax_scale=p["softmax_scale"]
    )
    return loss


def normsoftmax(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("normsoftmax", p, "temperature")
    loss: nn.Module = losses.NormalizedSoftmaxLoss(
        num_classes=ctx.num_classes, embedding_size=ctx.embedding_dim, temperature=p["temperature"]
    )
    return loss


def cosface(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = losses.CosFaceLoss(
        num_classes=ctx.num_classes, embedding_size=ctx.embedding_dim, margin=p["margin"], scale=p["scale"]
    )
    return loss


def arcface(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    # PML takes the angular margin in degrees and converts it to radians itself.
    loss: nn.Module = losses.ArcFaceLoss(
        num_classes=ctx.num_classes, embedding_size=ctx.embedding_dim, margin=p["margin"], scale=p["scale"]
    )
    return loss


def softtriple(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    check_positive("softtriple", p, "gamma")
    k = check_integer("softtriple", p, "centers_per_class", 1)
    reg = {}
    # K = 1 has no centres to spread; weight 0 (SOP, as the paper) means no regulariser at all.
    if k > 1 and p["reg_weight"] > 0:
        reg = {
            "weight_regularizer": BlockSparseCentersRegularizer(ctx.num_classes, k),
            "weight_reg_weight": p["reg_weight"],
        }
    loss: nn.Module = losses.SoftTripleLoss(
        num_classes=ctx.num_classes,
        embedding_size=ctx.embedding_dim,
        centers_per_class=k,
        la=p["la"],
        gamma=p["gamma"],
        margin=p["margin"],
        **reg,
    )
    return loss


def proxyanchor(ctx: LossContext, p: Mapping[str, float]) -> nn.Module:
    loss: nn.Module = losses.ProxyAnchorLoss(
        num_classes=ctx.num_classes, embedding_size=ctx.embedding_dim, margin=p["margin"], alpha=p["alpha"]
    )
    return loss
