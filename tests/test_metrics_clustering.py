"""NMI: our contingency-table NMI against sklearn, and the seeded faiss k-means behind it."""

from __future__ import annotations

import faiss
import numpy as np
import pytest
import torch
from sklearn.metrics import normalized_mutual_info_score
from test_metrics_reference import random_labels

from benchmark.metrics import evaluate
from benchmark.metrics.clustering import kmeans_assignments, nmi, normalized_mutual_info

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)


@pytest.mark.parametrize("seed", range(6))
def test_nmi_matches_sklearn_on_random_labellings(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 300))
    true = rng.integers(0, int(rng.integers(1, 30)), size=n)
    pred = rng.integers(0, int(rng.integers(1, 30)), size=n) * 11 - 5  # arbitrary cluster ids
    assert normalized_mutual_info(true, pred) == pytest.approx(
        normalized_mutual_info_score(true, pred), abs=1e-12
    )


@pytest.mark.parametrize(
    ("true", "pred"),
    [
        ([0, 0, 0], [1, 1, 1]),  # one class, one cluster: identical partitions
        ([0, 0, 1, 1], [5, 5, 5, 5]),  # one cluster: no information
        ([0, 0, 0, 0], [0, 1, 2, 3]),  # one class
        ([0, 0, 1, 1], [7, 7, 3, 3]),  # perfect up to renaming
        ([0, 1, 0, 1], [0, 0, 1, 1]),  # independent
    ],
)
def test_nmi_edge_cases_match_sklearn(true: list[int], pred: list[int]) -> None:
    assert normalized_mutual_info(np.array(true), np.array(pred)) == pytest.approx(
        normalized_mutual_info_score(true, pred), abs=1e-12
    )


@pytest.mark.parametrize("space", ["cosine", "euclidean"])
def test_nmi_metric_is_sklearn_on_the_same_assignments(space: str) -> None:
    rng = np.random.default_rng(1)
    labels = random_labels(300, 1, max_class_size=8)
    # Class-dependent means so the clustering is far from random.
    x = (rng.standard_normal((300, 8)) + 3 * rng.standard_normal((labels.max() + 1, 8))[labels]).astype(
        np.float32
    )
    assignments = kmeans_assignments(x, len(np.unique(labels)), space)  # type: ignore[arg-type]
    expected = normalized_mutual_info_score(labels, assignments)
    assert nmi(x, labels, space) == pytest.approx(expected, abs=1e-12)  # type: ignore[arg-type]
    assert evaluate(x, labels, space, ["nmi"])["nmi"] == pytest.approx(expected, abs=1e-12)  # type: ignore[arg-type]
    assert expected > 0.5


def test_kmeans_is_seeded_and_deterministic() -> None:
    x = np.random.default_rng(2).standard_normal((200, 4)).astype(np.float32)
    a = kmeans_assignments(x, 10, "euclidean", seed=3)
    np.testing.assert_array_equal(a, kmeans_assignments(x, 10, "euclidean", seed=3))
    assert a.shape == (200,) and a.dtype == np.int64 and set(a.tolist()) <= set(range(10))


def test_well_separated_clusters_give_nmi_one() -> None:
    centres = np.array([[0, 0], [100, 0], [0, 100]], dtype=np.float32)
    labels = np.repeat([4, 8, 15], 20)
    x = centres[np.repeat([0, 1, 2], 20)] + np.random.default_rng(3).standard_normal((60, 2)).astype(
        np.float32
    )
    assert nmi(x, labels, "euclidean") == pytest.approx(1.0)


def test_invalid_cluster_count() -> None:
    with pytest.raises(ValueError, match="n_clusters"):
        kmeans_assignments(np.zeros((3, 2)), 4, "euclidean")
