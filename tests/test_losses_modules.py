"""Every *registered* loss module (what training builds: name -> factory -> module) against its
formula's loop reference, with a non-default value for every hyperparameter and no two values
equal, so a wrapper that drops a hyperparameter, passes a default, or swaps two of them (e.g.
cwms's α and β) fails. tests/test_losses_reference.py checks the vectorised formulas themselves.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from test_losses_reference import (
    LABELS,
    NUM_CLASSES,
    PAIR_LABELS,
    TOL,
    _rand,
    cam_reference,
    cwms_reference,
    mfcont_reference,
    mfcwms_reference,
    mfnca_reference,
    mpa_reference,
    multi_similarity_mined_reference,
    pml_pair_reference,
    proxy_anchor_reference,
    softmax_family_reference,
    softtriple_reference,
)
from torch import Tensor, nn

from benchmark.losses import LOSSES, PARAM_LR, LossContext, build_loss

DIM = 5
MPA = {"alpha": 5.0, "delta": 0.3, "gamma": 0.4, "tau": 0.6, "num_proxies": 3.0}

# Hyperparameters for each registered loss: every one set (the loss-parameter learning rate does
# not enter the forward pass), none at its default, no two equal.
CASES: dict[str, dict[str, float]] = {
    "contrastive": {"pos_margin": 0.3, "neg_margin": 1.1},
    "triplet": {"margin": 0.4},
    "ntxent": {"temperature": 0.2},
    "margin": {"margin": 0.3, "beta": 0.9},
    "snr": {"pos_margin": 0.2, "neg_margin": 1.2, "reg_weight": 0.3},
    "ms": {"alpha": 3.0, "beta": 10.0, "base": 0.3},
    "ms-miner": {"alpha": 3.0, "beta": 10.0, "base": 0.2, "epsilon": 0.5},
    "proxynca": {"softmax_scale": 9.0},
    "normsoftmax": {"temperature": 0.3},
    "cosface": {"margin": 0.25, "scale": 4.0},
    "arcface": {"margin": 20.0, "scale": 5.0},
    "softtriple": {"la": 4.0, "gamma": 2.0, "margin": 0.5, "reg_weight": 0.9, "centers_per_class": 3.0},
    "proxyanchor": {"alpha": 1.5, "margin": 0.7},
    "mfcont": {"m_p": 0.15, "m_n": 0.9, "lambda_mf": 0.4},
    "cwms": {"alpha": 0.7, "beta": 6.0, "delta": 0.2},
    "mfcwms": {"alpha": 1.5, "beta": 7.0, "delta": 0.25, "lambda_mf": 0.6},
    "mfnca": {"alpha": 3.5},
    "cam": {"m": 0.8, "p": 1.7},
    "mpa": MPA,
    "mpa-dw": MPA,
    "mpa-ap": MPA,
}

Reference = Callable[[nn.Module, Tensor, Tensor, dict[str, float]], Tensor]


def _proxynca(loss: nn.Module, emb: Tensor, labels: Tensor, p: dict[str, float]) -> Tensor:
    from pytorch_metric_learning.losses import ProxyNCALoss

    pml = ProxyNCALoss(NUM_CLASSES, DIM, softmax_scale=p["softmax_scale"]).double()
    pml.proxies.data.copy_(loss.proxies.data)
    out: Tensor = pml(emb, labels)
    return out


def _pair(name: str) -> Reference:
    return lambda loss, emb, labels, p: pml_pair_reference(name, emb, labels, p)


def _softmax(name: str) -> Reference:
    return lambda loss, emb, labels, p: softmax_family_reference(
        name, emb, labels, loss.get_parameter("W").detach(), p
    )


def _mpa(variant: str) -> Reference:
    return lambda loss, emb, labels, p: mpa_reference(
        variant,
        emb,
        labels,
        loss.get_parameter("proxies").detach(),
        p["alpha"],
        p["delta"],
        p["gamma"],
        p["tau"],
    )


REFERENCES: dict[str, Reference] = {
    **{name: _pair(name) for name in ("contrastive", "triplet", "ntxent", "margin", "snr", "ms")},
    **{name: _softmax(name) for name in ("normsoftmax", "cosface", "arcface")},
    **{name: _mpa(name) for name in ("mpa", "mpa-dw", "mpa-ap")},
    "ms-miner": lambda loss, emb, labels, p: multi_similarity_mined_reference(
        emb, labels, p["alpha"], p["beta"], p["base"], p["epsilon"]
    ),
    "proxynca": _proxynca,
    "softtriple": lambda loss, emb, labels, p: softtriple_reference(
        emb,
        labels,
        loss.get_parameter("fc").detach().T.reshape(NUM_CLASSES, int(p["centers_per_class"]), DIM),
        p["la"],
        p["gamma"],
        p["margin"],
        p["reg_weight"],
    ),
    "proxyanchor": lambda loss, emb, labels, p: proxy_anchor_reference(
        emb, labels, loss.get_parameter("proxies").detach(), p["alpha"], p["margin"]
    ),
    "mfcont": lambda loss, emb, labels, p: mfcont_reference(
        emb, labels, loss.get_parameter("mean_fields").detach(), p["m_p"], p["m_n"], p["lambda_mf"]
    ),
    "cwms": lambda loss, emb, labels, p: cwms_reference(emb, labels, p["alpha"], p["beta"], p["delta"]),
    "mfcwms": lambda loss, emb, labels, p: mfcwms_reference(
        emb,
        labels,
        loss.get_parameter("mean_fields").detach(),
        p["alpha"],
        p["beta"],
        p["delta"],
        p["lambda_mf"],
    ),
    "mfnca": lambda loss, emb, labels, p: mfnca_reference(
        emb, labels, loss.get_parameter("mean_fields").detach(), p["alpha"]
    ),
    "cam": lambda loss, emb, labels, p: cam_reference(
        emb, labels, loss.get_parameter("anchors").detach(), p["m"], p["p"]
    ),
}


def test_every_registered_loss_has_a_non_default_case() -> None:
    assert sorted(CASES) == sorted(LOSSES.names()) == sorted(REFERENCES)
    for name, params in CASES.items():
        spec = LOSSES.get(name)
        assert set(params) == set(spec.defaults) - {PARAM_LR}, name
        assert all(params[k] != spec.defaults[k] for k in params), f"{name}: a value equals its default"
        assert len(set(params.values())) == len(params), f"{name}: two hyperparameters share a value"


@pytest.mark.parametrize("name", sorted(CASES))
def test_registered_module_matches_its_formula(name: str) -> None:
    spec = LOSSES.get(name)
    params = CASES[name]
    torch.manual_seed(0)  # the learnable tensors' initialisation; the reference reads them back
    loss = build_loss(name, LossContext(NUM_CLASSES, DIM), params).double()
    labels = PAIR_LABELS % NUM_CLASSES if spec.pair_based else LABELS
    emb = _rand(len(labels), DIM, seed=31)
    want = REFERENCES[name](loss, emb, labels, params)
    torch.testing.assert_close(loss(emb, labels), want, rtol=TOL, atol=TOL)
