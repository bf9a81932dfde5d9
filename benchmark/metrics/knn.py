"""Exact k-nearest-neighbour search with query = gallery and the query itself excluded.

Tie rule: among gallery items with equal score, the one with the smaller gallery index ranks
first, both inside the returned list and at its cut-off. faiss does not guarantee this: its heaps
return ties in arbitrary order (``IndexFlatIP`` even in descending id order) and, for inner
products, may keep a larger id over a smaller one at the k-th position. So each row is re-sorted
by (score, index), and a row whose cut-off falls inside a group of equal scores (detected with
one extra result) is searched again with a longer list until the whole group is in view.
Such rows are rare with trained embeddings; a collapsed model (all embeddings equal) makes every
row one, which costs a full ranking per query, still in bounded memory.

Thread count: faiss computes scores with OpenBLAS, whose float rounding depends on how many
OpenMP threads split a product, so the same embeddings ranked on 1 and on 2 threads differed at
near-ties (a resumed run's concatenated MAP@R moved in the 5th digit because its process had
another thread count). Each block of queries (fixed by N alone) is therefore searched on one
OpenMP thread, and blocks run in parallel in a thread pool instead (faiss releases the GIL): the
ranking depends on the embeddings only, the thread count only decides the speed.

Approximate search (:class:`KnnSearch`, config keys ``eval.knn`` and ``eval.*``) is an explicit
option for large N, where exact search costs 2·N²·D flops: faiss's IVF (inverted lists over a
k-means coarse quantiser, ``nprobe`` lists searched per query) or HNSW (a navigable graph). Their
neighbour lists may miss true neighbours, so metrics computed from them are estimates. Ties
rank by index within the returned list only, and a query for which the index returns fewer than
k other items is searched exactly. HNSW's graph is built by several threads in an order that
can vary between runs, so its results need not repeat exactly; IVF's do on the same host and
thread count (faiss's k-means is seeded).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, TypeVar, get_args

import numpy as np

from benchmark.config import KNN_KINDS, EvalConfig
from benchmark.metrics.faiss_import import faiss

Space = Literal["cosine", "euclidean"]
SPACES: tuple[str, ...] = get_args(Space)

# Most (query, neighbour) results held at once when a tie forces longer result lists:
# 2^22 entries = 48 MiB of float32 scores plus int64 ids.
MAX_RESULT_ENTRIES = 1 << 22

_T = TypeVar("_T")
_R = TypeVar("_R")


@dataclass
class _SearchThreads:
    # Process-wide; None: one per CPU this process may run on.
    count: int | None = None


_threads = _SearchThreads()


def set_search_threads(count: int | None) -> None:
    """Search query blocks on ``count`` threads at most (None: one per usable CPU).

    Fold workers set their share of the cores. Rankings do not depend on it (module docstring).
    """
    if count is not None and count < 1:
        raise ValueError(f"search threads must be >= 1 or None; got {count}.")
    _threads.count = count


def search_threads() -> int:
    """Threads the next search may use: :func:`set_search_threads`, or the usable CPUs."""
    if _threads.count is not None:
        return _threads.count
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _on_one_omp_thread(fn: Callable[[_T], _R], item: _T) -> _R:
    """``fn(item)`` with this thread's faiss/OpenBLAS work on one OpenMP thread (then restored)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)  # the calling thread's OpenMP setting only
    try:
        return fn(item)
    finally:
        faiss.omp_set_num_threads(before)


def _map_blocks(fn: Callable[[_T], _R], items: Sequence[_T]) -> Iterator[_R]:
    """``fn`` over ``items`` in order, each call on one OpenMP thread, up to
    :func:`search_threads` calls at once (at most twice that many results held)."""
    threads = min(search_threads(), len(items))
    if threads <= 1 or _gpu.enabled:
        for item in items:
            yield _on_one_omp_thread(fn, item)
        return
    with ThreadPoolExecutor(threads, thread_name_prefix="knn") as pool:
        pending: list[Future[_R]] = []
        for item in items:
            pending.append(pool.submit(_on_one_omp_thread, fn, item))
            if len(pending) >= 2 * threads:
                yield pending.pop(0).result()
        for fut in pending:
            yield fut.result()


def as_float32_matrix(embeddings: np.ndarray) -> np.ndarray:
    """Validate ``embeddings`` as a finite 2-D array and return it as contiguous float32."""
    x = np.ascontiguousarray(embeddings, dtype=np.float32)
    if x.ndim != 2:
        raise ValueError(f"embeddings must be a 2-D array (N, D); got shape {x.shape}.")
    if not np.isfinite(x).all():
        raise ValueError("embeddings contain NaN or inf; retrieval metrics are undefined for them.")
    return x


