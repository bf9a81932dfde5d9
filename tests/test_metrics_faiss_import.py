"""A broken faiss install (two faiss builds overwriting each other) gives an error naming the fix."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmark.metrics.faiss_import import broken_faiss_message

SWIG_ERROR = AttributeError("module 'faiss._swigfaiss' has no attribute 'delete_GpuResourcesVector'")


def test_two_builds_are_named_with_the_repair() -> None:
    msg = broken_faiss_message(SWIG_ERROR, {"faiss-cpu": "1.15.1", "faiss-gpu-cu12": "1.14.1"})
    assert "faiss-cpu 1.15.1, faiss-gpu-cu12 1.14.1" in msg
    assert "pip uninstall -y faiss-cpu faiss-gpu-cu12 && pip install faiss-gpu-cu12" in msg
    assert "delete_GpuResourcesVector" in msg


def test_one_build_is_reinstalled() -> None:
    msg = broken_faiss_message(ImportError("libfaiss.so: cannot open"), {"faiss-cpu": "1.15.1"})
    assert "Installed faiss builds: faiss-cpu 1.15.1" in msg and "--force-reinstall faiss-cpu" in msg
    assert "none" in broken_faiss_message(ImportError("No module named 'faiss'"), {})


def test_import_error_replaces_the_swig_traceback(tmp_path: Path) -> None:
    # A faiss package that fails the way a half-overwritten install does, first on the path.
    fake = tmp_path / "faiss"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"raise AttributeError({str(SWIG_ERROR)!r})\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    # faiss is imported on first use (not with the metrics package): a search triggers it.
    use = (
        "import numpy as np; from benchmark.metrics import knn; knn(np.eye(3, dtype='float32'), 1, 'cosine')"
    )
    cmd = [sys.executable, "-c", use]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: faiss cannot be imported (AttributeError:"), last
