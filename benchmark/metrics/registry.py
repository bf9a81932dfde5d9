"""The metric registry and :func:`evaluate`, the one entry point that turns embeddings into scores."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import numpy as np

from benchmark.errors import ConfigError
from benchmark.metrics import retrieval
from benchmark.metrics.clustering import nmi
from benchmark.metrics.full_ranking import full_ranking_average_precision
from benchmark.metrics.knn import (
    EXACT,
    KnnSearch,
    Space,
    as_float32_matrix,
    check_space,
    knn_batches,
    knn_gallery_batches,
)
from benchmark.registry import Registry

PerQueryFn = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]
EmbeddingFn = Callable[[np.ndarray, np.ndarray, Space], float]

# Upper bound on the neighbour entries held at once by evaluate(): a query block has at most
# this many (query, neighbour) pairs, i.e. ~32 MiB of int64 ids. A ranking metric needing the whole
# ranking would therefore run in blocks of max(1, 2^22 / N) queries.
MAX_NEIGHBOUR_ENTRIES = 1 << 22


@dataclass(frozen=True)
class MetricSpec:
    """How to compute one metric and how to present it.

    ``fn`` (query_labels, neighbour_labels, r) -> per-query values (NaN for excluded queries) is
    the metric's definition on a ranking, and ``k_needed(labels)`` says how many neighbours it
    reads. A metric that sets ``from_embeddings`` (embeddings, labels, space) -> value is computed
    by that function instead, without the shared kNN search: full-ranking mAP (whose ``fn`` would
    need k = N - 1, and which has a faster exact route) and NMI (not a per-query metric: its
    ``fn`` raises and ``k_needed`` is 0).
    """

    name: str
    display_name: str
    higher_is_better: bool
    k_needed: Callable[[np.ndarray], int]
    fn: PerQueryFn
    from_embeddings: EmbeddingFn | None = None
    description: str = ""


def adopt_metric(obj: object, shown: str) -> MetricSpec:
    """What a metric plugin names, checked: a :class:`MetricSpec` (else a ConfigError)."""
    if not isinstance(obj, MetricSpec):
        raise ConfigError(
            f"Plugin {shown!r} is a {type(obj).__name__}; a metric plugin must be a MetricSpec."
        )
    if not callable(obj.k_needed) or not callable(obj.fn) or not isinstance(obj.higher_is_better, bool):
        raise ConfigError(
            f"Plugin {shown!r}: MetricSpec.k_needed and fn must be callable, higher_is_better a bool."
        )
    if obj.from_embeddings is not None and not callable(obj.from_embeddings):
        raise ConfigError(f"Plugin {shown!r}: MetricSpec.from_embeddings must be callable or None.")
    return obj


METRICS: Registry[MetricSpec] = Registry("metric", group="dmlbench.metrics", adopt=adopt_metric)
MLRC_METRICS: tuple[str, ...] = ("map_at_r", "precision_at_1", "r_precision")


def _max_r(labels: np.ndarray) -> int:
    return int(retrieval.num_relevant(labels).max(initial=0))


def _full_ranking(labels: np.ndarray) -> int:
    return max(len(labels) - 1, 0)


def _fixed_k(k: int) -> Callable[[np.ndarray], int]:
    def k_needed(labels: np.ndarray) -> int:
        return k

    return k_needed


def _no_neighbours(labels: np.ndarray) -> int:
    return 0


def _not_per_query(name: str) -> PerQueryFn:
    def fn(query_labels: np.ndarray, neighbour_labels: np.ndarray, r: np.ndarray) -> np.ndarray:
        raise TypeError(f"Metric {name!r} is a property of the whole embedding set; use evaluate().")

    return fn


def _mean_full_ranking_ap(embeddings: np.ndarray, labels: np.ndarray, space: Space) -> float:
    return retrieval.nanmean(full_ranking_average_precision(embeddings, labels, space))


def _register(spec: MetricSpec) -> None:
    METRICS.register(spec.name, spec)


_register(
    MetricSpec(
        name="map_at_r",
        display_name="MAP@R",
        higher_is_better=True,
        k_needed=_max_r,
        fn=retrieval.map_at_r,
        description="Mean average precision over the first R neighbours (R = class size - 1; MLRC).",
    )
)
_register(
    MetricSpec(
        name="precision_at_1",
        display_name="P@1",
        higher_is_better=True,
        k_needed=_fixed_k(1),
        fn=retrieval.precision_at_1,
        description="Nearest neighbour has the query's label.",
    )
)
_register(
    MetricSpec(
        name="r_precision",
        display_name="RP",
        higher_is_better=True,
        k_needed=_max_r,
        fn=retrieval.r_precision,
        description="Fraction of the first R neighbours with the query's label (MLRC).",
    )
)
for _k in (1, 2, 4, 8, 10, 100):
    _register(
        MetricSpec(
            name=f"recall_at_{_k}",
            display_name=f"R@{_k}",
            higher_is_better=True,
            k_needed=_fixed_k(_k),
            fn=partial(retrieval.recall_at_k, k=_k),
            description=f"At least one of the {_k} nearest neighbours has the query's label (DML Recall@k).",
        )
    )
for _k in (20, 100):
    _register(
        MetricSpec(
            name=f"precision_at_{_k}",
            display_name=f"P@{_k}",
            higher_is_better=True,
            k_needed=_fixed_k(_k),
            fn=partial(retrieval.precision_at_k, k=_k),
            description=f"Fraction of the {_k} nearest neighbours with the query's label.",
        )
    )
for _k in (2, 4, 8, 10, 100):  # @2/4/8: the MPA paper reports them on CUB and Cars
    _register(
        MetricSpec(
            name=f"ndcg_at_{_k}",
            display_name=f"nDCG@{_k}",
            higher_is_better=True,
            k_needed=_fixed_k(_k),
            fn=partial(retrieval.ndcg_at_k, k=_k),
            description=f"Normalised DCG of the {_k} nearest neighbours, binary gains.",
        )
    )
_register(
    MetricSpec(
        name="map",
        display_name="mAP",
        higher_is_better=True,
        k_needed=_full_ranking,
        fn=retrieval.average_precision,
        from_embeddings=_mean_full_ranking_ap,
        description="Mean average precision over the full ranking of the gallery.",
    )
)
_register(
    MetricSpec(
        name="nmi",
        display_name="NMI",
        higher_is_better=True,
        k_needed=_no_neighbours,
        fn=_not_per_query("nmi"),
        from_embeddings=nmi,
        description="NMI of the labels and a seeded faiss k-means with one cluster per label.",
    )
)


def evaluate(
    embeddings: np.ndarray,
    labels: np.ndarray,
    space: Space,
    metrics: Sequence[str] = MLRC_METRICS,
    *,
    query_batch: int = 2048,
    search: KnnSearch = EXACT,
) -> dict[str, float]:
    """Score ``embeddings`` (N, D) with ``labels`` (N,) on the named metrics, query = gallery.

    The k-nearest-neighbour search runs once, with the largest k any requested ranking metric
    needs, in blocks of at most ``query_batch`` queries (fewer when k is large, see
    ``MAX_NEIGHBOUR_ENTRIES``). Returns ``{name: value}`` in the requested order; values are
    fractions in [0, 1], the mean over queries whose class has another member, or NaN if none has.
    Unknown names raise :class:`~benchmark.errors.UnknownNameError` before any work is done.
    A single name may be passed as a plain string. ``search`` chooses the kNN search of the
    ranking metrics: exact (the default) or an approximate faiss index (:class:`KnnSearch`);
    ``map`` and ``nmi`` do not use it.
    """
    names = [metrics] if isinstance(metrics, str) else list(dict.fromkeys(metrics))
    specs = [METRICS.get(name) for name in names]
    check_space(space)
    x = as_float32_matrix(embeddings)
    labels = np.asarray(labels)
    if labels.shape != (x.shape[0],):
        raise ValueError(f"labels must have shape ({x.shape[0]},); got {labels.shape}.")
    if query_batch < 1:
        raise ValueError(f"query_batch must be >= 1; got {query_batch}.")
    n = x.shape[0]
    results: dict[str, float] = {}

    ranking = [spec for spec in specs if spec.from_embeddings is None]
    if ranking:
        r = retrieval.num_relevant(labels)
        k = min(max(spec.k_needed(labels) for spec in ranking), max(n - 1, 0))
        per_query = {spec.name: np.full(n, np.nan) for spec in ranking}
        rows = max(1, min(query_batch, MAX_NEIGHBOUR_ENTRIES // max(k + 1, 1)))
        for start, neighbours in knn_batches(x, k, space, query_batch=rows, search=search):
            stop = start + len(neighbours)
            neighbour_labels = labels[neighbours]
            for spec in ranking:
                per_query[spec.name][start:stop] = spec.fn(
                    labels[start:stop], neighbour_labels, r[start:stop]
                )
        results.update({name: retrieval.nanmean(values) for name, values in per_query.items()})

    for spec in specs:
        if spec.from_embeddings is not None:
            results[spec.name] = float(spec.from_embeddings(x, labels, space))
    return {name: results[name] for name in names}


def evaluate_query_gallery(
    query_embeddings: np.ndarray,
    query_labels: np.ndarray,
    gallery_embeddings: np.ndarray,
    gallery_labels: np.ndarray,
    space: Space,
    metrics: Sequence[str] = MLRC_METRICS,
    *,
    query_batch: int = 2048,
    search: KnnSearch = EXACT,
) -> dict[str, float]:
    """Score queries against a separate gallery on the named ranking metrics (In-Shop's protocol).

    Each query ranks the gallery only; its R is the number of gallery items with its label (a
    query without one is left out, as a singleton in :func:`evaluate`). Metrics computed from one
    embedding set as a whole (``map``, ``nmi``) are refused with a ValueError naming them.
    Returns ``{name: value}`` in the requested order, fractions in [0, 1]. ``search`` as in
    :func:`evaluate`.
    """
    names = [metrics] if isinstance(metrics, str) else list(dict.fromkeys(metrics))
    specs = [METRICS.get(name) for name in names]
    whole = [spec.name for spec in specs if spec.from_embeddings is not None]
    if whole:
        raise ValueError(
            f"Metrics {', '.join(whole)} are computed on one embedding set, not on queries against a "
            "separate gallery; query-gallery evaluation supports the ranking metrics (e.g. map_at_r)."
        )
    check_space(space)
    q = as_float32_matrix(query_embeddings)
    g = as_float32_matrix(gallery_embeddings)
    q_labels, g_labels = np.asarray(query_labels), np.asarray(gallery_labels)
    if q_labels.shape != (q.shape[0],) or g_labels.shape != (g.shape[0],):
        raise ValueError(
            f"labels must have shapes ({q.shape[0]},) and ({g.shape[0]},); "
            f"got {q_labels.shape} and {g_labels.shape}."
        )
    classes, counts = np.unique(g_labels, return_counts=True)
    in_gallery = dict(zip(classes.tolist(), counts.tolist(), strict=True))
    r = np.array([in_gallery.get(label, 0) for label in q_labels.tolist()], dtype=np.int64)
    # A query is not in the gallery, so up to a whole gallery class is relevant: one more than
    # the query = gallery need (whose R excludes the query itself).
    k = min(max(spec.k_needed(g_labels) + 1 for spec in specs), g.shape[0]) if specs else 0
    per_query = {spec.name: np.full(q.shape[0], np.nan) for spec in specs}
    rows = max(1, min(query_batch, MAX_NEIGHBOUR_ENTRIES // max(k + 1, 1)))
    for start, neighbours in knn_gallery_batches(q, g, k, space, query_batch=rows, search=search):
        stop = start + len(neighbours)
        for spec in specs:
            per_query[spec.name][start:stop] = spec.fn(
                q_labels[start:stop], g_labels[neighbours], r[start:stop]
            )
    return {name: retrieval.nanmean(per_query[name]) for name in names}
