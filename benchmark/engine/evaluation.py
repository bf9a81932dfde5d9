"""Test-set scores a protocol reports: fold models' embeddings combined, and per-rep intervals."""

from __future__ import annotations

import numpy as np

from benchmark.metrics import evaluate
from benchmark.metrics.knn import EXACT, KnnSearch, Space
from benchmark.records import IntervalDoc
from benchmark.stats import t_interval


def concatenate_embeddings(fold_embs: list[np.ndarray], space: str) -> np.ndarray:
    """The 512-d concatenation of the fold models' embeddings (docs/protocols.md §2.4).

    Cosine space: each fold L2-normalised, concatenated, normalised again. Euclidean space
    (``cam``): raw embeddings concatenated, so the L2 distance is the root of the summed
    per-fold squared distances.
    """
    if space == "cosine":
        parts = [e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-12) for e in fold_embs]
        cat = np.concatenate(parts, axis=1)
        out: np.ndarray = (cat / np.maximum(np.linalg.norm(cat, axis=1, keepdims=True), 1e-12)).astype(
            np.float32
        )
        return out
    raw: np.ndarray = np.concatenate(fold_embs, axis=1).astype(np.float32)
    return raw


def evaluate_folds(
    fold_embs: list[np.ndarray],
    labels: np.ndarray,
    space: Space,
    metrics: list[str],
    search: KnnSearch = EXACT,
) -> dict[str, dict[str, float]]:
    """Separated (mean over fold models) and concatenated metrics on the test classes."""
    per_fold = [evaluate(e, labels, space, metrics, search=search) for e in fold_embs]
    separated = {m: float(np.mean([pf[m] for pf in per_fold])) for m in metrics}
    concatenated = evaluate(concatenate_embeddings(fold_embs, space), labels, space, metrics, search=search)
    return {"separated": separated, "concatenated": concatenated, "per_fold": per_fold}  # type: ignore[dict-item]


def interval_dict(values: list[float], confidence: float) -> IntervalDoc:
    """The t-interval of ``values`` as the record stores it (mean, half width, n, low, high)."""
    iv = t_interval(values, confidence)
    return {"mean": iv.mean, "half_width": iv.half_width, "n": iv.n, "low": iv.low, "high": iv.high}
