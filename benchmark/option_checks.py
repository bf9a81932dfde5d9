"""Value checks of the model and training-loop options of :mod:`benchmark.engine.training_options`.

Torch-free, so that ``dmlbench run`` refuses a wrong ``--set model.pooling=...`` or
``train.lr_decay_gamma=...`` before importing torch (a fraction of a second instead of seconds).
"""

from __future__ import annotations

from benchmark.config import RunConfig
from benchmark.errors import ConfigError

POOLINGS = ("avg", "avg+max")
EMBEDDER_INITS = ("default", "kaiming")


def validate_training_options(config: RunConfig) -> None:
    """ConfigError naming the key for an option value the loop cannot run with."""
    m, t = config.model, config.train
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
    if t.warmup_epochs < 0:
        raise ConfigError(f"train.warmup_epochs must be >= 0, got {t.warmup_epochs}.")
    if t.lr_decay_step < 0:
        raise ConfigError(f"train.lr_decay_step must be >= 0 (0 = no decay), got {t.lr_decay_step}.")
    if not 0 < t.lr_decay_gamma <= 1:
        raise ConfigError(f"train.lr_decay_gamma must be in (0, 1], got {t.lr_decay_gamma}.")
    if t.clip_grad_value < 0:
        raise ConfigError(f"train.clip_grad_value must be >= 0 (0 = no clipping), got {t.clip_grad_value}.")
