"""``dmlbench report``: print a dataset's leaderboard (or, with ``--convergence``, its convergence table)
from its run records; optionally (re)write plots."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from benchmark.checks import check_name
from benchmark.errors import DmlbenchError
from benchmark.report.leaderboard import available_runs, load_leaderboard
from benchmark.report.tables import FORMATS, render_leaderboard


def add_parser(sub: Any) -> None:
    p = sub.add_parser("report", help="print a leaderboard from run records", description=__doc__)
    p.add_argument("--dataset", default=None, help="dataset (default: the only one with records)")
    p.add_argument("--protocol", default="mlrc", help="protocol (default: mlrc)")
    p.add_argument(
        "--metrics",
        default=None,
        help="comma-separated metric names (default: every metric the records hold, MLRC's first)",
    )
    p.add_argument("--format", default="md", choices=FORMATS, help="output format (default: md)")
    p.add_argument("--budget", default=None, help="only records of this budget (default: one section each)")
    p.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="records root (default: results/)"
    )
    p.add_argument(
        "--plots",
        action="store_true",
        help="also (re)write the plots into <results>/<dataset>/<protocol>/plots/",
    )
    p.add_argument(
        "--published",
        action="store_true",
        help="also show the published papers' values beside each loss (Markdown; docs/protocols.md §8)",
    )
    p.add_argument(
        "--convergence",
        action="store_true",
        help="print the convergence table instead of the leaderboard: per loss, fold trainings stopped "
        "by patience, median best epoch, median fold wall time, CPU kind (md or csv)",
    )
    p.set_defaults(handler=handle)


def split_names(text: str | None) -> list[str] | None:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``; None or blank -> None."""
    if text is None:
        return None
    names = [part.strip() for part in text.split(",") if part.strip()]
    return names or None


def resolve_dataset(results_dir: Path, dataset: str | None, protocol: str) -> str:
    """``dataset`` or, when omitted, the only dataset with ``protocol`` records."""
    if dataset:
        return dataset
    runs = available_runs(results_dir)
    candidates = sorted({run.split("/")[0] for run in runs if run.split("/")[1] == protocol})
    if len(candidates) == 1:
        return candidates[0]
    if candidates:
        raise DmlbenchError(f"Name a --dataset; datasets with {protocol!r} records: {', '.join(candidates)}.")
    listed = ", ".join(runs)
    elsewhere = f"; records exist for: {listed} (choose one with --dataset and --protocol)" if runs else ""
    raise DmlbenchError(f"Name a --dataset; no {protocol!r} records under {results_dir}{elsewhere}.")


def handle(args: argparse.Namespace) -> int:
    # Names, never paths: joined to --results-dir they must stay inside it.
    check_name("protocol", args.protocol)
    dataset = check_name("dataset", resolve_dataset(args.results_dir, args.dataset, args.protocol))
    # One leaderboard object: the table, the published section and the plots all render it.
    lb = load_leaderboard(
        args.results_dir, dataset, args.protocol, budget=args.budget, metrics=split_names(args.metrics)
    )
    published = getattr(args, "published", False)  # Namespaces built by tests may lack it
    if published and args.format != "md":
        raise DmlbenchError("--published is shown as Markdown: use it with --format md (the default).")
    if getattr(args, "convergence", False):
        from benchmark.report.convergence_table import CONVERGENCE_FORMATS, render_convergence

        if args.format not in CONVERGENCE_FORMATS or published:
            raise DmlbenchError(
                f"--convergence prints one table in {' or '.join(CONVERGENCE_FORMATS)}; got "
                f"--format {args.format}{' with --published' if published else ''}."
            )
        sys.stdout.write(render_convergence(args.format, lb))
    else:
        sys.stdout.write(render_leaderboard(args.format, lb))
    if published:
        from benchmark.report.published import published_section

        sys.stdout.write(
            published_section(args.results_dir, dataset, args.protocol, lb.by_section, lb.metrics)
        )
    if args.plots:
        from benchmark.report.plots import write_plots  # matplotlib only when plotting

        # The plots cover every budget: with --budget the table shows one, so they read them all.
        every = lb if args.budget is None else None
        for path in write_plots(args.results_dir, dataset, args.protocol, leaderboard=every):
            print(f"plot: {path}", file=sys.stderr)
    return 0
