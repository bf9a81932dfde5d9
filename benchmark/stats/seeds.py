"""Intervals and tests that cover the search seed as well as the training seed (docs/protocols.md §4.5).

A row of a board is one loss under one configuration. Each *search seed* s runs the whole
hyperparameter search and then R test repetitions (training seeds) at the setting it found, so the
per-repetition values follow a two-level model::

    y[s, r] = mu + a[s] + e[s, r],    a[s] ~ N(0, sigma_a^2) (the search),  e ~ N(0, sigma_e^2) (training)

The seed means ybar[s] are then independent N(mu, tau^2) with tau^2 = sigma_a^2 + sigma_e^2 / R,
whatever the split between the two components; so the mean of S seed means has variance
tau^2 / S and ``S - 1`` degrees of freedom of its own. With S = 2 or 3 that is a t with 1 or 2
degrees of freedom: intervals 3-6x wider than the spread alone suggests. The estimator chosen here
pools tau^2 over the rows of one column (one budget, mode and metric) that have two or more
seeds, like the pooled variance of a one-way ANOVA: degrees of freedom sum(S_l - 1). It assumes
that the search moves every loss's result by a similar amount, and that assumption is tested
first (:func:`seed_variance`): when Bartlett's test rejects equal seed variances across those
rows at :data:`HOMOGENEITY_ALPHA`, one loss whose search is erratic would otherwise widen every
row (and narrow its own), so each multi-seed row keeps its own tau^2 on S_l - 1 degrees of
freedom, never below what its repetitions' training noise alone implies
(:func:`own_seed_variance`). With 2-3 seeds per row the test only catches large differences;
``dmlbench plan`` prints the per-loss spreads.

A row with one seed has no estimate of the search's share: its interval is the t-interval over
its repetitions, which covers training seeds only, and it says so (``scope``).

Why by hand: scipy and statsmodels have the one-way ANOVA and Welch's test, but not a pooled
two-level interval with per-row seed counts, nor a test between a pooled row and a one-seed row.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

#: The interval of a row with one search seed: t over test repetitions.
SCOPE_TRAINING = "training seeds"
#: The interval of a row with several search seeds: the two-level model.
SCOPE_BOTH = "search and training seeds"


def _t_quantile(q: float, df: float) -> float:
    import scipy.stats  # on first use (seconds to import)

    return float(scipy.stats.t.ppf(q, df))


@dataclass(frozen=True)
class Estimate:
    """A row's mean with the estimated variance of that mean and its degrees of freedom."""

    mean: float
    #: Estimated variance of :attr:`mean` (NaN when it cannot be estimated).
    var_mean: float
    df: float
    n_seeds: int
    #: Test repetitions over all seeds.
    n_values: int
    scope: str
    confidence: float = 0.95
    #: Whether :attr:`var_mean` comes from the column's pooled seed variance (rows that share it
    #: are compared with its degrees of freedom exactly).
    pooled: bool = False
    #: Whether :attr:`var_mean` is the row's training floor, above its own seed means' variance
    #: (:func:`own_seed_variance`).
    floored: bool = False

    @property
    def half_width(self) -> float:
        """Half-width of the two-sided t-interval; 0 for a zero variance, NaN when unknown."""
        if math.isnan(self.var_mean) or math.isnan(self.df) or self.df <= 0:
            return math.nan
        if self.var_mean == 0.0:
            return 0.0
        return _t_quantile(0.5 + self.confidence / 2.0, self.df) * math.sqrt(self.var_mean)


def _clean(values: Sequence[float]) -> np.ndarray:
    return np.asarray(values, dtype=np.float64).reshape(-1)


