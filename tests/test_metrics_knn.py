"""Exact kNN: against a float64 brute-force ranking, tie rule, self exclusion, batching, spaces."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator

import faiss
import numpy as np
import pytest
import torch
from test_metrics_reference import lattice_points, naive_ranking

from benchmark.metrics import SPACES, Space, knn, knn_batches

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)


@functools.cache
def _lattice_ranking(space: str) -> np.ndarray:
    return naive_ranking(lattice_points(300, space, seed=0), space)


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("k", [1, 5, 150, 299, 1000])
@pytest.mark.parametrize("query_batch", [1, 7, 300])
def test_matches_naive_ranking_with_many_ties(space: Space, k: int, query_batch: int) -> None:
    # k >= 100 exercises faiss's other result handler; k = 1000 is clipped to N - 1 = 299.
    x = lattice_points(300, space, seed=0)
    expected = _lattice_ranking(space)[:, :k]
    got = knn(x, k, space, query_batch=query_batch)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("space", SPACES)
def test_self_excluded_even_behind_exact_duplicates(space: Space) -> None:
    # Rows 0..4 are identical: for query 4 the four duplicates with smaller index tie with itself
    # and come first, so the query is not among its k + 1 search results at all.
    rng = np.random.default_rng(0)
    x = rng.standard_normal((40, 6)).astype(np.float32)
    x[1:5] = x[0]
    got = knn(x, 3, space)
    assert not (got == np.arange(40)[:, None]).any()
    np.testing.assert_array_equal(got[4], [0, 1, 2])
    np.testing.assert_array_equal(got[0], [1, 2, 3])


def test_duplicate_with_smaller_index_ranks_first() -> None:
    x = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    np.testing.assert_array_equal(knn(x, 2, "euclidean"), [[1, 2], [0, 2], [0, 1]])


@pytest.mark.parametrize("space", SPACES)
def test_deterministic_and_batch_independent(space: Space) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1000, 16)).astype(np.float32)
    full = knn(x, 10, space, query_batch=4096)
    np.testing.assert_array_equal(knn(x, 10, space, query_batch=4096), full)
    for query_batch in (1, 19, 20, 333):
        np.testing.assert_array_equal(knn(x, 10, space, query_batch=query_batch), full)


def test_knn_batches_cover_all_queries_in_order() -> None:
    x = np.random.default_rng(2).standard_normal((101, 5)).astype(np.float32)
    blocks = list(knn_batches(x, 4, "euclidean", query_batch=10))
    assert [start for start, _ in blocks] == list(np.cumsum([0] + [len(b) for _, b in blocks[:-1]]))
    np.testing.assert_array_equal(np.concatenate([b for _, b in blocks]), knn(x, 4, "euclidean"))
    assert max(len(b) for _, b in blocks) <= 10


def test_cosine_and_euclidean_differ_as_they_should() -> None:
    # Query 0 = (1, 0). Item 1 = (10, 1) points almost the same way but is far away;
    # item 2 = (0.6, 0.8) is close but at 53 degrees.
    x = np.array([[1.0, 0.0], [10.0, 1.0], [0.6, 0.8]], dtype=np.float32)
    assert knn(x, 1, "cosine")[0, 0] == 1
    assert knn(x, 1, "euclidean")[0, 0] == 2


def test_cosine_ignores_row_scale() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((200, 8)).astype(np.float32)
    scaled = x * rng.uniform(0.1, 10.0, size=(200, 1)).astype(np.float32)
    np.testing.assert_array_equal(knn(scaled, 5, "cosine"), knn(x, 5, "cosine"))


def test_zero_vector_in_cosine_space_is_allowed() -> None:
    x = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    got = knn(x, 2, "cosine")
    assert got.shape == (3, 2)
    assert not (got == np.arange(3)[:, None]).any()


@pytest.mark.parametrize(
    ("n", "k", "shape"), [(0, 3, (0, 0)), (1, 3, (1, 0)), (2, 3, (2, 1)), (5, 0, (5, 0))]
)
def test_small_galleries_and_k_clipping(n: int, k: int, shape: tuple[int, int]) -> None:
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    assert knn(x, k, "euclidean").shape == shape


def test_float64_input_is_accepted() -> None:
    x = np.random.default_rng(4).standard_normal((50, 3))
    np.testing.assert_array_equal(knn(x, 3, "euclidean"), knn(x.astype(np.float32), 3, "euclidean"))


@pytest.mark.parametrize(
    ("embeddings", "k", "space", "query_batch", "message"),
    [
        (np.zeros((3, 2)), 1, "manhattan", 10, "Unknown space"),
        (np.zeros(3), 1, "cosine", 10, "2-D"),
        (np.array([[0.0], [np.nan]]), 1, "cosine", 10, "NaN"),
        (np.zeros((3, 2)), -1, "cosine", 10, "k must be"),
        (np.zeros((3, 2)), 1, "cosine", 0, "query_batch"),
    ],
)
def test_invalid_arguments(
    embeddings: np.ndarray, k: int, space: str, query_batch: int, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        knn(embeddings, k, space, query_batch=query_batch)  # type: ignore[arg-type]


@pytest.mark.parametrize("space", SPACES)
def test_collapsed_embeddings_rank_by_index(space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every score ties: each row's cut-off lies inside one tie group spanning the whole gallery.
    # A tiny result budget forces the tie resolution through many small chunks.
    knn_module = importlib.import_module("benchmark.metrics.knn")
    monkeypatch.setattr(knn_module, "MAX_RESULT_ENTRIES", 64)
    x = np.ones((120, 3), dtype=np.float32)
    got = knn(x, 4, space, query_batch=50)
    expected = [[j for j in range(120) if j != i][:4] for i in range(120)]
    np.testing.assert_array_equal(got, expected)


def _near_duplicates() -> np.ndarray:
    """300 points repeated 20 times with 1e-4 noise: many neighbours whose scores differ only by
    float rounding, so their order follows how the score products were split across threads."""
    rng = np.random.default_rng(0)
    base = rng.standard_normal((300, 128)).astype(np.float32)
    x = np.repeat(base, 20, axis=0) + rng.standard_normal((6000, 128)).astype(np.float32) * 1e-4
    return np.asarray(x / np.linalg.norm(x, axis=1, keepdims=True), dtype=np.float32)


@pytest.fixture
def restore_threads() -> Iterator[None]:
    """Give back faiss's OpenMP setting and the search pool's size after a test changes them."""
    from benchmark.metrics.knn import set_search_threads

    before = faiss.omp_get_max_threads()
    yield
    faiss.omp_set_num_threads(before)
    set_search_threads(None)


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("pool", [1, 2])
@pytest.mark.usefixtures("restore_threads")
def test_every_exact_search_runs_on_one_openmp_thread(
    space: Space, pool: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mechanism behind the next test, checked on any machine: OpenBLAS splits a product's
    rounding by OpenMP thread on some kernels (measured: AVX2 on AMD EPYC differs between 1 and 2
    threads, AVX512 on Intel Xeon agrees), so every faiss search is made on one OpenMP thread,
    whatever the caller's setting and the pool's size. Removing that makes this test fail."""
    from benchmark.metrics.knn import FlatIndex, knn_gallery_batches, set_search_threads

    seen: list[int] = []
    search = FlatIndex.search

    def spy(self: FlatIndex, queries: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
        seen.append(faiss.omp_get_max_threads())
        return search(self, queries, m)

    monkeypatch.setattr(FlatIndex, "search", spy)
    x, n_queries, batch, gallery_batch = _near_duplicates()[:1200], 300, 256, 128
    faiss.omp_set_num_threads(2)
    set_search_threads(pool)
    knn(x, 25, space, query_batch=batch)
    for _ in knn_gallery_batches(x[:n_queries], x, 25, space, query_batch=gallery_batch):
        pass
    assert faiss.omp_get_max_threads() == 2, "the caller's OpenMP setting must be restored"
    blocks = -(-len(x) // batch) + -(-n_queries // gallery_batch)
    assert len(seen) >= blocks, f"expected at least one search per query block ({blocks}); saw {len(seen)}"
    assert set(seen) == {1}, f"faiss searches ran on {sorted(set(seen))} OpenMP threads"


@pytest.mark.parametrize("space", ["cosine", "euclidean"])
@pytest.mark.usefixtures("restore_threads")
def test_rankings_do_not_depend_on_the_thread_count(space: Space) -> None:
    """The process's OpenMP setting and the search pool's size change speed, not neighbours."""
    from benchmark.metrics.knn import knn_gallery_batches, set_search_threads

    x = _near_duplicates()
    results = []
    for omp, pool in ((1, 1), (2, 1), (2, 2), (1, 3)):
        faiss.omp_set_num_threads(omp)
        set_search_threads(pool)
        gallery = np.concatenate([b for _, b in knn_gallery_batches(x[:700], x, 25, space, query_batch=256)])
        results.append((knn(x, 25, space, query_batch=1024), gallery))
    for neighbours, gallery in results[1:]:
        np.testing.assert_array_equal(neighbours, results[0][0])
        np.testing.assert_array_equal(gallery, results[0][1])


def test_search_threads_must_be_positive() -> None:
    from benchmark.metrics.knn import set_search_threads

    with pytest.raises(ValueError, match="search threads must be >= 1 or None; got 0"):
        set_search_threads(0)
