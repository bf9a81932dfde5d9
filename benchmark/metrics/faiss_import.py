"""faiss, imported once for every metric, with an actionable error when the install is broken.

faiss-cpu and faiss-gpu-cu12 (and the other faiss-gpu builds) all install the same ``faiss``
package; with two of them installed, the second overwrites part of the first's files and
``import faiss`` fails deep inside SWIG code (seen here: ``pip install faiss-cpu faiss-gpu-cu12``
gives ``AttributeError: module 'faiss._swigfaiss' has no attribute 'delete_GpuResourcesVector'``).
That message says nothing about the cause, so it is replaced by one that does.
"""

from __future__ import annotations

import importlib.metadata
from types import ModuleType
from typing import TYPE_CHECKING

from benchmark.lazy import LazyModule

#: Distributions that install the ``faiss`` package.
FAISS_DISTRIBUTIONS = ("faiss-cpu", "faiss-gpu", "faiss-gpu-cu11", "faiss-gpu-cu12", "faiss")


def installed_faiss_distributions() -> dict[str, str]:
    """``{distribution: version}`` of every installed faiss build."""
    out = {}
    for name in FAISS_DISTRIBUTIONS:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


def broken_faiss_message(error: BaseException, installed: dict[str, str]) -> str:
    """What went wrong importing faiss and the pip commands that repair it."""
    found = ", ".join(f"{n} {v}" for n, v in installed.items()) or "none"
    if len(installed) > 1:
        names = " ".join(installed)
        return (
            f"faiss cannot be imported ({type(error).__name__}: {error}). Several faiss builds are "
            f"installed ({found}); they install the same 'faiss' package and overwrite each other's "
            f"files. Keep exactly one: pip uninstall -y {names} && pip install faiss-gpu-cu12 "
            "(GPU) or pip install faiss-cpu (CPU)."
        )
    return (
        f"faiss cannot be imported ({type(error).__name__}: {error}). Installed faiss builds: {found}. "
        "Reinstall one: pip install --force-reinstall faiss-cpu (or faiss-gpu-cu12 on a GPU machine)."
    )


def import_faiss() -> ModuleType:
    """``import faiss``, with the actionable message of :func:`broken_faiss_message` if it fails."""
    try:
        import faiss
    except (ImportError, AttributeError) as exc:  # a half-overwritten SWIG module raises AttributeError
        raise ImportError(broken_faiss_message(exc, installed_faiss_distributions())) from exc
    return faiss


# Imported on first use, not with the metrics package: `dmlbench list metrics`, `report` and the
# registry declarations do not need it (faiss takes a noticeable time to import).
if TYPE_CHECKING:
    import faiss
else:
    faiss = LazyModule("faiss", import_faiss)

__all__ = [
    "FAISS_DISTRIBUTIONS",
    "broken_faiss_message",
    "faiss",
    "import_faiss",
    "installed_faiss_distributions",
]
