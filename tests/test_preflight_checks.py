"""The torch-free checks ``dmlbench run`` makes before importing torch (issue 31, item 8): dataset
layouts, weights file formats, --storage URLs and option values, as pure functions."""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from benchmark.config import RunConfig
from benchmark.data import DATASETS, DatasetOptions, DatasetSpec, ImageDataset
from benchmark.data.layouts import (
    CUB_LAYOUT,
    STANDARD_LAYOUTS,
    check_folder_dir,
    check_omniglot_dir,
    find_root,
)
from benchmark.errors import ConfigError, DataError
from benchmark.models.weights_format import check_weights_format
from benchmark.option_checks import validate_training_options
from benchmark.protocol.request import RunRequest, preflight
from benchmark.search.options import check_storage_url

REPO = Path(__file__).resolve().parent.parent


# -- dataset layouts --------------------------------------------------------------------------------


def test_every_dataset_that_reads_files_declares_a_layout_check() -> None:
    for name in DATASETS.names():
        spec = DATASETS.get(name)
        if spec.requires_data_dir:
            assert callable(spec.check_data_dir), name


def test_find_root_names_the_missing_markers_and_every_folder_searched(tmp_path: Path) -> None:
    (tmp_path / "CUB_200_2011").mkdir()
    (tmp_path / "CUB_200_2011" / "images.txt").write_text("")
    with pytest.raises(DataError) as info:
        find_root(tmp_path, CUB_LAYOUT)
    message = str(info.value)
    assert f"{tmp_path}/CUB_200_2011 lacks image_class_labels.txt, images" in message
    assert f"one of {tmp_path}, {tmp_path}/CUB_200_2011," in message and "caltech.edu" in message
    (tmp_path / "CUB_200_2011" / "image_class_labels.txt").write_text("")
    (tmp_path / "CUB_200_2011" / "images").mkdir()
    assert find_root(tmp_path, CUB_LAYOUT) == tmp_path / "CUB_200_2011"
    with pytest.raises(DataError, match=r"not found \(no such folder\)"):
        find_root(tmp_path / "nowhere", CUB_LAYOUT)


@pytest.mark.parametrize("name", sorted(STANDARD_LAYOUTS))
def test_the_early_check_and_the_loader_refuse_an_empty_folder_alike(name: str, tmp_path: Path) -> None:
    """The check runs before torch; the loader (after it) finds its files with the same function."""
    spec = DATASETS.get(name)
    assert spec.check_data_dir is not None
    with pytest.raises(DataError) as early:
        spec.check_data_dir(tmp_path)
    with pytest.raises(DataError) as loader:
        spec.load(DatasetOptions(tmp_path, 32, tmp_path / "cache"))
    assert str(early.value) == str(loader.value)
    assert f"Dataset {name!r}" in str(early.value) and "not found" in str(early.value)


def test_omniglot_check(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=f"No Omniglot data in {tmp_path}: expected images_background"):
        check_omniglot_dir(tmp_path)
    with pytest.raises(DataError, match=r"\(no such folder\)"):
        check_omniglot_dir(tmp_path / "nowhere")
    (tmp_path / "images_background.zip").write_bytes(b"PK\x03\x04 cut short")
    with pytest.raises(DataError, match=r"Cannot read the Omniglot zip .*images_background\.zip"):
        check_omniglot_dir(tmp_path)
    with zipfile.ZipFile(tmp_path / "images_background.zip", "w") as zf:
        zf.writestr("images_background/Latin/character01/0001_01.png", b"")
    check_omniglot_dir(tmp_path)  # names only: the empty PNG is the loader's to refuse


def test_folder_check(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=f"{tmp_path}/nowhere does not exist"):
        check_folder_dir(tmp_path / "nowhere")
    (tmp_path / "file.txt").write_text("")
    with pytest.raises(DataError, match=r"file\.txt is not a directory"):
        check_folder_dir(tmp_path / "file.txt")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "notes.txt").write_text("")
    with pytest.raises(DataError, match=f"No images found in {tmp_path}"):
        check_folder_dir(tmp_path)
    (tmp_path / "a" / "x.PNG").write_bytes(b"")
    check_folder_dir(tmp_path)


