"""Multi-Proxy-Anchor family ``mpa``, ``mpa-dw``, ``mpa-ap`` (multi-proxy-anchor-family.txt).

K learnable proxies per class, compared with a sample through SoftTriple's relaxed similarity
``S(x, c) = Σ_k softmax_k(x·w_ck / γ) x·w_ck`` and kept apart within a class by the regulariser
``Reg = Σ_c Σ_{t<s} sqrt(2 - 2 w_ct·w_cs) / (C K (K-1))`` with weight τ. The three variants
differ in how they aggregate (docs/protocols.md §3): per proxy (``mpa``, Proxy-Anchor style), per sample with
positive and negative terms (``mpa-dw``), per sample with one softplus over all proxies
(``mpa-ap``).

Choices where the paper is ambiguous:

* Proxies are stored as one ``nn.Parameter`` of shape (C, K, D), initialised N(0, 1) and
  L2-normalised in the loss (the paper does not state its initialisation).
* K is the hyperparameter ``num_proxies``: 10, the paper's CUB/Cars value, and 2 on SOP (§4.1:
  "K = 2 for SOP and K = 10 for CUB-200-2011 and Cars196"; ``dataset_defaults``). Not searched.
* The classes are sampled like SoftTriple's ("random sampling"), i.e. class-based, m = 1.
"""

from __future__ import annotations

from benchmark.lazy import lazy_callable
from benchmark.losses.registry import (
    DEFAULT_PARAM_LR,
    PARAM_LR,
    PARAM_LR_SEARCH,
    LossFactory,
    LossSpec,
    SearchDim,
    register_loss,
)

#: The variants; their formulas and the module (torch) are in benchmark.losses.mpa_modules.
_VARIANTS = ("mpa", "mpa-dw", "mpa-ap")


def _factory(variant: str) -> LossFactory:
    """The variant's factory, imported when the loss is first built."""
    factory: LossFactory = lazy_callable(f"benchmark.losses.mpa_modules:{variant.replace('-', '_')}")
    return factory


_DISPLAY = {"mpa": "MPA", "mpa-dw": "MPA-DW", "mpa-ap": "MPA-AP"}
_DESCRIPTION = {
    "mpa": "Proxy-Anchor over K proxies per class with SoftTriple's relaxed similarity.",
    "mpa-dw": "Data-wise multi-proxy loss: per-sample positive and negative softplus terms.",
    "mpa-ap": "Multi-proxy loss with one softplus over all (margin-shifted) proxies per sample.",
}

for _variant in _VARIANTS:
    register_loss(
        LossSpec(
            name=_variant,
            display_name=_DISPLAY[_variant],
            factory=_factory(_variant),
            defaults={
                "alpha": 32.0,
                "delta": 0.1,
                "gamma": 0.1,
                "tau": 0.2,
                "num_proxies": 10.0,
                PARAM_LR: DEFAULT_PARAM_LR,
            },
            search_space={
                "alpha": SearchDim(1.0, 100.0, log=True),
                "delta": SearchDim(0.0, 1.0),
                "gamma": SearchDim(0.01, 1.0, log=True),
                "tau": SearchDim(0.0, 1.0),
                PARAM_LR: PARAM_LR_SEARCH,
            },
            pair_based=False,
            has_parameters=True,
            embedding_space="cosine",
            source="dmlbench",
            description=_DESCRIPTION[_variant],
            dataset_defaults={"sop": {"num_proxies": 2.0}},
        )
    )
