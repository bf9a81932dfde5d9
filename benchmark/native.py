"""Loads faiss's and torch's native libraries in one fixed order, faiss first (import for effect).

Both bring an OpenMP runtime, and the one loaded first serves both; faiss's exact k-NN then adds
up distances in a different order. Measured with ``dmlbench regress --exact``: glyphs/contrastive
test MAP@R 0.22636177576 with faiss imported first, 0.22636108132 with torch first (the other 13
regress values identical). Before faiss became a lazy import, every command loaded it first;
the heavy entry points (runs, the Python API, regress) import this module before torch, so a seed
still gives the same CPU metrics whichever way a run is started.
"""

from __future__ import annotations

from benchmark.metrics.faiss_import import import_faiss

import_faiss()

import torch  # noqa: E402, F401  (after faiss, on purpose)
