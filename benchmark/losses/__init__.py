"""Deep-metric-learning losses: the registry and every registered loss (docs/protocols.md §3).

Importing this package registers all losses in :data:`LOSSES`::

    from benchmark.losses import LOSSES, LossContext, build_loss

    loss = build_loss("mfcont", LossContext(num_classes=100, embedding_dim=128), {})
"""

from __future__ import annotations

# Registration happens on import; the order here is the order of `dmlbench list losses`:
# PML baselines first, then dmlbench's own losses.
# isort: off
from benchmark.losses import pml  # noqa: F401
from benchmark.losses import meanfield  # noqa: F401
from benchmark.losses import cam  # noqa: F401
from benchmark.losses import mpa  # noqa: F401

# isort: on
from benchmark.losses.registry import (
    DEFAULT_PARAM_LR,
    LOSSES,
    PARAM_LR,
    LossContext,
    LossFactory,
    LossSpec,
    SearchDim,
    build_loss,
    log_if_wide,
    register_loss,
    resolve_params,
)

__all__ = [
    "DEFAULT_PARAM_LR",
    "LOSSES",
    "PARAM_LR",
    "LossContext",
    "LossFactory",
    "LossSpec",
    "SearchDim",
    "build_loss",
    "log_if_wide",
    "register_loss",
    "resolve_params",
]
