"""Full-ranking AP by counting: equal to the definition applied to the complete kNN ranking."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch
from test_metrics_reference import lattice_points, naive_per_query, naive_ranking, random_labels

from benchmark.metrics import SPACES, Space, knn, num_relevant
from benchmark.metrics.full_ranking import full_ranking_average_precision
from benchmark.metrics.retrieval import average_precision

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("max_entries", [1, 1000, 1 << 22])
def test_matches_naive_with_ties(space: Space, max_entries: int) -> None:
    # Lattice points: exact scores, many exact ties (including with the query itself).
    # max_entries = 1 processes one query and one comparison row at a time.
    x = lattice_points(150, space, seed=11)
    labels = random_labels(150, 11, max_class_size=12)
    got = full_ranking_average_precision(x, labels, space, max_entries=max_entries)
    expected = naive_per_query("map", labels, naive_ranking(x, space))
    np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("space", SPACES)
def test_matches_definition_on_the_knn_ranking(space: Space) -> None:
    rng = np.random.default_rng(12)
    x = rng.standard_normal((400, 16)).astype(np.float32)
    labels = random_labels(400, 12, max_class_size=30)
    neighbour_labels = labels[knn(x, 399, space)]
    expected = average_precision(labels, neighbour_labels, num_relevant(labels))
    got = full_ranking_average_precision(x, labels, space, max_entries=5000)
    np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True)


def test_collapsed_embeddings_rank_by_index() -> None:
    # All scores tie, so the ranking of query i is 0, 1, ..., N-1 without i.
    labels = np.array([0, 1, 0, 0, 1, 2])
    got = full_ranking_average_precision(np.ones((6, 3), dtype=np.float32), labels, "cosine")
    # q0: others 1 2 3 4 5 -> hits at 2, 3 -> (1/2 + 2/3)/2;  q1: 0 2 3 4 5 -> hit at 4 -> 1/4
    # q2: 0 1 3 4 5 -> hits at 1, 3 -> (1 + 2/3)/2;  q3: 0 1 2 4 5 -> hits at 1, 3 -> same
    # q4: 0 1 2 3 5 -> hit at 2 -> 1/2;  q5: alone
    expected = [(1 / 2 + 2 / 3) / 2, 1 / 4, (1 + 2 / 3) / 2, (1 + 2 / 3) / 2, 1 / 2, np.nan]
    np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True)


@pytest.mark.parametrize("n", [0, 1, 3])
def test_tiny_and_all_singleton_inputs(n: int) -> None:
    got = full_ranking_average_precision(
        np.eye(max(n, 1), 3, dtype=np.float32)[:n], np.arange(n), "euclidean"
    )
    assert got.shape == (n,) and np.isnan(got).all()


def test_label_shape_is_checked() -> None:
    with pytest.raises(ValueError, match="labels"):
        full_ranking_average_precision(np.zeros((3, 2)), np.zeros(4), "cosine")
