"""Query-vs-database retrieval, brute force and two-stage (docs/protocols.md §2.5 ``cbir``, §4.3).

In the closed-set ``cbir`` protocol the queries (test images) are searched in a separate database
(training images) of the same classes, so nothing is excluded by index as in :mod:`knn`.

**Brute force** ranks the whole database for every query with an exact faiss flat index
(inner product of L2-normalised vectors for ``cosine``, L2 for ``euclidean``); ties rank the
smaller database index first, at the cut-off too (the rule and helpers of :mod:`knn`).

**Two-stage** (Class-Anchor-Margin paper, §3 "Fast retrieval via two-stage system"):

1. the query's class is the class of its nearest anchor (several anchors may share a class;
   ties go to the smaller anchor index);
2. only the database items of that class are ranked, by the same keys and tie rule as brute
   force. "Of that class" means by label (``assign="label"``, the paper's rule) or by each
   database item's own nearest anchor (``assign="anchor"``, for a database without labels).

Items outside the predicted class are **not retrieved**: the two-stage list holds the class's
items only, padded with ``-1``. Every metric counts a relevant item that is not in the list as a
miss: AP_i = (1/R_i) * sum over list positions j of P(j) rel(j), with R_i the number of database
items sharing the query's label, so a relevant item that is never retrieved adds 0; P@k divides
the hits among the first k positions by min(k, database size), an empty position being a miss.
Hence, with ``assign="label"``, AP is exactly 1 for a query whose class stage 1 gets right and 0
for one it gets wrong: two-stage mAP equals stage-1 accuracy. Brute force uses the same
formulas on its full ranking, where every relevant item appears, so its AP is the usual one.

Queries whose label has no database item (R_i = 0) get NaN and are left out of means, as in
:mod:`retrieval`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

import numpy as np
import torch
from torch import nn

from benchmark.errors import ConfigError
from benchmark.metrics.knn import (
    FlatIndex,
    Space,
    _build_index,
    _resolve_cutoff_ties,
    _search_sorted,
    as_float32_matrix,
    check_space,
    l2_normalise,
)
from benchmark.metrics.retrieval import nanmean

Assign = Literal["label", "anchor"]
ASSIGNS: tuple[str, ...] = get_args(Assign)

# Most (query, item) float32 keys held at once while ranking: 16 MiB of keys plus the sort's
# int64 order, in blocks of queries.
MAX_KEY_ENTRIES = 1 << 22


# --- keys -------------------------------------------------------------------------------------


def prepare(x: np.ndarray, space: Space) -> np.ndarray:
    """Vectors as they are compared: L2-normalised float32 for cosine, float32 for euclidean."""
    check_space(space)
    x = as_float32_matrix(x)
    return l2_normalise(x) if space == "cosine" else x


def rank_keys(
    queries: np.ndarray, items: np.ndarray, space: Space, items_sq: np.ndarray | None = None
) -> np.ndarray:
    """Keys (Q, M) float32, smaller is better, of prepared ``items`` for prepared ``queries``.

    Cosine: the negated inner product. Euclidean: the squared L2 distance computed as faiss
    does, |q|^2 + |x|^2 - 2 q.x clipped at 0; ``items_sq`` are the |x|^2 when precomputed.
    """
    inner = queries @ items.T
    if space == "cosine":
        return np.asarray(-inner, dtype=np.float32)
    q_sq = (queries**2).sum(axis=1)
    x_sq = (items**2).sum(axis=1) if items_sq is None else items_sq
    return np.asarray(np.maximum(q_sq[:, None] + x_sq[None, :] - 2 * inner, 0), dtype=np.float32)


def _rows_per_block(width: int) -> int:
    return max(1, MAX_KEY_ENTRIES // max(width, 1))


def nearest_anchor(
    queries: np.ndarray, anchors: np.ndarray, space: Space, anchors_sq: np.ndarray | None = None
) -> np.ndarray:
    """Index (Q,) int64 of the nearest of the prepared ``anchors`` to each prepared query.

    Ties go to the smaller anchor index (``argmin`` returns the first minimum).
    """
    out = np.empty(len(queries), dtype=np.int64)
    block = _rows_per_block(len(anchors))
    for start in range(0, len(queries), block):
        keys = rank_keys(queries[start : start + block], anchors, space, anchors_sq)
        out[start : start + block] = keys.argmin(axis=1)
    return out


# --- anchors ----------------------------------------------------------------------------------


# eq=False: a generated __eq__ would compare arrays element-wise and fail.
@dataclass(frozen=True, eq=False)
class ClassAnchors:
    """Anchor vectors (A, D) and the class label of each (A,); several may share a class."""

    vectors: np.ndarray
    classes: np.ndarray

    def __post_init__(self) -> None:
        vectors = as_float32_matrix(self.vectors)
        classes = np.asarray(self.classes)
        if classes.shape != (vectors.shape[0],) or not np.issubdtype(classes.dtype, np.integer):
            raise ValueError(
                f"anchor classes must be integers of shape ({vectors.shape[0]},), one per anchor; "
                f"got {classes.dtype} {classes.shape}."
            )
        if vectors.shape[0] == 0:
            raise ValueError("two-stage retrieval needs at least one anchor.")
        object.__setattr__(self, "vectors", vectors)
        object.__setattr__(self, "classes", classes.astype(np.int64))

    @classmethod
    def one_per_class(cls, vectors: np.ndarray, class_ids: np.ndarray | None = None) -> ClassAnchors:
        """Anchor i belongs to ``class_ids[i]`` (default: class i)."""
        n = np.asarray(vectors).shape[0]
        return cls(vectors, np.arange(n) if class_ids is None else np.asarray(class_ids))


def anchors_from_loss(loss: nn.Module, class_ids: np.ndarray | Sequence[int]) -> ClassAnchors:
    """The learnable class anchors of a trained loss module, labelled with ``class_ids``.

    ``class_ids[c]`` is the dataset label of the loss's dense class ``c`` (the trainer remaps
    labels to 0..C-1 in sorted order, so this is ``np.unique(train_labels)``). Known layouts:
    ``anchors`` (C, D) of ``cam``, ``mean_fields`` (C, D) of the mean-field losses, ``proxies``
    (C, D) of ProxyAnchor/ProxyNCA or (C, K, D) of the MPA family, ``W`` (D, C) of
    NormSoftmax/CosFace/ArcFace, and SoftTriple's ``fc`` (D, C*K) with centre j in class j // K.
    Wrappers holding the loss as ``.loss`` are unwrapped. A loss without anchors is a ConfigError.
    """
    ids = np.asarray(class_ids, dtype=np.int64)
    inner = loss
    while isinstance(getattr(inner, "loss", None), nn.Module):
        inner = inner.loss  # type: ignore[assignment]  # nn.Module.__getattr__ is untyped
    vectors, per_class = _anchor_tensor(inner)
    num_classes = vectors.shape[0] // per_class
    if num_classes != ids.size:
        raise ConfigError(
            f"The loss has anchors for {num_classes} classes but {ids.size} class ids were given."
        )
    return ClassAnchors(vectors, np.repeat(ids, per_class))


def _anchor_tensor(loss: nn.Module) -> tuple[np.ndarray, int]:
    """Anchors (C*K, D) ordered class by class, and K, the anchors per class."""

    def tensor(name: str) -> np.ndarray | None:
        value = getattr(loss, name, None)
        if not isinstance(value, torch.Tensor):
            return None
        return np.asarray(value.detach().float().cpu().numpy())

    fc, per_class = tensor("fc"), getattr(loss, "centers_per_class", None)
    if fc is not None and isinstance(per_class, int) and fc.ndim == 2:
        return np.ascontiguousarray(fc.T), per_class  # SoftTriple: column c*K + k is centre k of c
    for name in ("anchors", "mean_fields", "proxies"):
        value = tensor(name)
        if value is not None and value.ndim == 2:
            return value, 1
        if value is not None and value.ndim == 3:  # (C, K, D): K proxies per class
            return value.reshape(-1, value.shape[2]), value.shape[1]
    w = tensor("W")
    if w is not None and w.ndim == 2:
        return np.ascontiguousarray(w.T), 1  # PML classifier weights are (D, C)
    raise ConfigError(
        f"Loss {type(loss).__name__} has no class anchors (looked for anchors, mean_fields, proxies, "
        "W, SoftTriple fc); two-stage retrieval needs a loss with one or more anchors per class."
    )


# --- brute force -----------------------------------------------------------------------------


# eq=False: a generated __eq__ would compare arrays element-wise and fail.
@dataclass(frozen=True, eq=False)
class BruteForceIndex:
    """An exact faiss flat index over the whole database."""

    space: Space
    index: FlatIndex
    size: int

    @classmethod
    def build(cls, database: np.ndarray, space: Space) -> BruteForceIndex:
        """Index ``database`` (N, D); the cost of this is not part of query time."""
        check_space(space)
        index, _ = _build_index(as_float32_matrix(database), space)
        return cls(space, index, int(index.ntotal))

    def search(self, queries: np.ndarray, k: int) -> np.ndarray:
        """The min(k, N) nearest database items (Q, k') int64 of each query, ties by index."""
        if k < 1:
            raise ValueError(f"k must be >= 1; got {k}.")
        q = prepare(queries, self.space)
        keep = min(k, self.size)
        m = min(keep + 1, self.size)  # one more, to see whether the cut-off splits a tie
        keys, ids = _search_sorted(self.index, q, m, self.space)
        if m > keep:
            tied = np.flatnonzero(keys[:, keep - 1] == keys[:, keep])
            if tied.size:
                ids[tied, :keep] = _resolve_cutoff_ties(self.index, q[tied], keep, self.space)
        return np.ascontiguousarray(ids[:, :keep])


def brute_force_scores(
    queries: np.ndarray,
    query_labels: np.ndarray,
    database: np.ndarray,
    database_labels: np.ndarray,
    space: Space,
    ks: Sequence[int] = (20, 100),
) -> dict[str, np.ndarray]:
    """Per-query AP over the full brute-force ranking and P@k (see :func:`per_query_scores`).

    The ranking sorts the keys of :func:`rank_keys` with ties by database index, a block of
    queries at a time, so memory stays bounded however large the database.
    """
    q, x = prepare(queries, space), prepare(database, space)
    ql, dl = _check_labels(q, query_labels, x, database_labels)
    r = num_relevant_in_database(ql, dl)
    out = {name: np.empty(len(q)) for name in _score_names(ks)}
    block = _rows_per_block(len(x))
    for start in range(0, len(q), block):
        stop = min(len(q), start + block)
        order = np.argsort(rank_keys(q[start:stop], x, space), axis=1, kind="stable")
        hits = dl[order] == ql[start:stop, None]
        for name, values in per_query_scores(hits, r[start:stop], len(x), ks).items():
            out[name][start:stop] = values
    return out


# --- two-stage ---------------------------------------------------------------------------------


# eq=False: a generated __eq__ would compare arrays element-wise and fail.
@dataclass(frozen=True, eq=False)
class TwoStageResult:
    """Stage-1 anchor and class (Q,) and the stage-2 ranking (Q, width), ``-1`` = not retrieved."""

    anchor: np.ndarray
    predicted_class: np.ndarray
    neighbours: np.ndarray


# eq=False: a generated __eq__ would compare arrays element-wise and fail.
@dataclass(frozen=True, eq=False)
class TwoStageIndex:
    """Anchors plus the database grouped by class: ``order[start[g]:start[g+1]]`` are the
    database indices (ascending) assigned to class ``group_classes[g]``, and ``grouped`` holds
    the prepared vectors in that order (each class a contiguous block, read without copying)."""

    space: Space
    anchors: np.ndarray
    anchor_sq: np.ndarray
    anchor_classes: np.ndarray
    grouped: np.ndarray
    grouped_sq: np.ndarray
    order: np.ndarray
    group_classes: np.ndarray
    group_start: np.ndarray

    @classmethod
    def build(
        cls,
        database: np.ndarray,
        database_labels: np.ndarray,
        anchors: ClassAnchors,
        space: Space,
        assign: Assign = "label",
    ) -> TwoStageIndex:
        """Prepare anchors and group the database by label or by nearest anchor (not timed)."""
        check_space(space)
        if assign not in ASSIGNS:
            raise ConfigError(f"Unknown assign {assign!r}; expected one of {', '.join(ASSIGNS)}.")
        x = prepare(database, space)
        a = prepare(anchors.vectors, space)
        if a.shape[1] != x.shape[1]:
            raise ValueError(f"anchors have {a.shape[1]} dimensions but the database has {x.shape[1]}.")
        if len(x) == 0:
            raise ValueError("two-stage retrieval needs a non-empty database.")
        labels = np.asarray(database_labels)
        if labels.shape != (len(x),):
            raise ValueError(f"database_labels must have shape ({len(x)},); got {labels.shape}.")
        assigned = labels if assign == "label" else anchors.classes[nearest_anchor(x, a, space, None)]
        group_classes, group_of, sizes = np.unique(assigned, return_inverse=True, return_counts=True)
        order = np.argsort(group_of.reshape(-1), kind="stable").astype(np.int64)
        grouped = np.ascontiguousarray(x[order])
        return cls(
            space=space,
            anchors=a,
            anchor_sq=(a**2).sum(axis=1),
            anchor_classes=anchors.classes,
            grouped=grouped,
            grouped_sq=(grouped**2).sum(axis=1),
            order=order,
            group_classes=group_classes,
            group_start=np.concatenate(([0], np.cumsum(sizes))).astype(np.int64),
        )

    @property
    def max_group_size(self) -> int:
        """The largest number of database items assigned to one class."""
        return int(np.diff(self.group_start).max(initial=0))

    def search(self, queries: np.ndarray, k: int | None = None) -> TwoStageResult:
        """Two-stage retrieval of ``queries``: the first ``k`` items (all if None) of the
        predicted class, ties by database index, padded with ``-1`` to width ``k`` (or to the
        largest class). One batched ranking per predicted class, none per query."""
        if k is not None and k < 1:
            raise ValueError(f"k must be >= 1 or None; got {k}.")
        q = prepare(queries, self.space)
        if q.shape[1] != self.grouped.shape[1]:
            raise ValueError(
                f"queries have {q.shape[1]} dimensions but the database has {self.grouped.shape[1]}."
            )
        anchor = nearest_anchor(q, self.anchors, self.space, self.anchor_sq)
        predicted = self.anchor_classes[anchor]
        width = self.max_group_size if k is None else k
        out = np.full((len(q), width), -1, dtype=np.int64)

        # Group id of each query's predicted class; a class with no database item retrieves nothing.
        group = np.searchsorted(self.group_classes, predicted)
        group = np.minimum(group, len(self.group_classes) - 1)
        found = self.group_classes[group] == predicted
        ordered = np.flatnonzero(found)[np.argsort(group[found], kind="stable")]
        groups, first = np.unique(group[ordered], return_index=True)
        last = np.append(first[1:], len(ordered))
        for g, lo, hi in zip(groups.tolist(), first.tolist(), last.tolist(), strict=True):
            a, b = int(self.group_start[g]), int(self.group_start[g + 1])
            items = self.order[a:b]
            take = min(width, b - a)
            rows = ordered[lo:hi]
            block = _rows_per_block(b - a)
            for s in range(0, len(rows), block):
                r = rows[s : s + block]
                keys = rank_keys(q[r], self.grouped[a:b], self.space, self.grouped_sq[a:b])
                # items are ascending, so a stable sort breaks ties by database index.
                local = np.argsort(keys, axis=1, kind="stable")[:, :take]
                out[r, :take] = items[local]
        return TwoStageResult(anchor=anchor, predicted_class=predicted, neighbours=out)


# --- metrics on a ranked list ----------------------------------------------------------------


def _check_labels(
    queries: np.ndarray, query_labels: np.ndarray, database: np.ndarray, database_labels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    ql, dl = np.asarray(query_labels), np.asarray(database_labels)
    if ql.shape != (len(queries),):
        raise ValueError(f"query_labels must have shape ({len(queries)},); got {ql.shape}.")
    if dl.shape != (len(database),):
        raise ValueError(f"database_labels must have shape ({len(database)},); got {dl.shape}.")
    return ql, dl


def num_relevant_in_database(query_labels: np.ndarray, database_labels: np.ndarray) -> np.ndarray:
    """R_i (Q,) int64: the number of database items with query i's label."""
    classes, counts = np.unique(np.asarray(database_labels), return_counts=True)
    ql = np.asarray(query_labels)
    if classes.size == 0:
        return np.zeros(ql.shape, dtype=np.int64)
    pos = np.minimum(np.searchsorted(classes, ql), classes.size - 1)
    return np.where(classes[pos] == ql, counts[pos], 0).astype(np.int64)


def list_hits(query_labels: np.ndarray, neighbours: np.ndarray, database_labels: np.ndarray) -> np.ndarray:
    """Boolean (Q, width): list position j holds a database item with the query's label (-1 = miss)."""
    ids = np.asarray(neighbours, dtype=np.int64)
    ql, dl = np.asarray(query_labels), np.asarray(database_labels)
    if ids.ndim != 2 or ids.shape[0] != ql.shape[0]:
        raise ValueError(f"neighbours must have shape ({ql.shape[0]}, width); got {ids.shape}.")
    if ids.size and (ids.max() >= len(dl) or ids.min() < -1):
        raise ValueError(f"neighbours must be database indices in [0, {len(dl)}) or -1.")
    return np.asarray((ids >= 0) & (dl[np.maximum(ids, 0)] == ql[:, None]))


def average_precision_of_list(hits: np.ndarray, r: np.ndarray) -> np.ndarray:
    """AP_i = (1/R_i) sum_j P(j) rel(j) over the list; unlisted relevant items add 0; NaN if R_i = 0."""
    hits = np.asarray(hits, dtype=bool)
    r = np.asarray(r, dtype=np.int64)
    if hits.ndim != 2 or r.shape != (hits.shape[0],):
        raise ValueError(f"hits (Q, width) and r (Q,) disagree: {hits.shape} and {r.shape}.")
    if (hits.sum(axis=1) > r).any():
        raise ValueError("a list holds more relevant items than r says the database has.")
    precision = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    values = (precision * hits).sum(axis=1) / np.maximum(r, 1)
    return np.where(r > 0, values, np.nan)


def precision_at_k_of_list(hits: np.ndarray, r: np.ndarray, k: int, database_size: int) -> np.ndarray:
    """P@k_i = hits among the first k positions / min(k, database size); NaN if R_i = 0."""
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}.")
    hits = np.asarray(hits, dtype=bool)
    denominator = min(k, database_size)
    if hits.shape[1] < denominator and database_size > 0:
        # Shorter lists are fine only when their missing tail is known to be misses (-1 padding
        # is the caller's job): refuse to guess.
        raise ValueError(f"P@{k} needs {denominator} list positions; got {hits.shape[1]}.")
    values = hits[:, :k].sum(axis=1) / max(denominator, 1)
    return np.where(np.asarray(r) > 0, values, np.nan)


# --- both, scored the same way -------------------------------------------------------------


def _score_names(ks: Sequence[int]) -> list[str]:
    return ["map", *(f"precision_at_{k}" for k in ks)]


def per_query_scores(
    hits: np.ndarray, r: np.ndarray, database_size: int, ks: Sequence[int]
) -> dict[str, np.ndarray]:
    """Per-query ``map`` (AP) and ``precision_at_{k}`` (registry names) of ranked lists.

    A list shorter than min(k, database size) is a two-stage list whose later positions are
    not retrieved: they count as misses.
    """
    hits = np.asarray(hits, dtype=bool)
    scores = {"map": average_precision_of_list(hits, r)}
    for k in ks:
        need = min(k, database_size)
        padded = np.pad(hits, ((0, 0), (0, max(0, need - hits.shape[1]))))
        scores[f"precision_at_{k}"] = precision_at_k_of_list(padded, r, k, database_size)
    return scores


def score_hits(hits: np.ndarray, r: np.ndarray, database_size: int, ks: Sequence[int]) -> dict[str, float]:
    """Means over queries with R_i > 0 of :func:`per_query_scores`."""
    return {name: nanmean(values) for name, values in per_query_scores(hits, r, database_size, ks).items()}


def compare_retrieval(
    queries: np.ndarray,
    query_labels: np.ndarray,
    database: np.ndarray,
    database_labels: np.ndarray,
    anchors: ClassAnchors,
    space: Space,
    *,
    ks: Sequence[int] = (20, 100),
    assign: Assign = "label",
) -> dict[str, dict[str, float]]:
    """mAP and P@k of brute force (full ranking) and of two-stage retrieval, plus stage-1 accuracy.

    Returns ``{"brute_force": {...}, "two_stage": {..., "stage1_accuracy": ...}}``.
    """
    q, x = prepare(queries, space), prepare(database, space)
    ql, dl = _check_labels(q, query_labels, x, database_labels)
    r = num_relevant_in_database(ql, dl)
    brute = {name: nanmean(v) for name, v in brute_force_scores(q, ql, x, dl, space, ks).items()}
    result = TwoStageIndex.build(x, dl, anchors, space, assign).search(q)
    two = score_hits(list_hits(ql, result.neighbours, dl), r, len(x), ks)
    two["stage1_accuracy"] = float(np.mean(result.predicted_class == ql)) if len(ql) else float("nan")
    return {"brute_force": brute, "two_stage": two}