def _never_loaded(options: DatasetOptions) -> ImageDataset:
    """A plugin dataset's loader that preflight, which loads no data, never calls."""
    raise AssertionError("preflight loaded the dataset")


def test_a_plugin_dataset_declares_its_own_check_and_preflight_calls_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Path] = []

    def check(data_dir: Path) -> None:
        seen.append(data_dir)
        raise DataError(f"{data_dir} lacks labels.csv")

    spec = DatasetSpec("layoutplugin", "a plugin dataset", True, _never_loaded, {}, check)
    monkeypatch.setitem(DATASETS._items, "layoutplugin", spec)
    request = RunRequest(
        loss="contrastive",
        dataset="layoutplugin",
        data_dir=str(tmp_path),
        budget="smoke",
        out=tmp_path / "runs",
        results_dir=tmp_path / "res",
    )
    with pytest.raises(DataError, match=r"lacks labels\.csv"):
        preflight(request)
    assert seen == [tmp_path.resolve()]


def test_a_plugin_dataset_check_must_be_callable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The check is deliberately not callable: that is what preflight must reject.
    spec = DatasetSpec("badcheck", "d", True, _never_loaded, {}, "not callable")  # type: ignore[arg-type]
    monkeypatch.setitem(DATASETS._items, "badcheck", spec)
    request = RunRequest(
        loss="contrastive",
        dataset="badcheck",
        data_dir=str(tmp_path),
        budget="smoke",
        out=tmp_path / "runs",
        results_dir=tmp_path / "res",
    )
    with pytest.raises(
        ConfigError, match=r"'badcheck': DatasetSpec\.check_data_dir must be None or callable"
    ):
        preflight(request)


# -- weights files ----------------------------------------------------------------------------------


