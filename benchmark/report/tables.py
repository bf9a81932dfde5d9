"""Leaderboard tables in every output format (docs/protocols.md §6): Markdown, CSV, LaTeX and JSON.

All four render one :class:`~benchmark.report.leaderboard.Leaderboard` (records read once, the
newest per loss chosen once, metric columns resolved once): Markdown and CSV are
:mod:`benchmark.report.leaderboard`'s renderers, this module adds a LaTeX ``tabular`` and a JSON
document with the same rows and columns, :func:`render_leaderboard` (one format of a leaderboard),
and :func:`write_tables`, which regenerates ``leaderboard.{md,csv,tex,json}``: all four are
rendered before any is written, so a failure leaves the previous four files, never a mix.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmark.analysis.convergence import RULE
from benchmark.errors import UnknownNameError
from benchmark.io import write_text_atomic
from benchmark.metrics import METRICS
from benchmark.records import RunRecord, latest_per_loss
from benchmark.report.leaderboard import (
    EXEMPT_NOTE,
    TIER_ALPHA,
    TIERS_NOTE,
    UNTRAINED,
    VALUES_NOTE,
    Leaderboard,
    RecordLike,
    Row,
    available_runs,
    bound_footer,
    build_leaderboard,
    code_footer,
    convergence_footer,
    csv_text,
    footer_notes,
    format_cell,
    load_leaderboard,
    markdown_text,
    mode_titles,
    record_metrics,
    reproducibility_footer,
    resolve_metrics,
    row_environment,
    row_records,
    search_bound_hits,
    seed_variance_footer,
    select_records,
    settings_notes,
    tier_footer,
)

FORMATS = ("md", "csv", "tex", "json")
LEADERBOARD_SCHEMA = "dmlbench.leaderboard/1"
#: One budget's records (typed).
Records = list[RunRecord]
ByBudget = Mapping[str, Sequence[RecordLike]]

#: Its own names, and those it re-exports for callers of the former API (cli, api).
__all__ = [
    "FORMATS",
    "LEADERBOARD_SCHEMA",
    "ByBudget",
    "Records",
    "available_runs",
    "json_data",
    "json_text",
    "latest_per_loss",
    "latex_escape",
    "latex_text",
    "leaderboard_data",
    "mode_titles",
    "record_metrics",
    "refresh",
    "render",
    "render_json",
    "render_latex",
    "render_leaderboard",
    "resolve_metrics",
    "select_records",
    "write_tables",
]


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


def latex_text(lb: Leaderboard) -> str:
    """One plain ``tabular`` per budget (``\\hline`` rules, no packages needed), best mean bold.

    Cells are ``mean $\\pm$ half-width`` in percent; the footer (budget, search trials, reps,
    commits, deviations) follows each table as LaTeX comments.
    """
    modes, metrics = lb.modes, lb.metrics
    lines = [
        _comment(f"dmlbench leaderboard: dataset {lb.dataset}, protocol {lb.protocol}."),
        _comment("Generated from the run records; do not edit by hand."),
        _comment(VALUES_NOTE),
        _comment(TIERS_NOTE),
        *[_comment(note) for note in lb.notes],
    ]
    for s in lb.sections:
        titles = s.titles(modes)
        spec = "l|l|" + "|".join("r" * len(metrics) for _ in modes) + "|rr"
        group = " & ".join(
            rf"\multicolumn{{{len(metrics)}}}{{c|}}{{{latex_escape(titles.get(mode, label))}}}"
            for mode, label in modes
        )
        names = [latex_escape(METRICS.get(m).display_name) for _ in modes for m in metrics]
        lines += [
            "",
            _comment(f"Budget {s.label}" + (f" ({EXEMPT_NOTE})" if s.exempt else "")),
            *[_comment(note) for note in settings_notes(s)],
            rf"\begin{{tabular}}{{{spec}}}",
            r"\hline",
            f" & & {group} & & \\\\",
            " & ".join(["Loss", "Group", *names, "Seeds", "Reps"]) + r" \\",
            r"\hline",
        ]
        for r in s.rows:
            first = (modes[0][0], metrics[0]) if metrics else None
            cells = [latex_escape(r.label), s.letters(r, *first) if first else ""]
            for mode, _ in modes:
                for m in metrics:
                    text = latex_escape(format_cell(*r.cells[(mode, m)]))
                    cells.append(rf"\textbf{{{text}}}" if s.is_best(r, mode, m) else text)
            cells += [latex_escape(r.seeds_text), latex_escape(r.reps_text)]
            lines.append(" & ".join(cells) + r" \\")
            if r.loss == UNTRAINED:
                lines.append(r"\hline")
        lines += [r"\hline", r"\end{tabular}"]
        trials = s.search_trials()
        lines.append(
            _comment(
                f"Budget {s.label}; search trials per loss: "
                + ", ".join(f"{loss} {c}/{n}" for loss, (c, n) in trials.items())
                + "."
                if trials
                else f"Budget {s.label}; no hyperparameter search (loss defaults)."
            )
        )
        lines += [_comment(line) for line in tier_footer(s) + seed_variance_footer(s)]
        lines += [_comment(note) for note in footer_notes(s.chosen)]
        # Every seed's stops: the LaTeX table has no column of them.
        by_loss = sorted(s.seed_records(), key=lambda r: (r.loss, r.seed is None, r.seed or 0))
        lines += [_comment(line) for line in convergence_footer(s.budget, by_loss)]
        lines += [_comment(line) for line in code_footer(s.chosen)]
        # The same warnings as the Markdown footer: a LaTeX table copied into a paper must not lose
        # the best settings at a range bound or the mixed threads / CPU kinds behind its rows.
        seeds = s.seed_records()
        lines += [_comment(line) for line in bound_footer(seeds) + reproducibility_footer(seeds)]
        lines.append(
            _comment(
                "Reps and commits: "
                + ", ".join(f"{r.loss} {r.test['reps']} reps @ {r.commit}" for r in s.chosen)
                + "."
            )
        )
        devs = s.deviations()
        lines.append(
            _comment(
                "Deviations from the paper protocol: "
                + "; ".join(f"{key} = {value!r} (paper {paper!r})" for key, paper, value in devs)
                + "."
                if devs
                else "No deviations from the paper protocol."
            )
        )
    return "\n".join(lines) + "\n"


# -- JSON ---------------------------------------------------------------------------------------


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


def json_data(lb: Leaderboard) -> dict[str, Any]:
    """The leaderboard as plain data: per section (``budgets``), rows with (mean, half_width, best)
    per column. A budget split by board settings has one entry per settings group, each with its
    ``budget``, its ``section`` label and ``board_settings`` (``key``, ``current``: whether it is
    the group of the budget's newest record, ``differs_from_current``: ``key``/``value``/``current``
    of each setting it differs in); the entries of an unsplit budget have neither key.

    Each row also gives its ``convergence`` counts and its records' ``environment``
    (:func:`~benchmark.report.leaderboard.row_environment`); both are None for the untrained row.

    Values are fractions (like the CSV), not percent; a missing interval is ``None``.
    """
    budgets = []
    for s in lb.sections:
        seeds = s.seed_records()
        out_rows = []
        for r in s.rows:
            own = row_records(seeds, r)
            cells = {
                mode: {
                    m: {
                        "mean": _finite(r.cells[(mode, m)][0]),
                        "half_width": _finite(r.cells[(mode, m)][1]),
                        "df": _finite(r.estimates[(mode, m)].df) if (mode, m) in r.estimates else None,
                        "best": s.is_best(r, mode, m),
                        "group": s.letters(r, mode, m),
                    }
                    for m in lb.metrics
                }
                for mode, _ in lb.modes
            }
            out_rows.append(
                {
                    "loss": r.loss,
                    "name": r.name,
                    "seeds": list(r.seeds),
                    "reps_per_seed": r.reps,
                    "interval_covers": r.scope or None,
                    "commit": r.commit,
                    "cells": cells,
                    # Why the fold trainings stopped (None for the untrained row).
                    "convergence": _row_convergence(r),
                    # The CPU kinds and torch threads per fold of its records (None for the
                    # untrained row): the section's notes warn when they differ between rows.
                    "environment": row_environment(own) if own else None,
                }
            )
        entry: dict[str, Any] = {
            "budget": s.budget,
            "rows": out_rows,
            "search_trials": {
                loss: {"complete": c, "n_trials": n} for loss, (c, n) in s.search_trials().items()
            },
            "deviations": [{"key": k, "paper": p, "value": v} for k, p, v in s.deviations()],
            # The mixed threads / CPU kinds warning too, as the Markdown and LaTeX footers give it.
            "notes": settings_notes(s) + footer_notes(s.chosen) + reproducibility_footer(seeds),
            "tiers": tier_footer(s),
            "seed_variance": seed_variance_footer(s),
            "convergence_exempt": s.exempt,
        }
        bounds = search_bound_hits(seeds)
        if bounds:
            # Optional like the keys below: written only when some best setting is at a bound.
            entry["search_bounds"] = [
                {
                    "loss": r.loss,
                    "seed": r.seed,
                    "name": h.name,
                    "value": h.value,
                    "bound": h.bound,
                    "side": h.side,
                }
                for r, hits in bounds
                for h in hits
            ]
        if s.siblings:
            # Only a budget split by board settings carries these (optional keys: schema version 1
            # stays, and a board of one set of settings is written as before).
            entry["section"] = s.label
            entry["board_settings"] = {
                "key": s.settings_key,
                "current": not s.earlier,
                "differs_from_current": [
                    {"key": c.key, "value": c.value, "current": c.other} for c in s.changes
                ],
            }
        budgets.append(entry)
    return {
        "schema": LEADERBOARD_SCHEMA,
        "dataset": lb.dataset,
        "protocol": lb.protocol,
        "confidence": 0.95,
        "unit": "fraction of 1 for the ranking metrics (the Markdown and LaTeX tables show percent)",
        "values": VALUES_NOTE,
        "tiers": {"alpha": TIER_ALPHA, "rule": TIERS_NOTE},
        "modes": [mode for mode, _ in lb.modes],
        "metrics": [
            {
                "name": m,
                "display_name": METRICS.get(m).display_name,
                "higher_is_better": METRICS.get(m).higher_is_better,
            }
            for m in lb.metrics
        ],
        "budgets": budgets,
        "convergence_rule": RULE,
    }


def _row_convergence(row: Row) -> dict[str, Any] | None:
    """A row's convergence summary for the JSON, without the rule (stated once per document)."""
    if row.convergence is None:
        return None
    return {k: v for k, v in row.convergence.items() if k != "rule"}


