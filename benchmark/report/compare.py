"""Significance tables like the Mean-Field paper's Tables 6–7 (docs/protocols.md §4.4).

For one metric, every compared loss is tested against every reference loss in both evaluation
modes with Welch's t-test on the per-repetition test values. A cell reads ``✓↑`` (significantly
better), ``×↑`` (better, not significant), ``✓↓`` / ``×↓`` (worse), ``✓=`` / ``×=`` (equal
means); ``n/a`` with the arrow when no p-value exists (fewer than two repetitions, or two identical
constant samples). "Better" respects the metric's ``higher_is_better``. Optionally the p-values
of all comparisons of a table (one budget) are Holm-adjusted before the decision ``p <= alpha``.
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
from benchmark.records import RunRecord, latest_per_loss
from benchmark.report.leaderboard import MODES, Leaderboard, RecordLike, record_modes
from benchmark.report.tables import latex_escape
from benchmark.stats.intervals import holm, welch_t_test

FORMATS = ("md", "csv", "json", "tex")
COMPARE_SCHEMA = "dmlbench.compare/1"
DEFAULT_ALPHA = 0.05


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
    """A bare comparison of two samples (names and metric left blank); for tests and scripts."""
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
    values = record.test.per_rep.get(mode, {}).get(metric)
    if values is None:
        have = ", ".join(record.test.metrics) or "(none)"
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
    use_holm: bool = False,
    alpha: float = DEFAULT_ALPHA,
) -> list[Comparison]:
    """All comparisons of one table: compared losses × references × modes (newest record per loss).

    ``losses=None`` compares every loss of the budget that is not a reference. A reference or
    loss without a record raises :class:`DmlbenchError` listing the losses that have one.
    """
    spec = METRICS.get(metric)
    by_loss = {r.loss: r for r in latest_per_loss(records)}
    wanted = list(losses) if losses else [name for name in by_loss if name not in references]
    missing = [name for name in [*references, *wanted] if name not in by_loss]
    if missing:
        raise DmlbenchError(
            f"No {budget!r}-budget record for {', '.join(repr(m) for m in missing)}; "
            f"losses with records: {', '.join(by_loss) or '(none)'}."
        )
    if not wanted:
        raise DmlbenchError(
            f"Nothing to compare: every loss with a {budget!r}-budget record is a reference "
            f"({', '.join(by_loss)})."
        )
    out: list[Comparison] = []
    modes = record_modes(list(by_loss.values()))
    for name in wanted:
        for ref in references:
            if ref == name:
                continue
            for mode, _ in modes:
                if not all(by_loss[x].test.has_mode(mode) for x in (name, ref)):
                    continue  # e.g. cbir's two-stage mode of a loss without class anchors
                a = _per_rep(by_loss[name], mode, metric)
                b = _per_rep(by_loss[ref], mode, metric)
                t, p = welch_t_test(a, b)
                out.append(
                    Comparison(
                        budget=budget,
                        metric=metric,
                        mode=mode,
                        loss=name,
                        loss_name=by_loss[name].loss_display_name,
                        reference=ref,
                        reference_name=by_loss[ref].loss_display_name,
                        n=len(a),
                        reference_n=len(b),
                        mean=_mean(a),
                        reference_mean=_mean(b),
                        t=t,
                        p=p,
                        p_holm=None,
                        alpha=alpha,
                        higher_is_better=spec.higher_is_better,
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
    use_holm: bool = False,
    alpha: float = DEFAULT_ALPHA,
) -> dict[str, list[Comparison]]:
    """:func:`compare_tables` over a leaderboard's budgets (the newest record per loss it chose)."""
    by_budget = {s.budget: list(s.chosen) for s in lb.sections}
    return compare_tables(by_budget, references, losses, metric, use_holm=use_holm, alpha=alpha)


def compare_tables(
    by_budget: Mapping[str, Sequence[RecordLike]],
    references: Sequence[str],
    losses: Sequence[str] | None,
    metric: str,
    *,
    use_holm: bool = False,
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
        "Welch's t-test on the per-repetition test values "
        f"(scipy.stats.ttest_ind, equal_var=False), two-sided, α = {alpha:g}"
    )
    if use_holm:
        text += "; p-values Holm-adjusted over all comparisons of each table"
    return text + "."


def render_markdown(
    dataset: str,
    protocol: str,
    tables: dict[str, list[Comparison]],
    metric: str,
    use_holm: bool,
    alpha: float,
) -> str:
    """Markdown: one table per budget, rows = compared losses, columns = reference × mode."""
    spec = METRICS.get(metric)
    lines = [
        f"# Significance: `{dataset}`, protocol `{protocol}`, {spec.display_name}",
        "",
        _method(tables, use_holm, alpha),
        f"✓ significant, × not; ↑ the loss has the better mean {spec.display_name} than the reference "
        f"({'higher' if spec.higher_is_better else 'lower'} is better), ↓ the worse; "
        "n/a: no p-value (fewer than 2 repetitions, or identical constant values).",
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
            row = [names[loss]] + [
                cells[(loss, ref, mode)].cell if (loss, ref, mode) in cells else "–" for ref, mode in cols
            ]
            lines.append("| " + " | ".join(row) + " |")
        reps = {c.loss: c.n for c in comps} | {c.reference: c.reference_n for c in comps}
        lines += ["", "Repetitions: " + ", ".join(f"{k} {v}" for k, v in reps.items()) + "."]
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
        "test": "welch",
        "alpha": alpha,
        "holm": use_holm,
        "budgets": [
            {"budget": b, "comparisons": [c.as_dict() for c in comps]} for b, comps in tables.items()
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
) -> str:
    """The significance tables in ``fmt`` (one of :data:`FORMATS`)."""
    if fmt == "md":
        return render_markdown(dataset, protocol, tables, metric, use_holm, alpha)
    if fmt == "csv":
        return render_csv(tables)
    if fmt == "json":
        return render_json(dataset, protocol, tables, metric, use_holm, alpha)
    if fmt == "tex":
        return render_latex(dataset, protocol, tables, metric, use_holm, alpha)
    raise UnknownNameError("table format", fmt, list(FORMATS))
