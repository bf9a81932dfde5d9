"""Coverage of the leaderboard's intervals on simulated boards with known variance components.

Boards of L losses, each run with S search seeds of R test repetitions, values
mu_l + a_s + e_sr with sd sigma_a (search) and sigma_e (training). Prints, per setting, the share
of 95% intervals that contain mu_l: the two-level interval (benchmark.stats.seeds.row_estimates,
which pools the seed variance unless Bartlett's test rejects equal spreads), the same interval
always pooled (the rule before that test), each over all losses and for the lowest-covered loss,
and, for comparison, a one-seed t-interval over repetitions (what a single-seed row shows). The
last settings give the first loss an erratic search (its sigma_a 5-20x the others'). A column
gives the two-level coverage over the boards where Bartlett's test rejected (rows on their own
seed variance), the case a reader sees flagged "own" in a footer.

A second table follows one row's own interval (t on its S seed means, S - 1 df), as a board uses
it once the test rejects, with and without the training floor of
:func:`benchmark.stats.seeds.own_seed_variance`: over all simulated rows, and over the tenth whose
seed means happened to agree most closely (the row a rejection often comes from).

    python benchmarks/interval_coverage.py --boards 4000
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import numpy as np
import scipy.stats

from benchmark.stats.seeds import (
    HOMOGENEITY_ALPHA,
    own_seed_variance,
    row_estimates,
    seed_variance,
    training_estimate,
)

SETTINGS = (  # (losses, seeds, reps, sigma_a, sigma_e, sigma_a of the first loss) in MAP@R fractions
    (9, 2, 4, 0.010, 0.010, 0.010),
    (9, 3, 4, 0.010, 0.010, 0.010),
    (9, 2, 4, 0.020, 0.005, 0.020),
    (9, 3, 4, 0.000, 0.010, 0.000),
    (21, 2, 4, 0.010, 0.010, 0.010),
    (4, 5, 10, 0.005, 0.010, 0.005),
    # One loss whose search is erratic (the omniglot board's margin: seed means 24, 46, 39 while
    # the other multi-seed rows agree within a point), the case the test before pooling is for.
    (4, 3, 4, 0.005, 0.002, 0.100),
    (9, 3, 4, 0.005, 0.002, 0.100),
    (4, 2, 4, 0.005, 0.002, 0.100),
    (4, 3, 4, 0.005, 0.002, 0.020),
)


def coverage(y: np.ndarray, mu: np.ndarray, alpha: float) -> tuple[np.ndarray, float, int]:
    """Per loss, the share of boards ``y[b, loss, seed, rep]`` whose interval contains ``mu``;
    the share over the rows of the boards where the test rejected pooling, and how many did."""
    hits = np.zeros(len(mu))
    rejected_hits, rejected = 0.0, 0
    for board in y:
        rows = [[list(board[k, s]) for s in range(board.shape[1])] for k in range(len(mu))]
        inside = [abs(e.mean - mu[k]) <= e.half_width for k, e in enumerate(row_estimates(rows, alpha=alpha))]
        hits += inside
        if not seed_variance(rows, alpha).pooled:
            rejected += 1
            rejected_hits += float(np.mean(inside))
    return hits / len(y), (rejected_hits / rejected if rejected else math.nan), rejected


#: One row's settings for the second table: (seeds, reps, sigma_a / sigma_e).
OWN_SETTINGS = tuple((s, 4, r) for s in (2, 3) for r in (0.0, 0.5, 1.0, 2.0))


def own_row_coverage(seeds: int, reps: int, ratio: float, n: int, rng: np.random.Generator) -> list[float]:
    """One row's own-variance interval (mean 0, sigma_e 1): coverage without and with the training
    floor, over all ``n`` rows and over the tenth with the least spread of seed means."""
    y = rng.normal(0.0, ratio, (n, seeds, 1)) + rng.normal(0.0, 1.0, (n, seeds, reps))
    t = float(scipy.stats.t.ppf(0.975, seeds - 1))
    raw, floored, spread = np.zeros(n, bool), np.zeros(n, bool), np.zeros(n)
    for b in range(n):
        groups = [list(g) for g in y[b]]
        means = y[b].mean(axis=1)
        spread[b] = means.var(ddof=1)
        own = own_seed_variance(groups)
        assert own is not None  # every simulated seed has values
        raw[b] = abs(means.mean()) <= t * math.sqrt(spread[b] / seeds)
        floored[b] = abs(means.mean()) <= t * math.sqrt(own.tau2 / seeds)
    calm = spread <= np.quantile(spread, 0.1)
    return [float(raw.mean()), float(floored.mean()), float(raw[calm].mean()), float(floored[calm].mean())]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--boards", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print(
        "| Losses | Seeds | Reps | σ_a | σ_e | σ_a loss 1 | two-level coverage (lowest loss) "
        "| two-level where the test rejected (boards) | always pooled (lowest loss) "
        "| one-seed t coverage | MC ± (3 se) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for losses, seeds, reps, sa, se, sa_first in SETTINGS:
        mu = np.linspace(0.3, 0.5, losses)
        sd_a = np.full(losses, sa)
        sd_a[0] = sa_first
        y = (
            mu[None, :, None, None]
            + rng.normal(0, 1, (args.boards, losses, seeds, 1)) * sd_a[None, :, None, None]
            + rng.normal(0, se, (args.boards, losses, seeds, reps))
        )
        tested, when_rejected, rejected = coverage(y, mu, HOMOGENEITY_ALPHA)
        pooled, _, _ = coverage(y, mu, 0.0)
        one = np.mean([
            abs((t := training_estimate(list(y[b, k, 0]))).mean - mu[k]) <= t.half_width
            for b in range(args.boards)
            for k in range(losses)
        ])  # fmt: skip
        mc = 3 * math.sqrt(0.95 * 0.05 / args.boards)
        print(
            f"| {losses} | {seeds} | {reps} | {sa} | {se} | {sa_first} "
            f"| {tested.mean():.3f} ({tested.min():.3f}) | {when_rejected:.3f} ({rejected}) "
            f"| {pooled.mean():.3f} ({pooled.min():.3f}) | {one:.3f} | {mc:.3f} |"
        )
    print()
    print(
        "| Seeds | Reps | σ_a / σ_e | own, no floor | own, floored | own, no floor: calmest tenth "
        "| own, floored: calmest tenth |"
    )
    print("|---|---|---|---|---|---|---|")
    for seeds, reps, ratio in OWN_SETTINGS:
        cells = own_row_coverage(seeds, reps, ratio, 10 * args.boards, rng)
        print(f"| {seeds} | {reps} | {ratio:g} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
