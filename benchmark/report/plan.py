"""Power planning from the records (``dmlbench plan``; docs/protocols.md §4.7).

The variance components of the two-level model (:mod:`benchmark.stats.seeds`) are estimated
from one budget's records, pooled over losses, for one column (mode, metric):

- sigma_e^2, the training-seed variance: the within-seed variance of the test repetitions,
  pooled over every (loss, seed), sum(R - 1) degrees of freedom;
- tau^2, the variance of a seed mean: pooled over the losses with >= 2 seeds; then
  sigma_a^2 = max(0, tau^2 - sigma_e^2 / R), the search-seed variance (one-way ANOVA estimator).

Without a loss of two seeds sigma_a^2 is unknown and the plan says so (it plans with 0, which
is optimistic). The plan gives, per number of search seeds S and test repetitions R, the power to
separate a difference D between two losses (:func:`benchmark.stats.power.power`, the test of two
rows alone) at level alpha / comparisons, and the cheapest (S, R) reaching the target.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from benchmark.records import replicates_per_loss
from benchmark.report.leaderboard import RecordLike
from benchmark.stats.power import difference_df, difference_se, power
from benchmark.stats.seeds import SeedVariance, pooled_within_variance, seed_means, seed_variance

SEEDS = (1, 2, 3, 4, 5, 6, 8, 10)
REPS = (4, 10, 20)


@dataclass(frozen=True)
class Components:
    """Pooled variance components of one column (fractions^2, as the records hold values)."""

    sigma_e2: float
    df_e: int
    reps: int
    #: Per loss with several seeds: the standard deviation of its seed means.
    seed_sd: dict[str, float]
    #: The leaderboard's seed-variance model of the column: its pooled tau^2 and df, and its test
    #: of equal seed spreads across the multi-seed losses.
    seed_model: SeedVariance

    @property
    def tau2(self) -> float:
        """The pooled seed-mean variance (NaN without a multi-seed loss)."""
        return self.seed_model.tau2

    @property
    def df_tau(self) -> int:
        """Degrees of freedom of :attr:`tau2`."""
        return self.seed_model.df

    @property
    def sigma_a2(self) -> float:
        """The search-seed variance (NaN when no loss has two seeds)."""
        if math.isnan(self.tau2):
            return math.nan
        return max(0.0, self.tau2 - self.sigma_e2 / self.reps)


def components(records: Sequence[RecordLike], mode: str, metric: str) -> Components:
    """The column's pooled components over the records' losses (seeds folded per loss).

    Each loss's row holds its records' repetition values (records with fewer than 2 left out:
    they carry no within-seed spread); tau^2 is :func:`~benchmark.stats.seeds.pooled_seed_variance`
    of those rows, the one estimator the leaderboard's multi-seed rows use too.
    """
    rows: dict[str, list[list[float]]] = {}
    for loss, recs in sorted(replicates_per_loss(records).items()):
        groups = [list(v) for r in recs if len(v := r.test["per_rep"].get(mode, {}).get(metric) or []) >= 2]
        if groups:
            rows[loss] = groups
    groups_all = [g for groups in rows.values() for g in groups]
    sigma_e2, df_e = pooled_within_variance(groups_all)
    model = seed_variance(list(rows.values()))
    seed_sd = {loss: float(np.std(seed_means(g), ddof=1)) for loss, g in rows.items() if len(g) >= 2}
    r_typical = int(np.median([len(g) for g in groups_all])) if groups_all else 0
    return Components(sigma_e2, df_e, r_typical, seed_sd, model)


@dataclass(frozen=True)
class Plan:
    """Power per (seeds, reps) for a difference, and the cheapest design reaching the target."""

    difference: float
    alpha: float
    target: float
    grid: dict[tuple[int, int], float]
    #: (seeds, reps) with the fewest test trainings (seeds x reps) reaching the target, fewer
    #: seeds first among ties; None when no design in the grid reaches it.
    cheapest: tuple[int, int] | None


def plan(
    c: Components,
    difference: float,
    *,
    alpha: float = 0.05,
    target: float = 0.8,
    seeds: Sequence[int] = SEEDS,
    reps: Sequence[int] = REPS,
) -> Plan:
    """Power of the two-row test for each design (differences in the records' units)."""
    sigma_a2 = 0.0 if math.isnan(c.sigma_a2) else c.sigma_a2
    grid = {
        (s, r): power(difference, difference_se(sigma_a2, c.sigma_e2, s, r), difference_df(s, r), alpha)
        for s in seeds
        for r in reps
    }
    ok = [(s * r, s, r) for (s, r), p in grid.items() if p >= target]
    cheapest = (min(ok)[1], min(ok)[2]) if ok else None
    return Plan(difference, alpha, target, grid, cheapest)


def render(
    dataset: str, budget: str, mode: str, metric: str, c: Components, p: Plan, comparisons: int
) -> str:
    """Markdown: the components, the per-loss seed spreads and the power grid (points)."""
    pts = 100.0
    lines = [
        f"# Power plan: `{dataset}`, budget `{budget}`, {mode} {metric}",
        "",
        f"Training-seed sd σ_e = {pts * math.sqrt(c.sigma_e2):.2f} points (pooled over losses and seeds, "
        f"{c.df_e} df; {c.reps} repetitions per seed).",
    ]
    if math.isnan(c.tau2):
        lines.append(
            "Search-seed sd σ_a: unknown (no loss has records of two search seeds; run one with "
            "another --seed). Planned with σ_a = 0, which is optimistic."
        )
    else:
        lines.append(
            f"Search-seed sd σ_a = {pts * math.sqrt(c.sigma_a2):.2f} points (seed means pooled over "
            f"{len(c.seed_sd)} losses, {c.df_tau} df); per loss, sd of its seed means: "
            + ", ".join(f"{k} {pts * v:.2f}" for k, v in c.seed_sd.items())
            + "."
        )
        if not c.seed_model.pooled:
            lines.append(
                f"The losses' seed spreads differ ({c.seed_model.test()}): the leaderboard gives "
                "each multi-seed row its own seed variance (at least its repetitions' training "
                "noise), and this pooled σ_a describes no single loss; the plan is optimistic for a "
                "loss whose spread above is wider, pessimistic for one whose spread is narrower."
            )
    lines += [
        "",
        f"Power to separate two losses {pts * p.difference:.2f} points apart, two-sided α = {p.alpha:.3g}"
        + (f" (0.05 / {comparisons} comparisons, Bonferroni)" if comparisons > 1 else "")
        + ", each loss run with S search seeds of R test repetitions:",
        "",
        "| Seeds S | " + " | ".join(f"R = {r}" for r in sorted({r for _, r in p.grid})) + " |",
        "|---|" + "---|" * len({r for _, r in p.grid}),
    ]
    for s in sorted({s for s, _ in p.grid}):
        cells = [f"{p.grid[(s, r)]:.2f}" for r in sorted({r for _, r in p.grid})]
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    lines.append("")
    if p.cheapest is None:
        lines.append(f"No design in the grid reaches {p.target:.0%} power: more seeds are needed.")
    else:
        s, r = p.cheapest
        lines.append(
            f"Cheapest design with ≥ {p.target:.0%} power: {s} search seed(s) × {r} repetitions "
            f"({s * r} test trainings per loss, plus {s} searches)."
        )
    lines.append(
        "Degrees of freedom are those of two losses tested alone: 2(R − 1) with one seed, 2(S − 1) "
        "with several (hence S = 2 can have less power than S = 1); the leaderboard pools the seed "
        "variance over all multi-seed rows of a column, with more degrees of freedom, so for S ≥ 2 "
        "these figures are conservative."
    )
    if len({s for s, _ in p.grid}) > 1 and not math.isnan(c.tau2) and c.sigma_a2 > 0:
        lines.append(
            "More repetitions cannot replace seeds: with S seeds the standard error of a difference "
            "never falls below sqrt(2 σ_a² / S)."
        )
    return "\n".join(lines) + "\n"
