"""Average precision over the full ranking (docs/protocols.md §4.2 "mAP"), in bounded memory.

Through the kNN route this metric would need k = N - 1 sorted neighbours per query, which faiss
produces with a heap of size N (about 30 s for N = 10^4 on one core). AP only needs the rank of
each *relevant* item, and a rank is a count: 1 + the number of other items ranked before it. So
this module scores a block of queries against the whole gallery and counts, for every (query,
relevant item) pair, the items with a better key or an equal key and a smaller index -- the
ranking rule of :mod:`benchmark.metrics.knn`, with the query itself excluded by index. The cost
is O(N * R * N) comparisons (R = class size), which beats sorting every row for DML test sets
(R <= ~100) and needs no special case for ties.
"""

from __future__ import annotations

import numpy as np

from benchmark.metrics.knn import Space, as_float32_matrix, check_space, l2_normalise
from benchmark.metrics.retrieval import num_relevant

# Most (query, gallery item) entries held at once, both for a block of scores (float32) and for a
# chunk of comparisons (a float32 copy plus boolean temporaries): ~60 MiB at most in all.
MAX_SCORE_ENTRIES = 1 << 22


def _rank_keys(queries: np.ndarray, gallery: np.ndarray, sq_norms: np.ndarray | None) -> np.ndarray:
    """Rank keys (smaller is better) of every gallery item for each query, by faiss's formulas."""
    inner = queries @ gallery.T
    if sq_norms is None:  # cosine: rows are normalised, the key is the negated inner product
        return np.asarray(-inner, dtype=np.float32)
    # Squared L2 the way faiss's BLAS path computes it: |q|^2 + |x|^2 - 2 q.x, clipped at 0.
    q_norms = (queries.astype(np.float32) ** 2).sum(axis=1)
    return np.asarray(np.maximum(q_norms[:, None] + sq_norms[None, :] - 2 * inner, 0), dtype=np.float32)


def full_ranking_average_precision(
    embeddings: np.ndarray, labels: np.ndarray, space: Space, *, max_entries: int = MAX_SCORE_ENTRIES
) -> np.ndarray:
    """Per-query AP over the whole gallery (query = gallery, self excluded); NaN for singletons.

    AP_i = (1/R_i) * sum over relevant items j of (hits up to j's rank) / rank(j), which equals
    :func:`benchmark.metrics.retrieval.average_precision` applied to the full neighbour ranking.
    """
    check_space(space)
    x = as_float32_matrix(embeddings)
    labels = np.asarray(labels)
    n = x.shape[0]
    if labels.shape != (n,):
        raise ValueError(f"labels must have shape ({n},); got {labels.shape}.")
    r = num_relevant(labels)
    out = np.full(n, np.nan)
    if n < 2:
        return out
    gallery = l2_normalise(x) if space == "cosine" else x
    sq_norms = None if space == "cosine" else (gallery**2).sum(axis=1)

    # Members of each class in ascending index order, to enumerate (query, relevant item) pairs.
    _, class_of = np.unique(labels, return_inverse=True)
    class_of = class_of.reshape(-1)
    members = np.argsort(class_of, kind="stable")
    class_start = np.concatenate(([0], np.cumsum(np.bincount(class_of))))

    block = max(1, max_entries // n)
    for start in range(0, n, block):
        stop = min(n, start + block)
        query_ids = np.arange(start, stop)
        keys = _rank_keys(gallery[start:stop], gallery, sq_norms)

        # Pairs (local query row, gallery item of the same class), the query itself dropped.
        cls = class_of[query_ids]
        sizes = class_start[cls + 1] - class_start[cls]
        pair_row = np.repeat(np.arange(stop - start), sizes)
        offset = np.arange(sizes.sum()) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        pair_item = members[np.repeat(class_start[cls], sizes) + offset]
        not_self = pair_item != query_ids[pair_row]
        pair_row, pair_item = pair_row[not_self], pair_item[not_self]
        if pair_row.size == 0:
            continue

        # rank = 1 + items before the pair's item: a smaller key, or an equal key and a smaller
        # index -- minus the query itself where it is one of them.
        before = _count_before(keys, pair_row, pair_item, max_entries)
        self_key = keys[pair_row, query_ids[pair_row]]
        item_key = keys[pair_row, pair_item]
        self_before = (self_key < item_key) | ((self_key == item_key) & (query_ids[pair_row] < pair_item))
        rank = 1 + before - self_before

        # Within each query, the m-th relevant item found (by rank) contributes m / rank.
        order = np.lexsort((rank, pair_row))
        pair_row, rank = pair_row[order], rank[order]
        group_start = np.searchsorted(pair_row, pair_row, side="left")
        hits = np.arange(pair_row.size) - group_start + 1
        sums = np.bincount(pair_row, weights=hits / rank, minlength=stop - start)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:stop] = np.where(r[query_ids] > 0, sums / r[query_ids], np.nan)
    return out


def _count_before(keys: np.ndarray, rows: np.ndarray, items: np.ndarray, max_entries: int) -> np.ndarray:
    """For each (row, item): how many gallery items rank before ``item`` in that row of ``keys``."""
    n = keys.shape[1]
    counts = np.empty(rows.size, dtype=np.int64)
    index = np.arange(n)[None, :]
    chunk = max(1, max_entries // n)
    for s in range(0, rows.size, chunk):
        rr, ii = rows[s : s + chunk], items[s : s + chunk]
        row_keys = keys[rr]
        target = row_keys[np.arange(len(ii)), ii][:, None]
        earlier = (row_keys < target) | ((row_keys == target) & (index < ii[:, None]))
        counts[s : s + chunk] = np.count_nonzero(earlier, axis=1)
    return counts
