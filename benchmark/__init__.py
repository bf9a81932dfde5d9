"""dmlbench: a benchmark suite for deep-metric-learning losses (MLRC protocol and friends).

``from benchmark import run, report`` is the Python API (:mod:`benchmark.api`). Importing this
package stays light (no torch): the API is loaded on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from benchmark.api import report, run

__all__ = ["__version__", "report", "run"]


def __getattr__(name: str) -> Any:
    # PEP 562: `benchmark.run` imports benchmark.api (and through it torch) only when first used.
    if name in ("run", "report"):
        from benchmark import api

        return getattr(api, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
