"""Equivalence of our value with a published one: two one-sided tests (docs/protocols.md §8).

A published cell is a mean with a 95% half-width over n_p repetitions; ours is a row estimate
(:class:`benchmark.stats.seeds.Estimate`). The difference d = ours - published has standard error
sqrt(se_ours^2 + se_published^2) (in quadrature: the two runs are independent), with
Welch-Satterthwaite degrees of freedom. At level alpha, with margin m:

- ``consistent``: the (1 - 2 alpha) interval of d lies inside (-m, m), i.e. both one-sided tests
  reject |d| >= m (Schuirmann's TOST);
- ``differs``: that interval lies entirely beyond m or below -m, i.e. |d| > m is shown;
- ``inconclusive``: neither (too few repetitions, or d near the margin).

Why by hand: scipy has no TOST; statsmodels' ``ttost_ind`` needs both raw samples, and a
published cell is only a mean and a half-width.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

CONSISTENT = "consistent"
DIFFERS = "differs"
INCONCLUSIVE = "inconclusive"
VERDICTS = (CONSISTENT, DIFFERS, INCONCLUSIVE)


@dataclass(frozen=True)
class Equivalence:
    """The TOST of one cell."""

    diff: float
    se: float
    df: float
    margin: float
    alpha: float
    low: float  # the (1 - 2 alpha) interval of diff
    high: float
    verdict: str


def se_from_half_width(half_width: float, n: int, confidence: float = 0.95) -> float:
    """The standard error behind a published t-interval half-width over n repetitions."""
    import scipy.stats

    if n < 2:
        return math.nan
    return half_width / float(scipy.stats.t.ppf(0.5 + confidence / 2.0, n - 1))


def tost(diff: float, se: float, df: float, margin: float, alpha: float = 0.05) -> Equivalence:
    """TOST of |diff| < margin; ``se = 0`` treats both values as exact, ``df`` may be inf."""
    import scipy.stats

    if not margin > 0:
        raise ValueError(f"margin must be > 0; got {margin}.")
    if math.isnan(se) or math.isnan(diff):
        return Equivalence(diff, se, df, margin, alpha, math.nan, math.nan, INCONCLUSIVE)
    q = float(scipy.stats.t.ppf(1.0 - alpha, df)) if se > 0 else 0.0
    low, high = diff - q * se, diff + q * se
    if -margin < low and high < margin:
        verdict = CONSISTENT
    elif low > margin or high < -margin:
        verdict = DIFFERS
    else:
        verdict = INCONCLUSIVE
    return Equivalence(diff, se, df, margin, alpha, low, high, verdict)


def combined(se_a: float, df_a: float, se_b: float, df_b: float) -> tuple[float, float]:
    """(se, df) of a - b for independent a, b: quadrature and Welch-Satterthwaite (a side with
    se 0 is exact and adds no variance; both exact gives df inf)."""
    se = math.hypot(se_a, se_b)
    parts = [s**4 / d for s, d in ((se_a, df_a), (se_b, df_b)) if s > 0]
    if not parts:
        return se, math.inf
    if any(math.isnan(p) for p in parts):
        return se, math.nan
    return se, se**4 / sum(parts)
