"""Approximate kNN search (eval.knn = ivf / hnsw): close to exact on clustered data, never the
query itself, every index valid; exact search unchanged by the option's existence."""

from __future__ import annotations

import faiss
import numpy as np
import pytest

from benchmark.config import EvalConfig
from benchmark.metrics import EXACT, SPACES, KnnSearch, Space, evaluate, evaluate_query_gallery, knn
from benchmark.metrics.knn import ivf_lists, knn_search

faiss.omp_set_num_threads(1)

# IVF at its defaults (nprobe 16) and HNSW with a small graph and beam.
APPROX = [
    KnnSearch("ivf"),
    KnnSearch("hnsw", hnsw_m=16, hnsw_ef_search=32),
]


def clustered(
    n: int = 4000, dim: int = 32, n_classes: int = 400, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Class centres plus noise: ~10 images per class, MAP@R around 0.6 with exact search."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    centres = rng.standard_normal((n_classes, dim)).astype(np.float32)
    x = centres[labels] + 0.8 * rng.standard_normal((n, dim)).astype(np.float32)
    return x, labels


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("search", APPROX, ids=lambda s: s.kind)
def test_approximate_metrics_are_close_to_exact(space: Space, search: KnnSearch) -> None:
    x, labels = clustered()
    exact = evaluate(x, labels, space)
    approx = evaluate(x, labels, space, search=search)
    for name, value in exact.items():
        # Seen: IVF (16 of 102 lists) within 0.015-0.03, HNSW within 1e-3.
        assert abs(approx[name] - value) < 0.05, (name, approx[name], value)
    # Random neighbours (a broken index) would score near chance, ~0.003 MAP@R here.
    assert exact["map_at_r"] > 0.6


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("search", APPROX, ids=lambda s: s.kind)
def test_neighbour_lists_are_valid_and_mostly_exact(space: Space, search: KnnSearch) -> None:
    x, _ = clustered(n=2000)
    k = 10
    exact = knn(x, k, space)
    approx = knn(x, k, space, search=search)
    assert approx.shape == exact.shape and approx.dtype == np.int64
    assert ((approx >= 0) & (approx < len(x))).all()
    assert not (approx == np.arange(len(x))[:, None]).any()
    recall = np.mean([len(set(a) & set(e)) / k for a, e in zip(approx.tolist(), exact.tolist(), strict=True)])
    # Seen: IVF 0.92-0.93, HNSW 0.99.
    assert recall > 0.85, recall


def test_rows_the_index_cannot_fill_are_searched_exactly() -> None:
    # One IVF list probed out of many: some lists hold fewer than k + 1 items, so the index
    # returns missing entries (-1) for their queries; those rows must come from exact search.
    x, _ = clustered(n=2000, n_classes=200)
    search = KnnSearch("ivf", ivf_nlist=50, ivf_nprobe=1)
    k = 100
    got = knn(x, k, "cosine", search=search)
    assert ((got >= 0) & (got < len(x))).all()
    assert not (got == np.arange(len(x))[:, None]).any()
    assert all(len(set(row)) == k for row in got.tolist())


def test_query_gallery_search() -> None:
    x, labels = clustered()
    q, g = x[:1000], x[1000:]
    exact = evaluate_query_gallery(q, labels[:1000], g, labels[1000:], "cosine")
    for search in APPROX:
        approx = evaluate_query_gallery(q, labels[:1000], g, labels[1000:], "cosine", search=search)
        assert abs(approx["map_at_r"] - exact["map_at_r"]) < 0.05


def test_exact_is_the_default_and_unchanged() -> None:
    x, labels = clustered(n=1500)
    assert knn_search(EvalConfig()) == EXACT
    np.testing.assert_array_equal(knn(x, 12, "cosine", search=EXACT), knn(x, 12, "cosine"))
    assert evaluate(x, labels, "euclidean", search=EXACT) == evaluate(x, labels, "euclidean")


def test_search_options_validate() -> None:
    with pytest.raises(ValueError, match="Unknown kNN search 'annoy'; expected one of exact, ivf, hnsw"):
        KnnSearch("annoy")
    with pytest.raises(ValueError, match="ivf_nprobe must be >= 1"):
        KnnSearch("ivf", ivf_nprobe=0)
    assert ivf_lists(100_000, 0) == round(4 * 100_000**0.5)
    assert ivf_lists(1000, 0) == 1000 // 39  # k-means needs 39 points per list
    assert ivf_lists(10, 0) == 1
