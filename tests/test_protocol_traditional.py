"""The traditional protocol (protocols.md §2.5): half/half split, loss-parameter lrs, pass sampling, budget
overrides and dispatch by hand; then a `--budget smoke` run as a subprocess (record structure,
labelled selection on test, leaderboard, resume without training, strict config)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cli_helpers import dmlbench

from benchmark.budgets import BUDGETS
from benchmark.data.sampler import PassSampler
from benchmark.engine.train import iterations_per_epoch
from benchmark.errors import DataError
from benchmark.losses import LOSSES
from benchmark.protocol.cbir_run import CBIRRun
from benchmark.protocol.dispatch import runner_for
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.registry import budget_overrides
from benchmark.protocol.repeated_checks import unused_override
from benchmark.protocol.traditional import HalfSplit, half_split, traditional_param_lr
from benchmark.protocol.traditional_run import TraditionalRun

# -- pure functions ------------------------------------------------------------------------------


def test_half_split_even_uses_sorted_ids() -> None:
    assert half_split([5, 1, 3, 2]) == HalfSplit(train=(1, 2), test=(3, 5))


def test_half_split_odd_gives_test_the_extra_class() -> None:
    assert half_split(range(5)) == HalfSplit(train=(0, 1), test=(2, 3, 4))


def test_half_split_ignores_duplicates_and_is_disjoint() -> None:
    split = half_split([7, 7, 3, 9, 3, 1, 4, 4])
    assert split == HalfSplit(train=(1, 3), test=(4, 7, 9))
    assert not set(split.train) & set(split.test)


def test_half_split_needs_four_classes() -> None:
    with pytest.raises(DataError, match="at least 4 classes"):
        half_split([0, 1, 2])


def test_param_lr_proxies_and_mean_fields() -> None:
    # The paper's values at its lr 1e-4, and the authors' SOP/InShop mean fields at 6e-4 (1.2).
    # The ratios are the losses' own declarations: the protocol names no loss.
    assert traditional_param_lr(LOSSES.get("proxyanchor"), 1e-4) == 1e-2
    assert traditional_param_lr(LOSSES.get("mfcont"), 1e-4) == 2e-1
    assert traditional_param_lr(LOSSES.get("mfcwms"), 1e-4) == 2e-1
    assert traditional_param_lr(LOSSES.get("mfnca"), 1e-4) == 2e-1
    assert traditional_param_lr(LOSSES.get("mfcwms"), 6e-4) == 1.2
    assert traditional_param_lr(LOSSES.get("proxyanchor"), 6e-4) == 0.06  # not 0.06000000000000001
    assert traditional_param_lr(LOSSES.get("contrastive"), 1e-4) is None
    mean_fields = {
        name for name, spec in LOSSES.items() if spec.has_parameters and spec.param_lr_ratio == 2000
    }
    assert mean_fields == {"mfcont", "mfcwms", "mfnca"}  # docs/protocols.md §3: the mean-field losses


def test_iterations_per_epoch_zero_means_one_pass() -> None:
    assert iterations_per_epoch(0, 400, 128) == 3  # full batches only
    assert iterations_per_epoch(0, 50, 128) == 1
    assert iterations_per_epoch(10, 400, 128) == 10


def test_pass_sampler_draws_every_image_once_per_pass() -> None:
    sampler = PassSampler(10, 4, np.random.default_rng(0))
    first = sampler.sample(3).ravel()  # 12 draws: one pass and 2 of the next
    rest = sampler.sample(2).ravel()  # 8 more: the remaining 8 of the second pass
    stream = np.concatenate([first, rest])
    assert sorted(stream[:10].tolist()) == list(range(10))
    assert sorted(stream[10:20].tolist()) == list(range(10))


def test_pass_sampler_caps_batch_at_data_size() -> None:
    batches = PassSampler(3, 8, np.random.default_rng(1)).sample(2)
    assert batches.shape == (2, 3)
    assert all(sorted(b.tolist()) == [0, 1, 2] for b in batches)


def test_unused_override_names_search_keys() -> None:
    assert unused_override(["loss.margin", "train.lr"]) is None
    assert unused_override(["search.n_trials", "train.lr"]) == "search.n_trials"
    assert unused_override(["space.ms.alpha"]) == "space.ms.alpha"


def test_budgets_have_protocol_specific_overrides() -> None:
    smoke = BUDGETS.get("smoke")
    assert budget_overrides("smoke", "mlrc") is smoke.overrides
    trad = budget_overrides("smoke", "traditional")
    assert not any(k.startswith("search.") for k in trad)
    assert "train.iters_per_epoch" not in trad  # epochs stay dataset passes
    assert budget_overrides("paper", "traditional") == {}


def test_runner_dispatch_by_protocol_name() -> None:
    assert runner_for("mlrc") is MLRCRun
    assert runner_for("traditional") is TraditionalRun
    assert runner_for("cbir") is CBIRRun


# -- end to end ----------------------------------------------------------------------------------


def run_args(root: Path, loss: str = "proxyanchor") -> list[str]:
    return [
        "run",
        "--protocol",
        "traditional",
        "--loss",
        loss,
        "--budget",
        "smoke",
        "--out",
        str(root / "runs"),
        "--results-dir",
        str(root / "results"),
    ]


def record_of(root: Path, loss: str = "proxyanchor") -> dict[str, Any]:
    path = root / "results" / "glyphs" / "traditional" / "records" / f"{loss}.smoke.seed0.json"
    out: dict[str, Any] = json.loads(path.read_text())
    return out


@pytest.fixture(scope="module")
def smoke(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, str]:
    root = tmp_path_factory.mktemp("traditional")
    proc = dmlbench(*run_args(root), cache=cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, proc.stderr


def test_smoke_record_structure(smoke: tuple[Path, str]) -> None:
    root, _ = smoke
    rec = record_of(root)
    assert rec["schema"] == "dmlbench.run/1"
    assert rec["protocol"] == "traditional" and rec["loss"] == "proxyanchor" and rec["budget"] == "smoke"
    assert rec["selection_on_test"] is True
    assert any("Selection on test" in n for n in rec["notes"])
    assert "search" not in rec
    test = rec["test"]
    assert test["modes"] == ["test"]
    assert test["metrics"] == ["map_at_r", "recall_at_1", "recall_at_2", "recall_at_4", "recall_at_8"]
    reps = test["reps"]
    assert reps == 2 and len(test["rep_details"]) == reps
    for m in test["metrics"]:
        values = test["per_rep"]["test"][m]
        assert len(values) == reps and all(0.0 <= v <= 1.0 for v in values)
        s = test["summary"]["test"][m]
        assert math.isfinite(s["mean"]) and math.isfinite(s["half_width"]) and s["n"] == reps
    epochs = test["extra_summary"]["epochs_to_best"]
    assert 1 <= epochs["mean"] <= rec["config"]["train"]["max_epochs"]
    for rep in test["rep_details"]:
        assert 1 <= rep["best_epoch"] <= rep["epochs"]
        # The reported test MAP@R is the value at the selected (best) epoch of the curve.
        assert max(v for _, v in rep["curve"]) == pytest.approx(rep["scores"]["test"]["map_at_r"], abs=1e-6)
    assert rec["training"]["optimizer"] == "adamw"
    assert rec["training"]["loss_params"]["param_lr"] == 1e-2
    assert rec["data"]["n_train_classes"] == 50 and rec["data"]["n_test_classes"] == 50
    devs = {d["key"]: d for d in rec["deviations"]}
    assert devs["test.reps"]["paper"] == 10 and devs["test.reps"]["value"] == 2
    assert not any(k.startswith("search.") for k in devs)
    assert all(math.isfinite(v) for v in rec["untrained"]["test"].values())


def test_smoke_leaderboard_labels_the_flaw(smoke: tuple[Path, str], cache_dir: Path) -> None:
    root, stderr = smoke
    assert "rep 1/2" in stderr  # progress display
    md = (root / "results" / "glyphs" / "traditional" / "leaderboard.md").read_text()
    assert "ProxyAnchor" in md and "Test MAP@R" in md and "Selection on test" in md
    proc = dmlbench(
        "report",
        "--dataset",
        "glyphs",
        "--protocol",
        "traditional",
        "--results-dir",
        str(root / "results"),
        cache=cache_dir,
    )
    assert proc.returncode == 0, proc.stderr
    assert "| ProxyAnchor |" in proc.stdout and "epochs to best" in proc.stdout
    for fmt in ("csv", "tex", "json"):
        out = dmlbench(
            "report",
            "--dataset",
            "glyphs",
            "--protocol",
            "traditional",
            "--format",
            fmt,
            "--results-dir",
            str(root / "results"),
            cache=cache_dir,
        )
        assert out.returncode == 0, out.stderr


def test_resume_does_no_training(smoke: tuple[Path, str], cache_dir: Path) -> None:
    root, _ = smoke
    before = record_of(root)
    rep_files = sorted((Path(before["run_dir"]) / "reps").glob("rep*.json"))
    assert len(rep_files) == 2
    mtimes = [p.stat().st_mtime_ns for p in rep_files]
    proc = dmlbench(*run_args(root), cache=cache_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "(resuming)" in proc.stderr and "rep 1/2" not in proc.stderr  # no training progress
    assert [p.stat().st_mtime_ns for p in rep_files] == mtimes
    after = record_of(root)
    assert after["test"]["per_rep"] == before["test"]["per_rep"]
    assert after["untrained"] == before["untrained"]


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--set", "search.n_trials=3"], "search.n_trials"),
        (["--sampler", "tpe"], "--sampler"),
        (["--jobs", "2"], "--jobs"),
        (["--set", "protocol.n_folds=4"], "protocol.n_folds"),
    ],
)
def test_settings_it_would_ignore_are_rejected(
    tmp_path: Path, cache_dir: Path, extra: list[str], named: str
) -> None:
    proc = dmlbench(*run_args(tmp_path), *extra, cache=cache_dir)
    assert proc.returncode != 0
    assert named in proc.stderr and "traditional" in proc.stderr
    assert not (tmp_path / "runs").exists()
