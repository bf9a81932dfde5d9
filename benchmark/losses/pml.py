"""Baseline losses from pytorch-metric-learning (PML), with MLRC's Cars196 search ranges
(docs/protocols.md §3; the CUB and SOP ranges that differ are those datasets' paper settings,
benchmark.data.registry).

Each factory builds the PML class with the hyperparameters named as in docs/protocols.md §3; where it gives no
default the PML constructor default is used. All of these are cosine-space losses: PML's default
distances normalise the embeddings (``LpDistance``/``CosineSimilarity``/``SNRDistance`` with
``normalize_embeddings=True``), so the raw embeddings can be passed as they are.

Choices where §3 / MLRC leave room:

* ``margin`` learns a single shared β (PML ``learn_beta=True`` without ``num_classes``); its
  optimiser has no weight decay (docs/protocols.md §2.2). The β regulariser weight ν is 0 (PML default).
* ``snr`` feeds PML the *normalised* embeddings, so its zero-mean regulariser acts on the unit
  sphere like the loss term; on raw embeddings the model could satisfy it by shrinking the
  embedding norm, which the (scale-invariant) loss term does not notice.
* ``proxynca`` is PML's ProxyNCALoss evaluated in log space (:class:`LogSpaceProxyNCALoss`):
  same formula, but PML's softmax-then-log gives infinite gradients at large ``softmax_scale``.
* ``ms-miner`` is MultiSimilarityLoss on the pairs selected by MultiSimilarityMiner(ε).
* ``softtriple`` uses K = ``centers_per_class`` = 10 centres and PML's SparseCentersRegularizer
  with weight τ; with K = 1 the regulariser is undefined and omitted. On SOP the paper's K = 2
  without regulariser applies (``dataset_defaults``).
* Search ranges §3 states without a scale are linear, as in MLRC.

Batches without a positive pair (possible only off the MLRC sampler): ``triplet``, ``ntxent``,
``margin`` and ``ms-miner`` have no tuple to use and return PML's zero loss (0, still attached
to the graph, so ``backward()`` works); ``contrastive``, ``snr`` and ``ms`` return their
negative-pair terms only; the proxy/classification losses are unaffected.
"""

from __future__ import annotations

from collections.abc import Mapping

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

# The modules and factories import torch and PML: they live in benchmark.losses.pml_modules and
# are imported when a loss is first built, so listing or validating losses stays light.
_contrastive: LossFactory = lazy_callable("benchmark.losses.pml_modules:contrastive")
_triplet: LossFactory = lazy_callable("benchmark.losses.pml_modules:triplet")
_ntxent: LossFactory = lazy_callable("benchmark.losses.pml_modules:ntxent")
_margin: LossFactory = lazy_callable("benchmark.losses.pml_modules:margin")
_snr: LossFactory = lazy_callable("benchmark.losses.pml_modules:snr")
_ms: LossFactory = lazy_callable("benchmark.losses.pml_modules:ms")
_ms_miner: LossFactory = lazy_callable("benchmark.losses.pml_modules:ms_miner")
_proxynca: LossFactory = lazy_callable("benchmark.losses.pml_modules:proxynca")
_normsoftmax: LossFactory = lazy_callable("benchmark.losses.pml_modules:normsoftmax")
_cosface: LossFactory = lazy_callable("benchmark.losses.pml_modules:cosface")
_arcface: LossFactory = lazy_callable("benchmark.losses.pml_modules:arcface")
_softtriple: LossFactory = lazy_callable("benchmark.losses.pml_modules:softtriple")
_proxyanchor: LossFactory = lazy_callable("benchmark.losses.pml_modules:proxyanchor")


# --- registration ------------------------------------------------------------------------------

_MARGIN_RANGE = SearchDim(-0.2, 2.0)
_LR = {PARAM_LR: DEFAULT_PARAM_LR}
_LR_SEARCH = {PARAM_LR: PARAM_LR_SEARCH}


def _pml(
    name: str,
    display_name: str,
    factory: LossFactory,
    defaults: Mapping[str, float],
    search_space: Mapping[str, SearchDim],
    *,
    pair_based: bool,
    description: str,
    param_weight_decay: float = 1e-4,
    dataset_defaults: Mapping[str, Mapping[str, float]] | None = None,
) -> None:
    has_parameters = PARAM_LR in defaults
    register_loss(
        LossSpec(
            name=name,
            display_name=display_name,
            factory=factory,
            defaults=defaults,
            search_space=search_space,
            pair_based=pair_based,
            has_parameters=has_parameters,
            embedding_space="cosine",
            param_weight_decay=param_weight_decay,
            source="pml",
            description=description,
            dataset_defaults=dataset_defaults or {},
        )
    )


