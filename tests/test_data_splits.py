"""MLRC class-disjoint splits (docs/protocols.md §2.1, powerful-benchmarker's MLRCSplitManager)."""

from __future__ import annotations

import random

import pytest

from benchmark.data.splits import mlrc_split
from benchmark.errors import ConfigError, DataError, DmlbenchError


def naive_split(classes: list[int], p: int = 4) -> tuple[list[int], list[tuple[list[int], list[int]]]]:
    """A line-by-line transcription of the SPEC pseudo-code."""
    classes = sorted(classes)
    n = len(classes)
    n_test = int(0.5 * n)
    n_val = int(n * (1 / p) * 0.5)
    n_train = int(n * (1 - (1 / p) * 0.5) * 0.5)
    n_train += n - (n_train + n_val + n_test)
    start = int(0.5 * n)
    test = [classes[(start + i) % n] for i in range(n_test)]
    tv = [c for c in classes if c not in set(test)]
    m = len(tv)
    folds = []
    for k in range(p):
        a = int(k / p * m)
        folds.append(
            ([tv[(a + i) % m] for i in range(n_train)], [tv[(a + n_train + i) % m] for i in range(n_val)])
        )
    return test, folds


@pytest.mark.parametrize("n", [16, 17, 100, 196, 200, 242, 390, 1001])
def test_matches_naive_transcription(n: int) -> None:
    classes = random.Random(n).sample(range(10 * n), n)
    split = mlrc_split(classes)
    test, folds = naive_split(classes)
    assert list(split.test) == test
    assert [(list(f.train), list(f.val)) for f in split.folds] == folds


@pytest.mark.parametrize("n", [16, 100, 196, 200, 242, 390])
def test_disjoint_and_covering(n: int) -> None:
    classes = list(range(n))
    split = mlrc_split(classes)
    test = set(split.test)
    validated: set[int] = set()
    for fold in split.folds:
        train, val = set(fold.train), set(fold.val)
        assert not (train & val) and not (train & test) and not (val & test)
        assert train | val | test == set(classes)  # every fold sees every class exactly once
        validated |= val
    assert set(split.never_validated) == set(classes) - test - validated


def test_deterministic_and_order_independent() -> None:
    classes = list(range(0, 400, 2))
    shuffled = random.Random(0).sample(classes, len(classes))
    assert mlrc_split(classes) == mlrc_split(shuffled)
    assert mlrc_split(classes).fingerprint() == mlrc_split(shuffled).fingerprint()
    assert mlrc_split(classes).fingerprint() != mlrc_split(list(range(200))).fingerprint()


@pytest.mark.parametrize(
    ("n", "n_test", "n_train", "n_val", "never_validated"),
    [
        # CUB-200: n_val = int(200/8) = 25; n_train = int(87.5) = 87, += 200 - 212 -> 75.
        (200, 100, 75, 25, 0),
        # Cars196: n_val = int(24.5) = 24; n_train = int(85.75) = 85, += 196 - 207 -> 74; M = 98,
        # val blocks start at 74, 24+74, 49+74, 73+74 (mod 98): classes TV[24] and TV[73] never validated.
        (196, 98, 74, 24, 2),
        # SOP: n_val = int(2829.25) = 2829; n_train = int(9902.375) = 9902, += 22634 - 24048 -> 8488;
        # M = 11317, val blocks start at 8488, 0, 2829, 5658 (mod M) and are 2829 long, so TV[8487]
        # is never validated.
        (22634, 11317, 8488, 2829, 1),
    ],
)
def test_block_sizes(n: int, n_test: int, n_train: int, n_val: int, never_validated: int) -> None:
    split = mlrc_split(list(range(n)))
    assert len(split.test) == n_test
    assert {len(f.train) for f in split.folds} == {n_train}
    assert {len(f.val) for f in split.folds} == {n_val}
    assert len(split.never_validated) == never_validated
    assert split.test == tuple(range(n // 2, n // 2 + n_test))


def test_cars_never_validated_classes() -> None:
    split = mlrc_split(list(range(196)))
    assert split.never_validated == (24, 73)  # TV = classes 0..97


def test_fold0_validates_on_last_block() -> None:
    split = mlrc_split(list(range(200)))
    assert split.folds[0].val == tuple(range(75, 100))


def test_too_few_classes_is_an_error_naming_counts() -> None:
    with pytest.raises(DmlbenchError, match=r"3"):
        mlrc_split([0, 1, 2])


def test_minimum_class_count_message_and_boundary() -> None:
    with pytest.raises(DataError, match=r"has 7 classes.*at least 8"):
        mlrc_split(range(7))
    split = mlrc_split(range(8))  # 2 * n_folds: one validation class per fold
    assert [len(f.val) for f in split.folds] == [1, 1, 1, 1]
    with pytest.raises(ConfigError):
        mlrc_split(range(100), n_folds=0)


def test_fingerprint_is_sha256_hex_and_duplicates_are_ignored() -> None:
    fingerprint = mlrc_split(range(200)).fingerprint()
    assert len(fingerprint) == 64 and int(fingerprint, 16) >= 0
    assert mlrc_split([*range(200), *range(50)]).fingerprint() == fingerprint
