"""Retrieval metrics as pure, vectorised functions of neighbour labels (docs/protocols.md §4.1, §4.2).

Every metric takes

- ``query_labels`` (N,): the label of each query,
- ``neighbour_labels`` (N, k): labels of its gallery neighbours, best first, self excluded,
- ``r`` (N,): R_i, the number of *other* gallery items with label y_i (see :func:`num_relevant`),

and returns float64 per-query values (N,). Queries with R_i = 0 (their class has no other member)
are excluded from every metric: their value is NaN, and aggregates take the mean over the non-NaN
values (:func:`nanmean`). ``neighbour_labels`` must have at least as many columns as the metric
reads (e.g. max R_i for MAP@R); fewer raise ``ValueError`` rather than silently truncating R.
"""

from __future__ import annotations

import numpy as np


def num_relevant(labels: np.ndarray) -> np.ndarray:
    """R_i for query = gallery: how many *other* items share item i's label (int64, (N,))."""
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D; got shape {labels.shape}.")
    _, inverse, counts = np.unique(labels, return_inverse=True, return_counts=True)
    return (counts[inverse.reshape(-1)] - 1).astype(np.int64)


def nanmean(values: np.ndarray) -> float:
    """Mean over the non-NaN entries as a Python float; NaN (without a warning) if there are none."""
    values = np.asarray(values, dtype=np.float64)
    kept = values[~np.isnan(values)]
    return float(kept.mean()) if kept.size else float("nan")


