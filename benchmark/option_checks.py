"""Value checks of the model and training-loop options of :mod:`benchmark.engine.training_options`.

Torch-free, so that ``dmlbench run`` refuses a wrong ``--set model.pooling=...`` before importing
torch (a fraction of a second instead of seconds). The loop options (warm-up, lr decay, clipping)
are the traditional protocol's settings, checked by its ``TraditionalSettings``.
"""

from __future__ import annotations

from benchmark.config import RunConfig
from benchmark.errors import ConfigError

POOLINGS = ("avg", "avg+max")
EMBEDDER_INITS = ("default", "kaiming")


def validate_training_options(config: RunConfig) -> None:
    """ConfigError naming the key for an option value the loop cannot run with."""
    m = config.model
    if m.pooling not in POOLINGS:
        raise ConfigError(f"model.pooling must be one of {', '.join(POOLINGS)}, got {m.pooling!r}.")
    if m.embedder_init not in EMBEDDER_INITS:
        raise ConfigError(
            f"model.embedder_init must be one of {', '.join(EMBEDDER_INITS)}, got {m.embedder_init!r}."
        )
    if m.frozen_trunk and (m.pooling != "avg" or m.freeze_trunk_bn_affine):
        raise ConfigError(
            "model.frozen_trunk = true caches average-pooled trunk features; model.pooling must be 'avg' "
            "and model.freeze_trunk_bn_affine false (the trunk does not train anyway)."
        )
