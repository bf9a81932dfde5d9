"""Startup cost of the CLI: ``dmlbench --help``, ``dmlbench list losses`` and a bad-input error
against ``python -c "import torch"``, on the same machine (issue 14 §3).

Each command is a fresh interpreter; the commands are run in interleaved rounds (one of each per
round, so that a change in machine load hits every command alike) and the median and the min-max
range of ``--runs`` rounds are printed, in seconds of wall time. ``--code`` picks the checkout
whose ``benchmark`` package runs; given several times, every checkout's commands are interleaved
in the same rounds (e.g. before/after a change)::

    python benchmarks/startup_time.py --runs 7 [--code . --code /path/to/other/checkout]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# name -> (arguments of the python interpreter, expected exit code)
COMMANDS: dict[str, tuple[list[str], int]] = {
    'python -c "import torch"': (["-c", "import torch"], 0),
    "dmlbench --help": (["-m", "benchmark.cli.main", "--help"], 0),
    "dmlbench list losses": (["-m", "benchmark.cli.main", "list", "losses"], 0),
    # A bad input every version refuses (an unknown loss name): the time until the user sees the error.
    "dmlbench run --loss mfcnt (error)": (
        ["-m", "benchmark.cli.main", "run", "--loss", "mfcnt", "--budget", "smoke"],
        2,
    ),
}


def time_once(argv: list[str], expected: int, env: dict[str, str], cwd: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, cwd=cwd)
    elapsed = time.perf_counter() - start
    if proc.returncode != expected:
        raise SystemExit(f"{argv}: exit {proc.returncode}, expected {expected}:\n{proc.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=7, help="interleaved rounds (>= 5; default 7)")
    parser.add_argument(
        "--code", type=Path, action="append", default=None, help="checkout whose package runs (repeatable)"
    )
    args = parser.parse_args()
    if args.runs < 5:
        parser.error("--runs must be >= 5 for a median")
    codes = [c.resolve() for c in (args.code or [REPO])]
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as d:
        for _ in range(args.runs):
            for name, (argv, expected) in COMMANDS.items():
                # `import torch` does not depend on the checkout: timed once per round.
                for code in codes[:1] if argv[0] == "-c" else codes:
                    env = {**os.environ, "PYTHONPATH": str(code), "DMLBENCH_CACHE": d}
                    label = "" if argv[0] == "-c" else str(code)
                    times.setdefault((name, label), []).append(time_once(argv, expected, env, Path(d)))
    print(f"python: {sys.executable}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (end)"
    )
    print(f"{args.runs} interleaved rounds; wall seconds per fresh process")
    print("| command | checkout | median | min | max |\n|---|---|---|---|---|")
    for (name, label), values in times.items():
        print(
            f"| {name} | {label or '-'} | {statistics.median(values):.2f} | {min(values):.2f} "
            f"| {max(values):.2f} |"
        )


if __name__ == "__main__":
    main()
