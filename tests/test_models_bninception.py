"""BN-Inception: Cadene-compatible state dict, weight loading, output shape and input conversion."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from benchmark.errors import ConfigError
from benchmark.models.bninception import BNINCEPTION_INPUT, BNINCEPTION_SPEC, BNInception, build_bninception
from benchmark.models.trunks import load_trunk_weights

torch.set_num_threads(1)

# Table 1 of Ioffe & Szegedy (2015), written out independently of the module under test:
# #1x1, #3x3 reduce, #3x3, double #3x3 reduce, double #3x3, pool projection (0 = pass-through).
INCEPTION_TABLE = {
    "3a": (64, 64, 64, 64, 96, 32),
    "3b": (64, 64, 96, 64, 96, 64),
    "3c": (0, 128, 160, 64, 96, 0),
    "4a": (224, 64, 96, 96, 128, 128),
    "4b": (192, 96, 128, 96, 128, 128),
    "4c": (160, 128, 160, 128, 160, 128),
    "4d": (96, 128, 192, 160, 192, 128),
    "4e": (0, 128, 192, 192, 256, 0),
    "5a": (352, 192, 320, 160, 224, 128),
    "5b": (352, 192, 320, 192, 224, 128),
}

# A handful of keys of bn_inception-52deb4733.pth with their shapes, typed in by hand.
KNOWN_CADENE_KEYS = {
    "conv1_7x7_s2.weight": (64, 3, 7, 7),
    "conv1_7x7_s2.bias": (64,),
    "conv1_7x7_s2_bn.running_mean": (64,),
    "conv2_3x3.weight": (192, 64, 3, 3),
    "inception_3a_1x1.weight": (64, 192, 1, 1),
    "inception_3c_3x3.weight": (160, 128, 3, 3),
    "inception_4e_double_3x3_2.weight": (256, 256, 3, 3),
    "inception_5a_1x1.weight": (352, 1056, 1, 1),
    "inception_5b_pool_proj.weight": (128, 1024, 1, 1),
    "inception_5b_pool_proj_bn.running_var": (128,),
    "last_linear.weight": (1000, 1024),
    "last_linear.bias": (1000,),
}


def expected_cadene_shapes() -> dict[str, tuple[int, ...]]:
    """Every key of the Cadene weights file and its shape, derived from the paper's table."""
    convs: list[tuple[str, int, int, int]] = [
        ("conv1_7x7_s2", 3, 64, 7),
        ("conv2_3x3_reduce", 64, 64, 1),
        ("conv2_3x3", 64, 192, 3),
    ]
    cin = 192
    for block, (c1, r3, c3, rd, cd, proj) in INCEPTION_TABLE.items():
        p = f"inception_{block}"
        if c1:
            convs.append((f"{p}_1x1", cin, c1, 1))
        convs += [(f"{p}_3x3_reduce", cin, r3, 1), (f"{p}_3x3", r3, c3, 3)]
        convs += [(f"{p}_double_3x3_reduce", cin, rd, 1), (f"{p}_double_3x3_1", rd, cd, 3)]
        convs.append((f"{p}_double_3x3_2", cd, cd, 3))
        if proj:
            convs.append((f"{p}_pool_proj", cin, proj, 1))
        cin = c1 + c3 + cd + (proj if proj else cin)
    assert cin == 1024
    shapes: dict[str, tuple[int, ...]] = {}
    for name, i, o, k in convs:
        shapes[f"{name}.weight"] = (o, i, k, k)
        shapes[f"{name}.bias"] = (o,)
        for stat in ("weight", "bias", "running_mean", "running_var"):
            shapes[f"{name}_bn.{stat}"] = (o,)
    shapes["last_linear.weight"] = (1000, 1024)
    shapes["last_linear.bias"] = (1000,)
    return shapes


