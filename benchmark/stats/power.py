"""Power of a two-sided t-test, and the smallest difference it detects (docs/protocols.md §4.7).

Used by ``dmlbench compare`` (the minimum detectable difference of each table) and ``dmlbench
plan`` (how many test repetitions and search seeds a difference needs). The power of a two-sided
level-alpha t-test with ``df`` degrees of freedom against a true difference ``delta`` whose
estimate has standard error ``se`` is ``P(|T| > t_crit)`` for T noncentral-t(df, delta / se),
computed with scipy's ``nct``.
"""

from __future__ import annotations

import math


def power(delta: float, se: float, df: float, alpha: float = 0.05) -> float:
    """Power of the two-sided t-test (NaN when se or df is not positive and finite)."""
    import scipy.stats

    if not (se > 0 and math.isfinite(se) and df > 0 and math.isfinite(df)):
        return math.nan
    crit = float(scipy.stats.t.ppf(1.0 - alpha / 2.0, df))
    nc = abs(delta) / se
    upper = float(scipy.stats.nct.sf(crit, df, nc))
    if math.isnan(upper):
        # scipy's nct loses precision far in the tail (tiny alpha, few df): the far side is 0
        # and the near side is decided by which side of the critical value nc lies.
        return 1.0 if nc > crit else 0.0
    lower = float(scipy.stats.nct.cdf(-crit, df, nc))
    return upper + (0.0 if math.isnan(lower) else lower)


def min_detectable_difference(se: float, df: float, alpha: float = 0.05, target: float = 0.8) -> float:
    """The smallest |difference| the test detects with probability ``target`` (NaN if undefined)."""
    import scipy.optimize

    if not (se > 0 and math.isfinite(se) and df > 0 and math.isfinite(df)):
        return math.nan
    # Solved in units of se (the noncentrality), then scaled back.
    hi = 1.0
    while power(hi, 1.0, df, alpha) < target:
        hi *= 2.0
        if hi > 1e6:
            return math.nan
    nc = scipy.optimize.brentq(lambda d: power(d, 1.0, df, alpha) - target, 0.0, hi, xtol=1e-10)
    return float(nc) * se


def difference_se(sigma_a2: float, sigma_e2: float, seeds: int, reps: int) -> float:
    """Standard error of the difference of two rows with ``seeds`` search seeds of ``reps``
    repetitions each, under the two-level model: sqrt(2 (sigma_a^2 + sigma_e^2 / reps) / seeds)."""
    return math.sqrt(2.0 * (sigma_a2 + sigma_e2 / reps) / seeds)


def difference_df(seeds: int, reps: int) -> int:
    """Degrees of freedom of that difference's test for two rows alone: 2 (seeds - 1) with
    several seeds (seed means), 2 (reps - 1) with one (Welch on repetitions, equal variances)."""
    return 2 * (seeds - 1) if seeds > 1 else 2 * (reps - 1)
