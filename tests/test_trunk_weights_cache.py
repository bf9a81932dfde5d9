"""Pretrained ``timm:NAME`` trunk weights found offline in the Hugging Face hub / torch hub caches.

The caches are written here in the layouts timm fills when it downloads: the hub repository
``models--timm--NAME.TAG`` (refs/main -> snapshots/REV/model.safetensors -> blobs/SHA) for
timm >= 0.9, and ``$TORCH_HOME/hub/checkpoints/<URL file name>`` for timm's URL weights.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.models.trunks import (
    build_model,
    hf_hub_cache_dir,
    load_trunk_weights,
    lookup_cached_weights,
    trunk_spec,
)
from benchmark.protocol.mlrc_run import MLRCRun
from benchmark.protocol.request import RunRequest

timm = pytest.importorskip("timm", reason="optional extra dmlbench[timm] not installed")
safetensors_torch = pytest.importorskip("safetensors.torch")

# timm's tiny test model: its default pretrained tag lives only on the hub (no URL).
MODEL = "test_resnet"
REPO_ID = "timm/test_resnet.r160_in1k"
# A model with both a hub copy and a URL (the torch hub cache file name timm < 0.9 used).
URL_MODEL = "resnet10t"
URL_REPO_ID = "timm/resnet10t.c3_in1k"
URL_FILE = "resnet10t_176_c3-f3215ab1.pth"
REVISION = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Empty Hugging Face hub and torch hub caches under tmp_path: (hub cache, torch checkpoints)."""
    hub = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return hub, tmp_path / "torch" / "hub" / "checkpoints"


def timm_state(model: str, seed: int) -> dict[str, torch.Tensor]:
    """A full timm model's state dict (classifier included, as timm ships its checkpoints)."""
    torch.manual_seed(seed)
    net = timm.create_model(model, pretrained=False)
    return {k: v.contiguous() for k, v in net.state_dict().items()}


def write_hub_cache(
    hub: Path, repo_id: str, filename: str, state: dict[str, torch.Tensor], revision: str = REVISION
) -> Path:
    """Put ``state`` in the hub cache as huggingface_hub does; returns the snapshot path."""
    repo = hub / f"models--{repo_id.replace('/', '--')}"
    tmp = repo / "blobs" / "incoming"
    tmp.parent.mkdir(parents=True)
    if filename.endswith(".safetensors"):
        safetensors_torch.save_file(state, tmp)
    else:
        torch.save(state, tmp)
    blob = tmp.with_name(hashlib.sha256(tmp.read_bytes()).hexdigest())
    tmp.rename(blob)
    snapshot = repo / "snapshots" / revision / filename
    snapshot.parent.mkdir(parents=True)
    snapshot.symlink_to(os.path.relpath(blob, snapshot.parent))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)  # no newline: huggingface_hub reads it verbatim
    return snapshot


def resolved(model: str, **overrides: object) -> MLRCRun:
    """A resolved MLRC run (no compute) of trunk timm:MODEL with model.pretrained = true."""
    run = MLRCRun(
        RunRequest(
            loss="contrastive",
            budget="smoke",
            quiet=True,
            overrides={"model.trunk": f"timm:{model}", "model.pretrained": True, **overrides},
        )
    )
    run.resolve()
    return run


