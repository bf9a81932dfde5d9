"""A whole run on a standard on-disk dataset (decoded lazily from files), for every protocol.

Regression test: the trainer once accepted only in-memory image tensors, so any `--dataset cub200`
(or other standard layout) run failed in its first trial.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import dmlbench
from PIL import Image


def make_cub_tree(root: Path, n_classes: int = 40, per_class: int = 4) -> Path:
    """A CUB_200_2011 layout of small JPEGs: one noisy base colour per class."""
    cub = root / "CUB_200_2011"
    rng = np.random.default_rng(0)
    images, labels, classes = [], [], []
    i = 1
    for c in range(1, n_classes + 1):
        name = f"{c:03d}.Bird_{c}"
        classes.append(f"{c} {name}")
        base = rng.integers(0, 255, 3)
        for k in range(per_class):
            rel = f"{name}/img_{k}.jpg"
            path = cub / "images" / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            pixels = np.clip(base + rng.normal(0, 40, (30, 36, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(path)
            images.append(f"{i} {rel}")
            labels.append(f"{i} {c}")
            i += 1
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    return cub


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["mlrc", "traditional", "cbir"])
def test_smoke_run_on_a_lazy_on_disk_dataset(tmp_path: Path, protocol: str) -> None:
    cub = make_cub_tree(tmp_path / "data")
    # MLRC trains on ~3/8 of the 40 classes: a batch of 12 classes (m = 1) fits the smallest fold.
    mlrc = ["--set", "search.n_trials=2", "--set", "search.n_startup_trials=1"]
    mlrc += ["--set", "train.batch_size=12"]
    extra = mlrc if protocol == "mlrc" else []
    args = ["run", "--protocol", protocol, "--loss", "proxyanchor", "--budget", "smoke", "--quiet"]
    args += ["--dataset", "cub200", "--data-dir", str(cub), "--jobs", "1"]
    args += ["--out", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "results"), *extra]
    proc = dmlbench(*args, cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = list((tmp_path / "results" / "cub200" / protocol / "records").glob("*.json"))
    assert len(records) == 1
    rec = json.loads(records[0].read_text())
    assert rec["dataset"] == "cub200" and rec["data"]
    first_mode = next(iter(rec["test"]["summary"].values()))
    assert all(np.isfinite(v["mean"]) for v in first_mode.values())
