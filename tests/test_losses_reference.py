"""Losses against explicit-loop recomputations of their published formulas (docs/protocols.md §3), float64.

Each reference below is written independently of ``benchmark.losses.functional``: plain Python
loops over samples, classes and proxies, one scalar term at a time, exactly as the formula
reads. The references are built from torch scalars so autograd also gives reference gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import pytest
import torch
from torch import Tensor

from benchmark.losses import LOSSES, LossContext, build_loss
from benchmark.losses import functional as LF

torch.set_num_threads(1)

TOL = 1e-6

# A deliberately awkward batch: unbalanced classes, singleton classes, classes 3 and 5 of C = 6
# absent from the batch.
LABELS = torch.tensor([0, 2, 0, 4, 1, 2, 0, 4, 2])
NUM_CLASSES = 6
DIM = 5


def _rand(*shape: int, seed: int) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def _tsum(terms: Iterable[Tensor]) -> Tensor:
    """Python's ``sum`` of tensor terms, typed as a tensor.

    typeshed types ``sum`` as ``Tensor | Literal[0]`` (0 only for no terms); every sum here has
    at least one term, and the assert says so instead of a cast.
    """
    total = sum(terms)
    assert isinstance(total, Tensor)
    return total


def _unit(v: Tensor) -> Tensor:
    return v / torch.sqrt(_tsum(x * x for x in v))


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return _tsum(a[k] * b[k] for k in range(a.shape[0]))


def _relu(x: Tensor) -> Tensor:
    return x if x > 0 else x * 0


def _classes(labels: Tensor) -> list[int]:
    return sorted(set(labels.tolist()))


def _members(labels: Tensor, c: int) -> list[int]:
    return [i for i in range(len(labels)) if int(labels[i]) == c]


def _check_against_reference(
    vectorised: Callable[[Tensor, Tensor], Tensor],
    reference: Callable[[Tensor, Tensor], Tensor],
    emb: Tensor,
    params: Tensor,
) -> None:
    """Values and autograd gradients (embeddings and parameters) agree to ``TOL``."""
    e1, p1 = emb.clone().requires_grad_(), params.clone().requires_grad_()
    e2, p2 = emb.clone().requires_grad_(), params.clone().requires_grad_()
    got, want = vectorised(e1, p1), reference(e2, p2)
    torch.testing.assert_close(got, want, rtol=TOL, atol=TOL)
    got.backward()
    want.backward()
    assert e1.grad is not None and e2.grad is not None and p1.grad is not None and p2.grad is not None
    torch.testing.assert_close(e1.grad, e2.grad, rtol=TOL, atol=TOL)
    torch.testing.assert_close(p1.grad, p2.grad, rtol=TOL, atol=TOL)


# --- mfcont ------------------------------------------------------------------------------------


def mfcont_reference(
    emb: Tensor, labels: Tensor, fields: Tensor, m_p: float, m_n: float, lam: float
) -> Tensor:
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    w = [_unit(fields[c]) for c in range(fields.shape[0])]
    num_classes = len(w)
    total = emb.new_zeros(())
    for i, y in enumerate(labels.tolist()):
        total = total + _relu(1 - _dot(e[i], w[y]) - m_p)
        for c in range(num_classes):
            if c != y:
                total = total + _relu(m_n - (1 - _dot(e[i], w[c])))
    total = total / len(e)
    reg = emb.new_zeros(())
    for c in range(num_classes):
        for c2 in range(num_classes):
            if c != c2:
                reg = reg + _relu(m_n - (1 - _dot(w[c], w[c2]))) ** 2
    return total + lam * reg / num_classes


MFCONT_CASES = [(0.02, 0.3, 0.0), (0.1, 1.2, 0.5), (0.0, 2.0, 1.0), (0.5, 0.9, 0.3)]


@pytest.mark.parametrize(("m_p", "m_n", "lam"), MFCONT_CASES)
def test_mfcont_matches_loop_reference(m_p: float, m_n: float, lam: float) -> None:
    emb, fields = _rand(len(LABELS), DIM, seed=1), _rand(NUM_CLASSES, DIM, seed=2)
    _check_against_reference(
        lambda e, w: LF.mean_field_contrastive(e, LABELS, w, m_p, m_n, lam),
        lambda e, w: mfcont_reference(e, LABELS, w, m_p, m_n, lam),
        emb,
        fields,
    )


@pytest.mark.parametrize(("m_p", "m_n", "lam"), MFCONT_CASES)
def test_mfcont_gradcheck(m_p: float, m_n: float, lam: float) -> None:
    emb = _rand(len(LABELS), DIM, seed=3).requires_grad_()
    fields = _rand(NUM_CLASSES, DIM, seed=4).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda e, w: LF.mean_field_contrastive(e, LABELS, w, m_p, m_n, lam), (emb, fields)
    )


def test_mfcont_module_uses_its_mean_fields() -> None:
    loss = build_loss("mfcont", LossContext(NUM_CLASSES, DIM), {"m_n": 1.2, "lambda_mf": 0.5}).double()
    emb = _rand(len(LABELS), DIM, seed=5)
    want = mfcont_reference(emb, LABELS, loss.get_parameter("mean_fields").detach(), 0.02, 1.2, 0.5)
    torch.testing.assert_close(loss(emb, LABELS), want, rtol=TOL, atol=TOL)


# --- cwms / mfcwms / mfnca ---------------------------------------------------------------------


def cwms_reference(emb: Tensor, labels: Tensor, alpha: float, beta: float, delta: float) -> Tensor:
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    classes = _classes(labels)
    pos = emb.new_zeros(())
    for c in classes:
        idx = _members(labels, c)
        p_c = _tsum(torch.exp(-alpha * (_dot(e[i], e[j]) - delta)) for i in idx for j in idx) / len(idx) ** 2
        pos = pos + torch.log(1 + p_c / 2)
    neg = emb.new_zeros(())
    for c in classes:
        for c2 in classes:
            if c == c2:
                continue
            idx, idx2 = _members(labels, c), _members(labels, c2)
            n = _tsum(torch.exp(beta * (_dot(e[i], e[j]) - delta)) for i in idx for j in idx2)
            neg = neg + torch.log(1 + n / (len(idx) * len(idx2)))
    return pos / (alpha * len(classes)) + neg / (2 * beta * len(classes))


@pytest.mark.parametrize(("alpha", "beta", "delta"), [(2.0, 50.0, 0.5), (0.05, 3.0, -0.4), (10.0, 0.5, 0.9)])
def test_cwms_matches_loop_reference(alpha: float, beta: float, delta: float) -> None:
    emb = _rand(len(LABELS), DIM, seed=6)
    # No parameters: check the embedding gradient twice through the same harness.
    _check_against_reference(
        lambda e, _: LF.class_wise_multi_similarity(e, LABELS, alpha, beta, delta) + 0 * _.sum(),
        lambda e, _: cwms_reference(e, LABELS, alpha, beta, delta) + 0 * _.sum(),
        emb,
        torch.zeros(1, dtype=torch.float64),
    )


def mfcwms_reference(
    emb: Tensor, labels: Tensor, fields: Tensor, alpha: float, beta: float, delta: float, lam: float
) -> Tensor:
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    w = [_unit(fields[c]) for c in range(fields.shape[0])]
    num_classes = len(w)
    classes = _classes(labels)
    pos = emb.new_zeros(())
    for c in classes:
        idx = _members(labels, c)
        p_c = _tsum(torch.exp(-alpha * (_dot(e[i], w[c]) - delta)) for i in idx) / len(idx)
        pos = pos + torch.log(1 + p_c)
    n = [[emb.new_zeros(()) for _ in range(num_classes)] for _ in range(num_classes)]
    for c in classes:
        idx = _members(labels, c)
        for c2 in range(num_classes):
            n[c][c2] = _tsum(torch.exp(beta * (_dot(e[i], w[c2]) - delta)) for i in idx) / len(idx)
    neg = emb.new_zeros(())
    for c in range(num_classes):
        for c2 in range(num_classes):
            if c != c2:
                neg = neg + torch.log(1 + n[c][c2] + n[c2][c])
    reg = emb.new_zeros(())
    for c in range(num_classes):
        for c2 in range(num_classes):
            if c != c2:
                reg = reg + (torch.log(1 + torch.exp(beta * (_dot(w[c], w[c2]) - delta))) / beta) ** 2
    c_b = len(classes)
    return pos / (alpha * c_b) + neg / (2 * beta * c_b) + lam * reg / num_classes


@pytest.mark.parametrize(
    ("alpha", "beta", "delta", "lam"), [(0.01, 80.0, 0.8, 0.0), (2.0, 5.0, 0.1, 0.7), (20.0, 0.3, -0.5, 1.0)]
)
def test_mfcwms_matches_loop_reference(alpha: float, beta: float, delta: float, lam: float) -> None:
    emb, fields = _rand(len(LABELS), DIM, seed=7), _rand(NUM_CLASSES, DIM, seed=8)
    _check_against_reference(
        lambda e, w: LF.mean_field_class_wise_multi_similarity(e, LABELS, w, alpha, beta, delta, lam),
        lambda e, w: mfcwms_reference(e, LABELS, w, alpha, beta, delta, lam),
        emb,
        fields,
    )


def mfnca_reference(emb: Tensor, labels: Tensor, fields: Tensor, alpha: float) -> Tensor:
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    w = [_unit(fields[c]) for c in range(fields.shape[0])]

    def k(i: int, c: int) -> Tensor:  # e^{-α d(e_i, w_c)}
        return torch.exp(-alpha * (1 - _dot(e[i], w[c])))

    first = emb.new_zeros(())
    for i, y in enumerate(labels.tolist()):
        first = first - torch.log(k(i, y) / _tsum(k(i, c) for c in range(len(w))))
    second = emb.new_zeros(())
    classes = _classes(labels)
    for c in classes:
        num = _tsum(k(j, c) for j in _members(labels, c))
        den = _tsum(k(j, c) for j in range(len(e)))
        second = second - torch.log(num / den)
    return first / len(e) + second / len(classes)


@pytest.mark.parametrize("alpha", [0.01, 1.0, 16.0, 60.0])
def test_mfnca_matches_loop_reference(alpha: float) -> None:
    emb, fields = _rand(len(LABELS), DIM, seed=9), _rand(NUM_CLASSES, DIM, seed=10)
    _check_against_reference(
        lambda e, w: LF.mean_field_nca(e, LABELS, w, alpha),
        lambda e, w: mfnca_reference(e, LABELS, w, alpha),
        emb,
        fields,
    )


# --- cam ---------------------------------------------------------------------------------------


def cam_reference(emb: Tensor, labels: Tensor, anchors: Tensor, m: float, p: float) -> Tensor:
    def norm(v: Tensor) -> Tensor:
        return torch.sqrt(_tsum(x * x for x in v))

    attract = emb.new_zeros(())
    for i, y in enumerate(labels.tolist()):
        attract = attract + 0.5 * norm(emb[i] - anchors[y]) ** 2
    attract = attract / emb.shape[0]
    repel = emb.new_zeros(())
    for y in range(anchors.shape[0]):
        for y2 in range(anchors.shape[0]):
            if y != y2:
                repel = repel + _relu(2 * m - norm(anchors[y] - anchors[y2])) ** 2
    norm_term = _tsum(_relu(p - norm(anchors[y])) ** 2 for y in range(anchors.shape[0]))
    return attract + 0.5 * repel + 0.5 * norm_term


@pytest.mark.parametrize(("m", "p"), [(2.0, 1.0), (0.5, 3.0), (1.5, 0.1)])
def test_cam_matches_loop_reference(m: float, p: float) -> None:
    emb, anchors = _rand(len(LABELS), DIM, seed=11), _rand(NUM_CLASSES, DIM, seed=12)
    _check_against_reference(
        lambda e, a: LF.class_anchor_margin(e, LABELS, a, m, p),
        lambda e, a: cam_reference(e, LABELS, a, m, p),
        emb,
        anchors,
    )


@pytest.mark.parametrize(("num_classes", "dim"), [(3, DIM), (NUM_CLASSES, DIM)])
def test_cam_initial_anchors(num_classes: int, dim: int) -> None:
    m = 1.5
    anchors = build_loss("cam", LossContext(num_classes, dim), {"m": m}).get_parameter("anchors").detach()
    # Every anchor has norm √2·m; with C <= D they are scaled one-hot vectors, exactly 2m apart
    # (their m-spheres touch), otherwise random directions.
    torch.testing.assert_close(anchors.norm(dim=1), torch.full((num_classes,), math.sqrt(2) * m))
    if num_classes <= dim:
        off = ~torch.eye(num_classes, dtype=torch.bool)
        torch.testing.assert_close(
            torch.cdist(anchors, anchors)[off], torch.full((num_classes**2 - num_classes,), 2 * m)
        )


# --- multi-proxy-anchor family -----------------------------------------------------------------


def relaxed_similarity_reference(e: Tensor, proxies: list[list[Tensor]], c: int, gamma: float) -> Tensor:
    sims = [_dot(e, w) for w in proxies[c]]
    z = _tsum(torch.exp(s / gamma) for s in sims)
    return _tsum(torch.exp(s / gamma) / z * s for s in sims)


def mpa_regulariser_reference(proxies: list[list[Tensor]]) -> Tensor:
    num_classes, k = len(proxies), len(proxies[0])
    total = proxies[0][0].new_zeros(())
    for c in range(num_classes):
        for t in range(k):
            for s in range(t + 1, k):
                total = total + torch.sqrt(2 - 2 * _dot(proxies[c][t], proxies[c][s]))
    return total / (num_classes * k * (k - 1))


def mpa_reference(
    variant: str,
    emb: Tensor,
    labels: Tensor,
    raw: Tensor,
    alpha: float,
    delta: float,
    gamma: float,
    tau: float,
) -> Tensor:
    num_classes, k, _ = raw.shape
    w = [[_unit(raw[c, t]) for t in range(k)] for c in range(num_classes)]
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    sim = [
        [relaxed_similarity_reference(e[i], w, c, gamma) for c in range(num_classes)] for i in range(len(e))
    ]
    ys = labels.tolist()
    loss = emb.new_zeros(())
    if variant == "mpa":
        present = _classes(labels)
        for c in present:
            s = _tsum(torch.exp(-alpha * (sim[i][c] - delta)) for i in range(len(e)) if ys[i] == c)
            loss = loss + torch.log(1 + s) / len(present)
        for c in range(num_classes):
            s = sum(
                (torch.exp(alpha * (sim[i][c] + delta)) for i in range(len(e)) if ys[i] != c),
                emb.new_zeros(()),
            )
            loss = loss + torch.log(1 + s) / num_classes
    elif variant == "mpa-dw":
        for i in range(len(e)):
            pos = torch.log(1 + torch.exp(-alpha * (sim[i][ys[i]] - delta)))
            neg = torch.log(
                1 + _tsum(torch.exp(alpha * (sim[i][c] + delta)) for c in range(num_classes) if c != ys[i])
            )
            loss = loss + (pos + neg) / len(e)
    else:
        for i in range(len(e)):
            shifted = [delta - sim[i][c] if c == ys[i] else sim[i][c] + delta for c in range(num_classes)]
            loss = loss + torch.log(1 + _tsum(torch.exp(alpha * s) for s in shifted)) / len(e)
    return loss + tau * mpa_regulariser_reference(w)


MPA_FORMULAS = {
    "mpa": LF.multi_proxy_anchor,
    "mpa-dw": LF.multi_proxy_anchor_data_wise,
    "mpa-ap": LF.multi_proxy_anchor_all_proxies,
}


@pytest.mark.parametrize("variant", sorted(MPA_FORMULAS))
@pytest.mark.parametrize(
    ("alpha", "delta", "gamma", "tau"), [(32.0, 0.1, 0.1, 0.2), (1.0, 0.9, 1.0, 1.0), (5.0, 0.0, 0.03, 0.5)]
)
def test_mpa_family_matches_loop_reference(
    variant: str, alpha: float, delta: float, gamma: float, tau: float
) -> None:
    emb, proxies = _rand(len(LABELS), DIM, seed=13), _rand(NUM_CLASSES, 3, DIM, seed=14)
    formula = MPA_FORMULAS[variant]
    _check_against_reference(
        lambda e, w: formula(e, LABELS, w, alpha, delta, gamma, tau),
        lambda e, w: mpa_reference(variant, e, LABELS, w, alpha, delta, gamma, tau),
        emb,
        proxies,
    )


def test_mpa_regulariser_is_zero_for_one_proxy() -> None:
    assert float(LF.multi_proxy_regulariser(_rand(4, 1, DIM, seed=15))) == 0.0


# --- gradcheck of every own formula ------------------------------------------------------------


def _mpa_with_fixed_hyperparameters(
    formula: Callable[[Tensor, Tensor, Tensor, float, float, float, float], Tensor],
) -> Callable[[Tensor, Tensor], Tensor]:
    return lambda e, w: formula(e, LABELS, w, 4.0, 0.1, 0.3, 0.5)


OWN_FORMULAS: dict[str, tuple[Callable[[Tensor, Tensor], Tensor], tuple[int, ...]]] = {
    "mfcwms": (
        lambda e, w: LF.mean_field_class_wise_multi_similarity(e, LABELS, w, 2.0, 5.0, 0.1, 0.7),
        (6, 5),
    ),
    "cwms": (lambda e, w: LF.class_wise_multi_similarity(e, LABELS, 2.0, 5.0, 0.3) + 0 * w.sum(), (1,)),
    "mfnca": (lambda e, w: LF.mean_field_nca(e, LABELS, w, 4.0), (6, 5)),
    "cam": (lambda e, w: LF.class_anchor_margin(e, LABELS, w, 0.8, 1.5), (6, 5)),
    **{name: (_mpa_with_fixed_hyperparameters(f), (6, 3, 5)) for name, f in MPA_FORMULAS.items()},
}


@pytest.mark.parametrize("name", sorted(OWN_FORMULAS))
def test_own_formula_gradcheck(name: str) -> None:
    formula, param_shape = OWN_FORMULAS[name]
    emb = _rand(len(LABELS), DIM, seed=16).requires_grad_()
    params = _rand(*param_shape, seed=17).requires_grad_()
    assert torch.autograd.gradcheck(formula, (emb, params))


# --- PML baselines against their published formulas --------------------------------------------

PAIR_LABELS = torch.tensor([0, 1, 2, 3]).repeat_interleave(4)[
    torch.randperm(16, generator=torch.Generator().manual_seed(0))
]


def multi_similarity_mined_reference(
    emb: Tensor, labels: Tensor, alpha: float, beta: float, base: float, eps: float
) -> Tensor:
    """Wang et al. 2019: pairs mined with margin ε, then the MS loss; mean over anchors."""
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    ys = labels.tolist()
    n = len(e)
    total = emb.new_zeros(())
    for i in range(n):
        pos = [j for j in range(n) if j != i and ys[j] == ys[i]]
        neg = [k for k in range(n) if ys[k] != ys[i]]
        s = {j: _dot(e[i], e[j]) for j in range(n)}
        hardest_neg = max(float(s[k]) for k in neg)
        hardest_pos = min(float(s[j]) for j in pos)
        mined_pos = [j for j in pos if float(s[j]) - eps < hardest_neg]
        mined_neg = [k for k in neg if float(s[k]) + eps > hardest_pos]
        if mined_pos:
            total = total + torch.log(1 + _tsum(torch.exp(-alpha * (s[j] - base)) for j in mined_pos)) / alpha
        if mined_neg:
            total = total + torch.log(1 + _tsum(torch.exp(beta * (s[k] - base)) for k in mined_neg)) / beta
    return total / n


@pytest.mark.parametrize(("alpha", "beta", "base", "eps"), [(2.0, 50.0, 0.5, 0.1), (10.0, 3.0, 0.2, 0.5)])
def test_ms_miner_matches_published_formula(alpha: float, beta: float, base: float, eps: float) -> None:
    loss = build_loss(
        "ms-miner", LossContext(4, 8), {"alpha": alpha, "beta": beta, "base": base, "epsilon": eps}
    )
    emb = _rand(16, 8, seed=18)
    torch.testing.assert_close(
        loss(emb, PAIR_LABELS),
        multi_similarity_mined_reference(emb, PAIR_LABELS, alpha, beta, base, eps),
        rtol=TOL,
        atol=TOL,
    )


def proxy_anchor_reference(
    emb: Tensor, labels: Tensor, proxies: Tensor, alpha: float, delta: float
) -> Tensor:
    """Kim et al. 2020, eq. 4."""
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    p = [_unit(proxies[c]) for c in range(proxies.shape[0])]
    ys = labels.tolist()
    present = _classes(labels)
    pos = _tsum(
        torch.log(
            1 + _tsum(torch.exp(-alpha * (_dot(e[i], p[c]) - delta)) for i in range(len(e)) if ys[i] == c)
        )
        for c in present
    )
    neg = _tsum(
        torch.log(
            1 + _tsum(torch.exp(alpha * (_dot(e[i], p[c]) + delta)) for i in range(len(e)) if ys[i] != c)
        )
        for c in range(len(p))
    )
    return pos / len(present) + neg / len(p)


@pytest.mark.parametrize(("alpha", "margin"), [(32.0, 0.1), (1.5, 0.7)])
def test_proxyanchor_matches_published_formula(alpha: float, margin: float) -> None:
    loss = build_loss(
        "proxyanchor", LossContext(NUM_CLASSES, DIM), {"alpha": alpha, "margin": margin}
    ).double()
    emb = _rand(len(LABELS), DIM, seed=19)
    want = proxy_anchor_reference(emb, LABELS, loss.get_parameter("proxies").detach(), alpha, margin)
    torch.testing.assert_close(loss(emb, LABELS), want, rtol=TOL, atol=TOL)


def softtriple_reference(
    emb: Tensor, labels: Tensor, centres: Tensor, la: float, gamma: float, margin: float, tau: float
) -> Tensor:
    """Qian et al. 2019, eqs. 9-11; ``centres`` is (C, K, D)."""
    num_classes, k, _ = centres.shape
    w = [[_unit(centres[c, t]) for t in range(k)] for c in range(num_classes)]
    total = emb.new_zeros(())
    for i, y in enumerate(labels.tolist()):
        e = _unit(emb[i])
        logits = [
            la * (relaxed_similarity_reference(e, w, c, gamma) - (margin if c == y else 0.0))
            for c in range(num_classes)
        ]
        total = total - torch.log(torch.exp(logits[y]) / _tsum(torch.exp(z) for z in logits))
    return total / emb.shape[0] + tau * mpa_regulariser_reference(w)


@pytest.mark.parametrize(("la", "gamma", "margin", "tau"), [(20.0, 0.1, 0.01, 0.2), (3.0, 2.0, 0.5, 0.9)])
def test_softtriple_matches_published_formula(la: float, gamma: float, margin: float, tau: float) -> None:
    params = {"la": la, "gamma": gamma, "margin": margin, "reg_weight": tau, "centers_per_class": 3.0}
    loss = build_loss("softtriple", LossContext(NUM_CLASSES, DIM), params).double()
    # PML stores the centres as columns of a (D, C*K) matrix, class-major.
    centres = loss.get_parameter("fc").detach().T.reshape(NUM_CLASSES, 3, DIM)
    emb = _rand(len(LABELS), DIM, seed=20)
    want = softtriple_reference(emb, LABELS, centres, la, gamma, margin, tau)
    torch.testing.assert_close(loss(emb, LABELS), want, rtol=TOL, atol=TOL)


@pytest.mark.parametrize("scale", [1.0, 9.0, 30.0])
def test_proxynca_log_space_matches_pml(scale: float) -> None:
    from pytorch_metric_learning.losses import ProxyNCALoss

    ours = build_loss("proxynca", LossContext(NUM_CLASSES, DIM), {"softmax_scale": scale}).double()
    pml = ProxyNCALoss(NUM_CLASSES, DIM, softmax_scale=scale).double()
    pml.proxies.data.copy_(ours.proxies.data)
    emb = _rand(len(LABELS), DIM, seed=21)
    torch.testing.assert_close(ours(emb, LABELS), pml(emb, LABELS), rtol=TOL, atol=TOL)


@pytest.mark.parametrize(("num_classes", "k"), [(1, 2), (5, 3), (91, 10)])
def test_block_sparse_centres_regulariser_matches_pml(num_classes: int, k: int) -> None:
    from pytorch_metric_learning.regularizers import SparseCentersRegularizer

    from benchmark.losses.pml_modules import BlockSparseCentersRegularizer

    weights = _rand(num_classes * k, DIM, seed=22).requires_grad_(True)
    want = SparseCentersRegularizer(num_classes, k)(weights)
    (want_grad,) = torch.autograd.grad(want, weights)
    got = BlockSparseCentersRegularizer(num_classes, k)(weights)
    (got_grad,) = torch.autograd.grad(got, weights)
    torch.testing.assert_close(got, want, rtol=TOL, atol=TOL)
    torch.testing.assert_close(got_grad, want_grad, rtol=TOL, atol=TOL)


# --- remaining PML baselines: loop recomputations with PML's averaging conventions -------------
# These pin down that the wrappers pass the hyperparameters PML expects (units, names) and
# document how PML averages (e.g. AvgNonZero: the mean over the non-zero terms only).


def _dist(a: Tensor, b: Tensor) -> Tensor:
    return torch.sqrt(_tsum((a[k] - b[k]) ** 2 for k in range(a.shape[0])))


def _mean_non_zero(terms: list[Tensor], like: Tensor) -> Tensor:
    kept = [t for t in terms if t > 0]
    return _tsum(kept) / len(kept) if kept else like.new_zeros(())


def _pairs(ys: list[int], positive: bool) -> list[tuple[int, int]]:
    n = len(ys)
    return [(i, j) for i in range(n) for j in range(n) if i != j and (ys[i] == ys[j]) == positive]


def pml_pair_reference(name: str, emb: Tensor, labels: Tensor, p: dict[str, float]) -> Tensor:
    e = [_unit(emb[i]) for i in range(emb.shape[0])]
    ys = labels.tolist()
    n = len(e)
    pos, neg = _pairs(ys, True), _pairs(ys, False)
    triplets = [(a, q, r) for a, q in pos for r in range(n) if ys[r] != ys[a]]
    if name == "contrastive":
        return _mean_non_zero(
            [_relu(_dist(e[i], e[j]) - p["pos_margin"]) for i, j in pos], emb
        ) + _mean_non_zero([_relu(p["neg_margin"] - _dist(e[i], e[j])) for i, j in neg], emb)
    if name == "triplet":
        terms = [_relu(_dist(e[a], e[q]) - _dist(e[a], e[r]) + p["margin"]) for a, q, r in triplets]
        return _mean_non_zero(terms, emb)
    if name == "ntxent":
        t = p["temperature"]
        losses = []
        for a, q in pos:
            num = torch.exp(_dot(e[a], e[q]) / t)
            den = num + sum(
                (torch.exp(_dot(e[a], e[r]) / t) for r in range(n) if ys[r] != ys[a]), emb.new_zeros(())
            )
            losses.append(-torch.log(num / den))
        return _tsum(losses) / len(losses)
    if name == "margin":
        beta, margin = p["beta"], p["margin"]
        pos_terms = [_relu(_dist(e[a], e[q]) - beta + margin) for a, q, _ in triplets]
        neg_terms = [_relu(beta - _dist(e[a], e[r]) + margin) for a, _, r in triplets]
        active = sum(int(t > 0) for t in pos_terms + neg_terms)
        return _tsum(pos_terms + neg_terms) / active
    if name == "ms":
        alpha, beta, base = p["alpha"], p["beta"], p["base"]
        total = emb.new_zeros(())
        for i in range(n):
            sp = _tsum(
                torch.exp(-alpha * (_dot(e[i], e[j]) - base)) for j in range(n) if j != i and ys[j] == ys[i]
            )
            sn = _tsum(torch.exp(beta * (_dot(e[i], e[j]) - base)) for j in range(n) if ys[j] != ys[i])
            total = total + torch.log(1 + sp) / alpha + torch.log(1 + sn) / beta
        return total / n
    if name == "snr":

        def var(v: Tensor) -> Tensor:  # unbiased, as torch.var
            mu = _tsum(v) / len(v)
            return _tsum((x - mu) ** 2 for x in v) / (len(v) - 1)

        def snr(i: int, j: int) -> Tensor:
            return var(e[i] - e[j]) / var(e[i])

        contrastive = _mean_non_zero(
            [_relu(snr(i, j) - p["pos_margin"]) for i, j in pos], emb
        ) + _mean_non_zero([_relu(p["neg_margin"] - snr(i, j)) for i, j in neg], emb)
        zero_mean = _tsum(torch.abs(_tsum(e[i])) for i in range(n)) / n
        return contrastive + p["reg_weight"] * zero_mean
    raise AssertionError(name)


PML_PAIR_CASES = [
    ("contrastive", {"pos_margin": 0.3, "neg_margin": 1.1}),
    ("triplet", {"margin": 0.4}),
    ("ntxent", {"temperature": 0.2}),
    ("margin", {"margin": 0.2, "beta": 1.0}),
    ("ms", {"alpha": 2.0, "beta": 10.0, "base": 0.3}),
    ("snr", {"pos_margin": 0.2, "neg_margin": 1.2, "reg_weight": 0.3}),
]


@pytest.mark.parametrize(("name", "params"), PML_PAIR_CASES)
def test_pml_pair_losses_match_loop_reference(name: str, params: dict[str, float]) -> None:
    loss = build_loss(name, LossContext(4, 6), params).double()
    emb = _rand(16, 6, seed=22)
    want = pml_pair_reference(name, emb, PAIR_LABELS, params)
    torch.testing.assert_close(loss(emb, PAIR_LABELS), want, rtol=TOL, atol=TOL)


def softmax_family_reference(
    name: str, emb: Tensor, labels: Tensor, weights: Tensor, p: dict[str, float]
) -> Tensor:
    """NormSoftmax, CosFace, ArcFace: cross entropy on (margin-modified) scaled cosines."""
    w = [_unit(weights[:, c]) for c in range(weights.shape[1])]
    total = emb.new_zeros(())
    for i, y in enumerate(labels.tolist()):
        e = _unit(emb[i])
        cos = [_dot(e, w[c]) for c in range(len(w))]
        if name == "normsoftmax":
            logits = [c / p["temperature"] for c in cos]
        elif name == "cosface":
            logits = [p["scale"] * (cos[c] - (p["margin"] if c == y else 0.0)) for c in range(len(w))]
        else:  # arcface, margin in degrees
            m = math.radians(p["margin"])
            theta = torch.acos(cos[y])
            target = torch.cos(theta + m) if theta <= math.pi - m else cos[y] - m * math.sin(m)
            logits = [p["scale"] * (target if c == y else cos[c]) for c in range(len(w))]
        total = total - torch.log(torch.exp(logits[y]) / _tsum(torch.exp(z) for z in logits))
    return total / emb.shape[0]


PML_SOFTMAX_CASES = [
    ("normsoftmax", {"temperature": 0.3}),
    ("cosface", {"margin": 0.35, "scale": 4.0}),
    ("arcface", {"margin": 28.6, "scale": 5.0}),
    ("arcface", {"margin": 80.0, "scale": 3.0}),
]


@pytest.mark.parametrize(("name", "params"), PML_SOFTMAX_CASES)
def test_pml_softmax_losses_match_loop_reference(name: str, params: dict[str, float]) -> None:
    loss = build_loss(name, LossContext(NUM_CLASSES, DIM), params).double()
    emb = _rand(len(LABELS), DIM, seed=23)
    want = softmax_family_reference(name, emb, LABELS, loss.get_parameter("W").detach(), params)
    torch.testing.assert_close(loss(emb, LABELS), want, rtol=TOL, atol=TOL)


def test_every_registered_loss_has_a_loop_reference() -> None:
    covered = {
        "mfcont",
        "cwms",
        "mfcwms",
        "mfnca",
        "cam",
        "ms-miner",
        "proxyanchor",
        "softtriple",
        "proxynca",
    }
    covered |= set(MPA_FORMULAS) | {name for name, _ in PML_PAIR_CASES + PML_SOFTMAX_CASES}
    missing = sorted(set(LOSSES.names()) - covered)
    assert not missing, f"registered losses without a loop-reference test: {missing}"
