"""Per-query ranking metrics: every registered one against its naive reference, plus edge cases."""

from __future__ import annotations

from collections.abc import Callable

import faiss
import numpy as np
import pytest
import torch
from test_metrics_reference import (
    NAIVE_EMBEDDING_METRICS,
    NAIVE_RANKING_METRICS,
    naive_per_query,
    naive_r,
    random_labels,
)

from benchmark.metrics import METRICS, num_relevant, retrieval

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)

RANKING_METRICS = [name for name, spec in METRICS.items() if spec.from_embeddings is None]


def random_rankings(labels: np.ndarray, seed: int) -> np.ndarray:
    """A random full ranking (all other items) for each query: many label ties at every depth."""
    rng = np.random.default_rng(seed)
    n = len(labels)
    return np.array([rng.permutation([j for j in range(n) if j != i]) for i in range(n)], dtype=np.int64)


def _case(n: int, seed: int, max_class_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    labels = random_labels(n, seed, max_class_size)
    ranking = random_rankings(labels, seed)
    return labels, ranking, labels[ranking]


def test_every_registered_metric_has_a_naive_reference() -> None:
    assert set(METRICS.names()) == set(NAIVE_RANKING_METRICS) | set(NAIVE_EMBEDDING_METRICS)


@pytest.mark.parametrize("name", RANKING_METRICS)
@pytest.mark.parametrize(("n", "seed", "max_class_size"), [(250, 0, 9), (120, 1, 40), (6, 2, 3), (2, 3, 2)])
def test_matches_naive_reference(name: str, n: int, seed: int, max_class_size: int) -> None:
    # Few classes per query list -> the same label recurs at many depths; with n = 6 every
    # cut-off metric (P@20, R@100, ...) sees a list shorter than its k.
    labels, ranking, neighbour_labels = _case(n, seed, max_class_size)
    spec = METRICS.get(name)
    got = spec.fn(labels, neighbour_labels, num_relevant(labels))
    expected = naive_per_query(name, labels, ranking)
    assert got.shape == (n,) and got.dtype == np.float64
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15, equal_nan=True)


@pytest.mark.parametrize("name", RANKING_METRICS)
def test_k_needed_columns_are_enough(name: str) -> None:
    labels, _, neighbour_labels = _case(300, 4, 12)
    spec = METRICS.get(name)
    r = num_relevant(labels)
    k = spec.k_needed(labels)
    assert 1 <= k <= len(labels) - 1
    np.testing.assert_array_equal(
        spec.fn(labels, neighbour_labels[:, :k], r), spec.fn(labels, neighbour_labels, r)
    )


@pytest.mark.parametrize("name", RANKING_METRICS)
def test_singletons_are_nan_and_others_in_unit_interval(name: str) -> None:
    labels, _, neighbour_labels = _case(200, 5, 6)
    r = num_relevant(labels)
    values = METRICS.get(name).fn(labels, neighbour_labels, r)
    assert (r == 0).any() and (r > 0).any()
    np.testing.assert_array_equal(np.isnan(values), r == 0)
    assert ((values[r > 0] >= 0) & (values[r > 0] <= 1)).all()


def test_num_relevant() -> None:
    labels = np.array([5, 5, 7, 5, 9])
    np.testing.assert_array_equal(num_relevant(labels), [2, 2, 0, 2, 0])
    np.testing.assert_array_equal(num_relevant(labels), naive_r(labels.tolist()))
    assert num_relevant(np.array([], dtype=np.int64)).shape == (0,)


def test_string_labels_work() -> None:
    labels = np.array(["cat", "dog", "cat", "cat"])
    neighbours = np.array(
        [["cat", "cat", "dog"], ["cat", "cat", "cat"], ["cat", "dog", "cat"], ["dog", "cat", "cat"]]
    )
    # q0: R=2, top-2 = cat cat -> 1.  q1: alone.  q2: top-2 = cat dog -> 1/2.  q3: dog cat -> 1/4.
    np.testing.assert_allclose(
        retrieval.map_at_r(labels, neighbours, num_relevant(labels)), [1.0, np.nan, 0.5, 0.25], equal_nan=True
    )


def test_map_at_r_rewards_early_hits() -> None:
    # R = 3 for all three queries of label 0; hits at different depths.
    labels = np.array([0, 0, 0, 0])
    r = np.array([3, 3, 3, 3])
    neighbours = np.array([[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]])
    # rel [1,1,1] -> (1 + 1 + 1)/3;  [1,0,1] -> (1 + 2/3)/3;  [0,1,1] -> (1/2 + 2/3)/3;  [0,0,1] -> (1/3)/3
    expected = [1.0, (1 + 2 / 3) / 3, (1 / 2 + 2 / 3) / 3, (1 / 3) / 3]
    np.testing.assert_allclose(retrieval.map_at_r(labels, neighbours, r), expected, rtol=1e-15)
    np.testing.assert_allclose(
        retrieval.r_precision(labels, neighbours, r), [1, 2 / 3, 2 / 3, 1 / 3], rtol=1e-15
    )


def test_ndcg_by_hand() -> None:
    # R = 2, ranking hit-miss-hit: DCG = 1/log2(2) + 1/log2(4); ideal = 1/log2(2) + 1/log2(3).
    value = retrieval.ndcg_at_k(np.array([0]), np.array([[0, 1, 0]]), np.array([2]), k=3)
    assert value[0] == pytest.approx((1 + 1 / 2) / (1 + 1 / np.log2(3)))


def test_nanmean_ignores_excluded_queries_without_warning() -> None:
    assert retrieval.nanmean(np.array([0.5, np.nan, 1.0])) == 0.75
    with np.errstate(all="raise"):
        assert np.isnan(retrieval.nanmean(np.array([np.nan, np.nan])))
        assert np.isnan(retrieval.nanmean(np.array([])))


@pytest.mark.parametrize("fn", [retrieval.map_at_r, retrieval.r_precision])
def test_too_few_neighbours_for_r_is_an_error(
    fn: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
) -> None:
    labels = np.array([0, 0, 0, 1])
    with pytest.raises(ValueError, match="needs 2 neighbours"):
        fn(labels, np.zeros((4, 1), dtype=np.int64), num_relevant(labels))


def test_average_precision_needs_the_full_ranking() -> None:
    labels = np.array([0, 0, 0, 1])
    with pytest.raises(ValueError, match="full ranking"):
        retrieval.average_precision(labels, np.array([[0, 1], [0, 1], [0, 1], [0, 0]]), num_relevant(labels))


def test_empty_ranking_with_relevant_items_is_an_error() -> None:
    labels = np.array([0, 0])
    with pytest.raises(ValueError, match="no columns"):
        retrieval.precision_at_1(labels, np.zeros((2, 0), dtype=np.int64), num_relevant(labels))


def test_shape_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="shape"):
        retrieval.precision_at_1(np.array([0, 0]), np.zeros((3, 1)), np.array([1, 1]))
