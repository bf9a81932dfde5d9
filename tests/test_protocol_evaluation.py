"""``concatenate_embeddings`` against a naive reference (docs/protocols.md §2.4).

The folds' norms differ by orders of magnitude, and vary row by row, so that leaving out any of
the three steps (per-fold normalisation, concatenation, final normalisation) changes the result;
the mutants below are checked to differ from the reference, so the fixture itself can fail.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmark.engine.evaluation import concatenate_embeddings


def naive_concat(fold_embs: list[np.ndarray]) -> np.ndarray:
    """Row by row, with Python loops: each fold's row / its norm, joined, joined row / its norm."""
    rows = []
    for i in range(fold_embs[0].shape[0]):
        parts: list[float] = []
        for emb in fold_embs:
            row = [float(x) for x in emb[i]]
            norm = sum(x * x for x in row) ** 0.5
            parts.extend(x / norm for x in row)
        total = sum(x * x for x in parts) ** 0.5
        rows.append([x / total for x in parts])
    return np.array(rows, dtype=np.float64)


def skewed_folds(seed: int = 0) -> list[np.ndarray]:
    """Three folds of 7 rows: norms near 1e3, near 1e-3, and spanning 1e-2..1e2 row by row."""
    rng = np.random.default_rng(seed)
    big = rng.normal(size=(7, 4)) * 1e3
    small = rng.normal(size=(7, 5)) * 1e-3
    mixed = rng.normal(size=(7, 3)) * np.logspace(-2, 2, 7)[:, None]
    return [big.astype(np.float32), small.astype(np.float32), mixed.astype(np.float32)]


def test_cosine_concatenation_equals_naive_reference() -> None:
    folds = skewed_folds()
    got = concatenate_embeddings(folds, "cosine")
    assert got.shape == (7, 12)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, naive_concat(folds), rtol=1e-5, atol=1e-6)
    # Each fold contributes a block of norm 1/sqrt(3): equal weight whatever its scale.
    for start, stop in ((0, 4), (4, 9), (9, 12)):
        np.testing.assert_allclose(np.linalg.norm(got[:, start:stop], axis=1), 1 / np.sqrt(3), rtol=1e-5)


def test_cosine_similarity_is_the_mean_of_per_fold_cosines() -> None:
    folds = skewed_folds(1)
    got = concatenate_embeddings(folds, "cosine").astype(np.float64)
    unit = [f / np.linalg.norm(f, axis=1, keepdims=True) for f in folds]
    expected = np.mean([u @ u.T for u in unit], axis=0)
    np.testing.assert_allclose(got @ got.T, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mutant", ["no_fold_norm", "no_final_norm", "raw"])
def test_the_reference_tells_each_skipped_step_apart(mutant: str) -> None:
    """Each step matters on these folds: a version without it is far from the reference."""
    folds = [f.astype(np.float64) for f in skewed_folds()]
    unit = [f / np.linalg.norm(f, axis=1, keepdims=True) for f in folds]
    if mutant == "no_fold_norm":
        cat = np.concatenate(folds, axis=1)
        wrong = cat / np.linalg.norm(cat, axis=1, keepdims=True)
    elif mutant == "no_final_norm":
        wrong = np.concatenate(unit, axis=1)
    else:
        wrong = np.concatenate(folds, axis=1)
    assert not np.allclose(wrong, naive_concat(folds), rtol=1e-3, atol=1e-3)


def test_euclidean_concatenation_is_raw() -> None:
    """``cam``'s Euclidean space: no normalisation, so squared distances add over folds."""
    folds = skewed_folds(2)
    got = concatenate_embeddings(folds, "euclidean")
    np.testing.assert_array_equal(got, np.concatenate(folds, axis=1))
    d2 = ((got[:, None, :].astype(np.float64) - got[None, :, :]) ** 2).sum(-1)
    per_fold = sum(((f[:, None, :].astype(np.float64) - f[None, :, :]) ** 2).sum(-1) for f in folds)
    np.testing.assert_allclose(d2, per_fold, rtol=1e-6)


def test_zero_row_does_not_divide_by_zero() -> None:
    """An all-zero embedding row stays finite (the norms are floored at 1e-12)."""
    folds = skewed_folds(3)
    folds[1][2] = 0.0
    got = concatenate_embeddings(folds, "cosine")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got[2]), 1.0, rtol=1e-5)