def fake_cadene_state_dict(seed: int = 0) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    state = {k: torch.randn(s, generator=gen) for k, s in expected_cadene_shapes().items()}
    for key in state:
        if key.endswith("running_var"):
            state[key] = state[key].abs() + 0.5
    return state


def test_state_dict_keys_and_shapes_match_cadene() -> None:
    own = BNInception(num_classes=1000).state_dict()
    own_shapes = {k: tuple(v.shape) for k, v in own.items() if not k.endswith("num_batches_tracked")}
    assert own_shapes == expected_cadene_shapes()
    for key, shape in KNOWN_CADENE_KEYS.items():
        assert own_shapes[key] == shape, key
    # The input mean is a non-persistent buffer: it must not add a key the weights file lacks.
    assert not any("input_mean" in k for k in own)


def test_cadene_weights_load_through_load_trunk_weights(tmp_path: Path) -> None:
    state = fake_cadene_state_dict()
    path = tmp_path / "bn_inception-52deb4733.pth"
    torch.save(state, path)
    trunk, dim = build_bninception(3)
    assert dim == 1024
    load_trunk_weights(trunk, path)
    loaded = trunk.state_dict()
    for key in ("conv1_7x7_s2.weight", "inception_3a_1x1.weight", "inception_5b_pool_proj_bn.running_var"):
        assert torch.equal(loaded[key], state[key])
    # Grayscale: the RGB first convolution is averaged over its input channels.
    gray, _ = build_bninception(1)
    load_trunk_weights(gray, path)
    assert torch.allclose(
        gray.state_dict()["conv1_7x7_s2.weight"], state["conv1_7x7_s2.weight"].mean(1, keepdim=True)
    )


def test_wrong_weights_are_rejected(tmp_path: Path) -> None:
    state = fake_cadene_state_dict()
    del state["inception_4a_1x1.weight"]
    path = tmp_path / "broken.pth"
    torch.save(state, path)
    with pytest.raises(ConfigError, match="do not fit"):
        load_trunk_weights(build_bninception(3)[0], path)


@torch.no_grad()
def test_forward_gives_1024_d_features_at_227_and_224() -> None:
    trunk, dim = build_bninception(3)
    trunk.eval()
    x = torch.rand(2, 3, 227, 227) * 2 - 1
    assert trunk(x).shape == (2, dim) == (2, 1024)
    assert trunk(x[:, :, :224, :224]).shape == (2, 1024)


def test_parameter_count() -> None:
    trunk, _ = build_bninception(3)
    n_trunk = sum(p.numel() for p in trunk.parameters())
    assert 10_000_000 < n_trunk < 10_600_000
    n_full = sum(p.numel() for p in BNInception(num_classes=1000).parameters())
    assert n_full - n_trunk == 1024 * 1000 + 1000


@torch.no_grad()
def test_dmlbench_input_is_converted_to_caffe_convention() -> None:
    dml = BNInception(input_convention="dmlbench").eval()
    caffe = BNInception(input_convention="caffe").eval()
    caffe.load_state_dict(dml.state_dict())
    rgb = torch.rand(2, 3, 64, 64) * 2 - 1  # dmlbench batches: RGB in [-1, 1]
    bgr_0_255 = ((rgb + 1) * 127.5).flip(1) - torch.tensor(BNINCEPTION_INPUT.mean).view(1, 3, 1, 1)
    torch.testing.assert_close(dml(rgb), caffe(bgr_0_255), rtol=1e-4, atol=1e-4)


def test_input_convention_and_spec() -> None:
    assert BNINCEPTION_INPUT.channel_order == "BGR"
    assert BNINCEPTION_INPUT.mean == (104.0, 117.0, 128.0) and BNINCEPTION_INPUT.value_range == (0.0, 255.0)
    assert BNINCEPTION_SPEC.name == "bninception" and BNINCEPTION_SPEC.has_public_weights
    assert BNINCEPTION_SPEC.build is build_bninception
    with pytest.raises(ConfigError, match="2 input channels"):
        build_bninception(2)
