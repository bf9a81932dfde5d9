"""Leaderboards derived from run records only (SPEC §6): never typed by hand.

One section per budget (numbers from different budgets are not comparable); rows are losses plus
the untrained row; columns are separated/concatenated × metrics as mean ± 95% CI half-width in %;
the best mean per column is bold; the footer states reps, deviations from the paper and provenance.

Protocols other than MLRC (``traditional``, ``cbir``) name their own evaluation modes in the
record (``test.modes`` with ``test.mode_labels``); their tables have one column group per mode, a
cell of a mode a loss lacks (e.g. cbir's two-stage for a pair-based loss) is shown as ``–``, and
the footer adds the records' notes (e.g. selection on test) and further per-rep summaries.
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.io import write_text_atomic
from benchmark.metrics import METRICS

MODES = (("separated", "Sep."), ("concatenated", "Concat."))
UNTRAINED = "untrained"
Modes = Sequence[tuple[str, str]]


def record_modes(records: Sequence[dict[str, Any]]) -> tuple[tuple[str, str], ...]:
    """The (mode, label) column groups of ``records``: MLRC's unless the records name their own."""
    named = [r for r in records if "modes" in r.get("test", {})]
    if not named:
        return MODES
    out: dict[str, str] = {}
    for r in named:
        labels = r["test"].get("mode_labels", {})
        for mode in r["test"]["modes"]:
            out.setdefault(mode, str(labels.get(mode, mode)))
    return tuple(out.items())


def load_records(results_dir: Path, dataset: str, protocol: str) -> list[dict[str, Any]]:
    """Every run record of a dataset/protocol, oldest first."""
    folder = results_dir / dataset / protocol / "records"
    records = []
    for path in sorted(folder.glob("*.json")):
        try:
            with path.open(encoding="utf-8") as fh:
                record = json.load(fh)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            # One damaged file (e.g. truncated by a full disk) must not hide every other result.
            print(f"dmlbench: warning: skipping unreadable record {path}: {exc}", file=sys.stderr)
            continue
        if not isinstance(record, dict):
            print(f"dmlbench: warning: skipping {path}: not a run record (a JSON object)", file=sys.stderr)
            continue
        records.append(record)
    return sorted(records, key=lambda r: (r.get("created", ""), r.get("loss", "")))


@dataclass(frozen=True)
class Row:
    """One leaderboard row: a loss (or the untrained model) with per-column intervals."""

    name: str
    loss: str
    seed: int | None
    reps: int
    cells: dict[tuple[str, str], tuple[float, float]]  # (mode, metric) -> (mean, half_width)
    commit: str


