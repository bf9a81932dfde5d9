"""The ``mlrc`` protocol's declaration (docs/protocols.md §2.1-2.4), importable without torch.

Class-disjoint 4-fold cross-validation, a Bayesian hyperparameter search per loss, retraining
with the best parameters and separated/concatenated evaluation: the run code is
:mod:`benchmark.protocol.mlrc_run`. MLRC applies every budget's own overrides (``budgets.py``)
and reads no setting that only it uses. Its records may leave their modes out (separated and
concatenated, :data:`benchmark.records.MLRC_MODES`): records written before ``test.modes`` existed.
"""

from __future__ import annotations

from typing import Any

from benchmark.config import RunConfig
from benchmark.errors import ConfigError
from benchmark.lazy import lazy_callable
from benchmark.protocol.registry import ProtocolSpec, register_protocol
from benchmark.records import MLRC_MODES

#: MLRC's folds: four class-disjoint partitions, each once the validation set (docs/protocols.md §2.1).
MLRC_FOLDS = 4


def check_mlrc_config(c: RunConfig, request: Any = None) -> None:
    """MLRC's own checks (torch-free; ``dmlbench run`` makes them before importing torch): a search
    of at least one trial with at most that many startup trials, at least one iteration per epoch,
    and four folds. ``request`` is not read (every MLRC option is checked with the common ones)."""
    for key, value in (
        ("search.n_trials", c.search.n_trials),
        ("train.iters_per_epoch", c.train.iters_per_epoch),
    ):
        if value < 1:
            raise ConfigError(f"{key} must be >= 1, got {value}.")
    if not 0 <= c.search.n_startup_trials <= c.search.n_trials:
        raise ConfigError(
            f"search.n_startup_trials must be in [0, search.n_trials={c.search.n_trials}], "
            f"got {c.search.n_startup_trials}."
        )
    if c.protocol.n_folds != MLRC_FOLDS:
        raise ConfigError(f"protocol.n_folds must be {MLRC_FOLDS} for MLRC (got {c.protocol.n_folds}).")


PROTOCOL = register_protocol(
    ProtocolSpec(
        "mlrc",
        lazy_callable("benchmark.protocol.mlrc_run:MLRCRun"),
        record_modes=MLRC_MODES,
        check_config=check_mlrc_config,
    )
)
