"""Clustering quality: NMI between the labels and a seeded faiss k-means of the embeddings (§4.2)."""

from __future__ import annotations

import numpy as np

from benchmark.metrics.faiss_import import faiss
from benchmark.metrics.knn import Space, as_float32_matrix, check_space, gpu_search_enabled, l2_normalise


def kmeans_assignments(
    embeddings: np.ndarray, n_clusters: int, space: Space, *, seed: int = 0, niter: int = 20
) -> np.ndarray:
    """Cluster index (int64, (N,)) of every row after seeded faiss k-means with ``n_clusters`` centroids.

    In cosine space the rows are L2-normalised first, so clusters follow angles as the retrieval
    does. Deterministic for a given seed, faiss build and thread count.
    """
    check_space(space)
    x = as_float32_matrix(embeddings)
    if not 1 <= n_clusters <= x.shape[0]:
        raise ValueError(f"n_clusters must be in [1, N={x.shape[0]}]; got {n_clusters}.")
    if space == "cosine":
        x = l2_normalise(x)
    # min_points_per_centroid=1: DML test sets have few images per class (SOP: 2-12), far below
    # faiss's default of 39, which would only print a warning.
    kmeans = faiss.Kmeans(
        x.shape[1],
        n_clusters,
        niter=niter,
        seed=seed,
        verbose=False,
        min_points_per_centroid=1,
        gpu=gpu_search_enabled(),
    )
    kmeans.train(x)
    _, assignment = kmeans.index.search(x, 1)
    return np.asarray(assignment[:, 0], dtype=np.int64)


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())


def normalized_mutual_info(labels_true: np.ndarray, labels_pred: np.ndarray) -> float:
    """NMI = I(U; V) / ((H(U) + H(V)) / 2), the arithmetic normalisation (sklearn's default).

    Two labellings that are each a single group count as identical (1.0); otherwise a
    zero-entropy side makes the mutual information 0 and the result 0.
    """
    labels_true = np.asarray(labels_true)
    labels_pred = np.asarray(labels_pred)
    if labels_true.shape != labels_pred.shape or labels_true.ndim != 1:
        raise ValueError("labels_true and labels_pred must be 1-D arrays of equal length.")
    classes, true_ids = np.unique(labels_true, return_inverse=True)
    clusters, pred_ids = np.unique(labels_pred, return_inverse=True)
    if len(classes) == len(clusters) <= 1:
        return 1.0
    # Sparse contingency table: only the (class, cluster) pairs that occur.
    pairs, joint = np.unique(
        np.stack([true_ids.reshape(-1), pred_ids.reshape(-1)]), axis=1, return_counts=True
    )
    n = labels_true.shape[0]
    class_counts = np.bincount(true_ids.reshape(-1))
    cluster_counts = np.bincount(pred_ids.reshape(-1))
    p_joint = joint / n
    outer = class_counts[pairs[0]] * cluster_counts[pairs[1]] / float(n) ** 2
    mutual_info = max(float((p_joint * np.log(p_joint / outer)).sum()), 0.0)
    if mutual_info == 0.0:
        return 0.0
    normaliser = (_entropy(class_counts) + _entropy(cluster_counts)) / 2
    return mutual_info / normaliser


def nmi(embeddings: np.ndarray, labels: np.ndarray, space: Space, *, seed: int = 0, niter: int = 20) -> float:
    """NMI between ``labels`` and a k-means clustering with as many clusters as there are labels."""
    labels = np.asarray(labels)
    n_clusters = len(np.unique(labels))
    if n_clusters == 0:
        return float("nan")
    return normalized_mutual_info(
        labels, kmeans_assignments(embeddings, n_clusters, space, seed=seed, niter=niter)
    )
