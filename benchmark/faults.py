"""Named kill points, so crash-safety can be tested at exact moments instead of racing a timer.

Setting ``DMLBENCH_KILL_AT=<point>`` makes the process SIGKILL itself when it reaches ``<point>``
(no cleanup, no ``finally`` blocks, no flushed buffers: the same as ``kill -9`` at that moment).
Points are listed in :data:`KILL_POINTS`; a point with ``{...}`` fields names a specific trial, repetition,
fold or file. The variable may be a shell-style pattern (``search.fold_done:*``: the first fold any
trial finishes), for a test that cannot know which trial a process gets (workers sharing one study).
Unset, a kill point costs one dictionary lookup.
"""

from __future__ import annotations

import fnmatch
import os
import signal

ENV = "DMLBENCH_KILL_AT"

KILL_POINTS = (
    "search.trial_told:{trial number}",  # a trial's result is in the study, the next is not asked yet
    "search.fold_done:{trial number}:{fold}",  # a search fold's result is in, its trial is not told yet
    "test.fold_saved:{rep}:{fold}",  # a test fold's embeddings are saved, the rep is not evaluated yet
    "test.folds_saved:{rep}",  # every fold of the rep is saved (or was, before a resume), not evaluated yet
    "test.rep_saved:{rep}",  # a test repetition's result file is written
    "record.run_dir",  # the record is in the run dir, not yet in results/
    "report.tables",  # the leaderboard tables are written, the plots are not
    "write:{file name}",  # an atomic write's temporary file is complete, the rename has not happened
)


#: ``INT`` sends SIGINT instead (an interrupt the process can clean up after, as Ctrl-C), ``TERM``
#: SIGTERM (what a batch scheduler or ``kill`` sends), ``STOP`` SIGSTOP: the process freezes at the
#: point, so a test can act on a known state from outside (kill it while its fold workers train)
#: instead of polling for that state and racing a fast machine past it.
SIGNAL_ENV = "DMLBENCH_KILL_SIGNAL"
SIGNALS = {"INT": signal.SIGINT, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}


def kill_point(name: str) -> None:
    """SIGKILL this process if ``DMLBENCH_KILL_AT`` equals or matches ``name`` (SIGINT, SIGTERM or
    SIGSTOP with ``DMLBENCH_KILL_SIGNAL=INT``, ``TERM`` or ``STOP``)."""
    at = os.environ.get(ENV)
    if at is not None and fnmatch.fnmatchcase(name, at):
        os.kill(os.getpid(), SIGNALS.get(os.environ.get(SIGNAL_ENV, ""), signal.SIGKILL))