def test_files_torch_save_writes_pass_the_format_check(tmp_path: Path) -> None:
    state = {"w": torch.zeros(2)}
    torch.save(state, tmp_path / "new.pth")
    torch.save(state, tmp_path / "legacy.pth", _use_new_zipfile_serialization=False)
    check_weights_format(tmp_path / "new.pth")
    check_weights_format(tmp_path / "legacy.pth")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    safetensors_torch.save_file(state, tmp_path / "w.safetensors")
    check_weights_format(tmp_path / "w.safetensors")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("text.pth", b"these are not weights\n", "is not a PyTorch checkpoint (it starts with b'these ar'"),
        ("empty.pth", b"", "is empty (0 bytes)"),
        ("plain.pkl", pickle.dumps({"w": [1.0]}, protocol=4), "(a plain pickle, not torch.save's format"),
        ("cut.pth", b"PK\x03\x04 a zip cut short", "(a damaged zip archive"),
        ("w.safetensors", b"not a safetensors file", "is not a readable safetensors file"),
        ("big.safetensors", struct.pack("<Q", 10**12) + b"{}", "is not a readable safetensors file"),
    ],
)
def test_the_format_check_refuses_what_torch_cannot_read(
    name: str, content: bytes, message: str, tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        check_weights_format(path)
    assert str(path) in str(info.value) and message in str(info.value)


def test_a_zip_without_torch_records_is_refused_naming_its_members(tmp_path: Path) -> None:
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x/data.pkl", b"")  # data.pkl without version: not torch.save's layout
    with pytest.raises(ConfigError, match=r"a zip archive but not a PyTorch checkpoint .*holds x/data.pkl\)"):
        check_weights_format(path)


def test_a_state_dict_of_another_network_is_refused_before_any_data(tmp_path: Path) -> None:
    from benchmark.models.trunks import check_weights_file

    path = tmp_path / "other.pth"
    torch.save({"fc.weight": torch.zeros(2, 2), "layer9.weight": torch.zeros(3)}, path)
    with pytest.raises(ConfigError) as info:
        check_weights_file(path, "smallcnn")
    message = str(info.value)
    assert "do not fit the trunk: missing ['features.0.weight'" in message
    assert "unexpected ['layer9.weight']" in message and "fc.weight" not in message  # a classifier key


def test_the_fit_check_accepts_weights_of_either_channel_count(tmp_path: Path) -> None:
    """The dataset's channels are not known before it is loaded; the loader averages RGB weights."""
    from benchmark.models.registry import trunk_spec
    from benchmark.models.trunks import build_model, check_weights_file

    for channels in (1, 3):
        path = tmp_path / f"smallcnn{channels}.pth"
        torch.save(trunk_spec("smallcnn").build(channels)[0].state_dict(), path)
        check_weights_file(path, "smallcnn")
    build_model("smallcnn", 1, 8, pretrained=True, weights_path=str(tmp_path / "smallcnn3.pth"), seed=0)
    # One grayscale channel into an RGB trunk cannot be loaded: a message, not a RuntimeError.
    with pytest.raises(ConfigError, match=r"wrong shape \['features.0.weight \(16, 1, 3, 3\)"):
        build_model("smallcnn", 3, 8, pretrained=True, weights_path=str(tmp_path / "smallcnn1.pth"), seed=0)


# -- --storage and option values --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("runs/study.journal", "--storage expects a database URL"),
        (
            "foo://me:s3cret@host/db",
            "--storage foo://me@host/db is not a database URL SQLAlchemy understands",
        ),
        ("postgresql+nodriver://h/db", "Can't load plugin: sqlalchemy.dialects:postgresql.nodriver"),
    ],
)
def test_storage_urls_are_checked_without_optuna(url: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_storage_url(url)
    assert message in str(info.value) and "s3cret" not in str(info.value)


def test_the_storage_check_imports_neither_optuna_nor_torch() -> None:
    code = (
        "import sys\nfrom benchmark.search.options import check_storage_url\n"
        "check_storage_url('sqlite:///x.db')\n"
        "print(sorted(m for m in ('optuna', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("pooling", "max", "model.pooling must be one of avg, avg+max, got 'max'"),
        ("embedder_init", "xavier", "model.embedder_init must be one of default, kaiming, got 'xavier'"),
    ],
)
def test_training_option_values_are_checked_without_torch(key: str, value: str, message: str) -> None:
    import dataclasses

    config = RunConfig()
    model = dataclasses.replace(config.model, pooling=value) if key == "pooling" else config.model
    if key == "embedder_init":
        model = dataclasses.replace(model, embedder_init=value)
    changed = dataclasses.replace(config, model=model)
    with pytest.raises(ConfigError) as info:
        validate_training_options(changed)
    assert str(info.value) == message + "."


def test_a_trunk_that_cannot_be_built_on_the_meta_device_is_built_on_the_cpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch import nn

    from benchmark.models.registry import TRUNKS, TrunkSpec
    from benchmark.models.trunks import check_weights_file

    def build(channels: int) -> tuple[nn.Module, int]:
        width = int(torch.tensor(4).item())  # .item() fails on a meta tensor
        return nn.Sequential(nn.Conv2d(channels, width, 3)), width

    monkeypatch.setitem(TRUNKS._items, "itemtrunk", TrunkSpec("itemtrunk", "needs .item()", build, False))
    path = tmp_path / "w.pth"
    torch.save(build(1)[0].state_dict(), path)
    check_weights_file(path, "itemtrunk")
    torch.save({"0.weight": torch.zeros(5, 1, 3, 3), "0.bias": torch.zeros(5)}, path)
    with pytest.raises(
        ConfigError, match=r"wrong shape \['0.weight \(5, 1, 3, 3\) \(trunk: \(4, 3, 3, 3\)\)"
    ):
        check_weights_file(path, "itemtrunk")