def check_space(space: str) -> None:
    """Raise ``ValueError`` unless ``space`` is one of :data:`SPACES`."""
    if space not in SPACES:
        raise ValueError(f"Unknown space {space!r}; expected one of {', '.join(SPACES)}.")


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Return a float32 copy of ``x`` with unit-length rows; all-zero rows stay zero."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    # A zero vector has no direction; dividing by 1 keeps it zero instead of producing NaN.
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(x / norms, dtype=np.float32)


#: Longest result list faiss's GPU flat search returns (its GPU k-selection limit); a longer one
#: (only needed while a tie at the cut-off is resolved) is searched on the CPU copy instead.
GPU_MAX_K = 2048


@dataclass
class _GpuSearch:
    # Process-wide, like faiss's own thread count: every metric of a run shares it.
    enabled: bool = False
    resources: faiss.StandardGpuResources | None = None


_gpu = _GpuSearch()


def faiss_gpu_count() -> int:
    """GPUs faiss can use: 0 with faiss-cpu (no GPU code) or without a visible GPU."""
    if not hasattr(faiss, "StandardGpuResources"):
        return 0
    return int(faiss.get_num_gpus())


def use_gpu_search(enabled: bool) -> bool:
    """Search exact indexes on GPU 0 from now on if ``enabled`` and faiss-gpu sees a GPU.

    Returns whether GPU search is on. Results equal the CPU search's up to float rounding (GPU
    distances are computed in another order), so ties may resolve differently.
    """
    on = bool(enabled) and faiss_gpu_count() > 0
    _gpu.enabled = on
    if on and _gpu.resources is None:
        _gpu.resources = faiss.StandardGpuResources()
    return on


def gpu_search_enabled() -> bool:
    """Whether :func:`use_gpu_search` turned GPU search on in this process."""
    return _gpu.enabled


