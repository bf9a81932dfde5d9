"""Naive reference implementations of the metrics (docs/protocols.md §4.1, §4.2), and their own sanity tests.

Everything here is a straight, one-query-at-a-time transcription of the definitions, written to
be read rather than to be fast. The other ``test_metrics_*`` files import these references and
compare the vectorised code in ``benchmark.metrics`` against them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import faiss
import numpy as np
import pytest
import torch
from sklearn.metrics import normalized_mutual_info_score

from benchmark.metrics.clustering import kmeans_assignments

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)

# (label of the query, labels of its ranked neighbours, R) -> metric value for that query.
QueryMetric = Callable[[object, Sequence[object], int], float]
NAN = float("nan")


def naive_ranking(embeddings: np.ndarray, space: str) -> np.ndarray:
    """All other items for every query, best first, ties by smaller index (float64, one query at a time)."""
    x = np.asarray(embeddings, dtype=np.float64)
    if space == "cosine":
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        x = x / np.where(norms == 0, 1.0, norms)
    n = len(x)
    rows = []
    for i in range(n):
        others = [j for j in range(n) if j != i]
        if space == "cosine":
            rows.append(sorted(others, key=lambda j: (-float(x[i] @ x[j]), j)))
        else:
            rows.append(sorted(others, key=lambda j: (float(((x[i] - x[j]) ** 2).sum()), j)))
    return np.array(rows, dtype=np.int64).reshape(n, max(n - 1, 0))


def lattice_points(n: int, space: str, seed: int) -> np.ndarray:
    """Points whose float32 scores are exact, so mathematical ties are ties for faiss too.

    Euclidean: coordinates in {0, 1, 2} (squared distances are small integers). Cosine: vectors
    in {-1, 0, 1}^8 with exactly four non-zeros (norm 2, so normalising and dotting are exact).
    Both have many exact duplicates and many equal scores.
    """
    rng = np.random.default_rng(seed)
    if space == "euclidean":
        return rng.integers(0, 3, size=(n, 4)).astype(np.float32)
    x = np.zeros((n, 8), dtype=np.float32)
    for row in x:
        row[rng.choice(8, size=4, replace=False)] = rng.choice([-1.0, 1.0], size=4)
    return x


def random_labels(n: int, seed: int, max_class_size: int = 9) -> np.ndarray:
    """Labels whose classes have 1..max_class_size members (so singletons occur), shuffled."""
    rng = np.random.default_rng(seed)
    labels: list[int] = []
    while len(labels) < n:
        labels += [len(labels) * 7 + 3] * int(rng.integers(1, max_class_size + 1))
    return rng.permutation(np.array(labels[:n], dtype=np.int64))


def naive_r(labels: Sequence[object]) -> list[int]:
    """R_i: number of other items with the same label."""
    return [sum(1 for other in labels if other == y) - 1 for y in labels]


def naive_map_at_r(y: object, ranked: Sequence[object], r: int) -> float:
    if r == 0:
        return NAN
    hits = 0
    total = 0.0
    for j in range(1, r + 1):  # positions 1..R
        if ranked[j - 1] == y:
            hits += 1
            total += hits / j  # P(j) * rel(j)
    return total / r


def naive_r_precision(y: object, ranked: Sequence[object], r: int) -> float:
    if r == 0:
        return NAN
    return sum(1 for label in ranked[:r] if label == y) / r


def naive_precision_at(k: int) -> QueryMetric:
    def precision(y: object, ranked: Sequence[object], r: int) -> float:
        if r == 0:
            return NAN
        top = ranked[:k]  # shorter than k only when the gallery is
        return sum(1 for label in top if label == y) / len(top)

    return precision


def naive_recall_at(k: int) -> QueryMetric:
    def recall(y: object, ranked: Sequence[object], r: int) -> float:
        if r == 0:
            return NAN
        return 1.0 if any(label == y for label in ranked[:k]) else 0.0

    return recall


def naive_ndcg_at(k: int) -> QueryMetric:
    def ndcg(y: object, ranked: Sequence[object], r: int) -> float:
        if r == 0:
            return NAN
        top = ranked[:k]
        dcg = sum(
            (2 ** (1 if label == y else 0) - 1) / math.log2(i + 1) for i, label in enumerate(top, start=1)
        )
        ideal = sum(1 / math.log2(i + 1) for i in range(1, min(r, len(top)) + 1))
        return dcg / ideal

    return ndcg


def naive_average_precision(y: object, ranked: Sequence[object], r: int) -> float:
    if r == 0:
        return NAN
    hits = 0
    total = 0.0
    for j, label in enumerate(ranked, start=1):
        if label == y:
            hits += 1
            total += hits / j
    return total / r


# One entry per registered ranking metric; test_metrics_retrieval.py fails if one is missing.
NAIVE_RANKING_METRICS: dict[str, QueryMetric] = {
    "map_at_r": naive_map_at_r,
    "r_precision": naive_r_precision,
    "precision_at_1": naive_precision_at(1),
    "precision_at_20": naive_precision_at(20),
    "precision_at_100": naive_precision_at(100),
    "recall_at_1": naive_recall_at(1),
    "recall_at_2": naive_recall_at(2),
    "recall_at_4": naive_recall_at(4),
    "recall_at_8": naive_recall_at(8),
    "recall_at_10": naive_recall_at(10),
    "recall_at_100": naive_recall_at(100),
    "ndcg_at_2": naive_ndcg_at(2),
    "ndcg_at_4": naive_ndcg_at(4),
    "ndcg_at_8": naive_ndcg_at(8),
    "ndcg_at_10": naive_ndcg_at(10),
    "ndcg_at_100": naive_ndcg_at(100),
    "map": naive_average_precision,
}


def naive_nmi(embeddings: np.ndarray, labels: np.ndarray, space: str) -> float:
    """sklearn's NMI on the same seeded k-means assignments the metric uses."""
    assignments = kmeans_assignments(embeddings, len(set(labels.tolist())), space)  # type: ignore[arg-type]
    return float(normalized_mutual_info_score(labels, assignments))


