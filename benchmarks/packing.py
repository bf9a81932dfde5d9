"""How well a run keeps its fold workers busy, read from committed MLRC records: the most a better
scheduler could save.

Usage::

    python benchmarks/packing.py RECORDS_DIR [RECORDS_DIR ...]

A run's search and test stages train folds on ``execution.jobs`` workers. Packing of a stage is
the core-seconds its fold trainings took (the sum of their ``wall_s``) over the core-seconds the
stage held (``jobs`` x the stage's wall time, ``timings_s``). What is missing is time a worker sat
idle (a trial's or repetition's slowest fold still running while nothing else was queued, the
search waiting for a trial's result before proposing the next) plus the stage's own overhead
(study bookkeeping, embedding the test set, evaluation). So 1 / packing bounds the speed-up any
scheduling change could bring, for the folds as they are; it needs no timing run, only the
records, and is independent of the machine's load as far as the records' own stages were.

An interrupted trial (``interruptions``, a run stopped and resumed mid-trial) retrains its
unfinished folds: the work lost counts in the stage's wall time but in no fold's ``wall_s``, so it
reads as idle time a scheduler could not recover. Each such record says how many trials it
interrupted, and the closing lines give the median both over all records and over those without.

Each line: record, jobs, search packing, test packing, whole-run packing, the bound
1 / packing and the interrupted trials it counts. The closing lines give the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Packing:
    """Fold core-seconds over held core-seconds, per stage and for the whole run."""

    jobs: int
    search: float
    test: float
    total: float
    interrupted: int
    """Trials this run's search counted that were interrupted at least once."""


def counted_trials(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The search trials this run trained: a search extended from an earlier run's trials
    (``execution.search_extended_from``) holds their folds too, but its ``timings_s`` cover only
    the extra trials."""
    copied = (record["execution"].get("search_extended_from") or {}).get("n_trials", 0)
    return list(record["search"]["trials"][copied:])


def fold_seconds(record: dict[str, Any]) -> tuple[float, float]:
    """The summed wall time of the search folds this run trained (:func:`counted_trials`) and of
    the test folds."""
    search = sum(f["wall_s"] for t in counted_trials(record) for f in t.get("folds") or [])
    test = sum(f["wall_s"] for rep in record["test"]["rep_details"] for f in rep["folds"])
    return float(search), float(test)


def packing(record: dict[str, Any]) -> Packing:
    """The packing of one MLRC record (see the module docstring)."""
    jobs = int(record["execution"]["jobs"])
    search_s, test_s = fold_seconds(record)
    stage = record["timings_s"]
    held_search, held_test = jobs * float(stage["search"]), jobs * float(stage["test"])
    return Packing(
        jobs=jobs,
        search=search_s / held_search,
        test=test_s / held_test,
        total=(search_s + test_s) / (held_search + held_test),
        interrupted=sum(1 for t in counted_trials(record) if t.get("interruptions", 0)),
    )


def table(paths: Sequence[Path]) -> str:
    """One Markdown row per MLRC record under ``paths``, then the medians."""
    lines = [
        "| record | jobs | search | test | run | bound on a scheduling speed-up | interrupted trials |",
        "|---|---|---|---|---|---|---|",
    ]
    totals: list[float] = []
    whole: list[float] = []
    for path in paths:
        for file in sorted(path.glob("*.json")):
            record = json.loads(file.read_text())
            if record.get("protocol") != "mlrc" or "execution" not in record:
                continue
            p = packing(record)
            totals.append(p.total)
            if not p.interrupted:
                whole.append(p.total)
            lines.append(
                f"| {file.parent.parent.parent.name}/{file.stem} | {p.jobs} | {p.search:.1%} | "
                f"{p.test:.1%} | {p.total:.1%} | {1 / p.total:.2f}x | {p.interrupted or ''} |"
            )
    if totals:
        median = statistics.median(totals)
        lines += [
            "",
            f"{len(totals)} records: median run packing {median:.1%} "
            f"(range {min(totals):.1%}-{max(totals):.1%}), so a better scheduler could make the median "
            f"run at most {1 / median:.2f}x faster.",
        ]
        if whole and len(whole) < len(totals):
            median_whole = statistics.median(whole)
            lines.append(
                f"The {len(whole)} records without an interrupted trial: median {median_whole:.1%} "
                f"(range {min(whole):.1%}-{max(whole):.1%}); the other {len(totals) - len(whole)} count "
                "work lost to an interruption as idle time."
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("records", nargs="+", type=Path, help="folders of MLRC record JSON files")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.records if not p.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    sys.stdout.write(table(args.records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
