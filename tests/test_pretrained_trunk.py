"""The built-in pretrained trunk: reproducible generation, checksum at load, disjoint source classes."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import unicodedata
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import OMNIGLOT, REPO

from benchmark.data.glyphs import is_class_candidate
from benchmark.data.registry import DATASETS
from benchmark.errors import ConfigError
from benchmark.models import pretrained
from benchmark.models.pretrained import (
    BUILTIN_WEIGHTS,
    LOOKALIKE_DATASETS,
    OMNIGLOT_ALPHABET_BLOCKS,
    is_source_candidate,
    sha256_of,
    verified_path,
    weights_record,
)
from benchmark.models.trunks import build_model

SPEC = BUILTIN_WEIGHTS.get("smallcnn-symbols")
NATURAL_IMAGE_DATASETS = {"cub200", "cars196", "sop", "inshop", "cifar100", "food101", "tinyimagenet"}
BUILTIN = "builtin:smallcnn-symbols"


# Every registered built-in: smallcnn-symbols (made before the Omniglot look-alike filter; the
# earlier mini boards' weights), smallcnn-symbols-v2 (filtered) and -v3 (filtered, v1's step
# count; mini's).
ALL_BUILTINS = BUILTIN_WEIGHTS.names()
SCRIPT_NAME = "smallcnn-symbols-v2"  # what benchmarks/pretrain_trunk.py writes now


def _provenance(name: str = SPEC.name) -> dict[str, Any]:
    spec = BUILTIN_WEIGHTS.get(name)
    provenance: dict[str, Any] = json.loads((pretrained.WEIGHTS_DIR / spec.provenance_file).read_text())
    return provenance


def _source_codepoints(name: str = SPEC.name) -> list[int]:
    return [int(c[2:], 16) for c in _provenance(name)["source"]["classes"]]


def _run_tiny(out: Path) -> str:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pretrain_trunk.py"), "--tiny", "--out", str(out)],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    return sha256_of(out / f"{SCRIPT_NAME}.pt")


def test_pretraining_script_reproduces_its_checksum_across_processes(tmp_path: Path) -> None:
    first, second = _run_tiny(tmp_path / "a"), _run_tiny(tmp_path / "b")
    assert first == second
    prov = json.loads((tmp_path / "a" / f"{SCRIPT_NAME}.json").read_text())
    assert prov["sha256"] == first
    classes = prov["source"]["classes"]
    assert prov["source"]["class_list_sha256"] == hashlib.sha256("\n".join(classes).encode()).hexdigest()
    # The file is a trunk state dict that loads into smallcnn.
    model = build_model(
        "smallcnn", 1, 128, pretrained=True, weights_path=str(tmp_path / "a" / f"{SCRIPT_NAME}.pt"), seed=0
    )
    state = torch.load(tmp_path / "a" / f"{SCRIPT_NAME}.pt", weights_only=True)
    assert torch.equal(model.trunk.state_dict()["features.0.weight"], state["features.0.weight"])


def _script() -> Any:
    spec = importlib.util.spec_from_file_location("pretrain_trunk", REPO / "benchmarks" / "pretrain_trunk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_recipe_steps_of_the_provenances_written_before_steps_were_recorded() -> None:
    # v1: 547 classes x 12 faces x 3 renderings = 19692 images, 153 full batches of 128, 6 epochs;
    # v2: 87 classes, 3132 images, 24 batches: the 6x fewer steps that v3 makes up for.
    steps = _script().recipe_steps
    assert steps(_provenance("smallcnn-symbols")) == 6 * 153 == 918
    assert steps(_provenance("smallcnn-symbols-v2")) == 6 * 24 == 144
    v3 = _provenance("smallcnn-symbols-v3")
    assert steps(v3) == v3["training"]["steps_matched_to"]["steps"] == 918
    assert (
        v3["source"]["class_list_sha256"] == _provenance("smallcnn-symbols-v2")["source"]["class_list_sha256"]
    )


def test_pretraining_script_trains_the_steps_asked_for(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    args = ["--tiny", "--out", str(tmp_path), "--name", "tiny", "--train-renderings", "2", "--steps", "9"]
    args += ["--batch-size", "16"]
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "pretrain_trunk.py"), *args],
        check=True,
        env=env,
        capture_output=True,
        timeout=600,
    )
    prov = json.loads((tmp_path / "tiny.json").read_text())
    assert prov["name"] == "tiny" and prov["sha256"] == sha256_of(tmp_path / "tiny.pt")
    # --tiny: at most 24 classes x 2 faces x 2 renderings = 96 images, at most 6 batches of 16 an
    # epoch: 9 steps take two epochs or more, the last one cut short.
    training = prov["training"]
    assert training["steps"] == 9 and len(training["epoch_losses"]) == training["epochs"] >= 2
    assert training["epochs"] == -(-9 // training["steps_per_epoch"])
    assert prov["source"]["n_train_images"] == 2 * prov["source"]["n_held_out_images"]


@pytest.mark.parametrize("name", ALL_BUILTINS)
def test_committed_weights_match_registry_and_provenance(name: str) -> None:
    spec, builtin, prov = BUILTIN_WEIGHTS.get(name), f"builtin:{name}", _provenance(name)
    assert prov["name"] == name
    assert sha256_of(verified_path(spec)) == spec.sha256 == prov["sha256"]
    classes = prov["source"]["classes"]
    assert len(classes) == prov["source"]["n_classes"] == len(set(classes))
    assert prov["source"]["class_list_sha256"] == hashlib.sha256("\n".join(classes).encode()).hexdigest()
    record = weights_record("smallcnn", True, builtin)
    assert record is not None and record["sha256"] == spec.sha256 and record["provenance"] == prov
    assert weights_record("smallcnn", False, builtin) is None


def test_a_corrupted_builtin_file_is_refused_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    copy = tmp_path / "weights"
    shutil.copytree(pretrained.WEIGHTS_DIR, copy)
    data = bytearray((copy / SPEC.file).read_bytes())
    data[len(data) // 2] ^= 0x01  # one flipped bit in the tensor data
    (copy / SPEC.file).write_bytes(bytes(data))
    monkeypatch.setattr(pretrained, "WEIGHTS_DIR", copy)
    with pytest.raises(ConfigError, match="sha256"):
        build_model("smallcnn", 1, 128, pretrained=True, weights_path=BUILTIN, seed=0)
    with pytest.raises(ConfigError, match="sha256"):
        weights_record("smallcnn", True, BUILTIN)
    (copy / SPEC.file).unlink()
    with pytest.raises(ConfigError, match="missing"):
        build_model("smallcnn", 1, 128, pretrained=True, weights_path=BUILTIN, seed=0)


def test_builtin_weights_load_into_the_trunk_and_name_errors_are_clear() -> None:
    model = build_model("smallcnn", 1, 128, pretrained=True, weights_path=BUILTIN, seed=0)
    state = torch.load(verified_path(SPEC), weights_only=True)
    for key, value in state.items():
        assert torch.equal(model.trunk.state_dict()[key], value), key
    with pytest.raises(ConfigError, match="builtin:smallcnn-symbols"):
        weights_record("smallcnn", True, "builtin:nope")
    with pytest.raises(ConfigError, match=r"model\.trunk"):
        weights_record("resnet18", True, BUILTIN)


# --- disjointness from every evaluated dataset --------------------------------------------------
@pytest.mark.parametrize("name", ALL_BUILTINS)
def test_source_classes_are_symbols_of_the_source_blocks(name: str) -> None:
    for cp in _source_codepoints(name):
        assert is_source_candidate(cp), f"U+{cp:04X}"
        assert unicodedata.category(chr(cp)).startswith("S"), f"U+{cp:04X} is not a symbol"


def _omniglot_alphabets(root: Path) -> set[str]:
    """Alphabet folder names of the Omniglot sources (zips or folders) under ``root``."""
    names: set[str] = set()
    for source in sorted(root.glob("images_*")):
        members = (
            zipfile.ZipFile(source).namelist()
            if source.suffix == ".zip"
            else [str(p.relative_to(root)) for p in source.rglob("*.png")]
        )
        names |= {Path(m).parts[-3] for m in members if m.endswith(".png")}
    return names


@pytest.mark.parametrize("name", ALL_BUILTINS)
def test_source_classes_are_disjoint_from_every_registered_dataset(name: str) -> None:
    source = _source_codepoints(name)
    assert source
    checked = set()
    for name in DATASETS.names():
        if name == "glyphs":
            # glyphs' classes are the code points is_class_candidate accepts (minus look-alikes).
            assert not [f"U+{cp:04X}" for cp in source if is_class_candidate(cp)]
        elif name == "omniglot":
            # Omniglot's classes are characters of its 50 alphabets: no source code point may lie in
            # the Unicode blocks of their scripts (invented scripts have none, and source classes
            # are symbols, never letters, by test_source_classes_are_symbols_of_the_source_blocks).
            assert len(OMNIGLOT_ALPHABET_BLOCKS) == 50
            for alphabet, blocks in OMNIGLOT_ALPHABET_BLOCKS.items():
                inside = [f"U+{cp:04X}" for cp in source for lo, hi in blocks if lo <= cp <= hi]
                assert not inside, (alphabet, inside)
        elif name == "svhn":
            # House-number digits 0-9: no source class is a digit (nor any other non-symbol).
            assert not [cp for cp in source if unicodedata.category(chr(cp)) == "Nd" or chr(cp).isdigit()]
        elif name in NATURAL_IMAGE_DATASETS:
            # Photographs of birds, cars, products, clothes, food, objects: their classes are objects,
            # the source's are typographic symbols, so no identity can be shared; nothing finer to check.
            pass
        elif name == "folder":
            # A user's own image folders: no class identity to compare with. What holds is that the
            # source is rendered symbols (checked above), so a folder of natural images or of
            # letters shares no class with it; a folder of rendered symbols is the user's business.
            pass
        else:
            raise AssertionError(f"dataset {name!r} has no disjointness check against the pretraining source")
        checked.add(name)
    assert {"glyphs", "omniglot"} <= checked


def test_every_character_dataset_is_filtered_by_appearance() -> None:
    # The registered datasets whose classes are characters are those the source is filtered
    # against by appearance (tests/test_lookalike.py); svhn's digits are glyphs classes.
    characters = {"glyphs", "omniglot", "svhn"}
    assert set(DATASETS.names()) <= characters | NATURAL_IMAGE_DATASETS | {"folder"}
    assert set(LOOKALIKE_DATASETS) == characters - {"svhn"}


@pytest.mark.skipif(not OMNIGLOT.is_dir(), reason="the real Omniglot data is not on this machine")
def test_every_omniglot_alphabet_present_has_a_script_mapping() -> None:
    alphabets = _omniglot_alphabets(OMNIGLOT)
    assert alphabets
    assert not sorted(alphabets - set(OMNIGLOT_ALPHABET_BLOCKS))


def test_default_budget_fine_tunes_the_builtin_trunk() -> None:
    from benchmark.budgets import BUDGETS
    from benchmark.protocol.mlrc_run import MLRCRun
    from benchmark.protocol.request import RunRequest

    run = MLRCRun(RunRequest(loss="mfcont", budget="mini", quiet=True, device="cpu"))
    run.resolve()  # validates the built-in name, its trunk and the file's sha256
    m = run.config.model
    named = BUDGETS.get("mini").overrides["model.trunk_weights"]
    assert (m.trunk, m.pretrained, m.trunk_weights) == ("smallcnn", True, named)
    assert named.removeprefix("builtin:") in ALL_BUILTINS
    # The weights file is not a deviation from the paper; the trunk is.
    assert "model.trunk_weights" not in {d.key for d in run.deviations}
    assert "model.trunk" in {d.key for d in run.deviations}
