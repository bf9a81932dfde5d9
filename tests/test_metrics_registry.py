"""The metric registry and evaluate(): hand-checked cases, naive pipeline, PML, memory, errors."""

from __future__ import annotations

import math
import tracemalloc

import faiss
import numpy as np
import pytest
import torch
from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator
from pytorch_metric_learning.utils.inference import FaissKNN
from test_metrics_reference import (
    LINE_EXPECTED,
    LINE_LABELS,
    LINE_POSITIONS,
    lattice_points,
    naive_evaluate,
    random_labels,
)

from benchmark.errors import UnknownNameError
from benchmark.metrics import METRICS, MLRC_METRICS, SPACES, MetricSpec, Space, evaluate
from benchmark.metrics.knn import l2_normalise

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)


@pytest.mark.parametrize("name", METRICS.names())
def test_spec_is_well_formed(name: str) -> None:
    spec = METRICS.get(name)
    assert isinstance(spec, MetricSpec)
    assert spec.name == name
    assert spec.display_name and spec.description
    assert isinstance(spec.higher_is_better, bool)
    assert spec.k_needed(np.array([0, 0, 1, 1, 1])) >= 0


def test_display_names_are_unique_and_mlrc_metrics_registered() -> None:
    display = [spec.display_name for _, spec in METRICS.items()]
    assert len(display) == len(set(display))
    assert set(MLRC_METRICS) <= set(METRICS.names())
    assert [METRICS.get(n).display_name for n in MLRC_METRICS] == ["MAP@R", "P@1", "RP"]


def test_single_name_as_string() -> None:
    assert list(evaluate(LINE_POSITIONS, LINE_LABELS, "euclidean", "map_at_r")) == ["map_at_r"]


def test_unknown_metric_lists_choices() -> None:
    with pytest.raises(UnknownNameError, match="map_at_r"):
        evaluate(np.zeros((3, 2)), np.zeros(3), "cosine", ["mapr"])


def test_embedding_metric_fn_is_not_per_query() -> None:
    with pytest.raises(TypeError, match="evaluate"):
        METRICS.get("nmi").fn(np.zeros(2), np.zeros((2, 1)), np.zeros(2))


# -- hand-checkable cases ---------------------------------------------------------------------


@pytest.mark.parametrize("query_batch", [1, 2, 2048])
def test_points_on_a_line(query_batch: int) -> None:
    # Worked out in test_metrics_reference.py: MAP@R = 5/12, RP = 1/2, P@1 = 2/3, mAP = 3/4, ...
    got = evaluate(LINE_POSITIONS, LINE_LABELS, "euclidean", list(LINE_EXPECTED), query_batch=query_batch)
    assert got == pytest.approx(LINE_EXPECTED, abs=1e-12)
    assert got["map_at_r"] == pytest.approx(5 / 12) and got["precision_at_1"] == pytest.approx(2 / 3)


def test_cosine_duplicates_and_an_all_tie_query() -> None:
    # Normalised: e0 = e1 = (1, 0), e2 = e3 = (0, 1), e4 = (1, 1)/sqrt 2.  Labels A B A B A.
    # q0 (A, R=2): e1 B (1.0), e4 A (0.71), then e2 A, e3 B tie at 0 -> top-2 B A: MAP@R 1/4, RP 1/2, P@1 0
    # q1 (B, R=1): e0 A first                                        -> 0, 0, 0
    # q2 (A, R=2): e3 B (1.0), e4 A                                  -> 1/4, 1/2, 0
    # q3 (B, R=1): e2 A first                                        -> 0, 0, 0
    # q4 (A, R=2): e0..e3 all tie at 0.71 -> index order A B A B     -> 1/2, 1/2, 1
    x = np.array([[1, 0], [1, 0], [0, 1], [0, 2], [1, 1]], dtype=np.float32)
    labels = np.array([0, 1, 0, 1, 0])
    got = evaluate(x, labels, "cosine")
    assert got == pytest.approx({"map_at_r": 1 / 5, "precision_at_1": 1 / 5, "r_precision": 3 / 10})


def test_only_singletons_give_nan_without_warnings() -> None:
    with np.errstate(all="raise"):
        got = evaluate(np.eye(4, dtype=np.float32), np.arange(4), "cosine")
    assert all(math.isnan(v) for v in got.values())


@pytest.mark.parametrize("n", [0, 1])
def test_tiny_inputs(n: int) -> None:
    got = evaluate(np.zeros((n, 3), dtype=np.float32), np.zeros(n), "euclidean", ["map_at_r", "recall_at_4"])
    assert list(got) == ["map_at_r", "recall_at_4"] and all(math.isnan(v) for v in got.values())


# -- against the naive pipeline ----------------------------------------------------------------


@pytest.mark.parametrize("space", SPACES)
def test_every_metric_matches_naive_pipeline_with_ties(space: Space) -> None:
    # Lattice points: exact float32 scores, so distance ties are real ties for faiss as well.
    x = lattice_points(160, space, seed=7)
    labels = random_labels(160, seed=7, max_class_size=10)
    names = METRICS.names()
    got = evaluate(x, labels, space, names, query_batch=23)
    expected = naive_evaluate(x, labels, space, names)
    assert list(got) == names
    for name in names:
        assert got[name] == pytest.approx(expected[name], abs=1e-12), name


