"""Two-stage retrieval (docs/protocols.md §4.3) and query-vs-database brute force against hand-checked cases
and naive per-query Python references."""

from __future__ import annotations

import math

import faiss
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning import losses as pml_losses
from test_metrics_reference import lattice_points

from benchmark.errors import ConfigError
from benchmark.losses import LossContext, build_loss
from benchmark.metrics import SPACES, Space, two_stage
from benchmark.metrics.two_stage import (
    BruteForceIndex,
    ClassAnchors,
    TwoStageIndex,
    anchors_from_loss,
    average_precision_of_list,
    brute_force_scores,
    compare_retrieval,
    list_hits,
    num_relevant_in_database,
    precision_at_k_of_list,
)

faiss.omp_set_num_threads(1)
torch.set_num_threads(1)

# --- naive references: one query at a time, float64, plain Python sorting ----------------------


def naive_key(q: np.ndarray, x: np.ndarray, space: str) -> float:
    q, x = np.asarray(q, np.float64), np.asarray(x, np.float64)
    if space == "cosine":
        nq, nx = np.linalg.norm(q), np.linalg.norm(x)
        return -float((q / (nq or 1.0)) @ (x / (nx or 1.0)))
    return float(((q - x) ** 2).sum())


def naive_two_stage(
    queries: np.ndarray, database: np.ndarray, db_labels: np.ndarray, anchors: ClassAnchors, space: str
) -> list[list[int]]:
    """Per query: nearest anchor (first on ties), then that class's items by (key, index)."""
    out = []
    for q in queries:
        keys = [naive_key(q, a, space) for a in anchors.vectors]
        best = min(range(len(keys)), key=lambda i: (keys[i], i))
        cls = anchors.classes[best]
        items = [j for j in range(len(database)) if db_labels[j] == cls]
        out.append(sorted(items, key=lambda j: (naive_key(q, database[j], space), j)))
    return out


def naive_brute_force(queries: np.ndarray, database: np.ndarray, space: str) -> list[list[int]]:
    return [
        sorted(range(len(database)), key=lambda j: (naive_key(q, database[j], space), j)) for q in queries
    ]


def naive_ap(y: int, ranked: list[int], db_labels: np.ndarray) -> float:
    r = int((db_labels == y).sum())
    if r == 0:
        return math.nan
    hits, total = 0, 0.0
    for j, item in enumerate(ranked, start=1):
        if db_labels[item] == y:
            hits += 1
            total += hits / j
    return total / r  # relevant items missing from `ranked` add nothing


def naive_precision(y: int, ranked: list[int], db_labels: np.ndarray, k: int) -> float:
    if not (db_labels == y).any():
        return math.nan
    return sum(1 for item in ranked[:k] if db_labels[item] == y) / min(k, len(db_labels))


def padded(lists: list[list[int]], width: int) -> np.ndarray:
    return np.array([row + [-1] * (width - len(row)) for row in lists], dtype=np.int64)


# --- a case small enough to check by hand -----------------------------------------------------

# Points on a line (2-D, y = 0). Database: class 0 at x = 0 (item 0) and 1 (item 1); class 1 at
# x = 10 (item 2), 9 (item 3), 12 (item 4). Anchors: class 0 at 0.5, class 1 at 10.
DB = np.array([[0, 0], [1, 0], [10, 0], [9, 0], [12, 0]], dtype=np.float32)
DB_LABELS = np.array([0, 0, 1, 1, 1])
ANCHORS = ClassAnchors.one_per_class(np.array([[0.5, 0], [10, 0]], dtype=np.float32))
# Query A at x = 2 (label 0): anchor distances 1.5 and 8 -> class 0 (right).
# Query B at x = 6 (label 0): anchor distances 5.5 and 4 -> class 1 (wrong).
# Query C at x = 11 (label 1): anchor distances 10.5 and 1 -> class 1 (right).
QUERIES = np.array([[2, 0], [6, 0], [11, 0]], dtype=np.float32)
Q_LABELS = np.array([0, 0, 1])


