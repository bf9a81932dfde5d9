"""Leaderboard tables in every output format (docs/protocols.md §6): Markdown, CSV, LaTeX and JSON.

Markdown and CSV are :mod:`benchmark.report.leaderboard`'s renderers; this module adds the record
selection shared by ``dmlbench report``/``compare`` (dataset, protocol, budget, metrics, with errors
that name what exists), a LaTeX ``tabular`` and a JSON document with the same rows, and
:func:`write_tables`, which regenerates ``leaderboard.{md,csv,tex,json}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmark.errors import DmlbenchError, UnknownNameError
from benchmark.io import write_text_atomic
from benchmark.metrics import METRICS, MLRC_METRICS
from benchmark.protocol.convergence import EXEMPT_BUDGETS, RULE
from benchmark.report.leaderboard import (
    EXEMPT_NOTE,
    MODES,
    UNTRAINED,
    Modes,
    Row,
    build_rows,
    convergence_footer,
    footer_notes,
    format_cell,
    load_records,
    record_modes,
    render_csv,
    render_markdown,
    write_leaderboard,
)

FORMATS = ("md", "csv", "tex", "json")
LEADERBOARD_SCHEMA = "dmlbench.leaderboard/1"
Records = list[dict[str, Any]]


# -- record selection ---------------------------------------------------------------------------


def available_runs(results_dir: Path) -> list[str]:
    """``dataset/protocol`` pairs that have at least one record under ``results_dir``."""
    if not results_dir.is_dir():
        return []
    return sorted(
        f"{folder.parent.parent.name}/{folder.parent.name}"
        for folder in results_dir.glob("*/*/records")
        if folder.is_dir() and any(folder.glob("*.json"))
    )


def select_records(
    results_dir: Path, dataset: str, protocol: str, budget: str | None = None
) -> dict[str, Records]:
    """The records of a dataset/protocol grouped by budget (only ``budget`` when given).

    Raises :class:`DmlbenchError` naming the dataset/protocol pairs (or budgets) that do have
    records when the requested ones have none.
    """
    records = load_records(results_dir, dataset, protocol)
    if not records:
        runs = available_runs(results_dir)
        where = results_dir / dataset / protocol / "records"
        have = (
            "Records exist for: " + ", ".join(runs) + "."
            if runs
            else f"There are no records under {results_dir} at all; `dmlbench run` writes them."
        )
        raise DmlbenchError(
            f"No run records for dataset {dataset!r}, protocol {protocol!r} ({where}). {have}"
        )
    by_budget: dict[str, Records] = {}
    for r in records:
        by_budget.setdefault(str(r.get("budget", "unknown")), []).append(r)
    if budget is not None:
        if budget not in by_budget:
            raise DmlbenchError(
                f"No {dataset}/{protocol} records with budget {budget!r}; "
                f"budgets with records: {', '.join(sorted(by_budget))}."
            )
        return {budget: by_budget[budget]}
    return by_budget


def record_metrics(record: dict[str, Any]) -> list[str]:
    """The test metrics a record holds per-rep values and summaries for."""
    return [str(m) for m in record.get("test", {}).get("metrics", [])]


def resolve_metrics(by_budget: dict[str, Records], requested: Sequence[str] | None = None) -> list[str]:
    """The metric columns: ``requested`` (validated) or every metric all selected records hold.

    By default the MLRC metrics come first (in their usual order), then any further metric that
    every record holds. A requested name must be registered (else :class:`UnknownNameError`) and
    present in every selected record (else :class:`DmlbenchError` naming the metrics they have).
    """
    records = [r for rs in by_budget.values() for r in rs]
    common = record_metrics(records[0]) if records else []
    for r in records[1:]:
        have = set(record_metrics(r))
        common = [m for m in common if m in have]
    if not requested:
        ordered = [m for m in MLRC_METRICS if m in common] + [m for m in common if m not in MLRC_METRICS]
        if not ordered:
            raise DmlbenchError("The selected records share no test metric; select one --budget.")
        return ordered
    out: list[str] = []
    for m in requested:
        if m not in METRICS:
            raise UnknownNameError("metric", m, METRICS.names())
        if m not in common:
            raise DmlbenchError(
                f"Metric {m!r} is not in every selected record; the records have: "
                f"{', '.join(common) or '(no common metric)'}."
            )
        if m not in out:
            out.append(m)
    return out


def latest_per_loss(records: Sequence[dict[str, Any]]) -> Records:
    """The newest record of each loss (records sorted oldest first), ordered by loss name."""
    latest: dict[str, dict[str, Any]] = {}
    for r in sorted(records, key=lambda r: (r.get("created", ""), r.get("loss", ""))):
        latest[r["loss"]] = r
    return sorted(latest.values(), key=lambda r: r["loss"])


def mode_titles(records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Long column-group titles with the embedding sizes, e.g. ``"Separated (128-d)"``; for a
    protocol with its own modes, their labels."""
    if record_modes(records) != MODES:
        return dict(record_modes(records))
    titles = {"separated": "Separated", "concatenated": "Concatenated"}
    if not records:
        return titles
    newest = max(records, key=lambda r: r.get("created", ""))
    config = newest.get("config", {})
    dim = config.get("model", {}).get("embedding_dim")
    folds = config.get("protocol", {}).get("n_folds")
    if isinstance(dim, int) and isinstance(folds, int):
        titles = {
            "separated": f"Separated ({dim}-d)",
            "concatenated": f"Concatenated ({dim * folds}-d)",
        }
    return titles


