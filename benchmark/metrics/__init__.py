"""Retrieval and clustering metrics (§4): exact kNN, per-query metrics, the registry, evaluate()."""

from benchmark.config import KNN_KINDS
from benchmark.metrics.knn import EXACT, SPACES, KnnSearch, Space, knn, knn_batches
from benchmark.metrics.registry import METRICS, MLRC_METRICS, MetricSpec, evaluate, evaluate_query_gallery
from benchmark.metrics.retrieval import map_at_r, num_relevant, precision_at_1, r_precision

__all__ = [
    "EXACT",
    "KNN_KINDS",
    "METRICS",
    "MLRC_METRICS",
    "SPACES",
    "KnnSearch",
    "MetricSpec",
    "Space",
    "evaluate",
    "evaluate_query_gallery",
    "knn",
    "knn_batches",
    "map_at_r",
    "num_relevant",
    "precision_at_1",
    "r_precision",
]