class FlatIndex:
    """An exact faiss flat index, searched on the GPU when that is on (lists up to GPU_MAX_K)."""

    def __init__(self, cpu: faiss.Index) -> None:
        self.cpu = cpu
        self.gpu: faiss.Index | None = None
        if _gpu.enabled and _gpu.resources is not None:
            self.gpu = faiss.index_cpu_to_gpu(_gpu.resources, 0, cpu)

    @property
    def ntotal(self) -> int:
        """Number of indexed vectors."""
        return int(self.cpu.ntotal)

    def search(self, queries: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """faiss ``search``: the m best (scores, ids) of each query."""
        index = self.gpu if self.gpu is not None and m <= GPU_MAX_K else self.cpu
        scores, ids = index.search(queries, m)
        return scores, ids


@dataclass(frozen=True)
class KnnSearch:
    """How the k nearest neighbours are searched: ``kind`` is one of :data:`KNN_KINDS`.

    ``ivf_nlist`` (0 = ``4·sqrt(N)``, at most N / 39 so that k-means has 39 training points per
    list, faiss's minimum) and ``ivf_nprobe`` (lists searched per query) configure IVF;
    ``hnsw_m`` (graph degree) and ``hnsw_ef_search`` (search beam, at least k + 1) configure
    HNSW. The parameters of the kind not chosen are ignored. Approximate indexes are built and
    searched on the CPU, also where :func:`use_gpu_search` moves exact search to a GPU.
    """

    kind: str = "exact"
    ivf_nlist: int = 0
    ivf_nprobe: int = 16
    hnsw_m: int = 32
    hnsw_ef_search: int = 128

    def __post_init__(self) -> None:
        if self.kind not in KNN_KINDS:
            raise ValueError(f"Unknown kNN search {self.kind!r}; expected one of {', '.join(KNN_KINDS)}.")
        for name in ("ivf_nprobe", "hnsw_m", "hnsw_ef_search"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1; got {getattr(self, name)}.")
        if self.ivf_nlist < 0:
            raise ValueError(f"ivf_nlist must be >= 0 (0 = 4·sqrt(N)); got {self.ivf_nlist}.")

    @property
    def exact(self) -> bool:
        """Whether this is exact search."""
        return self.kind == "exact"


EXACT = KnnSearch()


def knn_search(config: EvalConfig) -> KnnSearch:
    """The search a run's ``[eval]`` section chooses."""
    return KnnSearch(
        kind=config.knn,
        ivf_nlist=config.ivf_nlist,
        ivf_nprobe=config.ivf_nprobe,
        hnsw_m=config.hnsw_m,
        hnsw_ef_search=config.hnsw_ef_search,
    )


def ivf_lists(n: int, requested: int) -> int:
    """The number of IVF lists used for a gallery of ``n`` items (see :class:`KnnSearch`)."""
    nlist = requested if requested > 0 else round(4 * np.sqrt(n))
    return int(max(1, min(nlist, n // 39)))


class ApproxIndex:
    """A faiss IVF-flat or HNSW-flat index over the gallery, with the same ``search`` as FlatIndex."""

    def __init__(self, x: np.ndarray, space: Space, search: KnnSearch) -> None:
        metric = faiss.METRIC_INNER_PRODUCT if space == "cosine" else faiss.METRIC_L2
        d = x.shape[1]
        self.search_options = search
        self._hnsw: faiss.IndexHNSWFlat | None = None
        index: faiss.Index
        if search.kind == "ivf":
            nlist = ivf_lists(len(x), search.ivf_nlist)
            quantizer = faiss.IndexFlatIP(d) if space == "cosine" else faiss.IndexFlatL2(d)
            ivf = faiss.IndexIVFFlat(quantizer, d, nlist, metric)
            ivf.train(x)
            ivf.nprobe = min(search.ivf_nprobe, nlist)
            # faiss keeps a reference only; the index must keep its quantiser alive.
            self._quantizer = quantizer
            index = ivf
        else:
            self._hnsw = faiss.IndexHNSWFlat(d, search.hnsw_m, metric)
            index = self._hnsw
        index.add(x)
        self.index = index

    @property
    def ntotal(self) -> int:
        """Number of indexed vectors."""
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        """The (approximately) m best (scores, ids) of each query; missing entries have id -1."""
        if self._hnsw is not None:
            # The beam must hold the whole result list, or HNSW returns fewer items.
            self._hnsw.hnsw.efSearch = max(self.search_options.hnsw_ef_search, m)
        scores, ids = self.index.search(queries, m)
        return scores, ids


def _approx_neighbours(
    index: ApproxIndex,
    exact: Callable[[np.ndarray, np.ndarray], np.ndarray],
    queries: np.ndarray,
    query_ids: np.ndarray | None,
    k: int,
    space: Space,
) -> np.ndarray:
    """k approximate neighbours per query (self removed by index when ``query_ids`` is given).

    Rows for which the index returns fewer than k usable items are answered by ``exact(rows of
    queries, their ids)``, so every row has k valid gallery indices.
    """
    keep = k + 1 if query_ids is not None else k
    m = min(keep, index.ntotal)
    _, ids = _search_sorted(index, queries, m, space)
    if query_ids is not None:
        is_self = ids == query_ids[:, None]
        # Drop the last item of a row that does not contain its query, as exact search does.
        is_self[~is_self.any(axis=1), -1] = True
        ids = ids[~is_self].reshape(len(ids), m - 1)
    ids = np.ascontiguousarray(ids[:, :k])
    short = np.flatnonzero((ids < 0).any(axis=1))
    if short.size:
        ids[short] = exact(queries[short], short if query_ids is None else query_ids[short])
    return ids


def _build_index(x: np.ndarray, space: Space) -> tuple[FlatIndex, np.ndarray]:
    """Return the exact index over the gallery and the (possibly normalised) vectors it holds."""
    if space == "cosine":
        x = l2_normalise(x)
        index: faiss.Index = faiss.IndexFlatIP(x.shape[1])
    else:
        index = faiss.IndexFlatL2(x.shape[1])
    index.add(x)
    return FlatIndex(index), x


def _batch_bounds(n: int, query_batch: int) -> list[tuple[int, int]]:
    # Near-equal batch sizes: a tiny trailing batch would otherwise take faiss's non-BLAS code
    # path (< 20 queries), whose float rounding differs slightly from the BLAS path.
    n_batches = max(1, -(-n // query_batch))
    edges = np.linspace(0, n, n_batches + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges) if b > a]


def _search_sorted(
    index: FlatIndex | ApproxIndex, queries: np.ndarray, m: int, space: Space
) -> tuple[np.ndarray, np.ndarray]:
    """faiss top-m search, each row re-sorted by (rank key, gallery index); smaller key is better."""
    scores, ids = index.search(queries, m)
    # Inner products are similarities: negate them so that smaller is better in both spaces.
    keys = -scores if space == "cosine" else scores
    order = np.lexsort((ids, keys), axis=1)
    return np.take_along_axis(keys, order, axis=1), np.take_along_axis(ids.astype(np.int64), order, axis=1)


def _resolve_cutoff_ties(index: FlatIndex, queries: np.ndarray, keep: int, space: Space) -> np.ndarray:
    """The first ``keep`` items by (key, index) for queries whose cut-off lies inside a tie."""
    n = index.ntotal
    out = np.empty((len(queries), keep), dtype=np.int64)
    pending = np.arange(len(queries))
    m = min(2 * (keep + 1), n)
    while pending.size:
        rows_per_chunk = max(1, MAX_RESULT_ENTRIES // m)
        unresolved = []
        for chunk in np.array_split(pending, -(-pending.size // rows_per_chunk)):
            keys, ids = _search_sorted(index, queries[chunk], m, space)
            # Every item scoring as well as the cut-off one is in view once the list's last
            # key is strictly worse (or the list is the whole gallery).
            done = (keys[:, -1] != keys[:, keep - 1]) | (m == n)
            out[chunk[done]] = ids[done, :keep]
            unresolved.append(chunk[~done])
        pending = np.concatenate(unresolved)
        m = min(2 * m, n)
    return out


def _neighbours_of_block(
    index: FlatIndex, queries: np.ndarray, query_ids: np.ndarray, k: int, space: Space
) -> np.ndarray:
    """k nearest other items for a block of gallery rows, ties by index, self removed by index."""
    n = index.ntotal
    keep = k + 1  # the query itself is normally among its own k + 1 best
    m = min(keep + 1, n)  # one more, to see whether the cut-off splits a tie
    keys, ids = _search_sorted(index, queries, m, space)
    if m > keep:
        tied = np.flatnonzero(keys[:, keep - 1] == keys[:, keep])
        if tied.size:
            ids[tied, :keep] = _resolve_cutoff_ties(index, queries[tied], keep, space)
    ids = ids[:, :keep]
    # Self is excluded by index, never by distance: an exact duplicate with a smaller index
    # ranks before the query, and rounding can push the query below near-duplicates. If the
    # query is not among its k + 1 best, the first k of them are the k best other items.
    is_self = ids == query_ids[:, None]
    is_self[~is_self.any(axis=1), -1] = True
    return np.asarray(ids[~is_self].reshape(len(ids), k), dtype=np.int64)


def knn_batches(
    embeddings: np.ndarray,
    k: int,
    space: Space,
    *,
    query_batch: int = 2048,
    search: KnnSearch = EXACT,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, neighbours)`` for consecutive query blocks; see :func:`knn`.

    ``neighbours`` is an int64 array (block size, k') with k' = min(k, N - 1). Memory is bounded
    by the index (N x D) plus one block of ``query_batch x (k' + 2)`` results (and at most
    ``MAX_RESULT_ENTRIES`` more while a tie at the cut-off is resolved). ``search`` chooses exact
    search (the default) or an approximate index (:class:`KnnSearch`).
    """
    check_space(space)
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}.")
    if query_batch < 1:
        raise ValueError(f"query_batch must be >= 1; got {query_batch}.")
    x = as_float32_matrix(embeddings)
    n = x.shape[0]
    k = min(k, max(n - 1, 0))
    if k == 0:
        # No neighbours requested (or a gallery of one item): no search needed.
        for start, stop in _batch_bounds(n, query_batch):
            yield start, np.empty((stop - start, 0), dtype=np.int64)
        return
    if not search.exact:
        yield from _approx_batches(x, k, space, query_batch, search)
        return
    index, gallery = _build_index(x, space)

    def block(bounds: tuple[int, int]) -> tuple[int, np.ndarray]:
        start, stop = bounds
        query_ids = np.arange(start, stop, dtype=np.int64)
        return start, _neighbours_of_block(index, gallery[start:stop], query_ids, k, space)

    yield from _map_blocks(block, _batch_bounds(n, query_batch))


def _approx_batches(
    x: np.ndarray, k: int, space: Space, query_batch: int, search: KnnSearch
) -> Iterator[tuple[int, np.ndarray]]:
    """:func:`knn_batches` through an approximate index (k >= 1)."""
    gallery = l2_normalise(x) if space == "cosine" else x
    approx = ApproxIndex(gallery, space, search)
    exact_index: list[FlatIndex] = []  # built only if a row needs it

    def exact(queries: np.ndarray, query_ids: np.ndarray) -> np.ndarray:
        if not exact_index:
            exact_index.append(_build_index(x, space)[0])
        return _neighbours_of_block(exact_index[0], queries, query_ids, k, space)

    for start, stop in _batch_bounds(len(x), query_batch):
        query_ids = np.arange(start, stop, dtype=np.int64)
        yield start, _approx_neighbours(approx, exact, gallery[start:stop], query_ids, k, space)


def knn(
    embeddings: np.ndarray, k: int, space: Space, *, query_batch: int = 2048, search: KnnSearch = EXACT
) -> np.ndarray:
    """Exact k nearest neighbours of every row of ``embeddings`` among all other rows.

    Query set = gallery = ``embeddings`` (N, D). Returns int64 indices (N, min(k, N - 1)), best
    first, never containing the query's own index. ``space="cosine"`` ranks by inner product of
    L2-normalised copies (faiss ``IndexFlatIP``), ``"euclidean"`` by L2 distance
    (``IndexFlatL2``). Ties rank the smaller gallery index first (see the module docstring).
    Queries are searched ``query_batch`` at a time, so no N x N matrix is ever built. A
    non-exact ``search`` returns approximate neighbours (:class:`KnnSearch`).
    """
    x = as_float32_matrix(embeddings)
    n = x.shape[0]
    out = np.empty((n, min(max(k, 0), max(n - 1, 0))), dtype=np.int64)
    for start, block in knn_batches(x, k, space, query_batch=query_batch, search=search):
        out[start : start + len(block)] = block
    return out


def knn_gallery_batches(
    queries: np.ndarray,
    gallery: np.ndarray,
    k: int,
    space: Space,
    *,
    query_batch: int = 2048,
    search: KnnSearch = EXACT,
) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(start, neighbours)``: the k nearest *gallery* rows of each block of ``queries``.

    For a query set separate from the gallery (In-Shop's query → gallery retrieval), so nothing
    is excluded. ``neighbours`` is int64 (block size, k') of gallery indices with k' = min(k,
    gallery size), best first; ties rank the smaller gallery index first, as in :func:`knn`.
    A non-exact ``search`` returns approximate neighbours (:class:`KnnSearch`).
    """
    check_space(space)
    if k < 0:
        raise ValueError(f"k must be >= 0; got {k}.")
    if query_batch < 1:
        raise ValueError(f"query_batch must be >= 1; got {query_batch}.")
    q = as_float32_matrix(queries)
    g = as_float32_matrix(gallery)
    if q.shape[1] != g.shape[1]:
        raise ValueError(
            f"queries have {q.shape[1]} dimensions and the gallery {g.shape[1]}; they must match."
        )
    k = min(k, g.shape[0])
    if k == 0:
        for start, stop in _batch_bounds(len(q), query_batch):
            yield start, np.empty((stop - start, 0), dtype=np.int64)
        return
    if space == "cosine":
        q = l2_normalise(q)
    if not search.exact:
        approx = ApproxIndex(l2_normalise(g) if space == "cosine" else g, space, search)
        exact_index: list[FlatIndex] = []  # built only if a row needs it

        def exact(block: np.ndarray, _rows: np.ndarray) -> np.ndarray:
            if not exact_index:
                exact_index.append(_build_index(g, space)[0])
            return _gallery_block(exact_index[0], block, k, space)

        for start, stop in _batch_bounds(len(q), query_batch):
            yield start, _approx_neighbours(approx, exact, q[start:stop], None, k, space)
        return
    index, _ = _build_index(g, space)

    def exact_block(bounds: tuple[int, int]) -> tuple[int, np.ndarray]:
        start, stop = bounds
        return start, _gallery_block(index, q[start:stop], k, space)

    yield from _map_blocks(exact_block, _batch_bounds(len(q), query_batch))


def _gallery_block(index: FlatIndex, block: np.ndarray, k: int, space: Space) -> np.ndarray:
    """The k nearest gallery items of each query of ``block`` (exact, ties by index)."""
    m = min(k + 1, index.ntotal)  # one more, to see whether the cut-off splits a tie
    keys, ids = _search_sorted(index, block, m, space)
    if m > k:
        tied = np.flatnonzero(keys[:, k - 1] == keys[:, k])
        if tied.size:
            ids[tied, :k] = _resolve_cutoff_ties(index, block[tied], k, space)
    return np.ascontiguousarray(ids[:, :k])