def json_text(lb: Leaderboard) -> str:
    """:func:`json_data` as indented JSON."""
    return json.dumps(json_data(lb), indent=1, ensure_ascii=False) + "\n"


# -- dispatch -----------------------------------------------------------------------------------

_RENDERERS = {"md": markdown_text, "csv": csv_text, "tex": latex_text, "json": json_text}


def render_leaderboard(fmt: str, lb: Leaderboard) -> str:
    """The leaderboard in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in _RENDERERS:
        raise UnknownNameError("table format", fmt, list(FORMATS))
    return _RENDERERS[fmt](lb)


def write_tables(
    results_dir: Path, dataset: str, protocol: str, *, leaderboard: Leaderboard | None = None
) -> list[Path]:
    """Regenerate ``leaderboard.{md,csv,tex,json}`` from every record; return their paths.

    One leaderboard (``leaderboard``, else read from the records) renders all four, and all four
    are rendered before the first is written. Records that share no metric give four tables
    without metric columns and a note (never two files refreshed and two stale).
    """
    lb = leaderboard or load_leaderboard(results_dir, dataset, protocol, require_metric=False)
    folder = results_dir / dataset / protocol
    texts = {folder / f"leaderboard.{fmt}": render_leaderboard(fmt, lb) for fmt in FORMATS}
    for path, text in texts.items():
        write_text_atomic(path, text)
    return list(texts)


def refresh(
    results_dir: Path,
    dataset: str,
    protocol: str,
    *,
    plots: bool = True,
    after_tables: Callable[[], None] | None = None,
) -> list[Path]:
    """After a run: read the records once, write the four tables, then (``plots``) the plots.

    Returns the table paths, then the plot files (PNG, PDF, README). ``after_tables`` is called
    between the two (the run command's kill point and progress message). The command that ran
    the protocol calls this (or :func:`write_tables` alone).
    """
    lb = load_leaderboard(results_dir, dataset, protocol, require_metric=False)
    paths = write_tables(results_dir, dataset, protocol, leaderboard=lb)
    if after_tables is not None:
        after_tables()
    if plots:
        from benchmark.report.plots import write_plots  # matplotlib only when plotting

        paths += write_plots(results_dir, dataset, protocol, leaderboard=lb)
    return paths


# -- the former entry points (records grouped by budget + metrics) -------------------------------


def render(fmt: str, dataset: str, protocol: str, by_budget: ByBudget, metrics: Sequence[str]) -> str:
    """The leaderboard of ``by_budget`` with ``metrics`` in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt not in _RENDERERS:
        raise UnknownNameError("table format", fmt, list(FORMATS))
    return render_leaderboard(fmt, build_leaderboard(dataset, protocol, by_budget, metrics))


def render_latex(dataset: str, protocol: str, by_budget: ByBudget, metrics: Sequence[str]) -> str:
    """:func:`latex_text` of the leaderboard of ``by_budget`` with ``metrics``."""
    return latex_text(build_leaderboard(dataset, protocol, by_budget, metrics))


def leaderboard_data(
    dataset: str, protocol: str, by_budget: ByBudget, metrics: Sequence[str]
) -> dict[str, Any]:
    """:func:`json_data` of the leaderboard of ``by_budget`` with ``metrics``."""
    return json_data(build_leaderboard(dataset, protocol, by_budget, metrics))


def render_json(dataset: str, protocol: str, by_budget: ByBudget, metrics: Sequence[str]) -> str:
    """:func:`json_text` of the leaderboard of ``by_budget`` with ``metrics``."""
    return json_text(build_leaderboard(dataset, protocol, by_budget, metrics))
