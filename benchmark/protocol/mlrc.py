"""The ``mlrc`` protocol's declaration (docs/protocols.md §2.1-2.4), importable without torch.

Class-disjoint 4-fold cross-validation, a Bayesian hyperparameter search per loss, retraining
with the best parameters and separated/concatenated evaluation: the run code is
:mod:`benchmark.protocol.mlrc_run`. MLRC applies every budget's own overrides (``budgets.py``)
and reads no setting that only it uses. Its records may leave their modes out (separated and
concatenated, :data:`benchmark.records.MLRC_MODES`): records written before ``test.modes`` existed.
"""

from __future__ import annotations

from benchmark.lazy import lazy_callable
from benchmark.protocol.registry import ProtocolSpec, register_protocol
from benchmark.records import MLRC_MODES

PROTOCOL = register_protocol(
    ProtocolSpec("mlrc", lazy_callable("benchmark.protocol.mlrc_run:MLRCRun"), record_modes=MLRC_MODES)
)