# -- shared row logic ---------------------------------------------------------------------------


def best_means(
    rows: Sequence[Row], metrics: Sequence[str], modes: Modes = MODES
) -> dict[tuple[str, str], float]:
    """Best mean per (mode, metric) column over the trained rows, by the metric's direction."""
    best: dict[tuple[str, str], float] = {}
    for mode, _ in modes:
        for m in metrics:
            sign = 1.0 if METRICS.get(m).higher_is_better else -1.0
            values = [
                r.cells[(mode, m)][0]
                for r in rows
                if r.loss != UNTRAINED and not math.isnan(r.cells[(mode, m)][0])
            ]
            best[(mode, m)] = max(values, key=lambda v: sign * v) if values else math.nan
    return best


def search_trials(records: Sequence[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per loss: (complete search trials, planned trials); records without a search are left out."""
    return {
        r["loss"]: (
            sum(1 for t in r["search"]["trials"] if t["state"] == "COMPLETE"),
            int(r["search"]["n_trials"]),
        )
        for r in records
        if "search" in r
    }


def deviations(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deviations from the paper protocol over the records, one per key, sorted by key."""
    devs: dict[str, dict[str, Any]] = {}
    for r in records:
        for d in r.get("deviations", []):
            devs[d["key"]] = {"key": d["key"], "paper": d["paper"], "value": d["value"]}
    return [devs[k] for k in sorted(devs)]


# -- LaTeX --------------------------------------------------------------------------------------

_LATEX_SPECIALS = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "±": r"$\pm$",
}


def latex_escape(text: str) -> str:
    """``text`` with LaTeX's special characters escaped (``MS_v2 & 5%`` -> ``MS\\_v2 \\& 5\\%``)."""
    return "".join(_LATEX_SPECIALS.get(ch, ch) for ch in text)


def _comment(text: str) -> str:
    return "% " + " ".join(text.splitlines())


def render_latex(dataset: str, protocol: str, by_budget: dict[str, Records], metrics: Sequence[str]) -> str:
    """One plain ``tabular`` per budget (``\\hline`` rules, no packages needed), best mean bold.

    Cells are ``mean $\\pm$ half-width`` in percent; the footer (budget, search trials, reps,
    commits, deviations) follows each table as LaTeX comments.
    """
    lines = [
        _comment(f"dmlbench leaderboard: dataset {dataset}, protocol {protocol}."),
        _comment("Generated from the run records; do not edit by hand."),
        _comment("Values: mean ± half-width of the 95% t-interval over test repetitions, in percent."),
    ]
    modes = record_modes([r for rs in by_budget.values() for r in rs])
    n_cols = 1 + len(modes) * len(metrics) + 1
    for budget in sorted(by_budget):
        records = by_budget[budget]
        chosen = latest_per_loss(records)
        rows = build_rows(records, metrics, modes)
        best = best_means(rows, metrics, modes)
        titles = mode_titles(records)
        spec = "l|" + "|".join("r" * len(metrics) for _ in modes) + "|r"
        group = " & ".join(
            rf"\multicolumn{{{len(metrics)}}}{{c|}}{{{latex_escape(titles.get(mode, label))}}}"
            for mode, label in modes
        )
        names = [latex_escape(METRICS.get(m).display_name) for _ in modes for m in metrics]
        lines += [
            "",
            _comment(f"Budget {budget}" + (f" ({EXEMPT_NOTE})" if budget in EXEMPT_BUDGETS else "")),
            rf"\begin{{tabular}}{{{spec}}}",
            r"\hline",
            f" & {group} & \\\\",
            " & ".join(["Loss", *names, "Reps"]) + r" \\",
            r"\hline",
        ]
        for r in rows:
            cells = [latex_escape(r.label)]
            for mode, _ in modes:
                for m in metrics:
                    mean, hw = r.cells[(mode, m)]
                    text = latex_escape(format_cell(mean, hw))
                    is_best = r.loss != UNTRAINED and mean == best[(mode, m)]
                    cells.append(rf"\textbf{{{text}}}" if is_best else text)
            cells.append(str(r.reps))
            assert len(cells) == n_cols
            lines.append(" & ".join(cells) + r" \\")
            if r.loss == UNTRAINED:
                lines.append(r"\hline")
        lines += [r"\hline", r"\end{tabular}"]
        trials = search_trials(chosen)
        lines.append(
            _comment(
                f"Budget {budget}; search trials per loss: "
                + ", ".join(f"{loss} {c}/{n}" for loss, (c, n) in trials.items())
                + "."
                if trials
                else f"Budget {budget}; no hyperparameter search (loss defaults)."
            )
        )
        lines += [_comment(note) for note in footer_notes(chosen)]
        lines += [_comment(line) for line in convergence_footer(budget, chosen)]
        lines.append(
            _comment(
                "Reps and commits: "
                + ", ".join(f"{r['loss']} {r['test']['reps']} reps @ {row_commit(r)}" for r in chosen)
                + "."
            )
        )
        devs = deviations(chosen)
        lines.append(
            _comment(
                "Deviations from the paper protocol: "
                + "; ".join(f"{d['key']} = {d['value']!r} (paper {d['paper']!r})" for d in devs)
                + "."
                if devs
                else "No deviations from the paper protocol."
            )
        )
    return "\n".join(lines) + "\n"


def row_commit(record: dict[str, Any]) -> str:
    """A record's short git commit with ``+dirty`` when the tree had local changes."""
    git = record.get("environment", {}).get("git", {})
    return str(git.get("commit", "unknown"))[:10] + ("+dirty" if git.get("dirty") else "")


# -- JSON ---------------------------------------------------------------------------------------


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


def leaderboard_data(
    dataset: str, protocol: str, by_budget: dict[str, Records], metrics: Sequence[str]
) -> dict[str, Any]:
    """The leaderboard as plain data: per budget, rows with (mean, half_width, best) per column.

    Values are fractions (like the CSV), not percent; a missing interval is ``None``.
    """
    budgets = []
    modes = record_modes([r for rs in by_budget.values() for r in rs])
    for budget in sorted(by_budget):
        records = by_budget[budget]
        chosen = latest_per_loss(records)
        rows = build_rows(records, metrics, modes)
        best = best_means(rows, metrics, modes)
        out_rows = []
        for r in rows:
            cells: dict[str, dict[str, dict[str, Any]]] = {}
            for mode, _ in modes:
                cells[mode] = {}
                for m in metrics:
                    mean, hw = r.cells[(mode, m)]
                    cells[mode][m] = {
                        "mean": _finite(mean),
                        "half_width": _finite(hw),
                        "best": r.loss != UNTRAINED and mean == best[(mode, m)],
                    }
            out_rows.append(
                {
                    "loss": r.loss,
                    "name": r.name,
                    "seed": r.seed,
                    "reps": r.reps,
                    "commit": r.commit,
                    "cells": cells,
                    # Why the fold trainings stopped (None for the untrained row).
                    "convergence": _row_convergence(r),
                }
            )
        budgets.append(
            {
                "budget": budget,
                "rows": out_rows,
                "search_trials": {
                    loss: {"complete": c, "n_trials": n} for loss, (c, n) in search_trials(chosen).items()
                },
                "deviations": deviations(chosen),
                "notes": footer_notes(chosen),
                "convergence_exempt": budget in EXEMPT_BUDGETS,
            }
        )
    return {
        "schema": LEADERBOARD_SCHEMA,
        "dataset": dataset,
        "protocol": protocol,
        "confidence": 0.95,
        "modes": [mode for mode, _ in modes],
        "metrics": [
            {
                "name": m,
                "display_name": METRICS.get(m).display_name,
                "higher_is_better": METRICS.get(m).higher_is_better,
            }
            for m in metrics
        ],
        "budgets": budgets,
        "convergence_rule": RULE,
    }


def _row_convergence(row: Row) -> dict[str, Any] | None:
    """A row's convergence summary for the JSON, without the rule (stated once per document)."""
    if row.convergence is None:
        return None
    return {k: v for k, v in row.convergence.items() if k != "rule"}


def render_json(dataset: str, protocol: str, by_budget: dict[str, Records], metrics: Sequence[str]) -> str:
    """:func:`leaderboard_data` as indented JSON."""
    return (
        json.dumps(leaderboard_data(dataset, protocol, by_budget, metrics), indent=1, ensure_ascii=False)
        + "\n"
    )


# -- dispatch -----------------------------------------------------------------------------------


def render(
    fmt: str, dataset: str, protocol: str, by_budget: dict[str, Records], metrics: Sequence[str]
) -> str:
    """The leaderboard in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "md":
        return render_markdown(dataset, protocol, by_budget, metrics)
    if fmt == "csv":
        return render_csv(by_budget, metrics)
    if fmt == "tex":
        return render_latex(dataset, protocol, by_budget, metrics)
    if fmt == "json":
        return render_json(dataset, protocol, by_budget, metrics)
    raise UnknownNameError("table format", fmt, list(FORMATS))


def write_tables(results_dir: Path, dataset: str, protocol: str) -> list[Path]:
    """Regenerate ``leaderboard.{md,csv,tex,json}`` from every record; return their paths."""
    paths = write_leaderboard(results_dir, dataset, protocol)
    by_budget = select_records(results_dir, dataset, protocol)
    metrics = resolve_metrics(by_budget)
    folder = results_dir / dataset / protocol
    tex, js = folder / "leaderboard.tex", folder / "leaderboard.json"
    write_text_atomic(tex, render_latex(dataset, protocol, by_budget, metrics))
    write_text_atomic(js, render_json(dataset, protocol, by_budget, metrics))
    return [*paths, tex, js]
