"""The two-level (search seed x training seed) estimator, tiers, power and TOST (benchmark.stats)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.stats

from benchmark.stats.equivalence import CONSISTENT, DIFFERS, INCONCLUSIVE, combined, se_from_half_width, tost
from benchmark.stats.intervals import holm, t_interval, welch_t_test
from benchmark.stats.power import difference_df, difference_se, min_detectable_difference, power
from benchmark.stats.seeds import (
    SCOPE_BOTH,
    SCOPE_TRAINING,
    contrast,
    difference,
    equal_variance_p,
    own_seed_variance,
    pooled_seed_variance,
    pooled_within_variance,
    row_estimates,
    seed_variance,
    training_estimate,
    training_floor,
)
from benchmark.stats.tiers import column_tiers, compact_letters


def test_one_seed_row_is_the_plain_t_interval() -> None:
    values = [0.41, 0.45, 0.43, 0.47]
    (est,) = row_estimates([[values]])
    ref = t_interval(values)
    assert est.scope == SCOPE_TRAINING and est.n_seeds == 1
    assert est.mean == pytest.approx(ref.mean, abs=1e-15)
    assert est.half_width == pytest.approx(ref.half_width, rel=1e-12)


def test_pooled_seed_variance_by_hand() -> None:
    rows = [[[1.0, 3.0], [5.0, 7.0]], [[0.0], [1.0], [2.0]], [[9.0, 9.0]]]
    # row 0: seed means 2, 6 -> ss 8, df 1; row 1: means 0,1,2 -> ss 2, df 2; row 2: one seed.
    tau2, df = pooled_seed_variance(rows)
    assert tau2 == pytest.approx(10.0 / 3.0) and df == 3
    est = row_estimates(rows)
    assert est[0].scope == SCOPE_BOTH and est[0].mean == 4.0
    assert est[0].var_mean == pytest.approx(10.0 / 3.0 / 2)
    assert est[1].var_mean == pytest.approx(10.0 / 3.0 / 3) and est[1].df == 3
    assert est[2].scope == SCOPE_TRAINING and est[2].half_width == 0.0
    half = scipy.stats.t.ppf(0.975, 3) * math.sqrt(10.0 / 3.0 / 2)
    assert est[0].half_width == pytest.approx(half)


def test_two_one_seed_rows_are_welch() -> None:
    a, b = [0.41, 0.45, 0.43, 0.47], [0.38, 0.40, 0.45, 0.36, 0.39]
    d = difference(training_estimate(a), training_estimate(b))
    t, p = welch_t_test(a, b)
    assert d.t == pytest.approx(t, rel=1e-10) and d.p == pytest.approx(p, rel=1e-9)


def test_a_contrast_of_one_seed_rows_matches_a_hand_computed_welch_satterthwaite() -> None:
    """A family gap: mean of two rows minus a third, recomputed from the repetitions by hand."""
    reps = ([0.61, 0.63, 0.60, 0.64], [0.58, 0.57, 0.60, 0.59], [0.50, 0.55, 0.52, 0.49])
    weights = (0.5, 0.5, -1.0)
    got = contrast([(c, training_estimate(list(r))) for c, r in zip(weights, reps, strict=True)])
    means = [float(np.mean(r)) for r in reps]
    var_means = [float(np.var(r, ddof=1)) / len(r) for r in reps]
    parts = [c * c * v for c, v in zip(weights, var_means, strict=True)]
    df = sum(parts) ** 2 / sum(w * w / (len(r) - 1) for w, r in zip(parts, reps, strict=True))
    se = math.sqrt(sum(parts))
    diff = sum(c * m for c, m in zip(weights, means, strict=True))
    assert got.diff == pytest.approx(diff, rel=1e-12) and got.se == pytest.approx(se, rel=1e-12)
    assert got.df == pytest.approx(df, rel=1e-12)
    assert got.p == pytest.approx(2 * scipy.stats.t.sf(abs(diff / se), df), rel=1e-9)
    lo, hi = got.interval()
    assert hi - diff == pytest.approx(scipy.stats.t.ppf(0.975, df) * se, rel=1e-9) and lo < diff < hi


def test_a_contrast_of_rows_of_one_pool_tests_on_the_pool_df_and_difference_is_a_contrast() -> None:
    rows = [[[0.50, 0.52], [0.55, 0.53]], [[0.40, 0.41], [0.43, 0.42]], [[0.45, 0.44], [0.47, 0.49]]]
    a, b, c = row_estimates(rows)
    gap = contrast([(0.5, a), (0.5, b), (-1.0, c)])
    assert gap.df == 3  # 3 rows x (2 seeds - 1): the pool's, not Welch-Satterthwaite's
    assert gap.se == pytest.approx(math.sqrt(a.var_mean / 4 + b.var_mean / 4 + c.var_mean))
    assert difference(a, b) == contrast([(1.0, a), (-1.0, b)])


def test_a_contrast_without_terms_is_an_error_and_an_unknown_variance_gives_nan() -> None:
    with pytest.raises(ValueError, match="at least one"):
        contrast([])
    assert math.isnan(contrast([(1.0, training_estimate([0.5]))]).se)


def _simulate(n_sims: int, losses: int, seeds: int, reps: int, sa: float, se: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu = np.linspace(0.3, 0.5, losses)
    a = rng.normal(0.0, sa, size=(n_sims, losses, seeds, 1))
    e = rng.normal(0.0, se, size=(n_sims, losses, seeds, reps))
    return mu[None, :, None, None] + a + e


@pytest.mark.parametrize(("seeds", "sa", "se"), [(2, 0.02, 0.01), (3, 0.01, 0.02), (3, 0.0, 0.02)])
def test_two_level_interval_covers_nominal(seeds: int, sa: float, se: float) -> None:
    """Known components, 1500 simulated boards of 6 losses: the nominal 95% covers 95% within
    Monte-Carlo error (3 standard errors), whatever the split between search and training."""
    n, losses = 1500, 6
    y = _simulate(n, losses, seeds, 4, sa, se, seed=seeds)
    mu = np.linspace(0.3, 0.5, losses)
    hits = 0
    for b in range(n):
        rows = [[list(y[b, k, s]) for s in range(seeds)] for k in range(losses)]
        for k, est in enumerate(row_estimates(rows)):
            hits += abs(est.mean - mu[k]) <= est.half_width
    coverage = hits / (n * losses)
    mc = 3 * math.sqrt(0.95 * 0.05 / n)  # rows of one board share tau^2: n boards, not n*losses
    assert abs(coverage - 0.95) < mc, coverage


def test_training_only_interval_undercovers_when_the_search_varies() -> None:
    """Why the scope is printed: with sigma_a = 2 sigma_e a one-seed interval misses often."""
    n = 2000
    y = _simulate(n, 1, 1, 4, 0.02, 0.01, seed=7)
    mu = 0.3
    hits = sum(
        abs(training_estimate(list(y[b, 0, 0])).mean - mu) <= training_estimate(list(y[b, 0, 0])).half_width
        for b in range(n)
    )
    assert hits / n < 0.75


def test_pooled_rows_test_on_the_pooled_df() -> None:
    rows = [[[0.50, 0.52], [0.55, 0.53]], [[0.40, 0.41], [0.43, 0.42]]]
    a, b = row_estimates(rows)
    d = difference(a, b)
    assert d.df == 2  # 2 rows x (2 seeds - 1)
    means_a, means_b = [0.51, 0.54], [0.405, 0.425]
    tau2 = (np.var(means_a, ddof=1) + np.var(means_b, ddof=1)) / 2
    t = (np.mean(means_a) - np.mean(means_b)) / math.sqrt(tau2 * (1 / 2 + 1 / 2))
    assert d.t == pytest.approx(t) and d.p == pytest.approx(2 * scipy.stats.t.sf(abs(t), 2))


def test_bartlett_decides_pooling_and_unequal_rows_keep_their_own_seed_variance() -> None:
    """An erratic search (seed means 24, 46, 39) beside calm ones (spread < 1 point): Bartlett's
    test (scipy) rejects equal seed variances, so each row's interval uses its own seed means on
    S - 1 df instead of a pool the erratic row dominates."""
    means = ([0.2425, 0.4592, 0.3927], [0.4675, 0.4709, 0.4694], [0.4379, 0.4434, 0.4417])
    rows = [[[m - 0.001, m + 0.001] for m in row] for row in means]
    model = seed_variance(rows)
    p = float(scipy.stats.bartlett(*[np.asarray(m) for m in means]).pvalue)
    assert model.p_equal == pytest.approx(p, rel=1e-12) and p < 0.05 and not model.pooled
    assert model.rows == 3 and "differ" in model.describe()
    for est, m in zip(row_estimates(rows), means, strict=True):
        assert not est.pooled and est.df == 2 and est.scope == SCOPE_BOTH
        assert est.var_mean == pytest.approx(float(np.var(m, ddof=1)) / 3, rel=1e-12)
        half = scipy.stats.t.ppf(0.975, 2) * math.sqrt(float(np.var(m, ddof=1)) / 3)
        assert est.half_width == pytest.approx(half, rel=1e-12)
    a, b = row_estimates(rows)[:2]
    d = difference(a, b)  # two rows of their own variance: Welch-Satterthwaite on their seed means
    welch = scipy.stats.ttest_ind(means[0], means[1], equal_var=False)
    assert d.p == pytest.approx(float(welch.pvalue), rel=1e-9)
    # alpha = 0 never rejects: the former always-pooled estimate.
    pooled = row_estimates(rows, alpha=0.0)
    tau2, df = pooled_seed_variance(rows)
    assert all(e.pooled and e.df == df for e in pooled)
    assert (
        pooled[1].var_mean == pytest.approx(tau2 / 3)
        and pooled[1].half_width > 10 * row_estimates(rows)[1].half_width
    )


def test_a_row_on_its_own_seed_variance_never_goes_below_its_training_noise() -> None:
    """Seeds whose means agree by chance (44.12, 44.34, 44.17, as omniglot's Contrastive) while
    each seed's repetitions spread by points: the row's own tau^2 is raised to sigma_e^2 / R,
    computed here from the repetitions by hand, on the same S - 1 df; a row above it keeps its own."""
    offsets = [-1.5, -0.5, 0.5, 1.5]  # within-seed deviations: variance 5/3 per seed
    calm = [[m + d for d in offsets] for m in (44.12, 44.34, 44.17)]
    erratic = [[m + d / 10 for d in offsets] for m in (24.0, 46.0, 39.0)]
    steady = [[m + d / 10 for d in offsets] for m in (47.0, 47.8, 46.3)]
    rows = [calm, erratic, steady]
    assert not seed_variance(rows).pooled  # Bartlett rejects: each row on its own variance
    sigma_e2 = sum(d * d for d in offsets) / 3  # every seed has the same deviations
    assert training_floor(calm) == pytest.approx(sigma_e2 / 4)
    est = row_estimates(rows)
    assert est[0].floored and not est[0].pooled and est[0].df == 2
    assert est[0].var_mean == pytest.approx(sigma_e2 / 4 / 3)
    assert est[0].half_width == pytest.approx(scipy.stats.t.ppf(0.975, 2) * math.sqrt(sigma_e2 / 12))
    calm_own = own_seed_variance(calm)
    assert calm_own is not None and calm_own.floored and calm_own.df == 2
    assert calm_own.tau2 == pytest.approx(sigma_e2 / 4)
    for row, e in zip(rows[1:], est[1:], strict=True):
        means = [float(np.mean(g)) for g in row]
        assert not e.floored and e.var_mean == pytest.approx(float(np.var(means, ddof=1)) / 3)
        own = own_seed_variance(row)
        assert own is not None and not own.floored and own.tau2 == pytest.approx(float(np.var(means, ddof=1)))
    # Unequal repetition counts: the floor is sigma_e^2 times the mean of 1/R_s.
    groups = [[1.0, 3.0], [2.0, 4.0, 6.0]]  # within: (2 + 8) / (1 + 2) = 10/3
    assert training_floor(groups) == pytest.approx(10 / 3 * (1 / 2 + 1 / 3) / 2)
    assert math.isnan(training_floor([[1.0], [2.0]]))  # no seed of two values: no floor


def test_similar_seed_spreads_still_pool() -> None:
    rows = [[[0.50, 0.52], [0.55, 0.53]], [[0.40, 0.41], [0.43, 0.42]], [[0.45, 0.44], [0.47, 0.49]]]
    model = seed_variance(rows)
    assert model.pooled and model.p_equal >= 0.05 and "pooled" in model.describe()
    assert all(e.pooled and e.df == 3 for e in row_estimates(rows))


def test_equal_variance_p_edge_cases() -> None:
    assert math.isnan(equal_variance_p([np.array([1.0, 2.0])]))  # one sample: nothing to compare
    assert equal_variance_p([np.array([1.0, 1.0]), np.array([2.0, 2.0])]) == 1.0
    assert equal_variance_p([np.array([1.0, 1.0]), np.array([2.0, 3.0])]) == 0.0
    x, y = np.array([1.0, 2.0, 4.0]), np.array([0.0, 5.0, 9.0, 2.0])
    assert equal_variance_p([x, y]) == pytest.approx(float(scipy.stats.bartlett(x, y).pvalue))
    assert math.isnan(seed_variance([[[0.5]], [[0.4, 0.5]]]).p_equal)  # no multi-seed row


def test_one_erratic_search_no_longer_breaks_the_other_rows_coverage() -> None:
    """Simulated boards of 5 rows with 3 seeds, one row's search sd 20x the others': pooling
    always makes the calm rows' intervals far too wide (coverage ~1) and the erratic row's too
    narrow; the tested rule brings the erratic row to nominal within Monte-Carlo error (3 se)
    and the calm rows' coverage down from ~1 (they pool again whenever the test misses)."""
    n, losses, seeds, reps = 1500, 5, 3, 4
    rng = np.random.default_rng(11)
    mu = np.linspace(0.3, 0.5, losses)
    sa = np.array([0.10, 0.005, 0.005, 0.005, 0.005])
    y = mu[None, :, None, None] + rng.normal(0.0, 1.0, (n, losses, seeds, 1)) * sa[None, :, None, None]
    y = y + rng.normal(0.0, 0.002, (n, losses, seeds, reps))
    hits = {"tested": np.zeros(losses), "always": np.zeros(losses)}
    for b in range(n):
        rows = [[list(y[b, k, s]) for s in range(seeds)] for k in range(losses)]
        for rule, alpha in (("tested", 0.05), ("always", 0.0)):
            for k, est in enumerate(row_estimates(rows, alpha=alpha)):
                hits[rule][k] += abs(est.mean - mu[k]) <= est.half_width
    tested, always = hits["tested"] / n, hits["always"] / n
    mc = 3 * math.sqrt(0.95 * 0.05 / n)
    assert abs(tested[0] - 0.95) < mc, tested
    assert always[0] < 0.95 - mc, always
    assert always[1:].min() > 0.995 and tested[1:].mean() < always[1:].mean(), (tested, always)


# -- tiers ------------------------------------------------------------------------------------


def _est(mean: float, sd: float = 0.001, n: int = 4) -> object:
    rng = np.random.default_rng(int(mean * 1000))
    values = list(mean + sd * rng.standard_normal(n))
    values = list(np.asarray(values) - np.mean(values) + mean)
    return training_estimate(values)


def test_tiers_known_by_construction() -> None:
    # Three clearly separated groups; within a group the means differ by far less than the noise.
    ests = [_est(m) for m in (0.50, 0.5003, 0.40, 0.4002, 0.30)]
    tiers = column_tiers(ests)  # type: ignore[arg-type]
    assert tiers.best == 1
    assert tiers.in_best_tier == (True, True, False, False, False)
    assert tiers.letters == ("a", "a", "b", "b", "c")
    assert tiers.n_pairs == 10
    # Lower is better flips the order of the letters.
    low = column_tiers(ests, higher_is_better=False)  # type: ignore[arg-type]
    assert low.letters == ("c", "c", "b", "b", "a") and low.in_best_tier[4]


def test_tiers_use_holm_over_all_pairs() -> None:
    ests = [_est(0.50, 0.01), _est(0.47, 0.01), _est(0.30, 0.01)]
    tiers = column_tiers(ests)  # type: ignore[arg-type]
    pairs = [(0, 1), (0, 2), (1, 2)]
    raw = [difference(ests[i], ests[j]).p for i, j in pairs]  # type: ignore[arg-type]
    assert [tiers.p_adjusted[p] for p in pairs] == pytest.approx(holm(raw))
    assert tiers.in_best_tier == tuple(not tiers.significant(i, 0) for i in range(3))


@pytest.mark.parametrize("seed", range(20))
def test_letters_share_exactly_when_not_significant(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 9))
    sig = [(i, j) for i, j in itertools.combinations(range(n), 2) if rng.random() < 0.5]
    letters = compact_letters(n, sig, list(range(n)))
    for i, j in itertools.combinations(range(n), 2):
        share = bool(set(letters[i]) & set(letters[j]))
        assert share == ((i, j) not in sig), (letters, sig)
    assert "a" in letters[0]