NAIVE_EMBEDDING_METRICS: dict[str, Callable[[np.ndarray, np.ndarray, str], float]] = {"nmi": naive_nmi}


def naive_per_query(name: str, labels: np.ndarray, ranking: np.ndarray) -> list[float]:
    """Per-query values of ranking metric ``name`` from a full ranking (gallery indices)."""
    metric = NAIVE_RANKING_METRICS[name]
    r = naive_r(labels.tolist())
    return [metric(labels[i], labels[ranking[i]].tolist(), r[i]) for i in range(len(labels))]


def naive_mean(values: Sequence[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else NAN


def naive_evaluate(
    embeddings: np.ndarray, labels: np.ndarray, space: str, names: Sequence[str]
) -> dict[str, float]:
    ranking = naive_ranking(embeddings, space)
    out = {}
    for name in names:
        if name in NAIVE_EMBEDDING_METRICS:
            out[name] = NAIVE_EMBEDDING_METRICS[name](embeddings, labels, space)
        else:
            out[name] = naive_mean(naive_per_query(name, labels, ranking))
    return out


# ---------------------------------------------------------------------------------------------
# Sanity tests of the references themselves, on a case small enough to check by hand.
#
# Five points on a line, euclidean:   position  0  1  2  3  7
#                                     label     A  A  B  A  C
# Rankings (distance, then index):  q0: 1A 2B 3A 4C   q1: 0A 2B 3A 4C  (0 and 2 tie at 1: 0 first)
#                                   q2: B is alone    q3: 2B 1A 0A 4C   q4: C is alone
# R = 2 for the A's; q2 and q4 are excluded.
LINE_POSITIONS = np.array([[0.0], [1.0], [2.0], [3.0], [7.0]], dtype=np.float32)
LINE_LABELS = np.array([0, 0, 1, 0, 2])  # A = 0, B = 1, C = 2
L3, L4 = math.log2(3), math.log2(4)
LINE_EXPECTED = {
    # q0: top-2 = A B -> (1/1)/2 ; q1 the same ; q3: top-2 = B A -> (1/2)/2.
    "map_at_r": (1 / 2 + 1 / 2 + 1 / 4) / 3,  # = 5/12
    "r_precision": (1 / 2 + 1 / 2 + 1 / 2) / 3,
    "precision_at_1": (1 + 1 + 0) / 3,
    "recall_at_1": (1 + 1 + 0) / 3,
    "recall_at_2": 1.0,
    # Only 4 other items: P@20 is the precision of those 4.
    "precision_at_20": (2 / 4 + 2 / 4 + 2 / 4) / 3,
    # Full ranking: q0 and q1 hit at 1 and 3, q3 at 2 and 3.
    "map": ((1 / 1 + 2 / 3) / 2 + (1 / 1 + 2 / 3) / 2 + (1 / 2 + 2 / 3) / 2) / 3,  # = 3/4
    # nDCG@2: q0/q1 hit at rank 1 only (DCG 1), q3 at rank 2 only (DCG 1/log2 3); ideal 1 + 1/log2 3.
    "ndcg_at_2": (2 + 1 / L3) / (1 + 1 / L3) / 3,
    "ndcg_at_10": (2 * (1 + 1 / L4) / (1 + 1 / L3) + (1 / L3 + 1 / L4) / (1 + 1 / L3)) / 3,
}


def test_naive_ranking_of_the_line() -> None:
    np.testing.assert_array_equal(
        naive_ranking(LINE_POSITIONS, "euclidean"),
        [[1, 2, 3, 4], [0, 2, 3, 4], [1, 3, 0, 4], [2, 1, 0, 4], [3, 2, 1, 0]],
    )


@pytest.mark.parametrize("name", sorted(LINE_EXPECTED))
def test_naive_references_on_the_line(name: str) -> None:
    got = naive_evaluate(LINE_POSITIONS, LINE_LABELS, "euclidean", [name])[name]
    assert got == pytest.approx(LINE_EXPECTED[name], abs=1e-15)
    assert LINE_EXPECTED["map_at_r"] == pytest.approx(5 / 12) and LINE_EXPECTED["map"] == pytest.approx(3 / 4)


def test_naive_r() -> None:
    assert naive_r([5, 5, 7, 5, 9]) == [2, 2, 0, 2, 0]
