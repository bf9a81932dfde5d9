"""t intervals, Welch's t-test and Holm's adjustment against scipy and hand-computed values."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats

from benchmark.stats import Interval, holm, t_interval, welch_t_test


@pytest.mark.parametrize("n", [2, 3, 10, 50])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_t_interval_matches_scipy(n: int, confidence: float) -> None:
    values = np.random.default_rng(n).normal(0.6, 0.05, size=n).tolist()
    mean = float(np.mean(values))
    low, high = scipy.stats.t.interval(confidence, n - 1, loc=mean, scale=scipy.stats.sem(values))
    got = t_interval(values, confidence)
    assert isinstance(got, Interval) and got.n == n
    assert got.mean == pytest.approx(mean, rel=1e-14)
    assert got.low == pytest.approx(low, rel=1e-12) and got.high == pytest.approx(high, rel=1e-12)
    assert got.half_width == pytest.approx((high - low) / 2, rel=1e-12)


def test_t_interval_by_hand() -> None:
    # values 1, 2, 3: mean 2, sd 1, sem 1/sqrt(3). With 2 degrees of freedom the t quantile has
    # the closed form t_p = (2p - 1) / sqrt(2 p (1 - p)); p = 0.975 gives 4.3027.
    t = 0.95 / math.sqrt(2 * 0.975 * 0.025)
    got = t_interval([1.0, 2.0, 3.0])
    assert got.mean == 2.0 and got.half_width == pytest.approx(t / math.sqrt(3), rel=1e-12)
    assert (got.low, got.high) == pytest.approx((2 - t / math.sqrt(3), 2 + t / math.sqrt(3)), rel=1e-12)


def test_t_interval_single_value_has_no_width() -> None:
    got = t_interval([0.42])
    assert got.mean == 0.42 and got.n == 1
    assert math.isnan(got.half_width) and math.isnan(got.low) and math.isnan(got.high)


def test_t_interval_constant_values_have_zero_width() -> None:
    got = t_interval([0.1, 0.1, 0.1])
    assert got == Interval(mean=0.1, half_width=0.0, n=3, low=0.1, high=0.1)


def test_t_interval_nan_propagates() -> None:
    got = t_interval([0.1, float("nan"), 0.3])
    assert math.isnan(got.mean) and math.isnan(got.half_width)


@pytest.mark.parametrize(("values", "confidence"), [([], 0.95), ([1.0, 2.0], 0.0), ([1.0, 2.0], 1.0)])
def test_t_interval_invalid(values: list[float], confidence: float) -> None:
    with pytest.raises(ValueError):
        t_interval(values, confidence)


@pytest.mark.parametrize(
    ("n_a", "n_b", "shift"), [(10, 10, 0.0), (10, 10, 0.02), (5, 12, 0.01), (2, 3, -0.1)]
)
def test_welch_matches_scipy(n_a: int, n_b: int, shift: float) -> None:
    rng = np.random.default_rng(n_a * 100 + n_b)
    a = rng.normal(0.5, 0.01, size=n_a).tolist()
    b = rng.normal(0.5 + shift, 0.03, size=n_b).tolist()
    expected = scipy.stats.ttest_ind(a, b, equal_var=False)
    t, p = welch_t_test(a, b)
    assert type(t) is float and type(p) is float
    assert t == pytest.approx(float(expected.statistic), rel=1e-12)
    assert p == pytest.approx(float(expected.pvalue), rel=1e-10)


def test_welch_sign_follows_first_sample() -> None:
    t, p = welch_t_test([0.9, 0.91, 0.92], [0.5, 0.52, 0.51])
    assert t > 0 and p < 0.05


@pytest.mark.filterwarnings("error")
def test_welch_degenerate_samples_without_warnings() -> None:
    t, p = welch_t_test([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    assert math.isnan(t) and math.isnan(p)
    t, p = welch_t_test([0.5, 0.5, 0.5], [0.6, 0.6, 0.6])
    assert t == -math.inf and p == 0.0
    t, p = welch_t_test([0.5], [0.6, 0.7, 0.8])
    assert math.isnan(t) and math.isnan(p)


def test_holm_by_hand() -> None:
    # Sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> raised to 0.06 (monotone).
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    # Capped at 1: 0.5*2 = 1.0, 0.6*1 = 0.6 -> 1.0.
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([0.2]) == [0.2]
    assert holm([]) == []


def naive_holm(p: list[float]) -> list[float]:
    """Holm's step-down adjustment written out from its definition (ties in any order)."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):  # rank 0 is the smallest p-value
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted


@pytest.mark.parametrize("seed", range(5))
def test_holm_matches_naive_and_is_monotone(seed: int) -> None:
    rng = np.random.default_rng(seed)
    p = rng.uniform(0, 0.2, size=12).round(3).tolist()  # rounding creates ties
    got = holm(p)
    assert got == pytest.approx(naive_holm(p), abs=1e-15)
    for i, j in itertools.product(range(len(p)), repeat=2):
        if p[i] <= p[j]:
            assert got[i] <= got[j]
    assert all(raw <= adj <= 1.0 for raw, adj in zip(p, got, strict=True))


def test_holm_passes_nan_through_and_does_not_count_it() -> None:
    got = holm([0.01, float("nan"), 0.04])
    assert got[0] == pytest.approx(0.02) and math.isnan(got[1]) and got[2] == pytest.approx(0.04)


def test_holm_rejects_values_outside_unit_interval() -> None:
    with pytest.raises(ValueError):
        holm([0.1, 1.5])