# -- power ------------------------------------------------------------------------------------


def test_power_and_mdd() -> None:
    # Large df: the normal approximation (z_0.975 + z_0.8) se.
    assert min_detectable_difference(1.0, 1e7) == pytest.approx(1.959964 + 0.841621, rel=1e-4)
    mdd = min_detectable_difference(0.5, 6)
    assert power(mdd, 0.5, 6) == pytest.approx(0.8, abs=1e-9)
    # Monte Carlo check of the power formula: 6 vs 6 equal-variance samples.
    rng = np.random.default_rng(0)
    delta, sd, n = 1.2, 1.0, 6
    a = rng.normal(delta, sd, size=(20000, n))
    b = rng.normal(0.0, sd, size=(20000, n))
    p = scipy.stats.ttest_ind(a, b, axis=1).pvalue
    se = sd * math.sqrt(2 / n)
    assert (p <= 0.05).mean() == pytest.approx(power(delta, se, 2 * n - 2), abs=0.015)


def test_difference_se_and_df() -> None:
    assert difference_se(1.0, 4.0, seeds=2, reps=4) == pytest.approx(math.sqrt(2 * (1 + 1) / 2))
    assert difference_df(1, 4) == 6 and difference_df(3, 4) == 4


# -- TOST -------------------------------------------------------------------------------------


