"""Pure, vectorised formulas of the losses implemented in dmlbench (docs/protocols.md §3).

Every function takes embeddings and labels plus the loss's parameter tensors and
hyperparameters, and returns a scalar. No function loops over samples or classes in Python.
Sums of exponentials are evaluated in log space (``logsumexp`` / ``softplus``) so that the
scales α, β up to 100, temperatures down to 0.01 and (near-)identical embeddings give finite
values and gradients in float32.

Notation follows docs/protocols.md §3: ``e`` are L2-normalised embeddings, ``w`` L2-normalised class vectors
(mean fields / proxies), ``d(a, b) = 1 - a·b``, C the number of classes of the fold and C_B the
number of classes present in the batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "batch_classes",
    "class_anchor_margin",
    "class_wise_multi_similarity",
    "grouped_logsumexp",
    "log1p_sum_exp",
    "mean_field_class_wise_multi_similarity",
    "mean_field_contrastive",
    "mean_field_nca",
    "multi_proxy_anchor",
    "multi_proxy_anchor_all_proxies",
    "multi_proxy_anchor_data_wise",
    "multi_proxy_regulariser",
    "relaxed_similarity",
    "safe_sqrt",
]


# --- building blocks ---------------------------------------------------------------------------


def safe_sqrt(x: Tensor) -> Tensor:
    """``sqrt(max(x, 0))`` with gradient 0 (instead of inf/NaN) where ``x <= 0``.

    Distances between identical vectors are exactly 0; the plain square root has an infinite
    derivative there, which turns into NaN as soon as it is multiplied by a zero upstream
    gradient.
    """
    positive = x > 0
    return torch.where(positive, torch.sqrt(torch.where(positive, x, torch.ones_like(x))), 0.0)


def batch_classes(labels: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct classes of a batch.

    Returns ``(classes, inverse, counts)``: the sorted distinct labels (C_B,), the index of each
    sample's class within ``classes`` (B,), and n_c, the number of samples per class (C_B,).
    """
    classes, inverse, counts = torch.unique(labels, sorted=True, return_inverse=True, return_counts=True)
    return classes, inverse, counts


def grouped_logsumexp(x: Tensor, group: Tensor, num_groups: int) -> Tensor:
    """``out[g, k] = log Σ_{i : group[i] = g} exp(x[i, k])`` for ``x`` of shape (N, K).

    Each group is shifted by its own maximum, so a group whose values are all far below another
    group's stays finite (a single global shift would underflow to log 0 at large scales).
    Every group must be non-empty (``group`` an inverse index as from :func:`batch_classes`).
    """
    index = group.unsqueeze(1).expand_as(x)
    with torch.no_grad():
        # The shift cancels analytically, so it needs no gradient.
        shift = torch.full((num_groups, x.shape[1]), -math.inf, dtype=x.dtype, device=x.device)
        shift = shift.scatter_reduce(0, index, x, reduce="amax", include_self=True)
        shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    summed = torch.zeros((num_groups, x.shape[1]), dtype=x.dtype, device=x.device)
    summed = summed.index_add(0, group, torch.exp(x - shift[group]))
    return shift + torch.log(summed)


