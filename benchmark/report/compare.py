"""Significance tables like the Mean-Field paper's Tables 6–7 (docs/protocols.md §4.4).

For one metric, every compared loss is tested against every reference loss in both evaluation modes,
on the same row model as the leaderboard (:mod:`benchmark.stats.seeds`): Welch's t-test on the
per-repetition test values for two one-seed rows, the pooled seed-mean test for rows with several
search seeds (Welch's on their seed means when the column's seed spreads differ). A cell reads
``✓↑`` (significantly better), ``×↑`` (better, not significant), ``✓↓`` / ``×↓`` (worse), ``✓=`` /
``×=`` (equal means); ``n/a`` with the arrow when no p-value exists (fewer than two repetitions, or
two identical constant samples). "Better" respects the metric's ``higher_is_better``. By default the
p-values of all comparisons of a table (one budget) are Holm-adjusted before the decision ``p <=
alpha``; ``correction=False`` gives the Mean-Field paper's uncorrected layout. Each comparison
carries the difference with its 95% interval, and each table the minimum difference detectable at
80% power with the repetitions at hand (:mod:`benchmark.stats.power`).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmark.errors import DmlbenchError, UnknownNameError
from benchmark.metrics import METRICS
from benchmark.records import RunRecord, replicates_per_loss
from benchmark.report.leaderboard import MODES, Leaderboard, RecordLike, column_estimates, record_modes
from benchmark.report.numbers import signed
from benchmark.report.tables import latex_escape
from benchmark.stats.intervals import holm, welch_t_test
from benchmark.stats.power import min_detectable_difference
from benchmark.stats.seeds import SCOPE_TRAINING, difference

FORMATS = ("md", "csv", "json", "tex")
COMPARE_SCHEMA = "dmlbench.compare/2"
DEFAULT_ALPHA = 0.05
#: The power a table's minimum detectable difference is stated at.
TARGET_POWER = 0.8


@dataclass(frozen=True)
class Comparison:
    """One Welch test: ``loss`` vs ``reference`` on ``metric`` in ``mode`` within one budget."""

    budget: str
    metric: str
    mode: str
    loss: str
    loss_name: str
    reference: str
    reference_name: str
    n: int
    reference_n: int
    mean: float
    reference_mean: float
    t: float
    p: float
    p_holm: float | None  # None when not Holm-adjusted
    alpha: float
    higher_is_better: bool
    #: Standard error and degrees of freedom of ``mean - reference_mean``.
    se: float = math.nan
    df: float = math.nan
    #: 95% interval of ``mean - reference_mean``.
    diff_low: float = math.nan
    diff_high: float = math.nan
    #: Which seeds each side's interval covers.
    scope: str = SCOPE_TRAINING
    reference_scope: str = SCOPE_TRAINING
    #: Search seeds behind each side.
    seeds: int = 1
    reference_seeds: int = 1

    @property
    def diff(self) -> float:
        """``mean - reference_mean``."""
        return self.mean - self.reference_mean

    def min_detectable(self, alpha: float, target: float = TARGET_POWER) -> float:
        """The smallest difference this comparison detects with probability ``target`` at ``alpha``."""
        return min_detectable_difference(self.se, self.df, alpha, target)

    @property
    def p_decision(self) -> float:
        """The p-value the decision uses: Holm-adjusted when computed, else the raw one."""
        return self.p if self.p_holm is None else self.p_holm

    @property
    def testable(self) -> bool:
        """Whether a p-value exists (not NaN)."""
        return not math.isnan(self.p_decision)

    @property
    def significant(self) -> bool:
        """``p <= alpha`` (False when untestable)."""
        return self.testable and self.p_decision <= self.alpha

    @property
    def direction(self) -> str:
        """``↑`` when ``loss`` is better than ``reference`` by mean, ``↓`` worse, ``=`` equal."""
        diff = self.mean - self.reference_mean
        if not self.higher_is_better:
            diff = -diff
        return "↑" if diff > 0 else "↓" if diff < 0 else "="

    @property
    def cell(self) -> str:
        """The table cell, e.g. ``✓↑``."""
        if not self.testable:
            return "n/a" + self.direction
        return ("✓" if self.significant else "×") + self.direction

    def as_dict(self) -> dict[str, Any]:
        """Plain data with the derived decision; NaN becomes ``None``."""
        data = asdict(self)
        data.update(significant=self.significant, direction=self.direction, cell=self.cell)
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in data.items()}


def compare_values(
    a: Sequence[float], b: Sequence[float], *, higher_is_better: bool = True, alpha: float = DEFAULT_ALPHA
) -> Comparison:
    """A bare Welch comparison of two samples (names and metric left blank); for tests and scripts."""
    t, p = welch_t_test(a, b)
    return Comparison(
        budget="",
        metric="",
        mode="",
        loss="a",
        loss_name="a",
        reference="b",
        reference_name="b",
        n=len(a),
        reference_n=len(b),
        mean=_mean(a),
        reference_mean=_mean(b),
        t=t,
        p=p,
        p_holm=None,
        alpha=alpha,
        higher_is_better=higher_is_better,
    )


def _mean(values: Sequence[float]) -> float:
    return math.fsum(values) / len(values) if len(values) else math.nan


def _per_rep(record: RunRecord, mode: str, metric: str) -> list[float]:
    values = record.test["per_rep"].get(mode, {}).get(metric)
    if values is None:
        have = ", ".join(record.test["metrics"]) or "(none)"
        raise DmlbenchError(
            f"The record of {record.loss!r} has no per-rep {mode} values for {metric!r}; it has: {have}."
        )
    return list(values)


def compare_budget(
    budget: str,
    records: Sequence[RecordLike],
    references: Sequence[str],
    losses: Sequence[str] | None,
    metric: str,
    *,
    use_holm: bool = True,
    alpha: float = DEFAULT_ALPHA,
) -> list[Comparison]:
    """All comparisons of one table: compared losses × references × modes.

    Each loss's row folds its search seeds (:func:`~benchmark.records.replicates_per_loss`), and
    a column's estimates are computed over every loss of the budget, as the leaderboard does, so
    the pooled seed variance is the same in both. ``losses=None`` compares every loss of the
    budget that is not a reference. A reference or loss without a record raises
    :class:`DmlbenchError` listing the losses that have one.
    """
    spec = METRICS.get(metric)
    replicates = replicates_per_loss(records)
    by_loss = {name: max(rs, key=lambda r: r.created) for name, rs in replicates.items()}
    wanted = list(losses) if losses else [name for name in sorted(by_loss) if name not in references]
    missing = [name for name in [*references, *wanted] if name not in by_loss]
    if missing:
        raise DmlbenchError(
            f"No {budget!r}-budget record for {', '.join(repr(m) for m in missing)}; "
            f"losses with records: {', '.join(sorted(by_loss)) or '(none)'}."
        )
    if not wanted:
        raise DmlbenchError(
            f"Nothing to compare: every loss with a {budget!r}-budget record is a reference "
            f"({', '.join(sorted(by_loss))})."
        )
    out: list[Comparison] = []
    modes = record_modes(list(by_loss.values()))
    names = sorted(replicates)
    for mode, _ in modes:
        for name in names:
            for r in replicates[name]:
                if r.has_mode(mode) and r.test["per_rep"].get(mode, {}).get(metric) is None:
                    _per_rep(r, mode, metric)  # raises naming what the record has
    estimates = {
        mode: dict(zip(names, column_estimates([replicates[n] for n in names], mode, metric), strict=True))
        for mode, _ in modes
    }
    for name in wanted:
        for ref in references:
            if ref == name:
                continue
            for mode, _ in modes:
                if not all(by_loss[x].has_mode(mode) for x in (name, ref)):
                    continue  # e.g. cbir's two-stage mode of a loss without class anchors
                a, b = estimates[mode][name], estimates[mode][ref]
                d = difference(a, b)
                low, high = d.interval(0.95)
                out.append(
                    Comparison(
                        budget=budget,
                        metric=metric,
                        mode=mode,
                        loss=name,
                        loss_name=by_loss[name].loss_display_name,
                        reference=ref,
                        reference_name=by_loss[ref].loss_display_name,
                        n=a.n_values,
                        reference_n=b.n_values,
                        mean=a.mean,
                        reference_mean=b.mean,
                        t=d.t,
                        p=d.p,
                        p_holm=None,
                        alpha=alpha,
                        higher_is_better=spec.higher_is_better,
                        se=d.se,
                        df=d.df,
                        diff_low=low,
                        diff_high=high,
                        scope=a.scope,
                        reference_scope=b.scope,
                        seeds=a.n_seeds,
                        reference_seeds=b.n_seeds,
                    )
                )
    if use_holm:
        adjusted = holm([c.p for c in out])
        out = [Comparison(**{**asdict(c), "p_holm": q}) for c, q in zip(out, adjusted, strict=True)]
    return out


def compare_leaderboard(
    lb: Leaderboard,
    references: Sequence[str],
    losses: Sequence[str] | None,
    metric: str,
    *,
    use_holm: bool = True,
    alpha: float = DEFAULT_ALPHA,
) -> dict[str, list[Comparison]]:
    """:func:`compare_tables` over a leaderboard's sections (every record: the seeds are folded).

    A table per section (:attr:`Leaderboard.by_section`): records of a budget made under
    different board settings are never tested against each other. When no section holds every
    needed loss and the reason is that they lie in different settings groups of one budget, the
    :class:`DmlbenchError` says so and names the settings that differ (:func:`settings_conflicts`).
    """
    try:
        return compare_tables(lb.by_section, references, losses, metric, use_holm=use_holm, alpha=alpha)
    except DmlbenchError as exc:
        conflicts = settings_conflicts(lb, [*references, *(losses or [])])
        if conflicts:
            raise DmlbenchError(" ".join(conflicts.values())) from exc
        raise


def settings_conflicts(lb: Leaderboard, needed: Sequence[str]) -> dict[str, str]:
    """Per budget whose sections hold every loss of ``needed`` but none holds them all: why they
    are not compared, naming which section holds which loss and the board settings that differ
    (each earlier section's against the current one). Empty when no budget is split that way."""
    wanted = list(dict.fromkeys(needed))
    out: dict[str, str] = {}
    for budget in dict.fromkeys(s.budget for s in lb.sections):
        sections = [s for s in lb.sections if s.budget == budget]
        held = [{r.loss for r in s.chosen} for s in sections]
        if len(sections) < 2 or any(set(wanted) <= h for h in held):
            continue
        if not all(any(loss in h for h in held) for loss in wanted):
            continue  # a loss without any record of this budget: the ordinary "no record" error
        parts = []
        for s, h in zip(sections, held, strict=True):
            mine = [loss for loss in wanted if loss in h]
            if not mine:
                continue
            text = f"`{s.label}` holds {', '.join(mine)}"
            if s.earlier:
                text += f" (differs from `{budget}` in: {'; '.join(c.text for c in s.changes)})"
            parts.append(text)
        out[budget] = (
            f"Budget {budget!r}: {', '.join(wanted)} were not all run under the same board settings, "
            f"and a comparison needs records of identical settings: {'; '.join(parts)}. Rerun the "
            f"earlier-settings losses under the budget's current settings to compare them."
        )
    return out


def compare_tables(
    by_budget: Mapping[str, Sequence[RecordLike]],
    references: Sequence[str],
    losses: Sequence[str] | None,
    metric: str,
    *,
    use_holm: bool = True,
    alpha: float = DEFAULT_ALPHA,
) -> dict[str, list[Comparison]]:
    """One table per budget; budgets lacking a needed loss are left out, and an error (naming each
    budget's losses with records) is raised only when no budget has them all."""
    if not references:
        raise DmlbenchError("Name at least one reference loss (--reference).")
    if metric not in METRICS:
        raise UnknownNameError("metric", metric, METRICS.names())
    if not 0.0 < alpha < 1.0:
        raise DmlbenchError(f"alpha must lie in (0, 1); got {alpha}.")
    tables: dict[str, list[Comparison]] = {}
    errors: list[str] = []
    for budget in sorted(by_budget):
        try:
            tables[budget] = compare_budget(
                budget, by_budget[budget], references, losses, metric, use_holm=use_holm, alpha=alpha
            )
        except DmlbenchError as exc:
            errors.append(str(exc))
    if not tables:
        raise DmlbenchError(" ".join(errors))
    return tables


# -- rendering ----------------------------------------------------------------------------------


def _columns(comparisons: Sequence[Comparison]) -> list[tuple[str, str]]:
    """(reference, mode) columns in first-seen order."""
    cols: list[tuple[str, str]] = []
    for c in comparisons:
        if (c.reference, c.mode) not in cols:
            cols.append((c.reference, c.mode))
    return cols


def _grid(
    comparisons: Sequence[Comparison],
) -> tuple[list[str], list[tuple[str, str]], dict[tuple[str, str, str], Comparison]]:
    losses: list[str] = []
    for c in comparisons:
        if c.loss not in losses:
            losses.append(c.loss)
    return losses, _columns(comparisons), {(c.loss, c.reference, c.mode): c for c in comparisons}


def _names(comparisons: Sequence[Comparison]) -> dict[str, str]:
    names = {c.loss: c.loss_name for c in comparisons}
    names.update({c.reference: c.reference_name for c in comparisons})
    return names


def _method(tables: dict[str, list[Comparison]], use_holm: bool, alpha: float) -> str:
    text = (
        "t-tests on the leaderboard's row model: Welch's t-test on the per-repetition test values "
        "for two one-seed rows (scipy.stats.ttest_ind, equal_var=False), the pooled seed-mean "
        "t-test for rows with several search seeds, Welch's on their seed means where Bartlett's "
        "test rejects equal seed spreads (each row's seed variance then at least its repetitions' "
        f"training noise; docs/protocols.md §4.5); two-sided, α = {alpha:g}"
    )
    if use_holm:
        text += "; p-values Holm-adjusted over all comparisons of each table"
    else:
        text += "; NOT corrected for the number of comparisons (--no-correction)"
    return text + "."


def _points(metric: str) -> float:
    # Records hold fractions for the ranking metrics; tables show points.
    return 100.0 if METRICS.get(metric).higher_is_better else 1.0


def power_line(comps: Sequence[Comparison], use_holm: bool, alpha: float) -> str:
    """The table's minimum detectable difference at 80% power (median and range over its
    comparisons), at alpha and, when corrected, at Holm's strictest step alpha / m."""
    if not comps:
        return ""
    scale = _points(comps[0].metric)
    levels = [("uncorrected", alpha)] + (
        [(f"Holm's first step α/{len(comps)}", alpha / len(comps))] if use_holm else []
    )
    parts = []
    for label, level in levels:
        values = sorted(v for v in (c.min_detectable(level) for c in comps) if not math.isnan(v))
        if not values:
            continue
        mid = (
            values[len(values) // 2]
            if len(values) % 2
            else (values[len(values) // 2 - 1] + values[len(values) // 2]) / 2
        )
        parts.append(
            f"{label} (α = {level:.2g}): {scale * mid:.2f} points "
            f"(range {scale * values[0]:.2f}–{scale * values[-1]:.2f})"
        )
    if not parts:
        return "Minimum detectable difference: not computable (too few repetitions)."
    reps = sorted({c.n for c in comps} | {c.reference_n for c in comps})
    return (
        f"Minimum difference detectable with 80% power, median over the table's comparisons "
        f"({'/'.join(map(str, reps))} test values per row): " + "; ".join(parts) + "."
    )


def _diff_text(c: Comparison) -> str:
    scale = _points(c.metric)
    if math.isnan(c.diff_low):
        return signed(scale * c.diff)
    return f"{signed(scale * c.diff)} [{signed(scale * c.diff_low)}, {signed(scale * c.diff_high)}]"


def render_markdown(
    dataset: str,
    protocol: str,
    tables: dict[str, list[Comparison]],
    metric: str,
    use_holm: bool,
    alpha: float,
    show_diff: bool = False,
) -> str:
    """Markdown: one table per budget, rows = compared losses, columns = reference × mode; with
    ``show_diff`` each cell leads with the difference and its 95% interval in points."""
    spec = METRICS.get(metric)
    lines = [
        f"# Significance: `{dataset}`, protocol `{protocol}`, {spec.display_name}",
        "",
        _method(tables, use_holm, alpha),
        f"✓ significant, × not; ↑ the loss has the better mean {spec.display_name} than the reference "
        f"({'higher' if spec.higher_is_better else 'lower'} is better), ↓ the worse; "
        "n/a: no p-value (fewer than 2 repetitions, or identical constant values)."
        + (" Cells lead with loss − reference and its 95% interval." if show_diff else ""),
    ]
    if protocol == "mlrc":
        lines.append("Sep. = separated fold embeddings, Concat. = concatenated.")
    labels = dict(MODES)
    for budget, comps in tables.items():
        losses, cols, cells = _grid(comps)
        names = _names(comps)
        header = ["Loss"] + [
            f"vs {names[ref]} {labels.get(mode, mode.replace('_', ' '))}" for ref, mode in cols
        ]
        lines += [
            "",
            f"## Budget `{budget}`",
            "",
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for loss in losses:
            row = [names[loss]]
            for ref, mode in cols:
                c = cells.get((loss, ref, mode))
                if c is None:
                    row.append("–")
                else:
                    row.append(f"{_diff_text(c)} {c.cell}" if show_diff else c.cell)
            lines.append("| " + " | ".join(row) + " |")
        reps = {c.loss: (c.n, c.seeds) for c in comps} | {
            c.reference: (c.reference_n, c.reference_seeds) for c in comps
        }
        lines += [
            "",
            "Test values per loss: "
            + ", ".join(f"{k} {n}" + (f" ({s} search seeds)" if s > 1 else "") for k, (n, s) in reps.items())
            + ".",
            power_line(comps, use_holm, alpha),
        ]
    return "\n".join(lines) + "\n"


def render_csv(tables: dict[str, list[Comparison]]) -> str:
    """CSV, one line per comparison, with t, raw and (if computed) Holm-adjusted p-values."""
    fields = [
        "budget",
        "metric",
        "mode",
        "loss",
        "reference",
        "n",
        "reference_n",
        "mean",
        "reference_mean",
        "t",
        "p",
        "p_holm",
        "alpha",
        "se",
        "df",
        "diff_low",
        "diff_high",
        "scope",
        "reference_scope",
        "significant",
        "direction",
        "cell",
    ]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(fields)
    for comps in tables.values():
        for c in comps:
            d = c.as_dict()
            writer.writerow(
                ["" if d[f] is None else repr(d[f]) if isinstance(d[f], float) else d[f] for f in fields]
            )
    return buf.getvalue()


def render_json(
    dataset: str,
    protocol: str,
    tables: dict[str, list[Comparison]],
    metric: str,
    use_holm: bool,
    alpha: float,
) -> str:
    """JSON: the settings and every comparison (NaN as ``null``)."""
    data = {
        "schema": COMPARE_SCHEMA,
        "dataset": dataset,
        "protocol": protocol,
        "metric": metric,
        "test": _method(tables, use_holm, alpha),
        "alpha": alpha,
        "holm": use_holm,
        "budgets": [
            {
                "budget": b,
                "comparisons": [c.as_dict() for c in comps],
                "min_detectable_difference": power_line(comps, use_holm, alpha),
            }
            for b, comps in tables.items()
        ],
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


_TEX_SYMBOLS = {"✓": r"\checkmark", "×": r"\times", "↑": r"\uparrow", "↓": r"\downarrow", "=": "="}


def _tex_cell(c: Comparison) -> str:
    if not c.testable:
        return "n/a $" + _TEX_SYMBOLS[c.direction] + "$"
    return "$" + " ".join(_TEX_SYMBOLS[ch] for ch in c.cell) + "$"


def render_latex(
    dataset: str,
    protocol: str,
    tables: dict[str, list[Comparison]],
    metric: str,
    use_holm: bool,
    alpha: float,
) -> str:
    """A plain ``tabular`` per budget, cells like ``$\\checkmark \\uparrow$`` (needs amssymb)."""
    spec = METRICS.get(metric)
    labels = dict(MODES)
    lines = [
        f"% dmlbench significance table: dataset {dataset}, protocol {protocol}, metric {spec.display_name}.",
        "% " + _method(tables, use_holm, alpha),
        *["% " + power_line(comps, use_holm, alpha) for comps in tables.values()],
        "% \\checkmark needs \\usepackage{amssymb}.",
    ]
    for budget, comps in tables.items():
        losses, cols, cells = _grid(comps)
        names = _names(comps)
        lines += [
            "",
            f"% Budget {budget}",
            r"\begin{tabular}{l|" + "c" * len(cols) + "}",
            r"\hline",
            " & ".join(
                ["Loss"]
                + [
                    latex_escape(f"vs {names[ref]} {labels.get(mode, mode.replace('_', ' '))}")
                    for ref, mode in cols
                ]
            )
            + r" \\",
            r"\hline",
        ]
        for loss in losses:
            row = [latex_escape(names[loss])] + [
                _tex_cell(cells[(loss, ref, mode)]) if (loss, ref, mode) in cells else "--"
                for ref, mode in cols
            ]
            lines.append(" & ".join(row) + r" \\")
        lines += [r"\hline", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def render(
    fmt: str,
    dataset: str,
    protocol: str,
    tables: dict[str, list[Comparison]],
    metric: str,
    use_holm: bool,
    alpha: float,
    show_diff: bool = False,
) -> str:
    """The significance tables in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "md":
        return render_markdown(dataset, protocol, tables, metric, use_holm, alpha, show_diff)
    if fmt == "csv":
        return render_csv(tables)
    if fmt == "json":
        return render_json(dataset, protocol, tables, metric, use_holm, alpha)
    if fmt == "tex":
        return render_latex(dataset, protocol, tables, metric, use_holm, alpha)
    raise UnknownNameError("table format", fmt, list(FORMATS))
