"""Provenance of a run: package versions, platform, device and git commit."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

import torch

from benchmark.analysis.provenance import CODE_PATHSPEC, uncommitted_code_files
from benchmark.engine.host import cpu_model
from benchmark.metrics.knn import gpu_search_enabled

_PACKAGES = (
    "dmlbench",
    "torch",
    "torchvision",
    "optuna",
    "faiss-cpu",
    "faiss-gpu-cu12",
    "pytorch-metric-learning",
    "numpy",
    "scipy",
)


def git_commit(cwd: Path | None = None) -> dict[str, Any]:
    """The commit of the source tree dmlbench runs from, and whether it has uncommitted changes.

    Changes under the top-level ``results/`` do not count: that folder holds what runs write (records,
    leaderboards, plots), so a second run in the same checkout would otherwise call the code of the
    first run's commit "dirty" although not a line of it changed.
    """
    root = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = uncommitted_code_files(root)
        return {"commit": sha, "dirty": bool(dirty)}
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown", "dirty": None}


@functools.cache
def code_identity() -> str:
    """Which code this process runs (:func:`tree_identity` of dmlbench's source, computed once)."""
    return tree_identity(Path(__file__).resolve().parent)


def tree_identity(root: Path) -> str:
    """The code of the checkout holding ``root``, as one comparable string.

    The full commit; for a tree with uncommitted changes (outside ``results/``)
    ``<commit>+dirty:<sha256 of the diff, 12 hex>``, so two different edits of one commit are two
    identities; outside a git checkout ``dmlbench <version>`` (an installed package). Every fold
    result carries it, so a record can tell when its folds were trained by different code (a run
    resumed after a code change, or search workers on machines with different checkouts).
    """
    git = git_commit(root)
    if git["commit"] == "unknown":
        return f"dmlbench {package_versions()['dmlbench']}"
    if not git["dirty"]:
        return str(git["commit"])
    try:
        diff = subprocess.run(
            ["git", "diff", "HEAD", *CODE_PATHSPEC], cwd=root, capture_output=True, check=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return f"{git['commit']}+dirty"
    return f"{git['commit']}+dirty:{hashlib.sha256(diff).hexdigest()[:12]}"


def package_versions() -> dict[str, str]:
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def environment_info(device: torch.device) -> dict[str, Any]:
    """Everything needed to say where a number came from."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        # The CPU and the vector instructions torch dispatches to change float rounding, so
        # same-seed CPU results are bit-identical only where these two match.
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "faiss_search": "gpu" if gpu_search_enabled() else "cpu",
        "packages": package_versions(),
        "git": git_commit(),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info