def test_hand_checked_two_stage_lists() -> None:
    result = TwoStageIndex.build(DB, DB_LABELS, ANCHORS, "euclidean").search(QUERIES)
    assert result.predicted_class.tolist() == [0, 1, 1]
    assert result.anchor.tolist() == [0, 1, 1]
    # A: class 0 items by distance: item 1 (1), item 0 (2); padded to the largest class (3).
    # B: class 1 items: item 3 (3), item 2 (4), item 4 (6).
    # C: item 2 (1) and item 4 (1) tie -> smaller index first; then item 3 (2).
    assert result.neighbours.tolist() == [[1, 0, -1], [3, 2, 4], [2, 4, 3]]
    assert TwoStageIndex.build(DB, DB_LABELS, ANCHORS, "euclidean").search(
        QUERIES, k=1
    ).neighbours.tolist() == [
        [1],
        [3],
        [2],
    ]


def test_hand_checked_scores() -> None:
    got = compare_retrieval(QUERIES, Q_LABELS, DB, DB_LABELS, ANCHORS, "euclidean", ks=(2,))
    # Two-stage AP: A finds both class-0 items first (1), B retrieves no class-0 item (0), C 1.
    assert got["two_stage"]["map"] == pytest.approx(2 / 3)
    assert got["two_stage"]["stage1_accuracy"] == pytest.approx(2 / 3)
    # P@2: A 2/2, B 0/2, C 2/2.
    assert got["two_stage"]["precision_at_2"] == pytest.approx(2 / 3)
    # Brute force, B at x = 6: distances 6, 5, 4, 3, 6 -> ranking 3, 2, 1, 0, 4 (item 0 before
    # item 4 on the tie); hits at ranks 3 and 4: AP = (1/3 + 2/4) / 2 = 5/12. A and C: AP 1.
    assert got["brute_force"]["map"] == pytest.approx((1 + 5 / 12 + 1) / 3)
    # P@2: A ranks items 1, 0 (2 hits); B items 3, 2 (0); C items 2, 4 (2).
    assert got["brute_force"]["precision_at_2"] == pytest.approx(2 / 3)


def test_hand_checked_assignment_by_nearest_anchor() -> None:
    # Item 5 at x = 6 is labelled 0 but lies nearer the class-1 anchor (4 < 5.5).
    db = np.vstack([DB, [[6, 0]]]).astype(np.float32)
    labels = np.append(DB_LABELS, 0)
    by_label = TwoStageIndex.build(db, labels, ANCHORS, "euclidean").search(QUERIES[1:2])
    by_anchor = TwoStageIndex.build(db, labels, ANCHORS, "euclidean", assign="anchor").search(QUERIES[1:2])
    assert by_label.neighbours.tolist() == [[3, 2, 4]]
    # Query B (x = 6) predicts class 1; by anchor, item 5 (distance 0) is in class 1 and first.
    assert by_anchor.neighbours.tolist() == [[5, 3, 2, 4]]
    # One relevant item (5) of B's two (0 and 5) found at rank 1: AP = (1/1) / 2.
    hits = list_hits(Q_LABELS[1:2], by_anchor.neighbours, labels)
    r = num_relevant_in_database(Q_LABELS[1:2], labels)
    assert r.tolist() == [3]  # items 0, 1 and 5 are labelled 0
    assert average_precision_of_list(hits, r).tolist() == [pytest.approx(1 / 3)]


def test_class_with_an_anchor_but_no_database_item_retrieves_nothing() -> None:
    anchors = ClassAnchors(np.array([[0.5, 0], [10, 0], [6, 0]], dtype=np.float32), np.array([0, 1, 7]))
    result = TwoStageIndex.build(DB, DB_LABELS, anchors, "euclidean").search(QUERIES)
    assert result.predicted_class.tolist() == [0, 7, 1]
    assert result.neighbours[1].tolist() == [-1, -1, -1]
    hits = list_hits(Q_LABELS, result.neighbours, DB_LABELS)
    assert average_precision_of_list(hits, num_relevant_in_database(Q_LABELS, DB_LABELS))[1] == 0.0


