"""Convergence of MLRC run records: how many fold trainings stopped by the patience rule.

For each record: the share of search and test-stage fold trainings that ended because validation
MAP@R had not strictly improved for ``train.patience`` evaluations (read from each fold's curve:
at least ``patience`` evaluations after the best one; a fold that reached ``train.max_epochs``
without that was cut by the cap), the median best epoch and fold wall time, the run's wall time
and the separated MAP@R with its confidence interval. Used to choose the ``mini`` budget's
schedule (issue 12); records with an explicit per-fold ``stopped_by`` use it.

    python benchmarks/mini_convergence.py results/*/mlrc/records/*.mini.seed0.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any


def stopped_by_patience(fold: dict[str, Any], patience: int) -> bool:
    """Whether a fold result ended by the patience rule (``stopped_by`` if the record has it)."""
    if "stopped_by" in fold:
        return bool(fold["stopped_by"] == "patience")
    evals = [e for e, _ in fold["curve"]]
    after_best = [e for e in evals if e > fold["best_epoch"]]
    return len(after_best) >= patience


def summarise(record: dict[str, Any]) -> dict[str, Any]:
    """The convergence row of one record."""
    patience = record["config"]["train"]["patience"]
    search = [f for t in record["search"]["trials"] for f in t["folds"]]
    test = [f for rep in record["test"]["rep_details"] for f in rep["folds"]]
    sep = record["test"]["summary"]["separated"]["map_at_r"]
    untrained = record.get("untrained", {}).get("separated", {}).get("map_at_r")

    def share(folds: list[dict[str, Any]]) -> str:
        n = sum(stopped_by_patience(f, patience) for f in folds)
        return f"{n}/{len(folds)}"

    return {
        "dataset": record["dataset"],
        "loss": record["loss"],
        "budget": record["budget"],
        "search_patience": share(search),
        "test_patience": share(test),
        "median_best_epoch_test": statistics.median(f["best_epoch"] for f in test),
        "median_epochs_test": statistics.median(f["epochs"] for f in test),
        "median_fold_s_search": round(statistics.median(f["wall_s"] for f in search), 1),
        "median_fold_s_test": round(statistics.median(f["wall_s"] for f in test), 1),
        "run_s": record["timings_s"]["total"],
        "sep_map_at_r": f"{100 * sep['mean']:.1f} ± {100 * sep['half_width']:.1f}",
        "untrained_sep_map_at_r": None if untrained is None else round(100 * untrained, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("records", nargs="+", type=Path)
    args = ap.parse_args(argv)
    rows = [summarise(json.loads(p.read_text())) for p in args.records]
    cols = list(rows[0])
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
