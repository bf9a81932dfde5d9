"""Writing the leaderboard's figures to PNG and PDF files, several figures at once.

Why this module exists: saving, not drawing the data, is what the plots cost. On the glyphs
leaderboard with 21 losses (2-core CPU), building the five figures took about 3 s and saving them
about 16-21 s, because each ``savefig`` runs matplotlib's constrained layout and renders every
artist in Python (it holds the GIL, so threads do not help). After a run both cores are free, so
the figures are saved by up to ``jobs`` processes, and each figure's layout is computed once (for
the PNG) and reused for its PDF.

Kept free of torch and of the rest of the package, so that a spawned saving process starts fast.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Sequence
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from benchmark.io import atomic_write
from benchmark.orphans import guarded_pool

#: The file formats written for every figure, in order (the PNG first: its draw fixes the layout).
FORMATS = ("png", "pdf")
DPI = 120


def save_figure(fig: Figure, stem: Path) -> list[Path]:
    """Write ``stem.png`` and ``stem.pdf`` atomically (no creation date or software version, so that
    the same figure gives the same bytes); the paths written.

    The layout engine (constrained layout) runs for the PNG only; the PDF reuses its positions,
    so both files have the same layout and the layout is not computed twice.
    """
    FigureCanvasAgg(fig)
    engine = fig.get_layout_engine()
    paths = []
    try:
        for ext in FORMATS:
            path = stem.with_suffix(f".{ext}")
            metadata = {"CreationDate": None} if ext == "pdf" else {"Software": None}
            with atomic_write(path) as fh:
                fig.savefig(fh, format=ext, dpi=DPI, metadata=metadata)
            paths.append(path)
            fig.set_layout_engine("none")
    finally:
        fig.set_layout_engine(engine)
    return paths


def _save_pickled(data: bytes, stem: str) -> list[str]:
    """:func:`save_figure` of a pickled figure (the body of a saving process)."""
    return [str(p) for p in save_figure(pickle.loads(data), Path(stem))]


def saving_processes() -> int:
    """Saving processes to use by default: the CPUs, at most 2. More cannot gain much: the largest
    figure (the validation curves) is nearly half of the saving time on its own (glyphs, 21 losses)."""
    return max(1, min(2, os.cpu_count() or 1))


def save_figures(figures: Sequence[tuple[Figure, Path]], jobs: int | None = None) -> list[Path]:
    """Save every ``(figure, stem)`` with :func:`save_figure`; the paths in the order given.

    With ``jobs`` > 1 (default :func:`saving_processes`) and more than one figure, the figures are
    pickled to that many spawned processes, largest first (by number of axes); the files are the
    same bytes as saved in this process.
    """
    jobs = saving_processes() if jobs is None else jobs
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, got {jobs}")
    if jobs == 1 or len(figures) < 2:
        return [p for fig, stem in figures for p in save_figure(fig, stem)]
    order = sorted(range(len(figures)), key=lambda i: -len(figures[i][0].axes))
    with guarded_pool(min(jobs, len(figures))) as pool:
        futures = {
            i: pool.submit(_save_pickled, pickle.dumps(figures[i][0]), str(figures[i][1])) for i in order
        }
        return [Path(p) for i in range(len(figures)) for p in futures[i].result()]
