"""m-per-class sampler and batched augmentation."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from benchmark.data.augment import CHARACTER_AUGMENT, PAPER_AUGMENT, AugmentSpec, eval_batch, train_batch
from benchmark.data.sampler import MPerClassSampler
from benchmark.errors import ConfigError, DataError, DmlbenchError

# 40 classes with 1..10 images each.
LABELS = np.repeat(np.arange(40), np.arange(40) % 10 + 1)


@pytest.mark.parametrize("m", [1, 4])
def test_batches_have_m_per_class_and_distinct_classes(m: int) -> None:
    sampler = MPerClassSampler(LABELS, m, 32, np.random.default_rng(0))
    batches = sampler.sample(50)
    assert batches.shape == (50, 32) and batches.dtype == np.int64
    for batch in batches:
        classes, counts = np.unique(LABELS[batch], return_counts=True)
        assert len(classes) == 32 // m and set(counts.tolist()) == {m}
        for c in classes:
            idx = batch[LABELS[batch] == c]
            if np.count_nonzero(c == LABELS) >= m:  # replacement only for classes smaller than m
                assert len(set(idx.tolist())) == m


def test_sampler_is_deterministic_and_covers_classes() -> None:
    a = MPerClassSampler(LABELS, 4, 32, np.random.default_rng(7)).sample(20)
    b = MPerClassSampler(LABELS, 4, 32, np.random.default_rng(7)).sample(20)
    assert np.array_equal(a, b)
    assert set(LABELS[a].ravel().tolist()) == set(range(40))


def test_sampler_is_fast() -> None:
    sampler = MPerClassSampler(LABELS, 4, 32, np.random.default_rng(0))
    t = time.perf_counter()
    sampler.sample(100)
    # Not a timing assertion on a tight bound: guards against per-sample Python loops (100x slower).
    assert time.perf_counter() - t < 1.0


@pytest.mark.parametrize(("m", "batch"), [(3, 32), (1, 64)])
def test_sampler_errors_state_values(m: int, batch: int) -> None:
    with pytest.raises(DmlbenchError, match=str(batch)):
        MPerClassSampler(LABELS, m, batch, np.random.default_rng(0))


def test_sampler_error_types_and_edge_cases() -> None:
    with pytest.raises(ConfigError, match=r"32.*3"):
        MPerClassSampler(LABELS, 3, 32, np.random.default_rng(0))
    with pytest.raises(DataError, match=r"needs 64 distinct classes.*only 40"):
        MPerClassSampler(LABELS, 1, 64, np.random.default_rng(0))
    sampler = MPerClassSampler(LABELS, 4, 32, np.random.default_rng(0))
    assert sampler.sample(0).shape == (0, 32)
    with pytest.raises(ConfigError):
        sampler.sample(-1)


def test_sampler_small_class_is_drawn_with_replacement() -> None:
    labels = np.array([0, 1, 1, 1, 1, 2, 2, 2, 2])  # class 0 has one image, m = 4
    batches = MPerClassSampler(labels, 4, 12, np.random.default_rng(0)).sample(5)
    for batch in batches:
        assert batch[labels[batch] == 0].tolist() == [0, 0, 0, 0]
        for c in (1, 2):
            assert sorted(batch[labels[batch] == c].tolist()) == np.flatnonzero(labels == c).tolist()


def test_sampler_class_choice_is_uniform() -> None:
    labels = np.repeat(np.arange(10), 5)
    batches = MPerClassSampler(labels, 2, 6, np.random.default_rng(3)).sample(5000)
    frequency = np.bincount(labels[batches[:, ::2]].ravel(), minlength=10) / batches[:, ::2].size
    assert np.allclose(frequency, 0.1, atol=0.01)


def test_invalid_augment_spec_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="scale"):
        AugmentSpec(scale=(0.5, 1.5), ratio=(1.0, 1.0), max_rotation_deg=0.0, hflip=False)
    with pytest.raises(ConfigError, match="ratio"):
        AugmentSpec(scale=(0.5, 1.0), ratio=(2.0, 1.0), max_rotation_deg=0.0, hflip=False)
    with pytest.raises(DataError, match="uint8"):
        eval_batch(torch.zeros(1, 1, 4, 4))


def test_augment_rotation_keeps_centre_and_flip_mirrors() -> None:
    x = torch.zeros(1, 1, 9, 9, dtype=torch.uint8)
    x[..., 4, 4] = 255
    rotate = AugmentSpec(scale=(1.0, 1.0), ratio=(1.0, 1.0), max_rotation_deg=90.0, hflip=False)
    assert float(train_batch(x, rotate, torch.Generator().manual_seed(0))[0, 0, 4, 4]) > 0.0
    x = torch.zeros(16, 1, 8, 8, dtype=torch.uint8)
    x[..., :4] = 255
    flip = AugmentSpec(scale=(1.0, 1.0), ratio=(1.0, 1.0), max_rotation_deg=0.0, hflip=True)
    out = train_batch(x, flip, torch.Generator().manual_seed(0))
    flipped = out[..., 4:].mean(dim=(1, 2, 3)) > out[..., :4].mean(dim=(1, 2, 3))
    assert 0 < int(flipped.sum()) < 16
    assert torch.equal(out[flipped], eval_batch(x.flip(-1))[flipped])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_augment_on_cuda_matches_cpu() -> None:
    x = images(c=3)
    cpu = train_batch(x, PAPER_AUGMENT, torch.Generator().manual_seed(1))
    gpu = train_batch(x.cuda(), PAPER_AUGMENT, torch.Generator().manual_seed(1))
    assert gpu.device.type == "cuda" and torch.allclose(gpu.cpu(), cpu, atol=1e-3)


def images(n: int = 8, c: int = 1, size: int = 28) -> torch.Tensor:
    return torch.randint(
        0, 256, (n, c, size, size), generator=torch.Generator().manual_seed(0), dtype=torch.uint8
    )


@pytest.mark.parametrize("spec", [PAPER_AUGMENT, CHARACTER_AUGMENT])
def test_train_batch_shape_range_determinism(spec: AugmentSpec) -> None:
    x = images(c=3)
    a = train_batch(x, spec, torch.Generator().manual_seed(1))
    b = train_batch(x, spec, torch.Generator().manual_seed(1))
    c = train_batch(x, spec, torch.Generator().manual_seed(2))
    assert a.shape == x.shape and a.dtype == torch.float32
    assert torch.equal(a, b) and not torch.equal(a, c)
    lo, hi = (
        eval_batch(torch.zeros(1, 1, 4, 4, dtype=torch.uint8)).min(),
        eval_batch(torch.full((1, 1, 4, 4), 255, dtype=torch.uint8)).max(),
    )
    assert lo <= a.min() and a.max() <= hi


def test_identity_augmentation_equals_eval() -> None:
    x = images()
    spec = AugmentSpec(scale=(1.0, 1.0), ratio=(1.0, 1.0), max_rotation_deg=0.0, hflip=False)
    out = train_batch(x, spec, torch.Generator().manual_seed(0))
    assert torch.allclose(out, eval_batch(x), atol=1e-4)


def test_character_augment_never_flips() -> None:
    # An asymmetric image: left half bright. Without flips the bright mass stays on the left.
    x = torch.zeros(64, 1, 28, 28, dtype=torch.uint8)
    x[..., :14] = 255
    out = train_batch(x, CHARACTER_AUGMENT, torch.Generator().manual_seed(0))
    assert bool((out[..., :14].mean(dim=(1, 2, 3)) > out[..., 14:].mean(dim=(1, 2, 3))).all())
