"""Leaderboards derived from run records only (docs/protocols.md §6): never typed by hand.

One section per budget (numbers from different budgets are not comparable); rows are losses plus
the untrained row; columns are separated/concatenated × metrics as mean ± 95% CI half-width in %;
the best mean per column is bold; the footer states reps, deviations from the paper and provenance.

Protocols other than MLRC (``traditional``, ``cbir``) name their own evaluation modes in the
record (``test.modes`` with ``test.mode_labels``); their tables have one column group per mode, a
cell of a mode a loss lacks (e.g. cbir's two-stage for a pair-based loss) is shown as ``–``, and
the footer adds the records' notes (e.g. selection on test) and further per-rep summaries.

Convergence (docs/protocols.md §2.6; :mod:`benchmark.protocol.convergence`): the footer gives, per loss, the
share of fold trainings that stopped by patience in the test and the search stage; a loss whose
run is "not converged" (fewer than 90% of its test-stage folds stopped by patience) carries that
mark next to its name in the table, and the CSV/JSON carry the counts and the verdict. The
``smoke`` budget's section says that it is exempt.
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
from benchmark.protocol.convergence import EXEMPT_BUDGETS, RULE, convergence_summary

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
    #: :func:`~benchmark.protocol.convergence.convergence_summary` of the loss's record; None for
    #: the untrained row.
    convergence: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """The name as the table shows it: with the "not converged" mark where it applies."""
        if self.convergence is not None and self.convergence["verdict"] == "not converged":
            return f"{self.name} (not converged)"
        return self.name


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
        rows.append(
            Row(
                r["loss_display_name"],
                r["loss"],
                r["seed"],
                r["test"]["reps"],
                cells,
                _commit(r),
                convergence_summary(r),
            )
        )
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
            f"## Budget `{budget}`" + (f" ({EXEMPT_NOTE})" if budget in EXEMPT_BUDGETS else ""),
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for r in rows:
            cells = []
            for col in cols:
                text = format_cell(*r.cells[col])
                cells.append(f"**{text}**" if r.loss != UNTRAINED and r.cells[col][0] == best[col] else text)
            lines.append("| " + " | ".join([r.label, *cells, str(r.reps), str(r.seed), r.commit]) + " |")
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
    out += convergence_footer(budget, records)
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
        for p in r.get("plugins", []):
            # Which outside code produced the row: the distribution and version, the reference, and
            # the hash of the file the component is defined in.
            sha = f"sha256 {p['sha256'][:12]}" if p.get("sha256") else "file not hashed"
            dist = f"{p['distribution']} {p['version']} " if p.get("distribution") else ""
            where = f"{dist}({p['ref']}, {sha})" if dist else f"{p['ref']} ({sha})"
            line = f"{r['loss']}: {p['kind']} plugin: {where}."
            if line not in out:
                out.append(line)
    for r in records:
        extra = r.get("test", {}).get("extra_summary", {})
        if extra:
            parts = [
                f"{k.replace('_', ' ')} {_plain(v['mean'])} ± {_plain(v['half_width'])}"
                for k, v in extra.items()
            ]
            out.append(f"{r['loss']}: " + "; ".join(parts) + ".")
    return out


#: How an exempt budget's section is labelled.
EXEMPT_NOTE = "exempt from the convergence rule: checks the machinery, not the ranking (protocols.md §2.6)"


def format_share(stage: dict[str, Any]) -> str:
    """``{"patience": 14, "n": 16, ...}`` -> ``"14/16 (88%)"``; ``"–"`` without fold trainings; a
    trailing ``*`` when some stops were derived (records written before ``stopped_by``)."""
    n = int(stage.get("n", 0))
    if n == 0:
        return "–"
    text = f"{int(stage['patience'])}/{n} ({100.0 * int(stage['patience']) / n:.0f}%)"
    return text + ("*" if stage.get("derived") else "")


def convergence_footer(budget: str, records: Sequence[dict[str, Any]]) -> list[str]:
    """Footer lines: per loss, fold trainings stopped by patience (test; search) and the verdict,
    then the rule (and what ``*`` means where a record needed its stops derived)."""
    if not records:
        return []
    summaries = [(str(r["loss"]), convergence_summary(r)) for r in records]
    parts = [
        f"{loss} test {format_share(c['test'])}, search {format_share(c['search'])}: {c['verdict']}"
        for loss, c in summaries
    ]
    out = ["Fold trainings stopped by patience: " + "; ".join(parts) + "."]
    rule = f"Convergence rule: {RULE}."
    if budget in EXEMPT_BUDGETS:
        rule += f" Budget `{budget}` is {EXEMPT_NOTE}."
    if any(c[stage]["derived"] for _, c in summaries for stage in ("test", "search")):
        rule += (
            " * = derived for records written before fold results carried stopped_by: patience when "
            "at least train.patience evaluations followed the best epoch, else max_epochs when the "
            "last allowed epoch ran (unknown otherwise); a failed search trial's missing folds count "
            "as diverged."
        )
    out.append(rule)
    return out


def _plain(x: float | None) -> str:
    value = _nan(x)
    return "–" if math.isnan(value) else f"{value:.3g}"


#: Convergence columns of the CSV: fold trainings stopped by patience and all fold trainings per
#: stage, the verdict, and how many stops were derived from an older record.
CSV_CONVERGENCE = (
    "test_patience_stops",
    "test_fold_trainings",
    "search_patience_stops",
    "search_fold_trainings",
    "convergence",
    "stops_derived",
)


def csv_convergence(row: Row) -> list[str]:
    """The :data:`CSV_CONVERGENCE` cells of a row (empty for the untrained row)."""
    c = row.convergence
    if c is None:
        return [""] * len(CSV_CONVERGENCE)
    derived = int(c["test"]["derived"]) + int(c["search"]["derived"])
    return [
        str(c["test"]["patience"]),
        str(c["test"]["n"]),
        str(c["search"]["patience"]),
        str(c["search"]["n"]),
        str(c["verdict"]),
        str(derived),
    ]


def render_csv(by_budget: dict[str, list[dict[str, Any]]], metrics: Sequence[str]) -> str:
    """The same rows as the Markdown table, as machine-readable CSV (fractions, not percent)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    modes = record_modes([r for rs in by_budget.values() for r in rs])
    cols = _columns(metrics, modes)
    writer.writerow(
        ["budget", "loss", "name", "seed", "reps", "commit"]
        + [f"{mode}_{m}_{part}" for mode, m in cols for part in ("mean", "ci")]
        + list(CSV_CONVERGENCE)
    )
    for budget in sorted(by_budget):
        for r in build_rows(by_budget[budget], metrics, modes):
            values: list[str] = []
            for col in cols:
                mean, hw = r.cells[col]
                values += ["" if math.isnan(mean) else repr(mean), "" if math.isnan(hw) else repr(hw)]
            writer.writerow([budget, r.loss, r.name, r.seed, r.reps, r.commit, *values, *csv_convergence(r)])
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
