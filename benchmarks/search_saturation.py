"""Signs that a hyperparameter search stopped before it saturated, read from MLRC run records.

Issue 27 read three signs off the committed ``mini`` boards; this script recomputes them for any
folders of records (the boards, the sensitivity variants), so a budget's trial count can be judged
by the same numbers before and after a change:

* **late best**: the best trial is among the last 3 of the search. If more trials no longer helped,
  the best trial's position would be uniform over the n trials: expected share 3 / n.
* **sampler beat Sobol**: the best trial came from the model-based phase (origin ``sampler``), not
  from the quasi-random start.
* **at a bound**: a best parameter lies within 5% of its range's width (on the range's own scale,
  log where the range is log) of the low or high bound. Uniform best values would do so 10% of the
  time. A best value pressed against a bound says the optimum may lie outside the range.

These are descriptive shares with exact binomial 95% intervals (Clopper-Pearson, ``scipy``),
set beside their no-saturation expectation; they are not tests. One record is one search.

    python benchmarks/search_saturation.py results/glyphs/mlrc/records results/omniglot/mlrc/records
    python benchmarks/search_saturation.py --by-record results/sensitivity/calib/omniglot/mlrc/records
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import binomtest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark.records import ParamRangeDoc, RunRecord, completed_trials, load_records  # noqa: E402

#: A best value within this fraction of its range's width from a bound counts as "at a bound".
BOUND_FRACTION = 0.05
#: "Late": the best trial among the last this many trials.
LATE = 3


@dataclass(frozen=True)
class SearchSigns:
    """The three signs of one record's search."""

    loss: str
    source: str
    n_trials: int
    best_index: int  # position of the best trial among the completed ones, 0-based
    best_origin: str
    #: parameter -> relative position of the best value in its range (0 = low, 1 = high).
    positions: dict[str, float]

    @property
    def late(self) -> bool:
        return self.best_index >= self.n_trials - LATE

    @property
    def from_sampler(self) -> bool:
        return self.best_origin == "sampler"

    def at_bound(self) -> list[str]:
        """The parameters whose best value lies within :data:`BOUND_FRACTION` of a bound."""
        return [p for p, x in self.positions.items() if x <= BOUND_FRACTION or x >= 1 - BOUND_FRACTION]


def relative_position(value: float, bounds: ParamRangeDoc) -> float:
    """Where ``value`` lies in ``[low, high]``, 0..1, on the range's scale (log if it is log)."""
    low, high = bounds["low"], bounds["high"]
    if bounds.get("log", False):
        low, high, value = math.log(low), math.log(high), math.log(value)
    return (value - low) / (high - low)


def signs(record: RunRecord, source: str) -> SearchSigns | None:
    """The record's search signs (None: no search, or no completed trial)."""
    search = record.search
    if search is None:
        return None
    done = [t for t in search["trials"] if t["state"] == "COMPLETE" and t["value"] is not None]
    if not done or completed_trials(search) == 0:
        return None
    # Ties go to the earliest trial, as Optuna's best_trial does.
    best = max(range(len(done)), key=lambda i: (done[i]["value"] or -math.inf, -i))
    space = search["space"]
    params = done[best]["params"]
    positions = {p: relative_position(params[p], space[p]) for p in sorted(space) if p in params}
    return SearchSigns(record.loss, source, len(done), best, done[best]["origin"] or "", positions)


def share(k: int, n: int) -> str:
    if n == 0:
        return "–"
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="exact")
    return f"{k}/{n} = {100 * k / n:.0f}% [{100 * ci.low:.0f}–{100 * ci.high:.0f}]"


def summary(rows: Sequence[SearchSigns]) -> list[str]:
    """The three shares over ``rows`` beside their no-saturation expectations (Markdown)."""
    late = sum(r.late for r in rows)
    expected_late = sum(min(LATE, r.n_trials) / r.n_trials for r in rows) / len(rows) if rows else math.nan
    sampler = sum(r.from_sampler for r in rows)
    n_params = sum(len(r.positions) for r in rows)
    at = sum(len(r.at_bound()) for r in rows)
    bound_list = sorted({f"{r.loss} {p}" for r in rows for p in r.at_bound()})
    return [
        "| sign | share (95% interval) | if the search had saturated |",
        "|---|---|---|",
        f"| best trial among the last {LATE} | {share(late, len(rows))} | {100 * expected_late:.0f}% |",
        f"| best trial from the model-based phase | {share(sampler, len(rows))} | – |",
        f"| best value within {100 * BOUND_FRACTION:.0f}% of a bound (per parameter) "
        f"| {share(at, n_params)} | {200 * BOUND_FRACTION:.0f}% |",
        "",
        f"At a bound: {', '.join(bound_list) if bound_list else 'none'}.",
    ]


def by_record(rows: Sequence[SearchSigns]) -> list[str]:
    out = [
        "| source | loss | trials | best trial | origin | best parameters (position in range) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        pos = ", ".join(
            f"{p} {x:.2f}{' (bound)' if p in r.at_bound() else ''}" for p, x in r.positions.items()
        )
        out.append(f"| {r.source} | {r.loss} | {r.n_trials} | {r.best_index} | {r.best_origin} | {pos} |")
    return out


def collect(folders: Sequence[Path]) -> list[SearchSigns]:
    rows = []
    for folder in folders:
        for record in load_records(folder):
            s = signs(record, str(folder))
            if s is not None:
                rows.append(s)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("folders", nargs="+", type=Path, help="folders of MLRC record JSON files")
    parser.add_argument("--by-record", action="store_true", help="also list each record's signs")
    args = parser.parse_args(argv)
    rows = collect(args.folders)
    if not rows:
        print("No record with a completed search in " + ", ".join(map(str, args.folders)), file=sys.stderr)
        return 1
    print(f"{len(rows)} searches from {', '.join(map(str, args.folders))}\n")
    print("\n".join(summary(rows)))
    if args.by_record:
        print()
        print("\n".join(by_record(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
