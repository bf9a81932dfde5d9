"""Dataset contract tests over the registry, plus glyphs, Omniglot and folder specifics."""

from __future__ import annotations

import io
import zipfile
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
    # Size 16 as in the contract test, so the session cache is reused (a build takes seconds).
    ds = load_dataset("glyphs", DatasetOptions(None, 16, cache_dir))
    classes, counts = np.unique(ds.labels, return_counts=True)
    assert 300 <= len(classes) <= 700 and set(counts.tolist()) == {32}
    # No two classes render identically (look-alikes such as Latin A / Greek Alpha were dropped).
    means = torch.stack([ds.images[torch.from_numpy(ds.labels == c)].float().mean(0) for c in classes])
    flat = means.flatten(1)
    dist = torch.cdist(flat, flat) + torch.eye(len(classes)) * 1e9
    assert float(dist.min()) > 0


def test_glyphs_rebuild_is_byte_identical_and_replaces_stale_cache(tmp_path: Path, cache_dir: Path) -> None:
    cached = load_dataset("glyphs", DatasetOptions(None, 16, cache_dir))
    # A cache entry from other fonts/renderer (wrong "source" key) must be rebuilt, not trusted.
    stale = tmp_path / "glyphs-v1-16.npz"
    zeros = np.zeros((1, 1, 16, 16), dtype=np.uint8)
    np.savez(stale, images=zeros, labels=np.zeros(1, np.int64), source=np.array("other fonts"))
    fresh = load_dataset("glyphs", DatasetOptions(None, 16, tmp_path))
    assert torch.equal(cached.images, fresh.images) and np.array_equal(cached.labels, fresh.labels)
    assert len(np.load(stale)["labels"]) == len(fresh.labels)  # the stale file was overwritten
    # Class ids are code points; Latin letters survive, their Greek/Cyrillic twins do not.
    classes = set(fresh.classes().tolist())
    assert {ord("A"), ord("e"), ord("é"), ord("è"), ord("Ж")} <= classes
    assert not {ord("Α"), ord("А")} & classes
    assert fresh.class_names[ord("é")] == "é"


@needs_omniglot
def test_omniglot_real_data(cache_dir: Path) -> None:
    ds = load_dataset("omniglot", DatasetOptions(OMNIGLOT, 28, cache_dir))
    classes, counts = np.unique(ds.labels, return_counts=True)
    assert len(classes) == 242 and set(counts.tolist()) == {20}  # Greek/Latin de-duplicated
    assert ds.images.float().mean() < 128  # strokes bright on dark background


@needs_omniglot
def test_omniglot_labels_are_character_ids_from_file_names(cache_dir: Path) -> None:
    ids: set[int] = set()
    for path in sorted(OMNIGLOT.glob("images_background*.zip")):
        with zipfile.ZipFile(path) as zf:
            ids |= {int(Path(n).name.split("_")[0]) for n in zf.namelist() if n.endswith(".png")}
    ds = load_dataset("omniglot", DatasetOptions(OMNIGLOT, 28, cache_dir))
    assert set(ds.classes().tolist()) == ids and len(ids) == 242


def write_omniglot_zip(path: Path, top: str, members: dict[str, int]) -> None:
    """A zip in the official layout; each member is a 105x105 PNG of one grey value."""
    with zipfile.ZipFile(path, "w") as zf:
        for name, value in members.items():
            buffer = io.BytesIO()
            Image.fromarray(np.full((105, 105), value, dtype=np.uint8)).save(buffer, format="PNG")
            zf.writestr(f"{top}/{name}", buffer.getvalue())


def test_omniglot_deduplicates_characters_across_zips(tmp_path: Path, cache_dir: Path) -> None:
    shared = {"Greek/character01/0394_01.png": 255, "Greek/character01/0394_02.png": 255}
    write_omniglot_zip(tmp_path / "images_background_small1.zip", "images_background_small1", shared)
    write_omniglot_zip(
        tmp_path / "images_background_small2.zip",
        "images_background_small2",
        {**shared, "Tagalog/character17/0909_01.png": 0},
    )
    ds = load_dataset("omniglot", DatasetOptions(tmp_path, 8, cache_dir))
    assert ds.labels.tolist() == [394, 394, 909]
    assert int(ds.images[:2].max()) == 0 and int(ds.images[2].min()) == 255  # inverted: ink bright


