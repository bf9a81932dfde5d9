"""Frozen-trunk mode: the on-disk feature cache (key, miss/hit, invalidation), features equal to a
direct trunk forward, embedder-only training, config validation, and a smoke run end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from benchmark.budgets import BUDGETS
from benchmark.config import RunConfig, load_protocol_file, resolve_config
from benchmark.data.augment import CHARACTER_AUGMENT, eval_batch
from benchmark.data.base import ImageDataset
from benchmark.data.splits import mlrc_split
from benchmark.engine.train import embed_samples, train_fold
from benchmark.errors import ConfigError
from benchmark.models import features as features_mod
from benchmark.models.features import (
    FeatureDataset,
    feature_key,
    feature_path,
    load_or_compute_features,
)
from benchmark.models.trunks import build_model
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest
from benchmark.protocol.run_data import fold_data, load_fold_data

CPU = torch.device("cpu")


def frozen_config(**overrides: Any) -> RunConfig:
    user = {"model.frozen_trunk": True, "data.augment": "none", **overrides}
    config, _ = resolve_config(load_protocol_file("mlrc"), BUDGETS.get("smoke").overrides, user)
    return config


def toy_dataset(n_classes: int = 16, per_class: int = 4, size: int = 16, seed: int = 0) -> ImageDataset:
    rng = np.random.default_rng(seed)
    images = torch.from_numpy(rng.integers(0, 256, (n_classes * per_class, 1, size, size), dtype=np.uint8))
    labels = np.repeat(np.arange(n_classes, dtype=np.int64) * 3, per_class)  # non-dense ids on purpose
    return ImageDataset("toy", images, labels)


class CountingForward:
    """Wraps ``features.trunk_features`` to count how often the trunk actually runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        self._real = features_mod.trunk_features
        monkeypatch.setattr(features_mod, "trunk_features", self)

    def __call__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        self.calls += 1
        return self._real(*args, **kwargs)


def test_key_changes_with_every_input_and_only_then() -> None:
    base: dict[str, Any] = dict(
        dataset_fingerprint="abc", trunk="smallcnn", weights="random-init:seed=1", image_size=28
    )
    key = feature_key(**base)
    assert key == feature_key(**base)
    variants: list[dict[str, Any]] = [
        {"dataset_fingerprint": "abd"},
        {"trunk": "resnet18"},
        {"weights": "random-init:seed=2"},
        {"weights": "sha256:00"},
        {"image_size": 32},
        {"transform": "other"},
        {"version": 999},
    ]
    keys = {feature_key(**{**base, **v}) for v in variants}
    assert key not in keys and len(keys) == len(variants)


def test_miss_then_hit_does_not_recompute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingForward(monkeypatch)
    data, config = toy_dataset(), frozen_config()
    first, path, hit1 = load_or_compute_features(data, config, tmp_path, 7, CPU)
    assert (hit1, counter.calls) == (False, 1) and path.is_file()
    assert path.parent == tmp_path / "features"
    mtime = path.stat().st_mtime_ns
    second, path2, hit2 = load_or_compute_features(data, config, tmp_path, 7, CPU)
    assert (hit2, counter.calls, path2) == (True, 1, path)
    assert path.stat().st_mtime_ns == mtime
    assert torch.equal(first.features, second.features)
    np.testing.assert_array_equal(second.labels, data.labels)
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_features_equal_a_direct_trunk_forward(tmp_path: Path) -> None:
    data, config = toy_dataset(), frozen_config()
    cached, _, _ = load_or_compute_features(data, config, tmp_path, 11, CPU)
    trunk = build_model("smallcnn", 1, 128, pretrained=False, weights_path="", seed=11).trunk.eval()
    with torch.no_grad():
        direct = trunk(eval_batch(data.images))
    assert cached.features.shape == (len(data), 128)
    torch.testing.assert_close(cached.features, direct, rtol=1e-5, atol=1e-6)
    # Eval mode: a trunk in train mode (batch statistics) would give other numbers.
    with torch.no_grad():
        batch_stats = trunk.train()(eval_batch(data.images))
    assert not torch.allclose(cached.features, batch_stats, atol=1e-3)


