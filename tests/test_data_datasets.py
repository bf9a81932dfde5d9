"""Dataset contract tests over the registry, plus glyphs, Omniglot and folder specifics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import OMNIGLOT
from PIL import Image

from benchmark.data import DATASETS, DatasetOptions, load_dataset
from benchmark.errors import DataError

needs_omniglot = pytest.mark.skipif(not OMNIGLOT.is_dir(), reason=f"Omniglot data not at {OMNIGLOT}")


def make_folder(root: Path) -> Path:
    for c, name in enumerate(["cat", "dog", "emu"]):
        (root / name).mkdir(parents=True)
        for i in range(3):
            Image.fromarray(np.full((10, 12), 40 * c + i, dtype=np.uint8)).save(root / name / f"{i}.png")
    return root


def test_every_dataset_without_data_dir_is_a_clear_error() -> None:
    for name, spec in DATASETS.items():
        if spec.requires_data_dir:
            with pytest.raises(DataError, match=r"data director|data-dir|folder"):
                load_dataset(name, DatasetOptions(None, 28, Path("/nonexistent")))


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_dataset_names_missing_path(name: str, tmp_path: Path) -> None:
    if not DATASETS.get(name).requires_data_dir:
        pytest.skip("embedded dataset: needs no files")
    with pytest.raises(DataError) as err:
        load_dataset(name, DatasetOptions(tmp_path / "empty", 28, tmp_path / "cache"))
    assert "empty" in str(err.value)  # the path searched is named


# Loaders of the standard photo layouts are tested on generated fixture trees in
# test_data_standard.py; here: the in-memory datasets that the CPU budgets train on.
FIXTURES: dict[str, Callable[[Path], Path | None]] = {
    "glyphs": lambda tmp: None,
    "folder": make_folder,
}
if OMNIGLOT.is_dir():
    FIXTURES["omniglot"] = lambda tmp: OMNIGLOT


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_loaded_dataset_contract(name: str, tmp_path: Path, cache_dir: Path) -> None:
    data_dir = FIXTURES[name](tmp_path)
    ds = load_dataset(name, DatasetOptions(data_dir, 16, cache_dir))
    assert ds.images.dtype == torch.uint8 and ds.images.ndim == 4 and ds.images.shape[2:] == (16, 16)
    assert ds.labels.dtype == np.int64 and len(ds.labels) == len(ds.images)
    sub = ds.subset(ds.classes()[:2].tolist())
    assert set(sub.labels.tolist()) == set(ds.classes()[:2].tolist())
    again = load_dataset(name, DatasetOptions(data_dir, 16, cache_dir))
    assert ds.fingerprint() == again.fingerprint()


def test_glyphs(cache_dir: Path) -> None:
    ds = load_dataset("glyphs", DatasetOptions(None, 28, cache_dir))
    classes, counts = np.unique(ds.labels, return_counts=True)
    assert 300 <= len(classes) <= 700 and set(counts.tolist()) == {32}
    # No two classes render identically (look-alikes such as Latin A / Greek Alpha were dropped).
    means = torch.stack([ds.images[torch.from_numpy(ds.labels == c)].float().mean(0) for c in classes])
    flat = means.flatten(1)
    dist = torch.cdist(flat, flat) + torch.eye(len(classes)) * 1e9
    assert float(dist.min()) > 0


@needs_omniglot
def test_omniglot_real_data(cache_dir: Path) -> None:
    ds = load_dataset("omniglot", DatasetOptions(OMNIGLOT, 28, cache_dir))
    classes, counts = np.unique(ds.labels, return_counts=True)
    assert len(classes) == 242 and set(counts.tolist()) == {20}  # Greek/Latin de-duplicated
    assert ds.images.float().mean() < 128  # strokes bright on dark background


def test_omniglot_extracted_folder_layout(tmp_path: Path, cache_dir: Path) -> None:
    char = tmp_path / "images_background" / "Alpha" / "character01"
    char.mkdir(parents=True)
    for drawer in (1, 2):
        Image.fromarray(np.full((105, 105), 255, dtype=np.uint8)).save(char / f"0007_{drawer:02d}.png")
    ds = load_dataset("omniglot", DatasetOptions(tmp_path, 28, cache_dir))
    assert ds.labels.tolist() == [7, 7] and int(ds.images.max()) == 0  # white paper -> dark


def test_folder_ids_and_names(tmp_path: Path, cache_dir: Path) -> None:
    ds = load_dataset("folder", DatasetOptions(make_folder(tmp_path / "tree"), 8, cache_dir))
    assert ds.labels.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert dict(ds.class_names) == {0: "cat", 1: "dog", 2: "emu"}
    assert ds.images.shape == (9, 1, 8, 8)


def test_folder_rgb(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "a").mkdir()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "a" / "x.png")
    assert load_dataset("folder", DatasetOptions(tmp_path, 8, cache_dir)).images.shape == (1, 3, 8, 8)
