"""Coverage of the leaderboard's intervals on simulated boards with known variance components.

Boards of L losses, each run with S search seeds of R test repetitions, values
mu_l + a_s + e_sr with sd sigma_a (search) and sigma_e (training). Prints, per setting, the share
of 95% intervals that contain mu_l: the two-level interval (benchmark.stats.seeds.row_estimates)
and, for comparison, a one-seed t-interval over repetitions (what a single-seed row shows).

    python benchmarks/interval_coverage.py --boards 4000
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

import numpy as np

from benchmark.stats.seeds import row_estimates, training_estimate

SETTINGS = (  # (losses, seeds, reps, sigma_a, sigma_e) in MAP@R fractions
    (9, 2, 4, 0.010, 0.010),
    (9, 3, 4, 0.010, 0.010),
    (9, 2, 4, 0.020, 0.005),
    (9, 3, 4, 0.000, 0.010),
    (21, 2, 4, 0.010, 0.010),
    (4, 5, 10, 0.005, 0.010),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--boards", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    print("| Losses | Seeds | Reps | σ_a | σ_e | two-level coverage | one-seed t coverage | MC ± (3 se) |")
    print("|---|---|---|---|---|---|---|---|")
    for losses, seeds, reps, sa, se in SETTINGS:
        mu = np.linspace(0.3, 0.5, losses)
        hits = one = 0
        for _ in range(args.boards):
            y = (
                mu[:, None, None]
                + rng.normal(0, sa, (losses, seeds, 1))
                + rng.normal(0, se, (losses, seeds, reps))
            )
            rows = [[list(y[k, s]) for s in range(seeds)] for k in range(losses)]
            for k, est in enumerate(row_estimates(rows)):
                hits += abs(est.mean - mu[k]) <= est.half_width
                first = training_estimate(rows[k][0])
                one += abs(first.mean - mu[k]) <= first.half_width
        n = args.boards * losses
        mc = 3 * math.sqrt(0.95 * 0.05 / args.boards)
        print(f"| {losses} | {seeds} | {reps} | {sa} | {se} | {hits / n:.3f} | {one / n:.3f} | {mc:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