def test_random_init_seed_change_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingForward(monkeypatch)
    data, config = toy_dataset(), frozen_config()
    a, pa, _ = load_or_compute_features(data, config, tmp_path, 1, CPU)
    b, pb, hit = load_or_compute_features(data, config, tmp_path, 2, CPU)
    assert (hit, counter.calls) == (False, 2) and pa != pb
    assert not torch.allclose(a.features, b.features)


def test_weights_file_change_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingForward(monkeypatch)
    weights = tmp_path / "trunk.pth"
    torch.save(
        build_model("smallcnn", 1, 8, pretrained=False, weights_path="", seed=1).trunk.state_dict(), weights
    )
    data = toy_dataset()
    config = frozen_config(**{"model.pretrained": True, "model.trunk_weights": str(weights)})
    a, pa, _ = load_or_compute_features(data, config, tmp_path, 0, CPU)
    # The init seed does not matter once weights come from a file: same file, same entry.
    _, pa2, hit = load_or_compute_features(data, config, tmp_path, 99, CPU)
    assert (hit, pa2, counter.calls) == (True, pa, 1)
    torch.save(
        build_model("smallcnn", 1, 8, pretrained=False, weights_path="", seed=2).trunk.state_dict(), weights
    )
    b, pb, hit = load_or_compute_features(data, config, tmp_path, 0, CPU)
    assert (hit, counter.calls) == (False, 2) and pb != pa
    assert not torch.allclose(a.features, b.features)


def test_image_size_change_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingForward(monkeypatch)
    _, p16, _ = load_or_compute_features(
        toy_dataset(size=16), frozen_config(**{"data.image_size": 16}), tmp_path, 0, CPU
    )
    _, p20, hit = load_or_compute_features(
        toy_dataset(size=20), frozen_config(**{"data.image_size": 20}), tmp_path, 0, CPU
    )
    assert (hit, counter.calls) == (False, 2) and p16 != p20


def test_trunk_change_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    counter = CountingForward(monkeypatch)
    data = toy_dataset(n_classes=4, per_class=2, size=32)
    a, pa, _ = load_or_compute_features(data, frozen_config(), tmp_path, 0, CPU)
    b, pb, hit = load_or_compute_features(
        data, frozen_config(**{"model.trunk": "resnet18"}), tmp_path, 0, CPU
    )
    assert (hit, counter.calls) == (False, 2) and pa != pb
    assert (a.features.shape[1], b.features.shape[1]) == (128, 512)


def test_embedder_only_training_leaves_trunk_and_features_unchanged(tmp_path: Path) -> None:
    config = frozen_config()
    data = toy_dataset(n_classes=24)
    feats, path, _ = load_or_compute_features(data, config, tmp_path, 3, CPU)
    stored = np.load(path)["features"].copy()
    before = feats.features.clone()
    classes = feats.classes()
    train, val = feats.subset(classes[:16].tolist()), feats.subset(classes[16:].tolist())
    result, model = train_fold(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=train,
        val=val,
        augment=None,
        seed=5,
        device=CPU,
    )
    assert result.epochs >= 1 and 0 <= result.best_val <= 1
    assert isinstance(model.trunk, torch.nn.Identity) and not list(model.trunk.parameters())
    assert [n for n, _ in model.named_parameters()] == ["embedder.weight", "embedder.bias"]
    torch.testing.assert_close(torch.from_numpy(stored), before, rtol=0, atol=0)
    assert torch.equal(feats.features, before)
    np.testing.assert_array_equal(np.load(path)["features"], stored)
    # The embedder did train: its weights moved away from the seed's initialisation.
    init = build_model("smallcnn", 1, 128, pretrained=False, weights_path="", seed=5)
    assert model.embedder.weight.shape == (128, 128)
    assert not torch.equal(model.embedder.weight, init.embedder.weight)
    emb = embed_samples(model, val, CPU)
    assert emb.shape == (len(val), 128) and np.isfinite(emb).all()


