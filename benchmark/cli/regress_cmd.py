"""``dmlbench regress``: train the regression suite briefly and compare with the committed baselines.

Exit 0: every metric within tolerance (improvements beyond it are reported, not failed);
exit 1: a metric dropped beyond its tolerance or a training failed (a per-loss diff is printed),
        or, with --exact, any metric differs from its baseline;
exit 2: bad input (unknown case/dataset/loss, missing data or baseline, stale baseline).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from benchmark.cli.report_cmd import split_names
from benchmark.regress.cases import DEFAULT_BASELINES, DEFAULT_SUITE, load_suite, select_cases


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "regress",
        help="regression checks on small subsets against results/baselines/",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--update",
        action="store_true",
        help="regenerate the baselines of the selected cases from real runs (every suite seed)",
    )
    p.add_argument(
        "--exact",
        action="store_true",
        help="fail on any difference from the baselines (same-environment check: same-seed CPU runs "
        "with one torch thread are bit-reproducible)",
    )
    p.add_argument(
        "--cases", default=None, help="comma-separated case names, e.g. glyphs/mfcont,omniglot/mfcont"
    )
    p.add_argument("--datasets", default=None, help="comma-separated datasets, e.g. glyphs")
    p.add_argument("--losses", default=None, help="comma-separated losses, e.g. mfcont,contrastive")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="data folder for the datasets that read files (omniglot); default: the suite's, "
        "../shared/data/omniglot relative to the repository root",
    )
    p.add_argument(
        "--baselines",
        type=Path,
        default=DEFAULT_BASELINES,
        help="baseline folder (default: results/baselines/ of the repository)",
    )
    p.add_argument(
        "--suite",
        type=Path,
        default=DEFAULT_SUITE,
        help="suite file (default: protocols/regress.toml)",
    )
    p.set_defaults(handler=handle)


def reconstruct_command(args: argparse.Namespace) -> str:
    """The update command as a user would type it (stored as the baselines' provenance)."""
    parts = ["dmlbench", "regress", "--update"]
    for flag in ("cases", "datasets", "losses"):
        if getattr(args, flag):
            parts += [f"--{flag}", getattr(args, flag)]
    if args.data_dir is not None:
        parts += ["--data-dir", str(args.data_dir)]
    if args.suite != DEFAULT_SUITE:
        parts += ["--suite", str(args.suite)]
    return " ".join(shlex.quote(p) for p in parts)


def handle(args: argparse.Namespace) -> int:
    suite = load_suite(args.suite, args.data_dir)
    cases = select_cases(suite, split_names(args.cases), split_names(args.datasets), split_names(args.losses))
    # Training code (torch) only once the suite and the selection are known to be valid.
    import benchmark.native  # noqa: F401  (faiss's and torch's native libraries in a fixed order)
    from benchmark.protocol.run_data import cache_dir
    from benchmark.regress.check import run_check, run_update

    if args.update:
        command = reconstruct_command(args)
        run_update(cases, suite.settings, args.baselines, cache_dir(), sys.stdout, command)
        return 0
    code, _ = run_check(cases, suite.settings, args.baselines, cache_dir(), sys.stdout, args.exact)
    return code
