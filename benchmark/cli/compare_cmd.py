"""``dmlbench compare``: significance of losses against reference losses, Holm-corrected by default."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmark.cli.report_cmd import resolve_dataset, split_names
from benchmark.errors import DmlbenchError
from benchmark.report.compare import (
    DEFAULT_ALPHA,
    FORMATS,
    compare_leaderboard,
    render,
    settings_conflicts,
)
from benchmark.report.leaderboard import load_leaderboard


def add_parser(sub: Any) -> None:
    p = sub.add_parser("compare", help="significance of losses vs reference losses", description=__doc__)
    p.add_argument("--dataset", default=None, help="dataset (default: the only one with records)")
    p.add_argument("--protocol", default="mlrc", help="protocol (default: mlrc)")
    p.add_argument(
        "--reference", required=True, help="comma-separated reference losses, e.g. arcface,proxyanchor"
    )
    p.add_argument(
        "--losses", default=None, help="comma-separated losses to compare (default: all non-reference losses)"
    )
    p.add_argument("--metric", default="map_at_r", help="metric tested (default: map_at_r)")
    correction = p.add_mutually_exclusive_group()
    correction.add_argument(
        "--holm",
        action="store_true",
        help="Holm-adjust the p-values over each table (the default; kept for old scripts)",
    )
    correction.add_argument(
        "--no-correction",
        action="store_true",
        help="do not correct for the number of comparisons (the Mean-Field paper's Tables 6-7)",
    )
    p.add_argument(
        "--diff",
        action="store_true",
        help="cells lead with loss - reference and its 95%% interval (Markdown)",
    )
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level (default: 0.05)")
    p.add_argument("--format", default="md", choices=FORMATS, help="output format (default: md)")
    p.add_argument("--budget", default=None, help="only records of this budget (default: one table each)")
    p.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="records root (default: results/)"
    )
    p.add_argument(
        "--published",
        action="store_true",
        help="also show the published papers' values beside each loss (Markdown; docs/protocols.md §8)",
    )
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    dataset = resolve_dataset(args.results_dir, args.dataset, args.protocol)
    # The same leaderboard object `report` renders: same records, same newest record per loss.
    lb = load_leaderboard(args.results_dir, dataset, args.protocol, budget=args.budget, require_metric=False)
    # One table per section: a budget's records of different board settings are never tested together.
    by_section = lb.by_section
    references = split_names(args.reference) or []
    losses = split_names(args.losses)
    use_holm = not getattr(args, "no_correction", False)
    tables = compare_leaderboard(lb, references, losses, args.metric, use_holm=use_holm, alpha=args.alpha)
    conflicts = settings_conflicts(lb, [*references, *(losses or [])])
    for label in sorted(set(by_section) - set(tables)):
        print(f"compare: section {label!r} left out (it lacks a needed loss).", file=sys.stderr)
    for why in conflicts.values():
        print(f"compare: {why}", file=sys.stderr)
    published = getattr(args, "published", False)  # Namespaces built by tests may lack it
    if published and args.format != "md":
        raise DmlbenchError("--published is shown as Markdown: use it with --format md (the default).")
    show_diff = getattr(args, "diff", False)
    sys.stdout.write(
        render(args.format, dataset, args.protocol, tables, args.metric, use_holm, args.alpha, show_diff)
    )
    if published:
        from benchmark.report.published import published_section

        shown = {c.loss for cs in tables.values() for c in cs} | set(references)
        sys.stdout.write(
            published_section(args.results_dir, dataset, args.protocol, by_section, [args.metric], shown)
        )
    return 0