def _check(
    query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    query_labels = np.asarray(query_labels)
    neighbour_labels = np.asarray(neighbour_labels)
    r = np.asarray(r, dtype=np.int64)
    n = query_labels.shape[0]
    if query_labels.ndim != 1 or r.shape != (n,):
        raise ValueError(
            f"query_labels and r must be 1-D of equal length; got {query_labels.shape} and {r.shape}."
        )
    if neighbour_labels.ndim != 2 or neighbour_labels.shape[0] != n:
        raise ValueError(f"neighbour_labels must have shape ({n}, k); got {neighbour_labels.shape}.")
    if (r < 0).any():
        raise ValueError("r must be >= 0.")
    return query_labels, neighbour_labels, r


def _hits(query_labels: np.ndarray, neighbour_labels: np.ndarray, columns: int, metric: str) -> np.ndarray:
    """Boolean (N, columns): neighbour j has the query's label."""
    if neighbour_labels.shape[1] < columns:
        raise ValueError(
            f"{metric} needs {columns} neighbours per query but only {neighbour_labels.shape[1]} were given."
        )
    return np.asarray(neighbour_labels[:, :columns] == query_labels[:, None])


def _exclude_singletons(values: np.ndarray, r: np.ndarray) -> np.ndarray:
    return np.where(r > 0, values, np.nan)


def _safe_r(r: np.ndarray) -> np.ndarray:
    # Singletons become NaN afterwards; dividing by 1 instead of 0 just avoids a warning.
    return np.asarray(np.maximum(r, 1), dtype=np.float64)


def map_at_r(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray) -> np.ndarray:
    """MAP@R per query: (1/R_i) * sum_{j <= R_i} P(j) rel(j), with P(j) = hits in top j / j."""
    query_labels, neighbour_labels, r = _check(query_labels, neighbour_labels, r)
    max_r = int(r.max(initial=0))
    within_r = np.arange(max_r)[None, :] < r[:, None]
    rel = _hits(query_labels, neighbour_labels, max_r, "MAP@R") & within_r
    precision = np.cumsum(rel, axis=1) / np.arange(1, max_r + 1)
    values = (precision * rel).sum(axis=1) / _safe_r(r)
    return _exclude_singletons(values, r)


def r_precision(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray) -> np.ndarray:
    """R-precision per query: hits among the first R_i neighbours, divided by R_i."""
    query_labels, neighbour_labels, r = _check(query_labels, neighbour_labels, r)
    max_r = int(r.max(initial=0))
    within_r = np.arange(max_r)[None, :] < r[:, None]
    rel = _hits(query_labels, neighbour_labels, max_r, "R-precision") & within_r
    return _exclude_singletons(rel.sum(axis=1) / _safe_r(r), r)


def precision_at_1(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray) -> np.ndarray:
    """P@1 per query: 1 if the nearest neighbour has the query's label, else 0."""
    return precision_at_k(query_labels, neighbour_labels, r, 1)


def precision_at_k(
    query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray, k: int
) -> np.ndarray:
    """P@k per query: hits among the first k neighbours divided by k.

    When ``neighbour_labels`` has fewer than k columns (the gallery holds fewer than k other
    items), the denominator is the length of the list actually returned.
    """
    query_labels, neighbour_labels, r = _check(query_labels, neighbour_labels, r)
    columns = _columns_for(k, neighbour_labels, r)
    rel = _hits(query_labels, neighbour_labels, columns, f"P@{k}")
    return _exclude_singletons(rel.sum(axis=1) / max(columns, 1), r)


def recall_at_k(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray, k: int) -> np.ndarray:
    """Recall@k in the DML sense per query: 1 if at least one of the first k neighbours is a hit."""
    query_labels, neighbour_labels, r = _check(query_labels, neighbour_labels, r)
    columns = _columns_for(k, neighbour_labels, r)
    rel = _hits(query_labels, neighbour_labels, columns, f"Recall@{k}")
    return _exclude_singletons(np.asarray(rel.any(axis=1), dtype=np.float64), r)


def ndcg_at_k(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray, k: int) -> np.ndarray:
    """nDCG@k per query with binary gains: DCG@k / ideal DCG@k, the ideal having min(R_i, k) hits.

    DCG@k = sum_{i <= k} (2^{rel_i} - 1) / log2(i + 1); with rel_i in {0, 1} the gain is rel_i.
    """
    query_labels, neighbour_labels, r = _check(query_labels, neighbour_labels, r)
    columns = _columns_for(k, neighbour_labels, r)
    rel = _hits(query_labels, neighbour_labels, columns, f"nDCG@{k}")
    discount = 1.0 / np.log2(np.arange(2, columns + 2))
    dcg = rel @ discount
    ideal_cumulative = np.concatenate(([0.0], np.cumsum(discount)))
    ideal = ideal_cumulative[np.minimum(r, columns)]
    return _exclude_singletons(dcg / np.where(ideal > 0, ideal, 1.0), r)


def average_precision(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Average precision over the full ranking per query: (1/R_i) * sum_j P(j) rel(j).

    ``neighbour_labels`` must hold the whole ranking (all N - 1 other items), so every relevant
    item appears in it; that is checked.
    """
    query_labels, neighbour_labels, r = _check(query_labels, neighbour_labels, r)
    rel = neighbour_labels == query_labels[:, None]
    found = rel.sum(axis=1)
    if (found != r).any():
        raise ValueError(
            "average_precision needs the full ranking: some queries have relevant items missing "
            "from neighbour_labels (or r does not match the labels)."
        )
    precision = np.cumsum(rel, axis=1) / np.arange(1, rel.shape[1] + 1)
    values = (precision * rel).sum(axis=1) / _safe_r(r)
    return _exclude_singletons(values, r)


def _columns_for(k: int, neighbour_labels: np.ndarray, r: np.ndarray) -> int:
    """Columns a cut-off metric reads: k, or fewer when the ranking is shorter than k.

    A ranking can only be shorter than k because the gallery is small (k is clipped to N - 1);
    an empty ranking for a query that has relevant items is a caller error.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}.")
    columns = min(k, int(neighbour_labels.shape[1]))
    if columns == 0 and (r > 0).any():
        raise ValueError("neighbour_labels has no columns but some queries have relevant items.")
    return columns
