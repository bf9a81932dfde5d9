"""Per-dataset paper settings (issue 13): MLRC's convergence schedule per dataset and the loss
values the papers state for particular datasets (K = 2 centres on SOP, cwms defaults).

The smoke runs use generated trees in the CUB, Cars196 and SOP layouts (SOP with its own
``Ebay_train.txt`` / ``Ebay_test.txt`` class-id files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.io
from cli_helpers import dmlbench
from PIL import Image

from benchmark.budgets import BUDGETS
from benchmark.config import deviations, load_protocol_file, resolve_config
from benchmark.losses import LOSSES, LossContext, build_loss
from benchmark.protocol.registry import budget_overrides
from benchmark.protocol.request import dataset_paper_settings


def _pixels(rng: np.random.Generator, base: np.ndarray) -> np.ndarray:
    return np.clip(base + rng.normal(0, 40, (30, 36, 3)), 0, 255).astype(np.uint8)


def make_sop_tree(root: Path, n_classes: int = 40, per_class: int = 4) -> Path:
    """Stanford_Online_Products: the first half of the class ids in Ebay_train.txt, the rest in
    Ebay_test.txt, image ids restarting at 1 in each file, as in the real dataset."""
    sop = root / "Stanford_Online_Products"
    rng = np.random.default_rng(1)
    header = "image_id class_id super_class_id path\n"
    half = n_classes // 2
    for part, ids in (("train", range(1, half + 1)), ("test", range(half + 1, n_classes + 1))):
        rows: list[str] = []
        for class_id in ids:
            base = rng.integers(0, 255, 3)
            for k in range(per_class):
                rel = f"chair_final/{class_id}_{k}.JPG"
                (sop / rel).parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(_pixels(rng, base)).save(sop / rel, format="JPEG")
                rows.append(f"{len(rows) + 1} {class_id} {1 + class_id % 3} {rel}")
        (sop / f"Ebay_{part}.txt").write_text(header + "\n".join(rows) + "\n")
    return sop


def make_cars_tree(root: Path, n_classes: int = 40, per_class: int = 4) -> Path:
    """cars_annos.mat + car_ims/, classes interleaved as in the real annotation file."""
    cars = root / "cars196"
    rng = np.random.default_rng(2)
    bases = rng.integers(0, 255, (n_classes, 3))
    dtype = [("relative_im_path", "O"), ("bbox_x1", "O"), ("class", "O"), ("test", "O")]
    n = n_classes * per_class
    annotations = np.zeros((1, n), dtype=dtype)
    for i in range(n):
        rel = f"car_ims/{i + 1:06d}.jpg"
        (cars / rel).parent.mkdir(parents=True, exist_ok=True)
        c = i % n_classes
        Image.fromarray(_pixels(rng, bases[c])).save(cars / rel)
        annotations[0, i] = (rel, 1, c + 1, int(c >= n_classes // 2))
    names = np.array([f"Make {c}" for c in range(1, n_classes + 1)], dtype=object)
    scipy.io.savemat(cars / "cars_annos.mat", {"annotations": annotations, "class_names": names})
    return cars


def _resolve(dataset: str, user: dict[str, Any], budget: str = "paper") -> tuple[Any, Any]:
    protocol = load_protocol_file("mlrc")
    overrides = budget_overrides(budget, "mlrc")
    return resolve_config(protocol, overrides, {"data.dataset": dataset, **user}, dataset_paper_settings)


@pytest.mark.parametrize(
    ("dataset", "schedule"), [("cub200", (2, 5)), ("cars196", (5, 3)), ("sop", (20, 2)), ("glyphs", (2, 5))]
)
def test_paper_budget_applies_the_datasets_schedule(dataset: str, schedule: tuple[int, int]) -> None:
    config, paper = _resolve(dataset, {})
    assert (config.train.eval_every, config.train.patience) == schedule
    assert (paper.train.eval_every, paper.train.patience) == schedule
    assert deviations(config, paper) == []


def test_the_datasets_own_values_are_not_a_deviation_other_values_are() -> None:
    config, paper = _resolve("cars196", {"train.eval_every": 5, "train.patience": 3})
    assert deviations(config, paper) == []
    config, paper = _resolve("cars196", {"train.eval_every": 2, "train.patience": 5})
    assert {(d.key, d.paper, d.value) for d in deviations(config, paper)} == {
        ("train.eval_every", 5, 2),
        ("train.patience", 3, 5),
    }


def test_budgets_keep_their_own_schedule_recorded_against_the_datasets() -> None:
    config, paper = _resolve("sop", {}, budget="mini")
    mini = BUDGETS.get("mini").overrides
    assert config.train.eval_every == mini["train.eval_every"]
    devs = {d.key: (d.paper, d.value) for d in deviations(config, paper)}
    assert devs["train.eval_every"] == (20, mini["train.eval_every"])


def test_sop_losses_use_two_centres_and_softtriple_no_regulariser() -> None:
    for name in ("softtriple", "mpa", "mpa-dw", "mpa-ap"):
        spec = LOSSES.get(name)
        k_key = "centers_per_class" if name == "softtriple" else "num_proxies"
        assert spec.defaults[k_key] == 10
        assert spec.defaults_for("cub200") == {} and spec.defaults_for("cars196") == {}
        assert spec.defaults_for("sop")[k_key] == 2
    assert LOSSES.get("softtriple").defaults_for("sop")["reg_weight"] == 0
    # Without a regulariser the built loss has no weight regulariser at all.
    params = {**LOSSES.get("softtriple").defaults, **LOSSES.get("softtriple").defaults_for("sop")}
    loss = build_loss("softtriple", LossContext(5, 8), params)
    assert getattr(loss, "weight_regularizer", None) is None
    assert tuple(loss.get_parameter("fc").shape) == (8, 5 * 2)


def test_cwms_defaults_are_the_authors() -> None:
    # mft-in-dml train.py: --alpha 0.01 --beta 80 --mrg 0.8 (the ClassWiseMultiSimilarity base).
    assert dict(LOSSES.get("cwms").defaults) == {"alpha": 0.01, "beta": 80.0, "delta": 0.8}


def _smoke(tmp_path: Path, dataset: str, root: Path, loss: str) -> dict[str, Any]:
    args = ["run", "--protocol", "mlrc", "--loss", loss, "--budget", "smoke", "--quiet"]
    args += ["--dataset", dataset, "--data-dir", str(root), "--jobs", "1"]
    args += [
        "--set",
        "search.n_trials=2",
        "--set",
        "search.n_startup_trials=1",
        "--set",
        "train.batch_size=12",
    ]
    args += [
        "--set",
        "test.reps=2",
        "--out",
        str(tmp_path / "runs"),
        "--results-dir",
        str(tmp_path / "results"),
    ]
    proc = dmlbench(*args, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = (tmp_path / "results" / dataset / "mlrc" / "records").glob("*.json")
    result: dict[str, Any] = json.loads(record.read_text())
    return result


@pytest.mark.slow
def test_smoke_run_on_sop_layout_records_schedule_and_two_centres(tmp_path: Path) -> None:
    rec = _smoke(tmp_path, "sop", make_sop_tree(tmp_path / "data"), "softtriple")
    smoke = BUDGETS.get("smoke").overrides
    assert rec["schedule"]["paper"] == {"eval_every": 20, "patience": 2}
    assert rec["schedule"]["paper_from"] == "dataset 'sop' (mlrc schedule)"
    assert rec["schedule"]["eval_every"] == smoke["train.eval_every"]
    assert rec["schedule"]["source"]["eval_every"] == "budget smoke"
    devs = {d["key"]: d for d in rec["deviations"]}
    assert devs["train.eval_every"]["paper"] == 20
    # K = 2 and no regulariser: fixed for the whole search, recorded, and not a deviation.
    assert rec["loss_dataset_defaults"] == {"centers_per_class": 2.0, "reg_weight": 0.0}
    assert rec["search"]["fixed"] == {"centers_per_class": 2.0, "reg_weight": 0.0}
    assert "reg_weight" not in rec["search"]["space"]
    assert rec["search"]["best_params"]["centers_per_class"] == 2
    assert not any(k.startswith("loss") for k in devs)


@pytest.mark.slow
def test_smoke_run_on_cars_layout_keeps_ten_proxies_and_cars_schedule(tmp_path: Path) -> None:
    rec = _smoke(tmp_path, "cars196", make_cars_tree(tmp_path / "data"), "mpa")
    assert rec["schedule"]["paper"] == {"eval_every": 5, "patience": 3}
    assert rec["loss_dataset_defaults"] == {}
    assert rec["search"]["best_params"]["num_proxies"] == 10


def test_traditional_trains_on_sops_official_classes() -> None:
    from benchmark.protocol.registry import resolve_run_config
    from benchmark.protocol.traditional import half_split

    protocol = load_protocol_file("traditional")
    config, paper = resolve_run_config(protocol, {}, {"data.dataset": "sop"}, dataset_paper_settings)
    assert config.settings["train_classes"] == 11318 and deviations(config, paper) == []
    split = half_split(range(1, 22635), config.settings["train_classes"])
    assert (len(split.train), len(split.test)) == (11318, 11316)
    assert split.train[-1] == 11318 and split.test[0] == 11319
    # Elsewhere the half/half cut stays.
    config, _ = resolve_run_config(protocol, {}, {"data.dataset": "cub200"}, dataset_paper_settings)
    assert half_split(range(1, 201), config.settings["train_classes"]).test[0] == 101
    # CPU budgets keep too few classes for 11,318: they cut in half, recorded as a deviation.
    mini = budget_overrides("mini", "traditional")
    config, paper = resolve_run_config(protocol, mini, {"data.dataset": "sop"}, dataset_paper_settings)
    devs = {d.key: (d.paper, d.value) for d in deviations(config, paper)}
    assert devs["settings.train_classes"] == (11318, 0)
