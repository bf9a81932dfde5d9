"""What a shorter patience would have selected, read from the validation curves of runs that
used a longer one: the per-fold cost of stopping early, without training anything.

Usage::

    python benchmarks/patience_truncation.py RECORDS_DIR [RECORDS_DIR ...] [--out FILE]
    python benchmarks/patience_truncation.py --folds-jsonl FILE [--show 2,5,10] [--out FILE]

The second form reads the folds that ``benchmarks/fold_convergence.py --jsonl FILE`` trained (one
fold per line, each loss at its default parameters, typically with a long patience so that the
shorter ones can be replayed); rows are then per dataset and loss, phase ``fold``.

**Why this is exact per fold.** The patience rule only decides *when* a fold stops: the batches,
augmentations and updates up to that point do not depend on it. So a fold trained with patience
P holds, in its recorded validation curve, the whole run that any patience p < P would have made
up to its own (earlier) stop. ``stop_at_patience`` replays the rule (stop after ``p``
validations without strict improvement, keep the best) on that curve; on every committed MLRC
record it reproduces the recorded best epoch, best value and stop epoch of every fold that stopped
by patience (``tests/test_patience_truncation.py``).

**What it does not show.** A search run with patience p would rank trials by different values,
so its Gaussian process would propose different trials from the 6th on, and the retrained
parameters could differ. Only the per-fold truncation is measured here; the search's own
response needs real runs (``benchmarks/sensitivity.py``). Nor can it see beyond P: what a patience
above the one the curves were recorded with would add is unknown, and the diminishing
step-to-step gains are the evidence for how near saturation P is.

**Columns**, per loss and phase (``search``: every fold of every trial; ``test``: every fold of
every retraining rep), for each p < P: the mean drop of the selected checkpoint's validation
MAP@R (points, P's selection minus p's, with a 95% t half-width over the folds, which are not
independent draws across trials, so read it as a scale), the share of folds whose selected
checkpoint changes, and the mean fraction of P's fold epochs that p trains.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats

from benchmark.report.numbers import signed


@dataclass(frozen=True)
class Stop:
    """Where the patience rule stops on a curve: the kept checkpoint and the last epoch trained."""

    best_value: float
    best_epoch: int
    epochs: int


def stop_at_patience(curve: Sequence[Sequence[float]], patience: int) -> Stop:
    """The patience rule replayed on ``curve`` (``[epoch, validation value]`` pairs in order):
    stop after ``patience`` validations without a strict improvement on the best so far; without
    such a stop, train to the curve's end."""
    if patience < 1:
        raise ValueError(f"patience must be >= 1, got {patience}")
    if not curve:
        raise ValueError("an empty curve has no stop")
    best_index = 0
    for index, (_, value) in enumerate(curve):
        if value > curve[best_index][1]:
            best_index = index
        elif index - best_index >= patience:
            return Stop(float(curve[best_index][1]), int(curve[best_index][0]), int(curve[index][0]))
    return Stop(float(curve[best_index][1]), int(curve[best_index][0]), int(curve[-1][0]))