def log1p_sum_exp(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    """``log(1 + Σ_{mask} exp(x))`` along ``dim``; 0 where the mask selects nothing.

    Written as a logsumexp over the selected entries plus one extra 0 entry (the ``1 +``), which
    keeps the maximum finite and the gradient well defined even for an empty selection.
    """
    masked = x.masked_fill(~mask, -math.inf)
    zeros = torch.zeros_like(masked.narrow(dim, 0, 1))
    return torch.logsumexp(torch.cat([masked, zeros], dim=dim), dim=dim)


def _off_diagonal(n: int, device: torch.device) -> Tensor:
    return ~torch.eye(n, dtype=torch.bool, device=device)


# --- mean-field family -------------------------------------------------------------------------


def mean_field_contrastive(
    embeddings: Tensor,
    labels: Tensor,
    mean_fields: Tensor,
    m_p: float,
    m_n: float,
    lambda_mf: float,
) -> Tensor:
    """MeanFieldContrastive (Mean-Field DML, eq. 8, as restated in docs/protocols.md §3).

    ``L = (1/B) Σ_i [relu(d(e_i, w_{y_i}) - m_P) + Σ_{c≠y_i} relu(m_N - d(e_i, w_c))]
    + λ_MF (1/C) Σ_{c≠c'} relu(m_N - d(w_c, w_c'))²``

    ``embeddings`` (B, D) and ``mean_fields`` (C, D) are raw; both are L2-normalised here.
    """
    e = F.normalize(embeddings, dim=1)
    w = F.normalize(mean_fields, dim=1)
    num_classes = w.shape[0]
    dist = 1.0 - e @ w.T  # (B, C)
    is_pos = F.one_hot(labels, num_classes).bool()
    pos = F.relu(dist.gather(1, labels.unsqueeze(1)).squeeze(1) - m_p)
    neg = F.relu(m_n - dist).masked_fill(is_pos, 0.0).sum(dim=1)
    loss = (pos + neg).mean()
    if lambda_mf != 0.0:
        # Skipped when inactive (the paper's default): it is O(C² D) per step, a real cost
        # for thousands of classes.
        mf_dist = 1.0 - w @ w.T
        hinge = F.relu(m_n - mf_dist).masked_fill(~_off_diagonal(num_classes, w.device), 0.0)
        loss = loss + lambda_mf * hinge.pow(2).sum() / num_classes
    return loss


def class_wise_multi_similarity(
    embeddings: Tensor, labels: Tensor, alpha: float, beta: float, delta: float
) -> Tensor:
    """ClassWiseMultiSimilarity (Mean-Field DML, eq. 9, as restated in docs/protocols.md §3).

    ``P_c = (1/n_c²) Σ_{i,j∈c} exp(-α(S_ij - δ))``,
    ``N_cc' = (1/(n_c n_c')) Σ_{i∈c, j∈c'} exp(β(S_ij - δ))``,
    ``L = (1/(α C_B)) Σ_c log(1 + P_c/2) + (1/(2β C_B)) Σ_{c≠c'} log(1 + N_cc')``
    over the classes present in the batch, pairs ``i = j`` included.
    """
    e = F.normalize(embeddings, dim=1)
    sim = e @ e.T
    _, inverse, counts = batch_classes(labels)
    num_b = counts.shape[0]
    log_counts = counts.to(sim.dtype).log()
    log_pair_counts = log_counts.unsqueeze(1) + log_counts.unsqueeze(0)

    def block_logsumexp(x: Tensor) -> Tensor:
        # log Σ_{i∈c, j∈c'} exp(x_ij) for all class pairs: reduce rows by class, then columns.
        rows = grouped_logsumexp(x, inverse, num_b)  # (C_B, B)
        return grouped_logsumexp(rows.T, inverse, num_b).T  # (C_B, C_B)

    log_p = torch.diagonal(block_logsumexp(-alpha * (sim - delta))) - 2.0 * log_counts
    pos = F.softplus(log_p - math.log(2.0)).sum() / (alpha * num_b)
    log_n = block_logsumexp(beta * (sim - delta)) - log_pair_counts
    neg_terms = F.softplus(log_n).masked_fill(~_off_diagonal(num_b, sim.device), 0.0)
    neg = neg_terms.sum() / (2.0 * beta * num_b)
    return pos + neg


def mean_field_class_wise_multi_similarity(
    embeddings: Tensor,
    labels: Tensor,
    mean_fields: Tensor,
    alpha: float,
    beta: float,
    delta: float,
    lambda_mf: float,
) -> Tensor:
    """MeanFieldClassWiseMultiSimilarity (Mean-Field DML, eq. 10, as restated in docs/protocols.md §3).

    ``P_c = (1/n_c) Σ_{i∈c} exp(-α(e_i·w_c - δ))``,
    ``N_cc' = (1/n_c) Σ_{i∈c} exp(β(e_i·w_c' - δ))`` (0 for classes absent from the batch),
    ``N^sym = N + Nᵀ`` over all C classes,
    ``L = (1/(α C_B)) Σ_{c∈batch} log(1 + P_c) + (1/(2β C_B)) Σ_{c≠c'} log(1 + N^sym_cc')
    + λ_MF (1/C) Σ_{c≠c'} softplus_β(w_c·w_c' - δ)²`` with ``softplus_β(x) = log(1 + e^{βx})/β``.
    """
    e = F.normalize(embeddings, dim=1)
    w = F.normalize(mean_fields, dim=1)
    num_classes = w.shape[0]
    sim = e @ w.T  # (B, C)
    classes, inverse, counts = batch_classes(labels)
    num_b = classes.shape[0]
    log_counts = counts.to(sim.dtype).log()

    pos_sim = sim.gather(1, labels.unsqueeze(1))  # (B, 1): e_i · w_{y_i}
    log_p = grouped_logsumexp(-alpha * (pos_sim - delta), inverse, num_b).squeeze(1) - log_counts
    pos = F.softplus(log_p).sum() / (alpha * num_b)

    # log N_cc' for the batch classes c (rows) and every class c' (columns).
    log_n = grouped_logsumexp(beta * (sim - delta), inverse, num_b) - log_counts.unsqueeze(1)
    # Σ_{c≠c'} over all C classes splits into (a) both classes in the batch, where
    # N^sym = N_cc' + N_c'c, and (b) exactly one in the batch, where N^sym_cc' = N^sym_c'c is a
    # single term counted twice. Pairs of absent classes contribute log(1 + 0) = 0. Splitting
    # avoids a logaddexp of two -inf entries, whose gradient is NaN.
    log_n_bb = log_n[:, classes]
    both = F.softplus(torch.logaddexp(log_n_bb, log_n_bb.T))
    both = both.masked_fill(~_off_diagonal(num_b, sim.device), 0.0).sum()
    in_batch = torch.zeros(num_classes, dtype=torch.bool, device=sim.device)
    in_batch[classes] = True
    one = F.softplus(log_n).masked_fill(in_batch.unsqueeze(0), 0.0).sum()
    neg = (both + 2.0 * one) / (2.0 * beta * num_b)

    loss = pos + neg
    if lambda_mf != 0.0:
        # Skipped when inactive (the paper's default): it is O(C² D) per step.
        softplus_beta = F.softplus(beta * (w @ w.T - delta)) / beta
        reg = softplus_beta.pow(2).masked_fill(~_off_diagonal(num_classes, w.device), 0.0)
        loss = loss + lambda_mf * reg.sum() / num_classes
    return loss


def mean_field_nca(embeddings: Tensor, labels: Tensor, mean_fields: Tensor, alpha: float) -> Tensor:
    """MeanFieldNCA (Mean-Field DML, ICLR appendix eq. 21, as restated in docs/protocols.md §3).

    ``L = -(1/B) Σ_i log softmax_{y_i}(-α d(e_i, w_·))
    - (1/C_B) Σ_{c∈batch} log[Σ_{j∈c} e^{-α d(w_c, e_j)} / Σ_j e^{-α d(w_c, e_j)}]``
    """
    e = F.normalize(embeddings, dim=1)
    w = F.normalize(mean_fields, dim=1)
    logits = -alpha * (1.0 - e @ w.T)  # (B, C)
    proxy_nca = F.cross_entropy(logits, labels)
    classes, inverse, _ = batch_classes(labels)
    logits_b = logits[:, classes]  # (B, C_B): -α d(w_c, e_j), column c
    log_num = torch.diagonal(grouped_logsumexp(logits_b, inverse, classes.shape[0]))
    log_den = torch.logsumexp(logits_b, dim=0)
    return proxy_nca + (log_den - log_num).mean()


# --- class anchor margin -----------------------------------------------------------------------


def class_anchor_margin(embeddings: Tensor, labels: Tensor, anchors: Tensor, m: float, p: float) -> Tensor:
    """Class Anchor Margin loss (CAM paper, eqs. 1-4, as restated in docs/protocols.md §3), euclidean space.

    ``L = mean_i ½‖e_i - c_{y_i}‖² + ½ Σ_{y≠y'} relu(2m - ‖c_y - c_y'‖)² + ½ Σ_y relu(p - ‖c_y‖)²``

    ``embeddings`` are used as they are (not normalised). The repeller sums over ordered pairs
    of all C anchors, as in eq. 2.
    """
    attract = 0.5 * (embeddings - anchors[labels]).pow(2).sum(dim=1).mean()
    sq_norms = anchors.pow(2).sum(dim=1)
    # Gram form: a (C, C, D) difference tensor would not fit for thousands of classes.
    sq_dist = sq_norms.unsqueeze(1) + sq_norms.unsqueeze(0) - 2.0 * anchors @ anchors.T
    dist = safe_sqrt(sq_dist)
    hinge = F.relu(2.0 * m - dist).masked_fill(~_off_diagonal(anchors.shape[0], anchors.device), 0.0)
    repel = 0.5 * hinge.pow(2).sum()
    norm = 0.5 * F.relu(p - safe_sqrt(sq_norms)).pow(2).sum()
    return attract + repel + norm


# --- multi-proxy-anchor family -----------------------------------------------------------------


def relaxed_similarity(embeddings: Tensor, proxies: Tensor, gamma: float) -> Tensor:
    """SoftTriple's relaxed similarity ``S(x, c) = Σ_k softmax_k(x·w_ck / γ) x·w_ck``.

    ``embeddings`` (B, D) and ``proxies`` (C, K, D) are raw and normalised here; returns (B, C).
    """
    e = F.normalize(embeddings, dim=1)
    w = F.normalize(proxies, dim=2)
    sims = torch.einsum("bd,ckd->bck", e, w)
    return (torch.softmax(sims / gamma, dim=2) * sims).sum(dim=2)


def multi_proxy_regulariser(proxies: Tensor) -> Tensor:
    """``Σ_c Σ_{t<s} sqrt(2 - 2 w_ct·w_cs) / (C K (K-1))``, 0 for a single proxy per class."""
    num_classes, k, _ = proxies.shape
    if k < 2:
        return proxies.new_zeros(())
    w = F.normalize(proxies, dim=2)
    gram = w @ w.transpose(1, 2)  # (C, K, K)
    upper = torch.triu(torch.ones(k, k, dtype=torch.bool, device=w.device), diagonal=1)
    dist = safe_sqrt(2.0 - 2.0 * gram[:, upper])
    return dist.sum() / (num_classes * k * (k - 1))


def multi_proxy_anchor(
    embeddings: Tensor, labels: Tensor, proxies: Tensor, alpha: float, delta: float, gamma: float, tau: float
) -> Tensor:
    """MPA loss (proxy-wise, Proxy-Anchor style; docs/protocols.md §3).

    ``L = (1/|C⁺|) Σ_{c∈C⁺} log(1 + Σ_{x∈X_c⁺} e^{-α(S(x,c) - δ)})
    + (1/C) Σ_c log(1 + Σ_{x∈X_c⁻} e^{α(S(x,c) + δ)}) + τ Reg``
    """
    sim = relaxed_similarity(embeddings, proxies, gamma)
    num_classes = proxies.shape[0]
    is_pos = F.one_hot(labels, num_classes).bool()
    num_present = is_pos.any(dim=0).sum()
    # Classes without positives contribute log(1 + 0) = 0 to the first sum.
    pos = log1p_sum_exp(-alpha * (sim - delta), is_pos, dim=0).sum() / num_present
    neg = log1p_sum_exp(alpha * (sim + delta), ~is_pos, dim=0).sum() / num_classes
    return pos + neg + tau * multi_proxy_regulariser(proxies)


def multi_proxy_anchor_data_wise(
    embeddings: Tensor, labels: Tensor, proxies: Tensor, alpha: float, delta: float, gamma: float, tau: float
) -> Tensor:
    """MPA-DW loss (data-wise; docs/protocols.md §3).

    ``L = (1/B) Σ_i [log(1 + e^{-α(S(x_i,y_i) - δ)}) + log(1 + Σ_{c≠y_i} e^{α(S(x_i,c) + δ)})]
    + τ Reg``
    """
    sim = relaxed_similarity(embeddings, proxies, gamma)
    is_pos = F.one_hot(labels, proxies.shape[0]).bool()
    pos = F.softplus(-alpha * (sim.gather(1, labels.unsqueeze(1)).squeeze(1) - delta))
    neg = log1p_sum_exp(alpha * (sim + delta), ~is_pos, dim=1)
    return (pos + neg).mean() + tau * multi_proxy_regulariser(proxies)


def multi_proxy_anchor_all_proxies(
    embeddings: Tensor, labels: Tensor, proxies: Tensor, alpha: float, delta: float, gamma: float, tau: float
) -> Tensor:
    """MPA-AP loss (all proxies in one softplus; docs/protocols.md §3).

    With ``S'(x, c) = δ - S(x, c)`` for ``c = y`` and ``S(x, c) + δ`` otherwise,
    ``L = (1/B) Σ_i log(1 + Σ_c e^{α S'(x_i, c)}) + τ Reg``.
    """
    sim = relaxed_similarity(embeddings, proxies, gamma)
    is_pos = F.one_hot(labels, proxies.shape[0]).bool()
    shifted = torch.where(is_pos, delta - sim, sim + delta)
    loss = log1p_sum_exp(alpha * shifted, torch.ones_like(is_pos), dim=1)
    return loss.mean() + tau * multi_proxy_regulariser(proxies)
