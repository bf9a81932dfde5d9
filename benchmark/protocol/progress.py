"""Progress display for long runs: stage, trial i/N, fold, epoch, best so far, ETA.

On a terminal one status line is rewritten in place; otherwise (logs, CI) the log stays compact:
a line per finished fold and trial (``milestone``/``persistent`` updates) and, between them, at
most one other status line per :data:`HEARTBEAT_LOG_S` as a heartbeat.
"""

from __future__ import annotations

import math
import os
import sys
import time
from typing import TextIO

#: ``DMLBENCH_PROGRESS=all``: in a log, write every status line (each epoch's too), as before the
#: compact log; for debugging and for tests that watch epochs.
PROGRESS_ENV = "DMLBENCH_PROGRESS"

#: Least seconds between heartbeat lines: often on a terminal (one line is rewritten in place),
#: rarely in a log, where each becomes a line of its own.
HEARTBEAT_TTY_S = 1.0
HEARTBEAT_LOG_S = 60.0


def format_duration(seconds: float) -> str:
    """``75`` -> ``"1m15s"``."""
    seconds = max(0, round(seconds))
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s" if m else f"{s}s"


class Progress:
    """Counts fold trainings (the unit of work) and estimates the time left from their mean."""

    def __init__(self, total_fold_trainings: int, stream: TextIO | None = None, quiet: bool = False) -> None:
        self.total = total_fold_trainings
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.tty = self.stream.isatty()
        self.every_line = os.environ.get(PROGRESS_ENV) == "all"
        self._fold_times: list[float] = []
        self._last_len = 0
        self._last_write = -math.inf
        self.parallel = 1  # fold trainings running at once

    def fold_finished(self, wall_s: float) -> None:
        self.done += 1
        self._fold_times.append(wall_s)

    def skip(self, n: int) -> None:
        """Work already done in an earlier (interrupted) process."""
        self.done += n

    def eta(self) -> str:
        if not self._fold_times:
            return "?"
        mean = sum(self._fold_times) / len(self._fold_times)
        return format_duration(mean * max(0, self.total - self.done) / self.parallel)

    def status(self, text: str, *, persistent: bool = False, milestone: bool = False) -> None:
        """Show ``text`` with the ETA; ``persistent`` lines are kept on a terminal too. In a log,
        only ``persistent`` and ``milestone`` lines (a fold or trial finished) are always written;
        the others (epochs, steps) at most once per :data:`HEARTBEAT_LOG_S`."""
        if self.quiet:
            return
        quiet_spell = time.monotonic() - self._last_write >= HEARTBEAT_LOG_S
        if not self.tty and not (persistent or milestone or quiet_spell or self.every_line):
            return
        line = f"{text} | ETA {self.eta()}"
        if self.tty:
            pad = " " * max(0, self._last_len - len(line))
            end = "\n" if persistent else ""
            self.stream.write(f"\r{line}{pad}{end}")
            self._last_len = 0 if persistent else len(line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self._last_write = time.monotonic()

    def heartbeat(self, text: str) -> None:
        """A status shown only if nothing was shown for a while (:data:`HEARTBEAT_TTY_S` on a
        terminal, :data:`HEARTBEAT_LOG_S` in a log): work between
        the regular updates (the steps of a slow epoch, feature extraction) stays visible without
        flooding a log."""
        if time.monotonic() - self._last_write >= (HEARTBEAT_TTY_S if self.tty else HEARTBEAT_LOG_S):
            self.status(text)

    def message(self, text: str) -> None:
        """A plain line (stage headers, results)."""
        if self.quiet:
            return
        if self.tty and self._last_len:
            self.stream.write("\n")
            self._last_len = 0
        self.stream.write(text + "\n")
        self.stream.flush()
        self._last_write = time.monotonic()


class Stopwatch:
    """Named wall-clock timings of a run's steps."""

    def __init__(self) -> None:
        self.timings: dict[str, float] = {}

    def time(self, name: str) -> _Timer:
        return _Timer(self, name)


class _Timer:
    def __init__(self, watch: Stopwatch, name: str) -> None:
        self.watch, self.name = watch, name

    def __enter__(self) -> None:
        self.t0 = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.watch.timings[self.name] = round(
            self.watch.timings.get(self.name, 0.0) + time.perf_counter() - self.t0, 3
        )