def training_estimate(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    """One seed's repetitions: the plain t-interval's mean, variance of the mean and n - 1 df."""
    x = _clean(values)
    n = int(x.size)
    if n == 0:
        return Estimate(math.nan, math.nan, math.nan, 1, 0, SCOPE_TRAINING, confidence)
    if n == 1 or not np.isfinite(x).all():
        mean = float(x.mean())
        return Estimate(mean, math.nan, math.nan, 1, n, SCOPE_TRAINING, confidence)
    if np.all(x == x[0]):
        return Estimate(float(x[0]), 0.0, float(n - 1), 1, n, SCOPE_TRAINING, confidence)
    return Estimate(float(x.mean()), float(x.var(ddof=1) / n), float(n - 1), 1, n, SCOPE_TRAINING, confidence)


def seed_means(groups: Sequence[Sequence[float]]) -> list[float]:
    """The mean of each seed's repetitions (a seed with no value is left out)."""
    return [float(np.mean(_clean(g))) for g in groups if len(g)]


def pooled_within_variance(groups: Sequence[Sequence[float]]) -> tuple[float, int]:
    """sigma_e^2 pooled over ``groups`` (each one seed's repetitions): the sum of squared
    deviations from each group's mean over sum(R - 1), and that denominator (NaN and 0 without a
    group of 2 values)."""
    ss, df = 0.0, 0
    for g in groups:
        x = _clean(g)
        if x.size >= 2:
            ss += float(((x - x.mean()) ** 2).sum())
            df += int(x.size - 1)
    return (ss / df if df else math.nan), df


def _multi_seed_means(rows: Sequence[Sequence[Sequence[float]]]) -> list[np.ndarray]:
    out = []
    for groups in rows:
        means = np.asarray(seed_means(groups))
        if means.size >= 2 and np.isfinite(means).all():
            out.append(means)
    return out


def pooled_seed_variance(rows: Sequence[Sequence[Sequence[float]]]) -> tuple[float, int]:
    """tau^2 pooled over the rows with >= 2 seeds: (sum of squared deviations of seed means from
    their row's mean) / sum(S_l - 1), and that denominator (0 and NaN when no row has 2 seeds)."""
    ss, df = 0.0, 0
    for means in _multi_seed_means(rows):
        ss += float(((means - means.mean()) ** 2).sum())
        df += int(means.size - 1)
    return (ss / df if df else math.nan), df


#: Significance level of Bartlett's test of equal seed variances, below which a column's
#: multi-seed rows stop pooling tau^2 (:func:`seed_variance`).
HOMOGENEITY_ALPHA = 0.05


@dataclass(frozen=True)
class SeedVariance:
    """How one column's multi-seed rows get the variance of their seed means."""

    #: Whether the rows share the pooled tau^2 (else each row uses its own, on S_l - 1 df).
    pooled: bool
    #: The pooled tau^2 and its degrees of freedom (NaN and 0 without a multi-seed row).
    tau2: float
    df: int
    #: Rows with two or more seeds (finite seed means), the ones pooled or tested.
    rows: int
    #: Bartlett's p-value for equal seed variances across those rows (NaN: fewer than 2 rows).
    p_equal: float
    alpha: float = HOMOGENEITY_ALPHA

    def describe(self) -> str:
        """What the rows' intervals use, with the test behind it (for footers)."""
        if self.rows < 2:
            return f"{self.rows} multi-seed row(s), nothing to pool"
        test = self.test()
        if self.pooled:
            return f"pooled ({test}: equal seed variances not rejected)"
        return (
            f"each row's own, S − 1 df, never below its training floor "
            f"({test}: the rows' seed spreads differ)"
        )

    def test(self) -> str:
        """The test behind the choice: ``Bartlett's p = 0.33 over 6 rows, α = 0.05``."""
        return f"Bartlett's p = {self.p_equal:.2g} over {self.rows} rows, α = {self.alpha:g}"

    def short(self) -> str:
        """:meth:`describe` in a few words (``pooled, p = 0.33`` / ``own, p = 0.0002``)."""
        if self.rows < 2:
            return "one multi-seed row"
        return f"{'pooled' if self.pooled else 'own'}, p = {self.p_equal:.2g}"


def training_floor(groups: Sequence[Sequence[float]]) -> float:
    """The least tau^2 a row's repetitions allow: tau^2 = sigma_a^2 + sigma_e^2 * mean(1/R_s)
    cannot fall below its second term, estimated with sigma_e^2 pooled over the row's seeds
    (:func:`pooled_within_variance`); NaN without a seed of two values."""
    sizes = [len(g) for g in groups if len(g)]
    sigma_e2, _ = pooled_within_variance(groups)
    return sigma_e2 * float(np.mean([1.0 / r for r in sizes])) if sizes else math.nan


class OwnVariance(NamedTuple):
    """One row's own tau^2 on its S - 1 degrees of freedom (:func:`own_seed_variance`)."""

    tau2: float
    df: int
    #: tau2 is the row's training floor, above the variance of its seed means.
    floored: bool


def own_seed_variance(groups: Sequence[Sequence[float]]) -> OwnVariance | None:
    """One row's own tau^2 and its S - 1 degrees of freedom: the variance of its seed means, or
    its :func:`training_floor` where that is larger; None without two seeds or with a non-finite
    seed mean.

    Why the floor: on 1-2 degrees of freedom the seed means can agree by chance far more closely
    than the training noise inside each seed allows (omniglot's Contrastive: seed means 44.12,
    44.34 and 44.17, variance 0.014, while each seed's 4 repetitions spread with
    sigma_e^2 / R = 0.20), and the t-interval on such a variance is the one that misses: on
    simulated rows whose spread falls in its lowest tenth, it covers 0.51-0.63 instead of 0.95
    (``benchmarks/interval_coverage.py``). The floor keeps the S - 1 degrees of freedom, so
    it only widens: rows of an almost deterministic search over-cover rather than under-cover."""
    means = np.asarray(seed_means(groups))
    if means.size < 2 or not np.isfinite(means).all():
        return None
    raw = float(means.var(ddof=1))
    floor = training_floor(groups)
    floored = not math.isnan(floor) and floor > raw
    return OwnVariance(floor if floored else raw, int(means.size - 1), floored)


def equal_variance_p(samples: Sequence[np.ndarray]) -> float:
    """Bartlett's p-value for equal variances of ``samples`` (each >= 2 values); NaN for fewer
    than 2 samples. Samples without spread: 1 when none has any, 0 when only some have none
    (Bartlett's statistic is then infinite)."""
    if len(samples) < 2:
        return math.nan
    spread = [bool(np.ptp(x) > 0) for x in samples]
    if not any(spread):
        return 1.0
    if not all(spread):
        return 0.0
    import scipy.stats

    return float(scipy.stats.bartlett(*samples).pvalue)


def seed_variance(
    rows: Sequence[Sequence[Sequence[float]]], alpha: float = HOMOGENEITY_ALPHA
) -> SeedVariance:
    """Whether a column's multi-seed rows may pool tau^2: Bartlett's test of equal seed-mean
    variances across them, pooled unless it rejects at ``alpha``."""
    tau2, df = pooled_seed_variance(rows)
    samples = _multi_seed_means(rows)
    p = equal_variance_p(samples)
    pooled = math.isnan(p) or p >= alpha
    return SeedVariance(pooled, tau2, df, len(samples), p, alpha)


def row_estimates(
    rows: Sequence[Sequence[Sequence[float]]],
    confidence: float = 0.95,
    alpha: float = HOMOGENEITY_ALPHA,
) -> list[Estimate]:
    """Each row's estimate: ``rows[l][s]`` are row l's repetition values under search seed s.

    Rows with one seed get :func:`training_estimate`; rows with several get the mean of their
    seed means with variance tau^2 / S_l: the pooled tau^2 on the pooled degrees of freedom, or,
    when :func:`seed_variance` rejects equal seed variances at ``alpha``, the row's own on S_l - 1
    (:func:`own_seed_variance`: at least its training floor, :attr:`Estimate.floored` says when).
    """
    model = seed_variance(rows, alpha)
    out = []
    for groups in rows:
        groups = [g for g in groups if len(g)]
        if len(groups) <= 1:
            out.append(training_estimate(groups[0] if groups else [], confidence))
            continue
        means = np.asarray(seed_means(groups))
        own = None if model.pooled else own_seed_variance(groups)
        tau2, df = (model.tau2, float(model.df)) if own is None else (own.tau2, float(own.df))
        out.append(
            Estimate(
                float(means.mean()),
                tau2 / len(means),
                df,
                len(means),
                sum(len(g) for g in groups),
                SCOPE_BOTH,
                confidence,
                pooled=model.pooled,
                floored=own is not None and own.floored,
            )
        )
    return out


@dataclass(frozen=True)
class Difference:
    """``a - b`` with its standard error, degrees of freedom and two-sided p-value."""

    diff: float
    se: float
    df: float
    t: float
    p: float

    def interval(self, confidence: float = 0.95) -> tuple[float, float]:
        """The two-sided t-interval of the difference (NaN bounds when it has no variance)."""
        if math.isnan(self.se) or math.isnan(self.df):
            return math.nan, math.nan
        h = _t_quantile(0.5 + confidence / 2.0, self.df) * self.se if self.se > 0 else 0.0
        return self.diff - h, self.diff + h


def difference(a: Estimate, b: Estimate) -> Difference:
    """Test of equal means for two rows.

    Two rows on the column's pooled seed variance: t on that pool's degrees of freedom (the
    pooled two-sample t-test of seed means). Otherwise Welch-Satterthwaite degrees of freedom:
    for two one-seed rows this is exactly Welch's t-test of their repetitions.
    """
    return contrast(((1.0, a), (-1.0, b)))


def contrast(terms: Sequence[tuple[float, Estimate]]) -> Difference:
    """The linear combination ``sum(c * row.mean)`` of independent rows, tested against 0.

    Its variance is ``sum(c**2 * row.var_mean)``. Rows that all share one column's pooled seed
    variance (all pooled, equal degrees of freedom) test on that pool's degrees of freedom;
    otherwise on the Welch-Satterthwaite degrees of freedom of the combination (for ``a - b`` of
    two one-seed rows: Welch's t-test; rows of different pools: an approximation). A family gap
    (mean of one group of rows minus the mean of another) is the contrast with weights
    ``1/n_1`` and ``-1/n_2``; it describes those rows, not a population of losses.
    """
    import scipy.stats

    if not terms:
        raise ValueError("A contrast needs at least one (weight, estimate) term, got none.")
    d = math.fsum(c * e.mean for c, e in terms)
    parts = [(c * c * e.var_mean, e.df) for c, e in terms]
    v = math.fsum(w for w, _ in parts)
    if any(math.isnan(x) for x in (d, v)) or any(math.isnan(df) for _, df in parts):
        return Difference(d, math.nan, math.nan, math.nan, math.nan)
    if v == 0.0:
        if d == 0.0:
            return Difference(d, 0.0, math.nan, math.nan, math.nan)
        return Difference(d, 0.0, math.inf, math.copysign(math.inf, d), 0.0)
    if all(e.pooled for _, e in terms) and len({e.df for _, e in terms}) == 1:
        df = terms[0][1].df
    else:
        df = v**2 / math.fsum(w**2 / f for w, f in parts if w > 0)
    se = math.sqrt(v)
    t = d / se
    p = float(2.0 * scipy.stats.t.sf(abs(t), df))
    return Difference(d, se, float(df), t, min(1.0, p))