def test_results_are_plain_floats_in_order_without_duplicates() -> None:
    x = np.random.default_rng(0).standard_normal((50, 4)).astype(np.float32)
    got = evaluate(x, random_labels(50, 0), "cosine", ["r_precision", "map_at_r", "r_precision"])
    assert list(got) == ["r_precision", "map_at_r"]
    assert all(type(v) is float and 0 <= v <= 1 for v in got.values())


def test_large_label_ids_that_collide_in_float32() -> None:
    # 2^24 and 2^24 + 1 are the same float32; labels are compared as given, never cast.
    x = np.random.default_rng(1).standard_normal((40, 4)).astype(np.float32)
    _, dense = np.unique(random_labels(40, 1, max_class_size=4), return_inverse=True)
    huge = dense + 2**24  # consecutive class ids from 2^24 on
    assert len(np.unique(huge.astype(np.float32))) < len(np.unique(huge))
    assert evaluate(x, huge, "euclidean") == evaluate(x, dense, "euclidean")


# -- against pytorch-metric-learning's AccuracyCalculator -------------------------------------

PML_NAMES = {
    "map_at_r": "mean_average_precision_at_r",
    "precision_at_1": "precision_at_1",
    "r_precision": "r_precision",
}


def pml_accuracy(
    x: np.ndarray, labels: np.ndarray, space: str, include: tuple[str, ...], k: object
) -> dict[str, float]:
    # PML casts labels to float32: remap to 0..C-1 first. Its default kNN is L2; for cosine give
    # it an inner-product index on normalised vectors, as we do.
    _, dense = np.unique(labels, return_inverse=True)
    if space == "cosine":
        x = l2_normalise(x)
        knn_func = FaissKNN(index_init_fn=faiss.IndexFlatIP)
    else:
        knn_func = FaissKNN()
    calculator = AccuracyCalculator(include=include, k=k, device=torch.device("cpu"), knn_func=knn_func)
    xt, yt = torch.from_numpy(x), torch.from_numpy(dense)
    return dict(calculator.get_accuracy(xt, yt, xt, yt, ref_includes_query=True))


@pytest.mark.parametrize("space", SPACES)
def test_mlrc_metrics_match_pml(space: Space) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((600, 16)).astype(np.float32)  # continuous: no distance ties
    labels = random_labels(600, 2, max_class_size=8) * 1_000_003 + 2**25  # singletons and huge ids
    ours = evaluate(x, labels, space, MLRC_METRICS)
    theirs = pml_accuracy(x, labels, space, tuple(PML_NAMES.values()), "max_bin_count")
    for name, pml_name in PML_NAMES.items():
        assert ours[name] == pytest.approx(theirs[pml_name], abs=1e-6), name


def test_euclidean_ties_match_pml_too() -> None:
    # faiss's L2 heaps keep and order tied items by ascending index, which is our rule, so PML
    # agrees even with many exact ties. (With IndexFlatIP it does not: faiss returns tied inner
    # products in descending index order and PML keeps that order.)
    x = lattice_points(400, "euclidean", seed=1)
    labels = random_labels(400, 1, max_class_size=10)
    ours = evaluate(x, labels, "euclidean", MLRC_METRICS)
    theirs = pml_accuracy(x, labels, "euclidean", tuple(PML_NAMES.values()), "max_bin_count")
    for name, pml_name in PML_NAMES.items():
        assert ours[name] == pytest.approx(theirs[pml_name], abs=1e-12), name


@pytest.mark.parametrize("space", SPACES)
def test_full_ranking_map_matches_pml(space: Space) -> None:
    # PML's mean_average_precision with k=None ranks the whole gallery and divides by R.
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    labels = random_labels(300, 3, max_class_size=12)
    ours = evaluate(x, labels, space, ["map"])["map"]
    theirs = pml_accuracy(x, labels, space, ("mean_average_precision",), None)["mean_average_precision"]
    assert ours == pytest.approx(theirs, abs=1e-6)


# -- bounded memory ------------------------------------------------------------------------------


def test_large_evaluation_in_bounded_memory() -> None:
    # 20,000 x 20,000 float32 scores would be 1.6 GB; numpy's allocations (traced by tracemalloc)
    # must stay far below that. faiss's own buffers are not traced; they are bounded by faiss's
    # internal blocking (4096 x 1024 scores) and the query batch.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((20_000, 64)).astype(np.float32)
    labels = rng.integers(0, 2_000, size=20_000)
    tracemalloc.start()
    try:
        got = evaluate(x, labels, "cosine", query_batch=256)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert set(got) == set(MLRC_METRICS) and all(0 <= v <= 1 for v in got.values())
    assert peak < 64 * 2**20, f"peak numpy allocation {peak / 2**20:.0f} MiB"
