"""The cbir protocol (§2.5, §4.3): metric parsing, anchors and retrieval scoring on hand-checkable
data; then `--budget smoke` runs as subprocesses: two-stage for an anchor loss (cam), none for a
pair loss (contrastive), finite values, resume without training, strict config."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import dmlbench

from benchmark.errors import ConfigError
from benchmark.losses import LossContext, build_loss
from benchmark.metrics.two_stage import ClassAnchors
from benchmark.protocol.cbir import cbir_cutoffs
from benchmark.protocol.cbir_run import brute_force_ranking, loss_anchors, score_retrieval

# -- pure functions ------------------------------------------------------------------------------


def test_cutoffs_from_metric_names() -> None:
    assert cbir_cutoffs(["map", "precision_at_20", "precision_at_100"]) == [20, 100]
    assert cbir_cutoffs(["map"]) == []


def test_query_gallery_metric_is_rejected() -> None:
    with pytest.raises(ConfigError, match="map_at_r"):
        cbir_cutoffs(["map", "map_at_r"])


# Two well-separated classes in 2-D (euclidean): database items 0,1 of class 10, items 2,3 of
# class 20; query 0 lies between items 0 and 1 (nearer 0), query 1 between 2 and 3 (nearer 3).
DB = np.array([[0.0, 0.0], [0.0, 1.0], [10.0, 0.0], [10.0, 1.0]], dtype=np.float32)
DB_LABELS = np.array([10, 10, 20, 20])
Q = np.array([[0.0, 0.4], [10.0, 0.6]], dtype=np.float32)
Q_LABELS = np.array([10, 20])


def test_brute_force_ranking_by_hand() -> None:
    ranking = brute_force_ranking(Q, DB, "euclidean")
    assert ranking.tolist() == [[0, 1, 2, 3], [3, 2, 1, 0]]


def test_brute_force_ranking_ties_by_index() -> None:
    db = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    assert brute_force_ranking(np.array([[1.0, 0.0]]), db, "cosine").tolist() == [[0, 1, 2]]


def test_scores_brute_force_only_without_anchors() -> None:
    scores, extras = score_retrieval(Q, Q_LABELS, DB, DB_LABELS, "euclidean", ["map", "precision_at_2"], None)
    assert set(scores) == {"brute_force"}
    # Both relevant items come first for both queries: AP = 1, P@2 = 1.
    assert scores["brute_force"] == {"map": 1.0, "precision_at_2": 1.0}
    assert extras["brute_force_ms_per_query"] >= 0 and "two_stage_ms_per_query" not in extras


def test_scores_two_stage_with_anchors() -> None:
    anchors = ClassAnchors(np.array([[0.0, 0.5], [10.0, 0.5]]), np.array([10, 20]))
    scores, extras = score_retrieval(
        Q, Q_LABELS, DB, DB_LABELS, "euclidean", ["map", "precision_at_4"], anchors
    )
    assert scores["brute_force"]["map"] == 1.0
    assert scores["brute_force"]["precision_at_4"] == 0.5  # 2 relevant among the 4 items
    # Stage 1 is right for both queries; stage 2 lists only the class's 2 items: P@4 = 2/4.
    assert scores["two_stage"] == {"map": 1.0, "precision_at_4": 0.5}
    assert extras["stage1_accuracy"] == 1.0 and extras["speedup"] > 0


def test_two_stage_wrong_anchor_scores_zero() -> None:
    # Anchors swapped: stage 1 sends each query to the other class, so nothing relevant is listed.
    anchors = ClassAnchors(np.array([[0.0, 0.5], [10.0, 0.5]]), np.array([20, 10]))
    scores, extras = score_retrieval(Q, Q_LABELS, DB, DB_LABELS, "euclidean", ["map"], anchors)
    assert scores["two_stage"]["map"] == 0.0 and extras["stage1_accuracy"] == 0.0
    assert scores["brute_force"]["map"] == 1.0


def test_loss_anchors_for_anchor_and_pair_losses() -> None:
    ctx = LossContext(num_classes=3, embedding_dim=4)
    cam = build_loss("cam", ctx, {})
    anchors = loss_anchors(cam, np.array([5, 6, 7]))
    assert anchors is not None and anchors.vectors.shape == (3, 4)
    assert anchors.classes.tolist() == [5, 6, 7]
    assert loss_anchors(build_loss("contrastive", ctx, {}), np.array([5, 6, 7])) is None


# -- end to end ----------------------------------------------------------------------------------


def run_args(root: Path, loss: str) -> list[str]:
    return [
        "run",
        "--protocol",
        "cbir",
        "--loss",
        loss,
        "--budget",
        "smoke",
        "--out",
        str(root / "runs"),
        "--results-dir",
        str(root / "results"),
    ]


def record_of(root: Path, loss: str) -> dict[str, Any]:
    path = root / "results" / "glyphs" / "cbir" / "records" / f"{loss}.smoke.seed0.json"
    out: dict[str, Any] = json.loads(path.read_text())
    return out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("cbir")
    for loss in ("cam", "contrastive"):
        proc = dmlbench(*run_args(root, loss), cache=cache_dir)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return root


def _check_finite_summary(rec: dict[str, Any], mode: str) -> None:
    test = rec["test"]
    for m in test["metrics"]:
        values = test["per_rep"][mode][m]
        assert len(values) == test["reps"] and all(0.0 <= v <= 1.0 for v in values)
        s = test["summary"][mode][m]
        assert math.isfinite(s["mean"]) and math.isfinite(s["half_width"])


def test_anchor_loss_has_two_stage(smoke: Path) -> None:
    rec = record_of(smoke, "cam")
    assert rec["protocol"] == "cbir" and rec["selection_on_test"] is False
    assert rec["two_stage"] is True
    test = rec["test"]
    assert test["metrics"] == ["map", "precision_at_20", "precision_at_100"]
    assert test["modes"] == ["brute_force", "two_stage"]
    _check_finite_summary(rec, "brute_force")
    _check_finite_summary(rec, "two_stage")
    extra = test["extra_summary"]
    for key in ("brute_force_ms_per_query", "two_stage_ms_per_query", "speedup", "stage1_accuracy"):
        assert math.isfinite(extra[key]["mean"]), key
    for rep in test["rep_details"]:
        # Two-stage with assignment by label: AP is 1 exactly for the queries stage 1 gets right.
        assert rep["scores"]["two_stage"]["map"] == pytest.approx(rep["retrieval"]["stage1_accuracy"])
        assert rep["n_anchors"] == rec["data"]["n_classes"]
    data = rec["data"]
    assert data["n_database_images"] + data["n_query_images"] == data["n_images"]
    assert data["n_query_images"] == 2 * data["n_classes"]  # a quarter of 8 images per class
    assert rec["training"]["optimizer"] == "adam"
    assert rec["training"]["selection"].startswith("none")


def test_pair_loss_has_no_two_stage(smoke: Path) -> None:
    rec = record_of(smoke, "contrastive")
    assert rec["two_stage"] is False
    assert rec["test"]["modes"] == ["brute_force"]
    assert "two_stage" not in rec["test"]["summary"]
    assert "speedup" not in rec["test"]["extra_summary"]
    _check_finite_summary(rec, "brute_force")
    md = (smoke / "results" / "glyphs" / "cbir" / "leaderboard.md").read_text()
    contrastive_row = next(line for line in md.splitlines() if line.startswith("| Contrastive |"))
    assert "–" in contrastive_row  # no two-stage cells
    assert "Two-stage mAP" in md


def test_resume_does_no_training(smoke: Path, cache_dir: Path) -> None:
    before = record_of(smoke, "cam")
    rep_files = sorted((Path(before["run_dir"]) / "reps").glob("rep*.json"))
    mtimes = [p.stat().st_mtime_ns for p in rep_files]
    proc = dmlbench(*run_args(smoke, "cam"), cache=cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(resuming)" in proc.stderr and "rep 1/2" not in proc.stderr  # no training progress
    assert [p.stat().st_mtime_ns for p in rep_files] == mtimes
    assert record_of(smoke, "cam")["test"]["per_rep"] == before["test"]["per_rep"]


def test_model_selection_on_queries_is_refused(tmp_path: Path, cache_dir: Path) -> None:
    proc = dmlbench(*run_args(tmp_path, "cam"), "--set", "train.eval_every=1", cache=cache_dir)
    assert proc.returncode != 0
    assert "train.eval_every" in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_split_settings_change_the_split(smoke: Path, tmp_path: Path, cache_dir: Path) -> None:
    default = record_of(smoke, "contrastive")["data"]
    args = run_args(tmp_path, "contrastive")
    proc = dmlbench(
        *args, "--set", "settings.query_fraction=0.5", "--set", "settings.split_seed=3", cache=cache_dir
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = record_of(tmp_path, "contrastive")
    data = rec["data"]
    assert (data["query_fraction"], data["split_seed"]) == (0.5, 3)
    assert data["n_query_images"] == 4 * data["n_classes"]  # half of 8 images per class
    assert data["split_fingerprint"] != default["split_fingerprint"]
    assert {"settings.query_fraction", "settings.split_seed"} <= {d["key"] for d in rec["deviations"]}
    assert rec["config"]["settings"] == {"query_fraction": 0.5, "split_seed": 3}


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("settings.query_fraction=1.0", "settings.query_fraction must lie in"),
        ("settings.split_seed=-1", "settings.split_seed must be >= 0"),
        ("protocol.query_fraction=0.5", "'protocol.query_fraction' is now 'settings.query_fraction'"),
    ],
)
def test_bad_split_settings_fail_before_compute(
    tmp_path: Path, cache_dir: Path, override: str, message: str
) -> None:
    proc = dmlbench(*run_args(tmp_path, "cam"), "--set", override, cache=cache_dir)
    assert proc.returncode != 0 and message in proc.stderr
    assert not (tmp_path / "runs").exists()