def fold_runs(record: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(phase, fold)`` for every fold training in an MLRC record that kept its curve."""
    for trial in record["search"]["trials"]:
        for fold in trial.get("folds") or []:
            if fold.get("curve"):
                yield "search", fold
    for rep in record["test"]["rep_details"]:
        for fold in rep["folds"]:
            if fold.get("curve"):
                yield "test", fold


@dataclass(frozen=True)
class Truncation:
    """The effect of patience ``p`` against the recorded patience, over one group of folds."""

    patience: int
    drop_points: float
    drop_half_width: float
    changed_share: float
    epoch_fraction: float


def truncations(folds: Sequence[dict[str, Any]], recorded: int) -> list[Truncation]:
    """For each p < ``recorded``: the drop of the selected validation value (points), its 95%
    half-width over the folds, the share of folds whose selection changes, and the epochs kept.
    Folds that did not stop by patience (cap, failure) are left out: their curve ends early for
    another reason."""
    usable = [f for f in folds if f.get("stopped_by") == "patience"]
    if not usable:
        return []
    full = [stop_at_patience(f["curve"], recorded) for f in usable]
    out = []
    for p in range(1, recorded):
        short = [stop_at_patience(f["curve"], p) for f in usable]
        pairs = list(zip(full, short, strict=True))
        drops = [100.0 * (a.best_value - b.best_value) for a, b in pairs]
        half = 0.0
        if len(drops) > 1:
            sem = statistics.stdev(drops) / math.sqrt(len(drops))
            half = float(stats.t.ppf(0.975, len(drops) - 1)) * sem
        out.append(
            Truncation(
                patience=p,
                drop_points=statistics.fmean(drops),
                drop_half_width=half,
                changed_share=sum(a.best_epoch != b.best_epoch for a, b in pairs) / len(usable),
                epoch_fraction=statistics.fmean(b.epochs / a.epochs for a, b in pairs),
            )
        )
    return out


NOTE = (
    "Each cell: validation MAP@R of the checkpoint patience p keeps, minus the recorded "
    "patience's (points, mean over folds ± 95% t half-width); share of folds whose kept "
    "checkpoint changes; mean fraction of the recorded fold epochs that p trains. Folds that "
    "did not stop by patience are left out."
)


def _cell(t: Truncation | None) -> str:
    """One table cell: drop ± half-width; share changed; epoch fraction (empty without ``t``)."""
    if t is None:
        return ""
    drop = f"{signed(-t.drop_points)} ± {t.drop_half_width:.2f}"
    return f"{drop}; {t.changed_share:.0%}; {t.epoch_fraction:.2f}"


def table(paths: Sequence[Path]) -> str:
    """The markdown table over every MLRC record under ``paths`` (columns up to the longest
    recorded patience; a record with a shorter one leaves the rest empty)."""
    rows: list[tuple[str, dict[int, Truncation]]] = []
    longest = 1
    for path in paths:
        for file in sorted(path.glob("*.json")):
            record = json.loads(file.read_text())
            if record.get("protocol") != "mlrc":
                continue
            train = record["config"]["train"]
            recorded = int(train["patience"])
            longest = max(longest, recorded)
            window = recorded * int(train["eval_every"]) * int(train["iters_per_epoch"])
            by_phase: dict[str, list[dict[str, Any]]] = {}
            for phase, fold in fold_runs(record):
                by_phase.setdefault(phase, []).append(fold)
            for phase in ("search", "test"):
                folds = by_phase.get(phase, [])
                usable = sum(f.get("stopped_by") == "patience" for f in folds)
                where = f"{path} (patience {recorded}, window {window} it.)"
                head = f"| {where} | {record['loss']} | {phase} | {usable}"
                rows.append((head, {t.patience: t for t in truncations(folds, recorded)}))
    columns = range(1, longest)
    lines = [
        "| records | loss | phase | folds | " + " | ".join(f"patience {p}" for p in columns) + " |",
        "|---" * (4 + len(columns)) + "|",
    ]
    lines += [head + " | " + " | ".join(_cell(by_p.get(p)) for p in columns) + " |" for head, by_p in rows]
    lines += ["", NOTE]
    return "\n".join(lines) + "\n"


def jsonl_table(path: Path, show: Sequence[int] | None = None) -> str:
    """The markdown table over the folds of a ``fold_convergence.py --jsonl`` file; ``show``
    limits the columns to those patiences (all below the recorded one by default)."""
    groups: dict[tuple[str, str, int, int, int], list[dict[str, Any]]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            fold = json.loads(line)
            key = (
                fold["dataset"],
                fold["loss"],
                fold["patience"],
                fold["eval_every"],
                fold["iters_per_epoch"],
            )
            groups.setdefault(key, []).append(fold)
    if not groups:
        return "(no folds)\n"
    longest = max(key[2] for key in groups)
    columns = [p for p in (show or range(1, longest)) if 1 <= p < longest]
    lines = [
        "| dataset | loss | recorded patience (window) | folds | "
        + " | ".join(f"patience {p}" for p in columns)
        + " |",
        "|---" * (4 + len(columns)) + "|",
    ]
    for (dataset, loss, recorded, every, iters), folds in sorted(groups.items()):
        by_p = {t.patience: t for t in truncations(folds, recorded)}
        cells = [_cell(by_p.get(p)) for p in columns]
        usable = sum(f.get("stopped_by") == "patience" for f in folds)
        lines.append(
            f"| {dataset} | {loss} | {recorded} ({recorded * every * iters} it.) | "
            + f"{usable} of {len(folds)} | "
            + " | ".join(cells)
            + " |"
        )
    lines.append("")
    lines.append(NOTE)
    return "\n".join(lines) + "\n"


def _folds_by_key(path: Path) -> dict[tuple[str, str, int], dict[str, Any]]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip():
            fold = json.loads(line)
            out[(fold["dataset"], fold["loss"], int(fold["fold"]))] = fold
    return out


def compare_surveys(base: Path, other: Path) -> str:
    """Two surveys of the same folds under different settings (e.g. another lr), per loss over
    the folds both trained: the change of the best validation MAP@R (points, ``other`` - ``base``,
    mean with a 95% t half-width over the folds) and the mean ratio of the epochs trained."""
    a, b = _folds_by_key(base), _folds_by_key(other)
    shared = sorted(set(a) & set(b))
    losses = sorted({(d, loss) for d, loss, _ in shared})
    lines = [
        f"| dataset | loss | folds | best validation MAP@R, {other.stem} − {base.stem} | epochs ratio |",
        "|---|---|---|---|---|",
    ]
    for dataset, loss in losses:
        keys = [k for k in shared if k[:2] == (dataset, loss)]
        diffs = [100.0 * (b[k]["best_val_map_at_r"] - a[k]["best_val_map_at_r"]) for k in keys]
        half = 0.0
        if len(diffs) > 1:
            half = float(stats.t.ppf(0.975, len(diffs) - 1)) * statistics.stdev(diffs) / math.sqrt(len(diffs))
        ratio = statistics.fmean(b[k]["epochs"] / a[k]["epochs"] for k in keys)
        mean = statistics.fmean(diffs)
        lines.append(f"| {dataset} | {loss} | {len(keys)} | {signed(mean)} ± {half:.2f} | {ratio:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("records", nargs="*", type=Path, help="folders of MLRC record JSON files")
    parser.add_argument("--folds-jsonl", type=Path, default=None, help="fold_convergence.py --jsonl output")
    parser.add_argument("--out", type=Path, default=None, help="write the table here too")
    parser.add_argument(
        "--show", default=None, help="with --folds-jsonl: the patience columns to show, e.g. 2,5,10,15"
    )
    args = parser.parse_args(argv)
    if bool(args.records) == (args.folds_jsonl is not None):
        print("error: give record folders or --folds-jsonl FILE (one of the two)", file=sys.stderr)
        return 2
    missing = [str(p) for p in args.records if not p.is_dir()]
    if args.folds_jsonl is not None and not args.folds_jsonl.is_file():
        missing.append(str(args.folds_jsonl))
    if missing:
        print(f"error: not found: {', '.join(missing)}", file=sys.stderr)
        return 2
    show = [int(p) for p in args.show.split(",")] if args.show else None
    text = table(args.records) if args.records else jsonl_table(args.folds_jsonl, show)
    print(text, end="")
    if args.out is not None:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
