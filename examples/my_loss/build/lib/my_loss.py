"""An example dmlbench loss plugin: binomial deviance around one margin on cosine similarities.

Every positive pair (same class) is pulled above the margin ``m``, every negative pair pushed below
it, each through a softplus of fixed sharpness ``alpha = 10``:

    L = mean_{pos} softplus(-alpha (s_ij - m)) + mean_{neg} softplus(alpha (s_ij - m))

The class attributes are the declaration a built-in loss makes with a ``LossSpec``: defaults,
the MLRC search space, the sampler kind (pair-based: 4 images per class in a batch), the embedding
space, learnable parameters (none). dmlbench builds it as ``MarginDevianceLoss(ctx, params)``
and calls it with ``(embeddings, labels)``. Nothing here imports dmlbench.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ALPHA = 10.0


class MarginDevianceLoss(nn.Module):
    name = "margindev"
    display_name = "Margin deviance (example plugin)"
    description = "binomial deviance around one margin m on cosine similarity (examples/my_loss)"
    defaults: ClassVar[dict[str, float]] = {"margin": 0.5}
    # The tuned range: (low, high), or (low, high, "log") for a log scale.
    search_space: ClassVar[dict[str, tuple[float, float]]] = {"margin": (0.0, 0.9)}
    pair_based = True
    embedding_space = "cosine"
    has_parameters = False

    def __init__(self, ctx: Any, params: Mapping[str, float]) -> None:
        super().__init__()
        self.margin = float(params["margin"])

    def forward(self, embeddings: Tensor, labels: Tensor) -> Tensor:
        x = F.normalize(embeddings, dim=1)
        sim = x @ x.T
        same = labels[:, None] == labels[None, :]
        off_diagonal = ~torch.eye(len(labels), dtype=torch.bool, device=labels.device)
        pos, neg = same & off_diagonal, ~same
        zero = sim.sum() * 0.0  # keeps the graph when a batch has no pair of a kind
        pos_term = F.softplus(-ALPHA * (sim[pos] - self.margin)).mean() if pos.any() else zero
        neg_term = F.softplus(ALPHA * (sim[neg] - self.margin)).mean() if neg.any() else zero
        return pos_term + neg_term
