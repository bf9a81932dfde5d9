"""The CLI reference page, generated from the argparse parsers (docs/reference/cli.md).

``python -m benchmark.cli.docs > docs/reference/cli.md`` regenerates it; ``tests/test_docs.py``
fails when the page differs from what the parsers say today.
"""

from __future__ import annotations

import argparse
import os
import sys

from benchmark.cli.main import SUBCOMMANDS, build_parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps its subparsers here, nowhere public
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def render() -> str:
    """Markdown: each subcommand's ``--help`` as argparse prints it at a fixed width."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "84"  # argparse wraps to the terminal; the page must not depend on it
    try:
        return _render()
    finally:
        if old is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = old


def _render() -> str:
    parser = build_parser()
    parser.prog = "dmlbench"
    subs = _subparsers(parser)
    lines = [
        "# Command line",
        "",
        "Generated from the argparse parsers by `python -m benchmark.cli.docs`; do not edit by hand.",
        "",
        "```text",
        parser.format_help().rstrip(),
        "```",
    ]
    for name in SUBCOMMANDS:
        lines += ["", f"## dmlbench {name}", "", "```text", subs[name].format_help().rstrip(), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
