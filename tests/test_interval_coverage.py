"""benchmarks/interval_coverage.py: the simulation behind docs/protocols.md §4.5's coverage claims."""

from __future__ import annotations

import math

import numpy as np
from conftest import load_benchmark_script


def test_a_rows_own_interval_covers_95_and_the_floor_only_widens_it() -> None:
    """Without the floor, t on S - 1 df over the seed means is exact: 95% within Monte-Carlo
    error (3 standard errors). The floored interval contains the unfloored one, so it covers at
    least as often, overall and among the calmest tenth, where the unfloored one misses most."""
    cov = load_benchmark_script("interval_coverage")
    n = 4000
    mc = 3 * math.sqrt(0.95 * 0.05 / n)
    for seeds, ratio in ((2, 0.0), (3, 1.0)):
        raw, floored, raw_calm, floored_calm = cov.own_row_coverage(
            seeds, 4, ratio, n, np.random.default_rng(seeds)
        )
        assert abs(raw - 0.95) < mc, raw
        assert floored >= raw and floored_calm >= raw_calm
        assert raw_calm < 0.8 < floored_calm, (raw_calm, floored_calm)


def test_coverage_counts_the_boards_where_the_test_rejected() -> None:
    """One erratic loss among calm ones: Bartlett's test rejects on most boards and the rows there
    are on their own variances; with alpha = 0 it never rejects (no such boards, NaN coverage)."""
    cov = load_benchmark_script("interval_coverage")
    rng = np.random.default_rng(5)
    boards, losses, seeds, reps = 200, 4, 3, 4
    mu = np.linspace(0.3, 0.5, losses)
    sd_a = np.array([0.1, 0.005, 0.005, 0.005])
    y = (
        mu[None, :, None, None]
        + rng.normal(0, 1, (boards, losses, seeds, 1)) * sd_a[None, :, None, None]
        + rng.normal(0, 0.002, (boards, losses, seeds, reps))
    )
    per_loss, when_rejected, rejected = cov.coverage(y, mu, 0.05)
    assert per_loss.shape == (losses,) and rejected > boards // 2 and 0.8 < when_rejected <= 1.0
    _, never, none = cov.coverage(y, mu, 0.0)
    assert none == 0 and math.isnan(never)