def test_omniglot_corrupt_zip_is_a_data_error(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "images_evaluation.zip").write_bytes(b"not a zip")
    with pytest.raises(DataError, match=r"images_evaluation\.zip"):
        load_dataset("omniglot", DatasetOptions(tmp_path, 8, cache_dir))


def test_omniglot_empty_dir_names_layout_and_path(tmp_path: Path, cache_dir: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset("omniglot", DatasetOptions(tmp_path, 28, cache_dir))
    assert str(tmp_path) in str(err.value) and "images_background" in str(err.value)


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


def test_folder_grayscale_and_rgb_mixed_gives_rgb(tmp_path: Path, cache_dir: Path) -> None:
    for name, array in [("g", np.zeros((8, 8), np.uint8)), ("c", np.zeros((8, 8, 3), np.uint8))]:
        (tmp_path / name).mkdir()
        Image.fromarray(array).save(tmp_path / name / "x.png")
    ds = load_dataset("folder", DatasetOptions(tmp_path, 8, cache_dir))
    assert ds.images.shape == (2, 3, 8, 8) and dict(ds.class_names) == {0: "c", 1: "g"}


def test_folder_resizes_shorter_side_and_centre_crops(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "a").mkdir()
    wide = np.zeros((10, 30), np.uint8)
    wide[:, 10:20] = 255  # a bright middle third: the centre crop keeps (only) it
    Image.fromarray(wide).save(tmp_path / "a" / "x.png")
    ds = load_dataset("folder", DatasetOptions(tmp_path, 10, cache_dir))
    assert ds.images.shape == (1, 1, 10, 10) and int(ds.images[..., 2:8].min()) > 200


def test_folder_errors(tmp_path: Path, cache_dir: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("no images here")
    with pytest.raises(DataError, match="No images found"):
        load_dataset("folder", DatasetOptions(tmp_path, 8, cache_dir))
    (tmp_path / "a" / "broken.png").write_bytes(b"not a png")
    with pytest.raises(DataError, match=r"broken\.png"):
        load_dataset("folder", DatasetOptions(tmp_path, 8, cache_dir))


def test_rows_of_classes_keeps_order_and_names_missing_classes() -> None:
    from benchmark.data.base import rows_of_classes

    labels = np.array([3, 1, 3, 2, 1])
    assert rows_of_classes(labels, [1, 3], "Dataset 'x'").tolist() == [0, 1, 2, 4]
    assert rows_of_classes(labels, [], "Dataset 'x'").tolist() == []
    with pytest.raises(DataError, match=r"Dataset 'x' has no class\(es\) \[7\]; it has 3 classes"):
        rows_of_classes(labels, [2, 7], "Dataset 'x'")


@pytest.mark.parametrize("side", [40, 64])  # PIL warns above its limit, raises above twice it
def test_folder_refuses_a_decompression_bomb_stating_the_limit(
    side: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from benchmark.data.folder import load_folder

    for c in range(2):
        (tmp_path / "root" / f"c{c}").mkdir(parents=True)
        Image.new("L", (8, 8)).save(tmp_path / "root" / f"c{c}" / "small.png")
    bomb = tmp_path / "root" / "c1" / "bomb.png"
    Image.new("L", (side, side)).save(bomb)
    # The real limit is ~89 M pixels (a 20000x20000 PNG); a small one makes a small bomb.
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(DataError) as info:
        load_folder(DatasetOptions(tmp_path / "root", 16, tmp_path / "cache"))
    message = str(info.value)
    assert f"Image {bomb} is too large to decode" in message and "The decode limit is 1,000 pixels" in message
