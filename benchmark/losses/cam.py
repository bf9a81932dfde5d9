"""Class Anchor Margin loss ``cam`` (shared/papers/class-anchor-margin-loss.txt, eqs. 1-4).

The only euclidean-space loss of the benchmark: embeddings are *not* normalised, and retrieval
with a ``cam`` model uses L2 distances.

Choices where the paper is ambiguous:

* The repeller ``½ Σ_{y≠y'} relu(2m - ‖c_y - c_y'‖)²`` sums over *ordered* pairs of *all* C
  anchors (eq. 2 as printed), not only the classes of the batch, and the norm term sums over all
  anchors; only the attractor is a batch mean. Anchors of classes absent from the batch therefore
  still repel each other every step, which is what makes the anchors a fixed "codebook".
* Anchor initialisation (the paper's "base vector" strategy): anchor y = √2·m · e_y (one-hot),
  so anchors are exactly 2m apart (their m-spheres touch but do not overlap), when
  C <= embedding dim; otherwise N(0, I) directions rescaled to the same norm √2·m.
* Concatenated evaluation (docs/protocols.md §2.4) L2-normalises each fold's output before concatenating;
  that discards the norm this loss trains. For euclidean-space losses the natural counterpart is
  to concatenate the raw 128-d outputs (512-d) and rank by L2 distance, which equals ranking by
  the sum of the per-fold squared distances. That choice belongs to the evaluation code; the
  spec's ``embedding_space = "euclidean"`` is the signal for it.
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

# The module (torch) lives in benchmark.losses.cam_modules, imported when the loss is first built.
_cam: LossFactory = lazy_callable("benchmark.losses.cam_modules:cam")


register_loss(
    LossSpec(
        name="cam",
        display_name="ClassAnchorMargin",
        factory=_cam,
        defaults={"m": 2.0, "p": 1.0, PARAM_LR: DEFAULT_PARAM_LR},
        search_space={
            "m": SearchDim(0.1, 10.0, log=True),
            "p": SearchDim(0.1, 10.0, log=True),
            PARAM_LR: PARAM_LR_SEARCH,
        },
        pair_based=False,
        has_parameters=True,
        embedding_space="euclidean",
        source="dmlbench",
        description="Attract samples to learnable class anchors that repel each other (L2 space).",
    )
)
