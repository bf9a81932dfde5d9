"""``dmlbench plan``: how many search seeds and test repetitions separate a difference of D points."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmark.cli.report_cmd import resolve_dataset
from benchmark.errors import DmlbenchError


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan", help="seeds and repetitions needed to separate a difference (power)", description=__doc__
    )
    p.add_argument("--dataset", default=None, help="dataset (default: the only one with records)")
    p.add_argument("--protocol", default="mlrc", help="protocol (default: mlrc)")
    p.add_argument("--budget", default="mini", help="budget whose records give the variances (default: mini)")
    p.add_argument("--metric", default="map_at_r", help="metric (default: map_at_r)")
    p.add_argument("--mode", default="separated", help="evaluation mode (default: separated)")
    p.add_argument(
        "--difference", type=float, default=1.0, help="difference to separate, in points (default: 1.0)"
    )
    p.add_argument("--power", type=float, default=0.8, help="target power (default: 0.8)")
    p.add_argument("--alpha", type=float, default=0.05, help="family level (default: 0.05)")
    p.add_argument(
        "--comparisons", type=int, default=1, help="comparisons to correct for (Bonferroni; default 1)"
    )
    p.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="records root (default: results/)"
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    if not args.difference > 0:
        raise DmlbenchError(f"--difference must be > 0 points; got {args.difference}.")
    if not 0.0 < args.power < 1.0 or not 0.0 < args.alpha < 1.0:
        raise DmlbenchError(f"--power and --alpha must lie in (0, 1); got {args.power} and {args.alpha}.")
    if args.comparisons < 1:
        raise DmlbenchError(f"--comparisons must be >= 1; got {args.comparisons}.")
    from benchmark.report.leaderboard import select_records
    from benchmark.report.plan import components, plan, render

    dataset = resolve_dataset(args.results_dir, args.dataset, args.protocol)
    from benchmark.records import settings_groups

    # The budget's current board settings only: the plan is for runs made under them, and the
    # variances of records made under earlier settings are not pooled in.
    records = settings_groups(
        select_records(args.results_dir, dataset, args.protocol, args.budget)[args.budget]
    )[0]
    c = components(records, args.mode, args.metric)
    if c.df_e == 0:
        raise DmlbenchError(
            f"No {args.mode} {args.metric!r} per-repetition values with 2 or more repetitions in the "
            f"{dataset}/{args.protocol} {args.budget!r} records."
        )
    p = plan(c, args.difference / 100.0, alpha=args.alpha / args.comparisons, target=args.power)
    sys.stdout.write(render(dataset, args.budget, args.mode, args.metric, c, p, args.comparisons))
    return 0
