"""``dmlbench`` command line: one module per subcommand, dispatched from here."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType

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


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C's KeyboardInterrupt would be, so a run cleans up the same way."""


#: Exit status of a process stopped by a signal, the shell's convention: 128 + the signal number.
EXIT_INTERRUPTED = 128 + signal.SIGINT
EXIT_TERMINATED = 128 + signal.SIGTERM


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM stops it as Ctrl-C does (fold workers stopped, work saved).

    Why: batch schedulers, ``timeout``, ``docker stop`` and ``kill`` send SIGTERM, whose default
    ends the process at once: the finished trials survive that, but the run's timings so far and
    its tidy shutdown do not. A SIGTERM ignored by whoever started us stays ignored, and only the
    main thread may set a handler (elsewhere, e.g. ``main()`` called from a thread, nothing changes).
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is None or previous == signal.SIG_IGN:  # None: a handler set outside Python, kept
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; user errors become a message and exit code 2, Ctrl-C 130 and SIGTERM 143."""
    args = build_parser().parse_args(argv)
    try:
        with sigterm_as_interrupt():
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
    except KeyboardInterrupt as exc:
        how = "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"
        print(
            f"\ndmlbench: {how}. Finished trials and test repetitions are saved; "
            "re-run the same command to continue.",
            file=sys.stderr,
        )
        return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
