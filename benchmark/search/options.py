"""Search options known without importing Optuna: the sampler registry and the heartbeat default.

``dmlbench list samplers``, ``dmlbench run --help`` and config validation read these; the samplers
themselves are built by :func:`benchmark.search.study.make_sampler`.
"""

from __future__ import annotations

from benchmark.registry import Registry

SAMPLERS: Registry[str] = Registry("sampler")
for _name, _doc in [
    ("gp", "Gaussian-process BO with log-EI (Optuna GPSampler), mirroring MLRC's Ax/BoTorch"),
    ("tpe", "Tree-structured Parzen estimator (Optuna TPESampler)"),
    ("random", "Uniform random search (Optuna RandomSampler)"),
]:
    SAMPLERS.register(_name, _doc)

#: Seconds between heartbeats of a running trial in a shared database (``--heartbeat``).
DEFAULT_HEARTBEAT_S = 30
