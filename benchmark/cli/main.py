"""``dmlbench`` command line: one module per subcommand, dispatched from here."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from benchmark.cli import compare_cmd, list_cmd, plan_cmd, regress_cmd, report_cmd, run_cmd
from benchmark.errors import DmlbenchError

SUBCOMMANDS = {
    "run": run_cmd,
    "list": list_cmd,
    "report": report_cmd,
    "compare": compare_cmd,
    "plan": plan_cmd,
    "regress": regress_cmd,
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dmlbench", description="Benchmark deep-metric-learning losses (MLRC protocol)."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in SUBCOMMANDS.values():
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors become a message and exit code 2, Ctrl-C exit code 130."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except BrokenPipeError:
        # The reader went away (`dmlbench list losses | head`): not an error of ours. Point stdout
        # at devnull so the interpreter's final flush does not raise again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except DmlbenchError as exc:
        print(f"\ndmlbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ndmlbench: interrupted. Finished trials and test repetitions are saved; "
            "re-run the same command to continue.",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