def test_tost_hand_computed() -> None:
    q = scipy.stats.t.ppf(0.95, 10)
    e = tost(0.2, 0.1, 10, margin=0.5)
    assert e.low == pytest.approx(0.2 - q * 0.1) and e.high == pytest.approx(0.2 + q * 0.1)
    assert e.verdict == CONSISTENT  # 0.2 + 1.81 * 0.1 = 0.38 < 0.5
    assert tost(0.4, 0.1, 10, margin=0.5).verdict == INCONCLUSIVE  # upper 0.58
    assert tost(0.8, 0.1, 10, margin=0.5).verdict == DIFFERS  # lower 0.62 > 0.5
    assert tost(-0.8, 0.1, 10, margin=0.5).verdict == DIFFERS
    assert tost(0.49, 0.0, math.inf, margin=0.5).verdict == CONSISTENT
    with pytest.raises(ValueError, match="margin"):
        tost(0.0, 0.1, 10, margin=0.0)


def test_combined_se_is_quadrature_with_welch_df() -> None:
    se, df = combined(0.3, 3, 0.4, 9)
    assert se == pytest.approx(0.5)
    assert df == pytest.approx(0.5**4 / (0.3**4 / 3 + 0.4**4 / 9))
    assert combined(0.0, 3, 0.0, 9) == (0.0, math.inf)
    assert se_from_half_width(scipy.stats.t.ppf(0.975, 9) * 0.2, 10) == pytest.approx(0.2)


def test_pooled_within_variance_is_the_one_way_anova_error_mean_square() -> None:
    groups = [[0.1, 0.3, 0.2], [0.5, 0.9], [0.7]]  # the singleton carries no within-seed spread
    var, df = pooled_within_variance(groups)
    by_hand = (0.02 + 0.08) / 3  # (0.01 + 0.01 + 0) + 0.08, over (2 + 1) df
    assert df == 3 and var == pytest.approx(by_hand)
    # scipy's one-way ANOVA: F = MS_between / MS_within, so MS_within = MS_between / F.
    two = groups[:2]
    f, _ = scipy.stats.f_oneway(*two)
    grand = np.mean([x for g in two for x in g])
    ms_between = sum(len(g) * (np.mean(g) - grand) ** 2 for g in two) / (len(two) - 1)
    assert pooled_within_variance(two)[0] == pytest.approx(ms_between / f)
    assert math.isnan(pooled_within_variance([[0.4]])[0])