_pml(
    "contrastive",
    "Contrastive",
    _contrastive,
    {"pos_margin": 0.0, "neg_margin": 1.0},
    {"pos_margin": _MARGIN_RANGE, "neg_margin": _MARGIN_RANGE},
    pair_based=True,
    description="Hinge on positive and negative pair distances (Hadsell et al. 2006).",
)
_pml(
    "triplet",
    "Triplet",
    _triplet,
    {"margin": 0.05},
    {"margin": _MARGIN_RANGE},
    pair_based=True,
    description="Triplet margin loss over all triplets of the batch.",
)
_pml(
    "ntxent",
    "NT-Xent",
    _ntxent,
    {"temperature": 0.07},
    {"temperature": SearchDim(1e-5, 100.0, log=True)},
    pair_based=True,
    description="Normalised temperature-scaled cross entropy over positive pairs (InfoNCE).",
)
_pml(
    "margin",
    "Margin",
    _margin,
    {"margin": 0.2, "beta": 1.2, **_LR},
    {"margin": _MARGIN_RANGE, "beta": _MARGIN_RANGE, **_LR_SEARCH},
    pair_based=True,
    param_weight_decay=0.0,
    description="Margin loss with a learnable boundary β (Wu et al. 2017).",
)
_pml(
    "snr",
    "SNR Contrastive",
    _snr,
    {"pos_margin": 0.0, "neg_margin": 1.0, "reg_weight": 0.1},
    {"pos_margin": SearchDim(0.0, 2.0), "neg_margin": SearchDim(0.0, 2.0), "reg_weight": SearchDim(0.0, 1.0)},
    pair_based=True,
    description="Contrastive loss on signal-to-noise-ratio distances with a zero-mean regulariser.",
)
_MS_DEFAULTS = {"alpha": 2.0, "beta": 50.0, "base": 0.5}
_MS_SEARCH = {"alpha": SearchDim(0.01, 100.0), "beta": SearchDim(0.01, 100.0), "base": SearchDim(0.0, 1.0)}
_pml(
    "ms",
    "MultiSimilarity",
    _ms,
    _MS_DEFAULTS,
    _MS_SEARCH,
    pair_based=True,
    description="MultiSimilarity loss over all pairs of the batch (Wang et al. 2019).",
)
_pml(
    "ms-miner",
    "MultiSimilarity + miner",
    _ms_miner,
    {**_MS_DEFAULTS, "epsilon": 0.1},
    {**_MS_SEARCH, "epsilon": SearchDim(0.0, 1.0)},
    pair_based=True,
    description="MultiSimilarity loss on the pairs chosen by the MultiSimilarity miner.",
)
_pml(
    "proxynca",
    "ProxyNCA",
    _proxynca,
    {"softmax_scale": 1.0, **_LR},
    {"softmax_scale": SearchDim(0.01, 100.0), **_LR_SEARCH},
    pair_based=False,
    description="NCA between samples and one learnable proxy per class.",
)
_pml(
    "normsoftmax",
    "NormSoftmax",
    _normsoftmax,
    {"temperature": 0.05, **_LR},
    {"temperature": SearchDim(0.01, 100.0, log=True), **_LR_SEARCH},
    pair_based=False,
    description="Softmax over cosine similarities to normalised class weights.",
)
_pml(
    "cosface",
    "CosFace",
    _cosface,
    {"margin": 0.35, "scale": 64.0, **_LR},
    {"margin": SearchDim(0.0, 1.0), "scale": SearchDim(0.01, 200.0), **_LR_SEARCH},
    pair_based=False,
    description="Large-margin cosine softmax (additive cosine margin).",
)
_pml(
    "arcface",
    "ArcFace",
    _arcface,
    {"margin": 28.6, "scale": 64.0, **_LR},
    {"margin": SearchDim(0.0, 90.0), "scale": SearchDim(0.01, 200.0), **_LR_SEARCH},
    pair_based=False,
    description="Additive angular margin softmax; margin in degrees.",
)
_pml(
    "softtriple",
    "SoftTriple",
    _softtriple,
    {"la": 20.0, "gamma": 0.1, "margin": 0.01, "reg_weight": 0.2, "centers_per_class": 10.0, **_LR},
    {
        "la": SearchDim(0.01, 100.0),
        "gamma": SearchDim(0.01, 100.0),
        "margin": SearchDim(0.0, 1.0),
        "reg_weight": SearchDim(0.0, 1.0),
        **_LR_SEARCH,
    },
    pair_based=False,
    description="Softmax over K centres per class with a sparse-centres regulariser τ.",
    # SoftTriple paper §5 (SOP): "each class has about 5 images, so we set K = 2 for this data set
    # and discard the regularizer"; MLRC's SOP SoftTriple has no regulariser either.
    dataset_defaults={"sop": {"centers_per_class": 2.0, "reg_weight": 0.0}},
)
_pml(
    "proxyanchor",
    "ProxyAnchor",
    _proxyanchor,
    {"alpha": 32.0, "margin": 0.1, **_LR},
    {"alpha": SearchDim(0.01, 100.0), "margin": SearchDim(0.0, 1.0), **_LR_SEARCH},
    pair_based=False,
    description="Proxy-anchored pair weighting over all samples of the batch (Kim et al. 2020).",
)
