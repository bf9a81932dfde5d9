"""The machine a run trains on, in terms a record keeps (pure Python, no torch), so that planning
scripts can compare a record's host with this one without loading the training stack."""

from __future__ import annotations

import functools
import platform
from pathlib import Path


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what the platform module says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"