# --- against naive references ---------------------------------------------------------------


def lattice_problem(
    space: Space, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, ClassAnchors]:
    # Exact float32 scores, so the many exact ties of stage 1 and stage 2 are ties for every
    # implementation and the tie rules are what is compared.
    rng = np.random.default_rng(seed)
    x = lattice_points(130, space, seed)
    labels = rng.integers(0, 6, size=130)
    anchors = ClassAnchors(lattice_points(9, space, seed + 100), rng.integers(0, 7, size=9))
    return x[:30], labels[:30], x[30:], labels[30:], anchors


@pytest.mark.parametrize("space", SPACES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_two_stage_matches_naive_reference_with_ties(space: Space, seed: int) -> None:
    queries, q_labels, db, db_labels, anchors = lattice_problem(space, seed)
    index = TwoStageIndex.build(db, db_labels, anchors, space)
    got = index.search(queries).neighbours
    expected = naive_two_stage(queries, db, db_labels, anchors, space)
    np.testing.assert_array_equal(got, padded(expected, index.max_group_size))
    # And every metric on those lists, with missing relevant items counted as misses.
    r = num_relevant_in_database(q_labels, db_labels)
    hits = list_hits(q_labels, got, db_labels)
    np.testing.assert_allclose(
        average_precision_of_list(hits, r),
        [naive_ap(y, row, db_labels) for y, row in zip(q_labels, expected, strict=True)],
        equal_nan=True,
    )
    scores = compare_retrieval(queries, q_labels, db, db_labels, anchors, space, ks=(5, 20))
    for k in (5, 20):
        naive = [naive_precision(y, row, db_labels, k) for y, row in zip(q_labels, expected, strict=True)]
        assert scores["two_stage"][f"precision_at_{k}"] == pytest.approx(np.nanmean(naive))


@pytest.mark.parametrize("space", SPACES)
def test_brute_force_matches_naive_reference_with_ties(space: Space) -> None:
    queries, q_labels, db, db_labels, anchors = lattice_problem(space, 3)
    expected = naive_brute_force(queries, db, space)
    for k in (1, 7, 100, 500):  # 7 cuts inside tie groups; 500 > database size
        got = BruteForceIndex.build(db, space).search(queries, k)
        np.testing.assert_array_equal(got, np.array(expected)[:, :k])
    per_query = brute_force_scores(queries, q_labels, db, db_labels, space, ks=(5,))
    np.testing.assert_allclose(
        per_query["map"], [naive_ap(y, row, db_labels) for y, row in zip(q_labels, expected, strict=True)]
    )
    np.testing.assert_allclose(
        per_query["precision_at_5"],
        [naive_precision(y, row, db_labels, 5) for y, row in zip(q_labels, expected, strict=True)],
    )
    scores = compare_retrieval(queries, q_labels, db, db_labels, anchors, space, ks=(20, 100))
    naive_p100 = [naive_precision(y, row, db_labels, 100) for y, row in zip(q_labels, expected, strict=True)]
    assert scores["brute_force"]["precision_at_100"] == pytest.approx(np.mean(naive_p100))


def separated_clusters(space: Space, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """10 classes of 12 database and 3 query points, far apart relative to their spread."""
    rng = np.random.default_rng(seed)
    # Moderate norms: the squared L2 of faiss (|q|^2 + |x|^2 - 2 q.x in float32) loses the
    # within-cluster distances to rounding when |x|^2 is ~10^6 times larger than they are.
    centres = rng.standard_normal((10, 16)) * (1.0 if space == "cosine" else 5.0)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True) if space == "cosine" else 1.0
    db_labels = np.repeat(np.arange(10) * 3 + 1, 12)  # non-contiguous class ids
    q_labels = np.repeat(np.arange(10) * 3 + 1, 3)
    spread = 0.01 if space == "cosine" else 0.1
    db = centres[(db_labels - 1) // 3] + spread * rng.standard_normal((120, 16))
    queries = centres[(q_labels - 1) // 3] + spread * rng.standard_normal((30, 16))
    return queries.astype(np.float32), q_labels, db.astype(np.float32), db_labels


@pytest.mark.parametrize("space", SPACES)
def test_equals_brute_force_when_anchors_are_means_of_separated_clusters(space: Space) -> None:
    queries, q_labels, db, db_labels = separated_clusters(space, 4)
    classes = np.unique(db_labels)
    anchors = ClassAnchors.one_per_class(np.stack([db[db_labels == c].mean(0) for c in classes]), classes)
    two = TwoStageIndex.build(db, db_labels, anchors, space).search(queries)
    brute = BruteForceIndex.build(db, space).search(queries, 12)
    np.testing.assert_array_equal(two.neighbours, brute)
    scores = compare_retrieval(queries, q_labels, db, db_labels, anchors, space, ks=(20, 100))
    assert scores["brute_force"] == pytest.approx(
        {k: v for k, v in scores["two_stage"].items() if k != "stage1_accuracy"}
    )
    assert scores["two_stage"]["map"] == 1.0 and scores["two_stage"]["stage1_accuracy"] == 1.0
    # P@20: 12 relevant items at most among 20 positions; P@100: 12 of min(100, 120).
    assert scores["two_stage"]["precision_at_20"] == pytest.approx(12 / 20)
    assert scores["two_stage"]["precision_at_100"] == pytest.approx(12 / 100)


def test_cosine_and_euclidean_pick_different_anchors() -> None:
    # Query (1, 0). Anchor 0 = (10, 0): same direction (cosine 1) but 9 away. Anchor 1 =
    # (0.5, 0.5): cosine 0.707 but 0.707 away. Cosine picks class 0, euclidean class 1.
    anchors = ClassAnchors.one_per_class(np.array([[10, 0], [0.5, 0.5]], dtype=np.float32))
    db = np.array([[3, 0], [0, 3]], dtype=np.float32)
    labels = np.array([0, 1])
    query = np.array([[1, 0]], dtype=np.float32)
    cosine = TwoStageIndex.build(db, labels, anchors, "cosine")
    euclidean = TwoStageIndex.build(db, labels, anchors, "euclidean")
    assert cosine.search(query).predicted_class.tolist() == [0]
    assert euclidean.search(query).predicted_class.tolist() == [1]
    # Cosine ignores the query's norm; euclidean does not: at (20, 0) anchor 0 is nearest.
    assert euclidean.search(20 * query).predicted_class.tolist() == [0]
    assert cosine.search(20 * query).predicted_class.tolist() == [0]


def test_several_anchors_per_class() -> None:
    # Class 5 has anchors at x = 0 and x = 20, class 9 one at x = 10. A query at x = 18 is
    # nearest anchor 1 (distance 2), which belongs to class 5.
    anchors = ClassAnchors(np.array([[0.0], [20.0], [10.0]], dtype=np.float32), np.array([5, 5, 9]))
    db = np.array([[1.0], [19.0], [11.0], [9.0]], dtype=np.float32)
    labels = np.array([5, 5, 9, 9])
    result = TwoStageIndex.build(db, labels, anchors, "euclidean").search(
        np.array([[18.0], [8.0]], dtype=np.float32)
    )
    assert result.anchor.tolist() == [1, 2]
    assert result.predicted_class.tolist() == [5, 9]
    assert result.neighbours.tolist() == [[1, 0], [3, 2]]


# --- anchors of trained losses --------------------------------------------------------------


def nearest_class(anchors: ClassAnchors, e: np.ndarray, space: Space) -> np.ndarray:
    return (
        TwoStageIndex.build(anchors.vectors, anchors.classes, anchors, space).search(e, k=1).predicted_class
    )


def test_anchors_of_dmlbench_losses() -> None:
    ids = np.array([3, 8, 11, 20])
    ctx = LossContext(num_classes=4, embedding_dim=6)
    cam = build_loss("cam", ctx, {})
    got = anchors_from_loss(cam, ids)
    np.testing.assert_array_equal(got.vectors, cam.get_parameter("anchors").detach().numpy())
    assert got.classes.tolist() == ids.tolist()
    mf = build_loss("mfcont", ctx, {})
    np.testing.assert_array_equal(
        anchors_from_loss(mf, ids).vectors, mf.get_parameter("mean_fields").detach().numpy()
    )
    mpa = build_loss("mpa", ctx, {"num_proxies": 3})
    multi = anchors_from_loss(mpa, ids)
    assert multi.vectors.shape == (12, 6)
    assert multi.classes.tolist() == np.repeat(ids, 3).tolist()
    np.testing.assert_array_equal(multi.vectors[4], mpa.get_parameter("proxies").detach().numpy()[1, 1])


def test_anchors_of_pml_classifier_losses_agree_with_their_logits() -> None:
    torch.manual_seed(0)
    e = torch.randn(200, 8)
    ids = np.arange(10) * 2
    soft = pml_losses.SoftTripleLoss(num_classes=10, embedding_size=8, centers_per_class=3)
    anchors = anchors_from_loss(soft, ids)
    sim = F.normalize(e, dim=1) @ F.normalize(soft.fc.detach(), dim=0)
    best_centre_class = sim.view(-1, 10, 3).amax(dim=2).argmax(dim=1).numpy()
    np.testing.assert_array_equal(nearest_class(anchors, e.numpy(), "cosine"), ids[best_centre_class])
    norm = pml_losses.NormalizedSoftmaxLoss(num_classes=10, embedding_size=8)
    logits = F.normalize(e, dim=1) @ F.normalize(norm.W.detach(), dim=0)
    got = nearest_class(anchors_from_loss(norm, ids), e.numpy(), "cosine")
    np.testing.assert_array_equal(got, ids[logits.argmax(dim=1).numpy()])
    proxy = build_loss("proxyanchor", LossContext(10, 8), {})
    np.testing.assert_array_equal(
        anchors_from_loss(proxy, ids).vectors, proxy.get_parameter("proxies").detach().numpy()
    )


def test_loss_without_anchors_and_wrong_class_count_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="has no class anchors"):
        anchors_from_loss(build_loss("contrastive", LossContext(4, 6), {}), np.arange(4))
    with pytest.raises(ConfigError, match="anchors for 4 classes but 3 class ids"):
        anchors_from_loss(build_loss("cam", LossContext(4, 6), {}), np.arange(3))


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match=r"Unknown assign 'nearest'.*label, anchor"):
        TwoStageIndex.build(DB, DB_LABELS, ANCHORS, "euclidean", assign="nearest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="anchors have 3 dimensions but the database has 2"):
        TwoStageIndex.build(DB, DB_LABELS, ClassAnchors.one_per_class(np.ones((2, 3))), "euclidean")
    with pytest.raises(ValueError, match="k must be >= 1"):
        TwoStageIndex.build(DB, DB_LABELS, ANCHORS, "euclidean").search(QUERIES, k=0)
    with pytest.raises(ValueError, match="one per anchor"):
        ClassAnchors(np.ones((2, 2)), np.array([0]))
    with pytest.raises(ValueError, match="P@5 needs 5 list positions"):
        precision_at_k_of_list(np.ones((1, 3), dtype=bool), np.array([3]), 5, 10)


@pytest.mark.parametrize("space", SPACES)
def test_small_blocks_give_the_same_results(space: Space, monkeypatch: pytest.MonkeyPatch) -> None:
    queries, q_labels, db, db_labels, anchors = lattice_problem(space, 5)
    index = TwoStageIndex.build(db, db_labels, anchors, space)
    whole = brute_force_scores(queries, q_labels, db, db_labels, space)
    lists = index.search(queries).neighbours
    # One query row per block (database of 100 > 7 entries; classes of ~17 > 7).
    monkeypatch.setattr(two_stage, "MAX_KEY_ENTRIES", 7)
    blocked = brute_force_scores(queries, q_labels, db, db_labels, space)
    for name in whole:
        np.testing.assert_array_equal(blocked[name], whole[name])
    np.testing.assert_array_equal(index.search(queries).neighbours, lists)
