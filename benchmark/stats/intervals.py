"""Confidence intervals and significance tests over per-repetition values (docs/protocols.md §2.4, §4.4).

Thin, typed wrappers around scipy with the edge cases decided once:

- :func:`t_interval` with a single value has no spread estimate: ``half_width``, ``low`` and
  ``high`` are NaN (the mean is still reported). Identical values give a half-width of exactly 0
  (scipy would return NaN for a zero scale). NaN inputs propagate to NaN outputs.
- :func:`welch_t_test` returns scipy's values, warnings silenced: (NaN, NaN) when a sample has
  fewer than two values or both samples are the same constant, (±inf, 0.0) when both are
  constant but differ.
- :func:`holm` passes NaN p-values (tests that could not be carried out) through as NaN and does
  not count them among the m hypotheses.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Interval:
    """A two-sided confidence interval for a mean: ``mean ± half_width`` = [low, high] from n values."""

    mean: float
    half_width: float
    n: int
    low: float
    high: float


def t_interval(values: Sequence[float], confidence: float = 0.95) -> Interval:
    """Student-t interval, equal to ``scipy.stats.t.interval(confidence, n - 1, loc=mean, scale=sem)``."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}.")
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    n = int(x.size)
    if n == 0:
        raise ValueError("t_interval needs at least one value.")
    if n == 1:
        mean = float(x[0])
        return Interval(mean=mean, half_width=float("nan"), n=1, low=float("nan"), high=float("nan"))
    if np.all(x == x[0]):
        # Exact: averaging identical floats can round away from the value itself.
        mean = float(x[0])
        return Interval(mean=mean, half_width=0.0, n=n, low=mean, high=mean)
    mean = float(x.mean())
    sem = float(x.std(ddof=1) / np.sqrt(n))
    import scipy.stats  # on first use: scipy.stats takes seconds to import, `dmlbench --help` none

    half_width = float(scipy.stats.t.ppf(0.5 + confidence / 2.0, n - 1)) * sem
    return Interval(mean=mean, half_width=half_width, n=n, low=mean - half_width, high=mean + half_width)


def welch_t_test(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Welch's unequal-variance t-test of a vs b: ``(t, two-sided p)`` as ``ttest_ind(equal_var=False)``.

    t > 0 means mean(a) > mean(b).
    """
    x = np.asarray(a, dtype=np.float64).reshape(-1)
    y = np.asarray(b, dtype=np.float64).reshape(-1)
    import scipy.stats

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        # scipy warns about degenerate samples (too few, constant); the module docstring says
        # what comes back for them.
        warnings.simplefilter("ignore", RuntimeWarning)
        result = scipy.stats.ttest_ind(x, y, equal_var=False)
    return float(result.statistic), float(result.pvalue)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm–Bonferroni adjusted p-values, in the input order.

    With the m valid p-values sorted ascending, p_(i) becomes max_{j <= i} min(1, (m - j + 1) p_(j))
    (1-based), so the adjusted values keep the order of the raw ones and never exceed 1. Reject
    hypothesis i at level alpha iff its adjusted p-value is <= alpha.
    """
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    valid = ~np.isnan(p)
    if ((p[valid] < 0.0) | (p[valid] > 1.0)).any():
        raise ValueError("p-values must lie in [0, 1] (or be NaN).")
    raw = p[valid]
    m = raw.size
    order = np.argsort(raw, kind="stable")
    scaled = (m - np.arange(m)) * raw[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    adjusted = np.empty(m)
    adjusted[order] = adjusted_sorted
    out = p.copy()
    out[valid] = adjusted
    return [float(v) for v in out]
