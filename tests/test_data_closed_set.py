"""Closed-set (cbir) split: disjoint images, identical class sets, determinism, clear errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import OMNIGLOT

from benchmark.data import DatasetOptions, ImageDataset, load_dataset
from benchmark.data.closed_set import closed_set_datasets, closed_set_split, queries_per_class
from benchmark.errors import ConfigError, DataError

needs_omniglot = pytest.mark.skipif(not OMNIGLOT.is_dir(), reason=f"Omniglot data not at {OMNIGLOT}")


def uneven_labels() -> np.ndarray:
    # Non-contiguous class ids, interleaved images, class sizes 2, 5, 20 and 32.
    rng = np.random.default_rng(0)
    labels = np.repeat(np.array([7, 3, 100, 42]), [2, 5, 20, 32])
    return labels[rng.permutation(labels.size)].astype(np.int64)


def test_images_are_disjoint_cover_everything_and_classes_match() -> None:
    labels = uneven_labels()
    split = closed_set_split(labels, seed=1)
    assert np.intersect1d(split.database, split.queries).size == 0
    np.testing.assert_array_equal(np.sort(np.concatenate([split.database, split.queries])), np.arange(59))
    np.testing.assert_array_equal(np.unique(labels[split.database]), np.unique(labels[split.queries]))
    assert (np.diff(split.database) > 0).all() and (np.diff(split.queries) > 0).all()


def test_query_counts_per_class_follow_the_fraction() -> None:
    labels = uneven_labels()
    split = closed_set_split(labels, seed=1, query_fraction=0.25)
    counted = dict(zip(*np.unique(labels[split.queries], return_counts=True), strict=True))
    # round(0.25 * n): 2 -> 0.5 -> 1 (floor(x + 0.5)), 5 -> 1.25 -> 1, 20 -> 5, 32 -> 8.
    assert {int(c): int(n) for c, n in counted.items()} == {7: 1, 3: 1, 100: 5, 42: 8}


def test_fraction_is_clipped_so_every_class_keeps_a_query_and_a_database_image() -> None:
    np.testing.assert_array_equal(queries_per_class(np.array([2, 3, 10]), 0.9, None), [1, 2, 9])
    np.testing.assert_array_equal(queries_per_class(np.array([2, 3, 10]), 0.01, None), [1, 1, 1])


def test_fixed_number_of_queries_per_class() -> None:
    labels = np.repeat(np.arange(4), 6).astype(np.int64)
    split = closed_set_split(labels, seed=0, query_fraction=None, n_queries=2)
    np.testing.assert_array_equal(np.bincount(labels[split.queries]), [2, 2, 2, 2])
    np.testing.assert_array_equal(np.bincount(labels[split.database]), [4, 4, 4, 4])


def test_deterministic_given_the_seed_and_seed_dependent() -> None:
    labels = uneven_labels()
    a, b = closed_set_split(labels, seed=5), closed_set_split(labels.copy(), seed=5)
    np.testing.assert_array_equal(a.queries, b.queries)
    assert a.fingerprint() == b.fingerprint()
    c = closed_set_split(labels, seed=6)
    assert not np.array_equal(a.queries, c.queries)
    assert a.fingerprint() != c.fingerprint()


def test_known_split_of_a_tiny_set_is_stable() -> None:
    # Pins the rule: default_rng(0).permutation(8) = [2, 4, 3, 6, 5, 0, 1, 7] gives each image a
    # key; each class's query is its image with the smallest key: class 0 (images 0-3, keys
    # 2, 4, 3, 6) -> image 0; class 1 (images 4-7, keys 5, 0, 1, 7) -> image 5.
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 1], dtype=np.int64)
    assert np.random.default_rng(0).permutation(8).tolist() == [2, 4, 3, 6, 5, 0, 1, 7]
    split = closed_set_split(labels, seed=0, query_fraction=None, n_queries=1)
    assert split.queries.tolist() == [0, 5]
    assert split.database.tolist() == [1, 2, 3, 4, 6, 7]
    # 0.25 * 4 = 1 query per class: the same split.
    assert closed_set_split(labels, seed=0, query_fraction=0.25).queries.tolist() == [0, 5]


def test_too_small_class_is_a_clear_error() -> None:
    labels = np.array([1, 1, 1, 9, 4, 4], dtype=np.int64)
    with pytest.raises(DataError, match=r"class\(es\) 9 \(1 images\)"):
        closed_set_split(labels, seed=0)
    with pytest.raises(DataError, match=r"at least 4 images.*1 \(3 images\), 4 \(2 images\), 9 \(1 images\)"):
        closed_set_split(np.array([1, 1, 1, 9, 4, 4]), seed=0, query_fraction=None, n_queries=3)


@pytest.mark.parametrize(
    ("fraction", "n", "match"),
    [
        (0.25, 2, "exactly one"),
        (None, None, "exactly one"),
        (1.0, None, "query_fraction must lie in"),
        (0.0, None, "query_fraction must lie in"),
        (None, 0, "n_queries must be an integer >= 1"),
    ],
)
def test_bad_options_are_config_errors(fraction: float | None, n: int | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        closed_set_split(
            np.repeat(np.arange(3), 4).astype(np.int64), seed=0, query_fraction=fraction, n_queries=n
        )


def test_datasets_hold_the_split_images() -> None:
    labels = np.repeat(np.arange(3), 4).astype(np.int64)
    images = torch.arange(12, dtype=torch.uint8).view(12, 1, 1, 1).expand(12, 1, 8, 8).contiguous()
    ds = ImageDataset("toy", images, labels, {0: "a", 1: "b", 2: "c"})
    database, queries = closed_set_datasets(ds, seed=3)
    split = closed_set_split(labels, seed=3)
    assert queries.images[:, 0, 0, 0].tolist() == split.queries.tolist()
    assert database.images[:, 0, 0, 0].tolist() == split.database.tolist()
    assert len(database) + len(queries) == 12 and queries.class_names == ds.class_names


def test_glyphs_split(cache_dir: Path) -> None:
    ds = load_dataset("glyphs", DatasetOptions(None, 16, cache_dir))
    database, queries = closed_set_datasets(ds, seed=0)
    sizes = np.bincount(ds.labels)
    assert set(sizes[sizes > 0].tolist()) == {32}
    np.testing.assert_array_equal(np.unique(queries.labels), ds.classes())
    assert set(np.bincount(queries.labels)[ds.classes()].tolist()) == {8}
    assert set(np.bincount(database.labels)[ds.classes()].tolist()) == {24}


@needs_omniglot
def test_omniglot_split(cache_dir: Path) -> None:
    ds = load_dataset("omniglot", DatasetOptions(OMNIGLOT, 16, cache_dir))
    database, queries = closed_set_datasets(ds, seed=0)
    _, q_counts = np.unique(queries.labels, return_counts=True)
    _, d_counts = np.unique(database.labels, return_counts=True)
    assert set(q_counts.tolist()) == {5} and set(d_counts.tolist()) == {15}
    np.testing.assert_array_equal(np.unique(database.labels), ds.classes())
