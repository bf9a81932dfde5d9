"""Mean-field losses (Mean-Field DML papers, protocols.md §3): ``mfcont``, ``cwms``, ``mfcwms``, ``mfnca``.

The formulas live in :mod:`benchmark.losses.functional`; :mod:`benchmark.losses.meanfield_modules`
wraps them as ``nn.Module`` s owning their mean fields; this module declares and registers them.

Choices where the papers are ambiguous (documented in docs/protocols.md §3, which follows the authors'
implementation rather than the printed equations):

* **Normalisation of the sample terms.** Eq. 8 of the ICLR paper averages per class and then
  over classes, ``(1/|C|) Σ_c (1/|D_c|) Σ_{i∈c}``; docs/protocols.md §3 (and this code) uses the batch mean
  ``(1/B) Σ_i`` for ``mfcont`` and the cross-entropy mean for ``mfnca``. With the sampler of the
  MLRC protocol (every class of a batch has the same number m of images) the two coincide; they
  differ only for unbalanced batches, where the batch mean weights classes by their size.
* **Similarity vs distance.** ``cwms`` / ``mfcwms`` follow docs/protocols.md §3, written with the
  similarity ``S = e·e'`` and base δ (``exp(-α(S - δ))`` for positives, ``exp(β(S - δ))`` for
  negatives). The printed eqs. 9/10 use the distance ``d = 1 - S``, i.e. their δ corresponds to
  ``1 - δ`` here (and eq. 9 excludes ``i = j`` where §3 includes it). The ``mfcwms`` defaults
  (α, β, δ, λ_MF) = (0.01, 80, 0.8, 0) are §3's, in its (similarity) convention.
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

# --- registration ------------------------------------------------------------------------------

# The modules (torch) live in benchmark.losses.meanfield_modules, imported when a loss is first built.
_mfcont: LossFactory = lazy_callable("benchmark.losses.meanfield_modules:mfcont")
_cwms: LossFactory = lazy_callable("benchmark.losses.meanfield_modules:cwms")
_mfcwms: LossFactory = lazy_callable("benchmark.losses.meanfield_modules:mfcwms")
_mfnca: LossFactory = lazy_callable("benchmark.losses.meanfield_modules:mfnca")


#: Learning rate of the mean fields as a multiple of the model's where it is not searched
#: (docs/protocols.md §2.5): the authors' code sets it as ``--lr * --lr-ratio``; the paper's 2e-1
#: at lr 1e-4 is a ratio of 2000, and their SOP/InShop commands keep --lr-ratio 2000 at --lr 6e-4
#: (mean fields 1.2).
MEAN_FIELD_PARAM_LR_RATIO = 2000.0

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
        param_lr_ratio=MEAN_FIELD_PARAM_LR_RATIO,
        source="dmlbench",
        description="Contrastive loss against learnable per-class mean fields (Mean-Field DML eq. 8).",
    )
)

register_loss(
    LossSpec(
        name="cwms",
        display_name="ClassWiseMultiSimilarity",
        factory=_cwms,
        # §3 gives no defaults; the authors' code (mft-in-dml train.py: --alpha 0.01, --beta 80,
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
        param_lr_ratio=MEAN_FIELD_PARAM_LR_RATIO,
        source="dmlbench",
        description="ClassWiseMultiSimilarity expanded around learnable mean fields (eq. 10).",
    )
)

register_loss(
    LossSpec(
        name="mfnca",
        display_name="MeanFieldNCA",
        factory=_mfnca,
        # §3 gives no default α. 16 puts the cosine logits in the usual range of normalised
        # softmax losses (NormSoftmax's 1/0.05 = 20, CosFace/ArcFace use 30-64 on larger C).
        defaults={"alpha": 16.0, PARAM_LR: DEFAULT_PARAM_LR},
        search_space={"alpha": SearchDim(0.01, 100.0, log=True), PARAM_LR: PARAM_LR_SEARCH},
        pair_based=False,
        has_parameters=True,
        embedding_space="cosine",
        param_lr_ratio=MEAN_FIELD_PARAM_LR_RATIO,
        source="dmlbench",
        description="ProxyNCA on mean fields plus the mean-field/sample NCA term (ICLR eq. 21).",
    )
)