def assert_trunk_holds(trunk: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Every trunk tensor equals the checkpoint's (so nothing was left at its random init)."""
    own = trunk.state_dict()
    assert own, "empty trunk"
    for key, value in own.items():
        assert torch.equal(value, state[key]), key


def test_hub_cache_lookup_finds_the_default_tag_and_explicit_tags(caches: tuple[Path, Path]) -> None:
    hub, _ = caches
    snapshot = write_hub_cache(hub, REPO_ID, "model.safetensors", timm_state(MODEL, 0))
    for name in (f"timm:{MODEL}", f"timm:{MODEL}.r160_in1k"):
        lookup = lookup_cached_weights(trunk_spec(name))
        assert lookup.found == snapshot
        assert lookup.cache == "Hugging Face hub"
    # Another model's repository is not there.
    assert lookup_cached_weights(trunk_spec(f"timm:{URL_MODEL}")).found is None


def test_pretrained_timm_trunk_gets_exactly_the_cached_weights(caches: tuple[Path, Path]) -> None:
    hub, _ = caches
    state = timm_state(MODEL, 1)
    snapshot = write_hub_cache(hub, REPO_ID, "model.safetensors", state)
    run = resolved(MODEL)
    # Recorded as the weights file, like --trunk-weights (the run record holds the config).
    assert run.config.model.trunk_weights == str(snapshot)
    model = build_model(
        f"timm:{MODEL}", 3, 8, pretrained=True, weights_path=run.config.model.trunk_weights, seed=7
    )
    assert_trunk_holds(model.trunk, state)
    assert not any(k.startswith("fc.") for k in model.trunk.state_dict())


def test_pickled_hub_file_is_used_when_there_is_no_safetensors(caches: tuple[Path, Path]) -> None:
    hub, _ = caches
    state = timm_state(MODEL, 2)
    snapshot = write_hub_cache(hub, REPO_ID, "pytorch_model.bin", state)
    assert lookup_cached_weights(trunk_spec(f"timm:{MODEL}")).found == snapshot
    model = build_model(f"timm:{MODEL}", 3, 8, pretrained=True, weights_path=str(snapshot), seed=7)
    assert_trunk_holds(model.trunk, state)


def test_hub_cache_follows_hf_home_when_hf_hub_cache_is_unset(
    caches: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    assert hf_hub_cache_dir() == tmp_path / "home" / "hub"
    snapshot = write_hub_cache(tmp_path / "home" / "hub", REPO_ID, "model.safetensors", timm_state(MODEL, 0))
    assert lookup_cached_weights(trunk_spec(f"timm:{MODEL}")).found == snapshot


def test_url_weights_in_the_torch_hub_cache_and_hub_copy_first(caches: tuple[Path, Path]) -> None:
    hub, checkpoints = caches
    checkpoints.mkdir(parents=True)
    torch_state = timm_state(URL_MODEL, 3)
    torch.save(torch_state, checkpoints / URL_FILE)
    run = resolved(URL_MODEL)
    assert run.config.model.trunk_weights == str(checkpoints / URL_FILE)
    model = build_model(
        f"timm:{URL_MODEL}", 3, 8, pretrained=True, weights_path=run.config.model.trunk_weights, seed=7
    )
    assert_trunk_holds(model.trunk, torch_state)
    # With a hub copy too, timm's own order: the hub copy.
    snapshot = write_hub_cache(hub, URL_REPO_ID, "model.safetensors", timm_state(URL_MODEL, 4))
    assert resolved(URL_MODEL).config.model.trunk_weights == str(snapshot)


def test_explicit_weights_file_wins_over_the_cache(caches: tuple[Path, Path], tmp_path: Path) -> None:
    hub, _ = caches
    write_hub_cache(hub, REPO_ID, "model.safetensors", timm_state(MODEL, 0))
    mine = tmp_path / "mine.safetensors"
    mine_state = timm_state(MODEL, 5)
    safetensors_torch.save_file(mine_state, mine)
    run = resolved(MODEL, **{"model.trunk_weights": str(mine)})
    assert run.config.model.trunk_weights == str(mine)
    model = build_model(
        f"timm:{MODEL}", 3, 8, pretrained=True, weights_path=run.config.model.trunk_weights, seed=7
    )
    assert_trunk_holds(model.trunk, mine_state)


def test_empty_caches_are_an_error_naming_what_was_searched(caches: tuple[Path, Path]) -> None:
    hub, checkpoints = caches
    with pytest.raises(ConfigError) as err:
        resolved(URL_MODEL)
    message = str(err.value)
    for fragment in (
        "model.pretrained = true for trunk 'timm:resnet10t'",
        "model.safetensors, pytorch_model.bin",
        URL_REPO_ID,
        f"Hugging Face hub cache {hub}",
        f"{URL_FILE} is in {checkpoints}",
        "--trunk-weights",
    ):
        assert fragment in message, (fragment, message)
    # A cached revision that refs/main does not point to is not the one timm would load.
    write_hub_cache(hub, REPO_ID, "model.safetensors", timm_state(MODEL, 0))
    (hub / f"models--{REPO_ID.replace('/', '--')}" / "refs" / "main").write_text("f" * 40)
    with pytest.raises(
        ConfigError, match=r"none of model\.safetensors, pytorch_model\.bin of timm/test_resnet"
    ):
        resolved(MODEL)


def test_unknown_pretrained_tag_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"no pretrained tag 'resnet10t\.nope'; its tags: resnet10t\.c3_in1k"
    ):
        trunk_spec("timm:resnet10t.nope")


def test_timm_classifier_names_are_skipped_on_load(tmp_path: Path) -> None:
    # LeViT's cfg names head.linear and head_dist.linear; num_classes=0 drops head_dist's bn too.
    spec = trunk_spec("timm:levit_128s")
    assert spec.head_names == ("head", "head_dist")
    state = timm_state("levit_128s", 6)
    path = tmp_path / "levit.safetensors"
    safetensors_torch.save_file(state, path)
    trunk, _ = spec.build(3)
    load_trunk_weights(trunk, path, spec.head_names)
    assert_trunk_holds(trunk, state)
    with pytest.raises(ConfigError, match=r"unexpected \['head_dist\."):
        load_trunk_weights(spec.build(3)[0], path)


def test_unreadable_safetensors_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.safetensors"
    path.write_bytes(b"not a safetensors file")
    with pytest.raises(ConfigError, match=r"broken\.safetensors is not a readable safetensors file"):
        build_model(f"timm:{MODEL}", 3, 8, pretrained=True, weights_path=str(path), seed=0)
