"""dmlbench: a benchmark suite for deep-metric-learning losses (MLRC protocol and friends).

The Python API is :mod:`benchmark.api` (``from benchmark.api import run, report``); ``benchmark.run``
is the same function. Importing this package stays light (no torch): the API loads on first use.
``report`` is not offered here because ``benchmark.report`` is the report subpackage: once that is
imported, the attribute is the subpackage, whatever this module exports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from benchmark.api import run

__all__ = ["__version__", "run"]


def __getattr__(name: str) -> Any:
    # PEP 562: `benchmark.run` imports benchmark.api (and through it torch) only when first used.
    if name == "run":
        from benchmark import api

        return api.run
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
