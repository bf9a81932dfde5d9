"""Which code trained a run's folds: one code version per record, or a record that says it mixes.

Every fold result carries the :func:`benchmark.engine.environment.code_identity` of the process
that trained it. A run directory keeps the history of the code versions that worked in it
(``code.json``); resuming it with other code is refused unless the user asks for it
(``--resume-mixed-code``), because the record would otherwise be stamped with the new commit
although some of its trials and repetitions were trained by the old code. A record behind which
stands more than one code version (its folds', and the one that wrote it) says so
(``code.mixed``), and tables mark its commit.
Pure Python (no torch), so reports can use it without importing the training stack.
"""

from __future__ import annotations

import datetime as dt
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmark.analysis.convergence import fold_trainings
from benchmark.errors import DmlbenchError
from benchmark.io import read_json, write_json_atomic

#: A fold result written before fold results carried their code (or by a plugin trainer that omits it).
UNRECORDED = "unrecorded"
#: The run directory's history of code versions.
CODE_FILE = "code.json"
#: The command-line flag that allows resuming a run directory with other code.
RESUME_FLAG = "--resume-mixed-code"
#: The source tree minus what runs write: ``results/`` holds records, leaderboards and plots, so a
#: second run in one checkout would otherwise call the first run's commit "dirty" although not a
#: line of its code changed (git pathspec, relative to the checkout's top).
CODE_PATHSPEC = ("--", ":(top)", ":(top,exclude)results")


def uncommitted_code_files(root: Path) -> list[str]:
    """Tracked files outside ``results/`` with uncommitted changes in the checkout holding ``root``.

    Raises ``OSError`` or ``subprocess.SubprocessError`` where ``root`` is not in a git checkout.
    """
    out = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", *CODE_PATHSPEC],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    return [line[3:] for line in out.splitlines() if line.strip()]


def short_code(identity: str) -> str:
    """A code identity as tables show it: a 40-hex commit cut to 10 characters, the rest kept."""
    commit, plus, rest = identity.partition("+")
    if len(commit) == 40 and all(ch in "0123456789abcdef" for ch in commit):
        commit = commit[:10]
    return commit + plus + rest


def fold_codes(record: Mapping[str, Any]) -> dict[str, int]:
    """How many of the record's fold trainings (search and test) each code version trained."""
    counts: dict[str, int] = {}
    for _, fold in fold_trainings(record):
        code = str(fold.get("code") or UNRECORDED)
        counts[code] = counts.get(code, 0) + 1
    return counts


def code_versions(record: Mapping[str, Any]) -> dict[str, int]:
    """Every code version behind a record, with the fold trainings it ran: :func:`fold_codes`
    and the code that wrote the record (``code.writer``, 0 folds when it trained none: a run
    resumed after a code change only to evaluate and write)."""
    versions = fold_codes(record)
    writer = record.get("code", {}).get("writer")
    if isinstance(writer, str):
        versions.setdefault(writer, 0)
    return versions


def code_summary(
    record: Mapping[str, Any], writer: str, run_dir_history: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The record's ``code`` entry: the code writing it, fold trainings per code version, and
    whether more than one version is behind the record."""
    folds = fold_codes(record)
    out: dict[str, Any] = {"writer": writer, "folds": folds, "mixed": len({*folds, writer}) > 1}
    if run_dir_history is not None:
        out["run_dir_history"] = run_dir_history
    return out


def check_resume_code(run_dir: Path, current: str, resumed: bool, allow_mixed: bool) -> list[dict[str, Any]]:
    """The run directory's code history with ``current`` appended when new; writes ``code.json``.

    A new run directory starts its history. Resuming one whose last code version is not
    ``current`` (a run directory from before code histories counts as :data:`UNRECORDED`) raises
    :class:`DmlbenchError` unless ``allow_mixed``.
    """
    path = run_dir / CODE_FILE
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    history: list[dict[str, Any]]
    if not resumed:
        history = []
    elif path.exists():
        history = list(read_json(path))
    else:
        history = [{"code": UNRECORDED, "since": None}]
    if history and history[-1]["code"] == current:
        return history
    if history and not allow_mixed:
        before = ", ".join(short_code(str(h["code"])) for h in history)
        raise DmlbenchError(
            f"Run directory {run_dir} holds work of other code ({before}); this is {short_code(current)}. "
            "Resuming would put fold trainings of both into one record stamped with this commit. Remove "
            f"the directory (or use another --out) to start over, or pass {RESUME_FLAG} to continue; the "
            "record and the leaderboard then say that its folds mix code versions."
        )
    history.append({"code": current, "since": now})
    write_json_atomic(path, history)
    return history
