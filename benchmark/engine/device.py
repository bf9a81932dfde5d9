"""Where a run computes: the torch device of ``--device`` and how many fold processes run at once."""

from __future__ import annotations

import os

import torch

from benchmark.errors import ConfigError
from benchmark.metrics.knn import use_gpu_search


def pick_device(name: str) -> torch.device:
    """The torch device for ``--device`` (``auto``: CUDA if present); on CUDA, retrieval metrics
    search with faiss-gpu too when it is installed (recorded as ``environment.faiss_search``)."""
    if name == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    elif name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"--device {name} was requested but CUDA is not available on this machine.")
    elif name.startswith("mps") and not torch.backends.mps.is_available():
        raise ConfigError(f"--device {name} was requested but MPS (Apple GPU) is not available here.")
    else:
        device = torch.device(name)
        if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(
                f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                f"numbered from 0."
            )
    use_gpu_search(device.type == "cuda")
    return device


# One process per core, not two: time-slicing 4 fold processes on the 2-core machine fills the cores a
# trial's finished folds leave idle, but costs each fold more per epoch (cache, switches). Measured on
# the README command (glyphs mfcont, idle, one run each, identical results): --jobs 2 741 s and
# --jobs 4 696 s with one trial's folds per pool; with the Sobol trials' and the test reps' folds
# pooled (benchmark.protocol.search_stage, mlrc_run), --jobs 2 676 s and --jobs 4 709 s.
def default_jobs(device: torch.device) -> int:
    """Fold-parallel processes: one per core on CPU (at most 4 folds run at once), 1 on a GPU."""
    return 1 if device.type != "cpu" else max(1, min(4, os.cpu_count() or 1))