def _latest_per_loss(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    latest: dict[str, dict[str, Any]] = {}
    for r in records:  # oldest first, so later records replace earlier ones
        latest[r["loss"]] = r
    return sorted(latest.values(), key=lambda r: r["loss"])


def build_rows(records: Sequence[dict[str, Any]], metrics: Sequence[str], modes: Modes = MODES) -> list[Row]:
    """Rows of one budget: the untrained model (from the newest record) then one row per loss.

    A (mode, metric) a record does not hold is (NaN, NaN).
    """
    chosen = _latest_per_loss(records)
    if not chosen:
        return []
    newest = max(chosen, key=lambda r: r.get("created", ""))
    untrained = newest.get("untrained", {})
    rows = [
        Row(
            "Untrained (init trunk + random embedder)",
            UNTRAINED,
            newest["seed"],
            1,
            {
                (mode, m): (_nan(untrained.get(mode, {}).get(m)), math.nan)
                for mode, _ in modes
                for m in metrics
            },
            _commit(newest),
        )
    ]
    missing = {"mean": None, "half_width": None}
    for r in chosen:
        summary = r["test"]["summary"]
        cells = {
            (mode, m): (
                _nan(summary.get(mode, {}).get(m, missing)["mean"]),
                _nan(summary.get(mode, {}).get(m, missing)["half_width"]),
            )
            for mode, _ in modes
            for m in metrics
        }
        rows.append(Row(r["loss_display_name"], r["loss"], r["seed"], r["test"]["reps"], cells, _commit(r)))
    return rows


def _nan(x: float | None) -> float:
    return math.nan if x is None else float(x)


def _commit(record: dict[str, Any]) -> str:
    git = record.get("environment", {}).get("git", {})
    sha = str(git.get("commit", "unknown"))[:10]
    return sha + ("+dirty" if git.get("dirty") else "")


def format_cell(mean: float, half_width: float) -> str:
    """``0.2534, 0.0041`` -> ``"25.34 ± 0.41"`` (percent); no ± when there is no interval; ``–``
    when there is no value."""
    if math.isnan(mean):
        return "–"
    if math.isnan(half_width):
        return f"{100 * mean:.2f}"
    return f"{100 * mean:.2f} ± {100 * half_width:.2f}"


def _columns(metrics: Sequence[str], modes: Modes = MODES) -> list[tuple[str, str]]:
    return [(mode, m) for mode, _ in modes for m in metrics]


def render_markdown(
    dataset: str, protocol: str, by_budget: dict[str, list[dict[str, Any]]], metrics: Sequence[str]
) -> str:
    """The Markdown leaderboard of a dataset/protocol, one section per budget."""
    modes = record_modes([r for rs in by_budget.values() for r in rs])
    lines = [
        f"# Leaderboard: `{dataset}`, protocol `{protocol}`",
        "",
        "Generated by `dmlbench` from the run records in `records/`; do not edit by hand.",
        "Values: mean ± half-width of the 95% t-interval over test repetitions, in percent.",
        "Sep. = each fold model's 128-d embedding alone (mean over the 4 folds); "
        "Concat. = the 4 fold embeddings concatenated (512-d). Best mean per column in bold."
        if modes == MODES
        else "Best mean per column in bold; – = not applicable to that loss.",
    ]
    for budget in sorted(by_budget):
        records = by_budget[budget]
        rows = build_rows(records, metrics, modes)
        cols = _columns(metrics, modes)
        header = ["Loss"] + [
            f"{label} {METRICS.get(m).display_name}" for mode, label in modes for m in metrics
        ]
        header += ["Reps", "Seed", "Commit"]
        best = {
            col: max(
                (r.cells[col][0] for r in rows if r.loss != UNTRAINED and not math.isnan(r.cells[col][0])),
                key=lambda v: v if METRICS.get(col[1]).higher_is_better else -v,
                default=math.nan,
            )
            if any(not math.isnan(r.cells[col][0]) for r in rows if r.loss != UNTRAINED)
            else math.nan
            for col in cols
        }
        lines += [
            "",
            f"## Budget `{budget}`",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for r in rows:
            cells = []
            for col in cols:
                text = format_cell(*r.cells[col])
                cells.append(f"**{text}**" if r.loss != UNTRAINED and r.cells[col][0] == best[col] else text)
            lines.append("| " + " | ".join([r.name, *cells, str(r.reps), str(r.seed), r.commit]) + " |")
        lines += ["", *_footer(budget, _latest_per_loss(records))]
    return "\n".join(lines) + "\n"


def _footer(budget: str, records: Sequence[dict[str, Any]]) -> list[str]:
    devs: dict[str, tuple[Any, Any]] = {}
    for r in records:
        for d in r.get("deviations", []):
            devs[d["key"]] = (d["paper"], d["value"])
    searched = [r for r in records if "search" in r]
    out = (
        [
            f"Budget `{budget}`; search trials per loss: "
            + ", ".join(
                f"{r['loss']} {len([t for t in r['search']['trials'] if t['state'] == 'COMPLETE'])}"
                f"/{r['search']['n_trials']}"
                for r in searched
            )
            + "."
        ]
        if searched
        else [f"Budget `{budget}`; no hyperparameter search (loss defaults)."]
    )
    out += footer_notes(records)
    if devs:
        out.append(
            "Deviations from the paper protocol: "
            + "; ".join(f"`{k}` = {v[1]!r} (paper {v[0]!r})" for k, v in sorted(devs.items()))
            + "."
        )
    else:
        out.append("No deviations from the paper protocol.")
    return out


def footer_notes(records: Sequence[dict[str, Any]]) -> list[str]:
    """The records' notes (each once) and their further per-rep summaries (``test.extra_summary``)."""
    out: list[str] = []
    for r in records:
        for note in r.get("notes", []):
            if note not in out:
                out.append(str(note))
    for r in records:
        extra = r.get("test", {}).get("extra_summary", {})
        if extra:
            parts = [
                f"{k.replace('_', ' ')} {_plain(v['mean'])} ± {_plain(v['half_width'])}"
                for k, v in extra.items()
            ]
            out.append(f"{r['loss']}: " + "; ".join(parts) + ".")
    return out


def _plain(x: float | None) -> str:
    value = _nan(x)
    return "–" if math.isnan(value) else f"{value:.3g}"


def render_csv(by_budget: dict[str, list[dict[str, Any]]], metrics: Sequence[str]) -> str:
    """The same rows as the Markdown table, as machine-readable CSV (fractions, not percent)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    modes = record_modes([r for rs in by_budget.values() for r in rs])
    cols = _columns(metrics, modes)
    writer.writerow(
        ["budget", "loss", "name", "seed", "reps", "commit"]
        + [f"{mode}_{m}_{part}" for mode, m in cols for part in ("mean", "ci")]
    )
    for budget in sorted(by_budget):
        for r in build_rows(by_budget[budget], metrics, modes):
            values: list[str] = []
            for col in cols:
                mean, hw = r.cells[col]
                values += ["" if math.isnan(mean) else repr(mean), "" if math.isnan(hw) else repr(hw)]
            writer.writerow([budget, r.loss, r.name, r.seed, r.reps, r.commit, *values])
    return buf.getvalue()


def write_leaderboard(results_dir: Path, dataset: str, protocol: str) -> list[Path]:
    """Regenerate ``leaderboard.md`` and ``leaderboard.csv`` from every record; return their paths."""
    records = load_records(results_dir, dataset, protocol)
    by_budget: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_budget.setdefault(r["budget"], []).append(r)
    # Only metrics every record has: a column cannot be filled from some records alone.
    metrics = (
        [m for m in records[0]["test"]["metrics"] if all(m in r["test"]["metrics"] for r in records)]
        if records
        else []
    )
    folder = results_dir / dataset / protocol
    md, csv_path = folder / "leaderboard.md", folder / "leaderboard.csv"
    write_text_atomic(md, render_markdown(dataset, protocol, by_budget, metrics))
    write_text_atomic(csv_path, render_csv(by_budget, metrics))
    return [md, csv_path]