def test_feature_training_rejects_augmentation(tmp_path: Path) -> None:
    config = frozen_config()
    feats, _, _ = load_or_compute_features(toy_dataset(), config, tmp_path, 0, CPU)
    with pytest.raises(ConfigError, match=r"data\.augment must be 'none'"):
        train_fold(
            config=config,
            loss_name="contrastive",
            loss_params={},
            train=feats,
            val=feats,
            augment=CHARACTER_AUGMENT,
            seed=0,
            device=CPU,
        )


def test_frozen_trunk_with_augmentation_is_a_config_error() -> None:
    run = MLRCRun(RunRequest(loss="mfcont", budget="smoke", overrides={"model.frozen_trunk": True}))
    with pytest.raises(
        ConfigError, match=r"model\.frozen_trunk = true.*data\.augment = 'characters'.*augment=none"
    ):
        run.resolve()


def test_worker_loader_reads_the_cached_file(tmp_path: Path) -> None:
    config = frozen_config()
    feats, path, _ = load_or_compute_features(toy_dataset(n_classes=40), config, tmp_path, 0, CPU)
    parent = fold_data(feats, mlrc_split(feats.classes().tolist(), 4))
    worker = load_fold_data(config, tmp_path / "no-dataset-cache-needed", path)
    assert isinstance(worker.test, FeatureDataset) and isinstance(parent.test, FeatureDataset)
    assert torch.equal(worker.test.features, parent.test.features)
    for (wt, wv), (pt, pv) in zip(worker.folds, parent.folds, strict=True):
        assert isinstance(wt, FeatureDataset) and isinstance(pt, FeatureDataset)
        assert isinstance(wv, FeatureDataset) and isinstance(pv, FeatureDataset)
        assert torch.equal(wt.features, pt.features) and torch.equal(wv.features, pv.features)
        np.testing.assert_array_equal(wt.labels, pt.labels)


@pytest.mark.slow
def test_frozen_smoke_run_records_the_deviation(tmp_path: Path, cache_dir: Path) -> None:
    feature_cache = tmp_path / "cache"
    feature_cache.mkdir()
    # Reuse the session's rendered glyphs; the features dir starts empty so the run must create it.
    for item in cache_dir.iterdir():
        if item.is_file() and item.name.startswith("glyphs"):
            os.symlink(item, feature_cache / item.name)
    env = {**os.environ, "DMLBENCH_CACHE": str(feature_cache)}
    args = ["--loss", "mfcont", "--budget", "smoke", "--jobs", "2"]
    args += ["--set", "model.frozen_trunk=true", "--set", "data.augment=none"]
    args += ["--out", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results")]
    proc = subprocess.run(
        [sys.executable, "-m", "benchmark.cli.main", "run", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "computed features" in proc.stdout + proc.stderr
    rec = json.loads(
        (tmp_path / "results" / "glyphs" / "mlrc" / "records" / "mfcont.smoke.seed0.json").read_text()
    )
    devs = {d["key"]: (d["paper"], d["value"]) for d in rec["deviations"]}
    assert devs["model.frozen_trunk"] == (False, True)
    assert devs["data.augment"] == ("paper", "none")
    assert rec["config"]["model"]["frozen_trunk"] is True
    assert len([t for t in rec["search"]["trials"] if t["state"] == "COMPLETE"]) == 3
    assert all(0 <= rec["test"]["summary"][m]["map_at_r"]["mean"] <= 1 for m in ("separated", "concatenated"))
    assert 0 <= rec["untrained"]["separated"]["map_at_r"] <= 1
    cached = list((feature_cache / "features").glob("*.npz"))
    assert len(cached) == 1
    n_images = rec["data"]["n_images"]
    assert np.load(cached[0])["features"].shape == (n_images, 128)
    assert feature_path(feature_cache, cached[0].stem) == cached[0]
