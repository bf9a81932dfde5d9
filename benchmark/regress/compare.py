"""Pure comparison logic of ``dmlbench regress``: tolerances from seed spread, per-metric verdicts,
the result table and the per-loss regression diff. No training and no file access here."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.stats

from benchmark.errors import DmlbenchError


def tolerance_from_seeds(values: Sequence[float], quantile: float, floor: float, k: int = 1) -> float:
    """Allowed drop of a ``k``-seed mean below its baseline: ``max(floor, t_{n-1}(q) * sqrt(2/k) * s)``.

    ``s`` is the sample standard deviation of the metric over the ``n`` baseline seeds. A check
    averages ``k`` seeds and compares with the baseline's average of the same ``k`` seeds; after a
    change that redraws the random streams, the difference of two independent ``k``-seed means has
    standard deviation ``sqrt(2/k) * sigma``; with ``sigma`` estimated by ``s`` from ``n`` values,
    the difference over ``sqrt(2/k) s`` follows Student's t with ``n - 1`` degrees of freedom. So a
    change no worse than "drawing other seeds" (a reordered random stream, a library's different
    kernel numerics) drops the value by more than the tolerance with probability ``1 - quantile``.
    Averaging ``k`` seeds narrows the tolerance by ``sqrt(k)``: smaller real drops are caught.
    """
    if len(values) < 2:
        raise DmlbenchError(f"A tolerance needs the metric from at least 2 seeds, got {len(values)}.")
    if not 0.5 < quantile < 1:
        raise DmlbenchError(f"tolerance quantile must be in (0.5, 1), got {quantile}.")
    if k < 1:
        raise DmlbenchError(f"A check averages at least 1 seed, got k={k}.")
    sd = float(np.std(np.asarray(values, dtype=np.float64), ddof=1))
    t = float(scipy.stats.t.ppf(quantile, len(values) - 1))
    return max(floor, t * math.sqrt(2.0 / k) * sd)


class Status(enum.Enum):
    IDENTICAL = "OK"  # bit-identical to the baseline (expected on the baseline's environment)
    WITHIN = "OK (drift)"  # different but within tolerance
    IMPROVED = "IMPROVED"  # above the baseline by more than the tolerance: not a failure
    REGRESSED = "REGRESSED"  # below the baseline by more than the tolerance: exit 1
    FAILED = "FAILED"  # training diverged / no value: counts as a regression
    CHANGED = "CHANGED"  # --exact: any difference from the baseline fails

    @property
    def fails(self) -> bool:
        return self in (Status.REGRESSED, Status.FAILED, Status.CHANGED)


def verdict(baseline: float, now: float | None, tolerance: float, exact: bool = False) -> Status:
    """Status of one metric (higher is better). ``now`` None or NaN means the training failed;
    ``exact`` makes any difference a failure (for the baseline's own environment)."""
    if now is None or not math.isfinite(now):
        return Status.FAILED
    delta = now - baseline
    if delta == 0.0:
        return Status.IDENTICAL
    if exact:
        return Status.CHANGED
    if delta < -tolerance:
        return Status.REGRESSED
    if delta > tolerance:
        return Status.IMPROVED
    return Status.WITHIN


@dataclass(frozen=True)
class Row:
    """One (case, metric) comparison."""

    case: str
    metric: str
    baseline: float
    now: float | None
    tolerance: float
    status: Status
    note: str = ""

    @property
    def delta(self) -> float | None:
        return None if self.now is None else self.now - self.baseline


def compare_case(
    case: str,
    baseline: Mapping[str, tuple[float, float]],
    now: Mapping[str, float] | None,
    failure: str | None = None,
    exact: bool = False,
) -> list[Row]:
    """Rows for one case; ``baseline`` maps metric -> (value, tolerance); ``now`` None = it failed."""
    rows = []
    for metric, (value, tol) in baseline.items():
        current = None if now is None else now.get(metric)
        status = verdict(value, current, tol, exact)
        rows.append(Row(case, metric, value, current, tol, status, failure or ""))
    return rows


def _fmt(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.4f}" if signed else f"{x:.4f}"


def render_table(rows: Sequence[Row]) -> str:
    """A fixed-width table: case, metric, baseline, now, delta, tolerance, status."""
    header = ("case", "metric", "baseline", "now", "delta", "tolerance", "status")
    body = [
        (
            r.case,
            r.metric,
            _fmt(r.baseline),
            _fmt(r.now),
            _fmt(r.delta, signed=True),
            f"±{r.tolerance:.4f}",
            r.status.value + (f" ({r.note})" if r.note else ""),
        )
        for r in rows
    ]
    widths = [max(len(str(line[i])) for line in [header, *body]) for i in range(len(header))]
    numeric = {2, 3, 4, 5}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in numeric else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *(line(b) for b in body)])


def regression_diff(rows: Sequence[Row], provenance: Mapping[str, str] | None = None) -> str:
    """The per-loss diff of failing rows, grouped by case, plus where the baseline came from."""
    failing = [r for r in rows if r.status.fails]
    if not failing:
        return ""
    out = [f"REGRESSION in {len({r.case for r in failing})} case(s):"]
    for case in dict.fromkeys(r.case for r in failing):
        out.append(f"  {case}:")
        for r in (r for r in failing if r.case == case):
            if r.status is Status.FAILED:
                out.append(f"    {r.metric}: baseline {r.baseline:.4f}, now FAILED ({r.note or 'no value'})")
            elif r.status is Status.CHANGED:
                assert r.now is not None and r.delta is not None  # CHANGED rows always have a value
                out.append(f"    {r.metric}: {r.baseline!r} -> {r.now!r} ({r.delta:+.2e}; --exact)")
            else:
                assert r.now is not None and r.delta is not None  # REGRESSED rows always have a value
                out.append(
                    f"    {r.metric}: {r.baseline:.4f} -> {r.now:.4f} ({r.delta:+.4f}; allowed drop "
                    f"{r.tolerance:.4f}, {abs(r.delta) / r.tolerance:.1f}x the tolerance)"
                    if r.tolerance > 0
                    else f"    {r.metric}: {r.baseline:.4f} -> {r.now:.4f} ({r.delta:+.4f})"
                )
        if provenance and case in provenance:
            out.append(f"    baseline: {provenance[case]}")
    cases = ",".join(dict.fromkeys(r.case for r in failing))
    out.append(f"If the change is intended, record it with: dmlbench regress --update --cases {cases}")
    return "\n".join(out)


def improvement_note(rows: Sequence[Row]) -> str:
    """A loud note for metrics above baseline + tolerance (not a failure)."""
    improved = [r for r in rows if r.status is Status.IMPROVED]
    if not improved:
        return ""
    cases = list(dict.fromkeys(r.case for r in improved))
    return (
        f"IMPROVED beyond tolerance in {len(cases)} case(s): {', '.join(cases)}. This does not fail; "
        "if the change is intended, record it with: dmlbench regress --update --cases " + ",".join(cases)
    )


def summary_line(rows: Sequence[Row]) -> str:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.status.name.lower()] = counts.get(r.status.name.lower(), 0) + 1
    order = ["identical", "within", "improved", "changed", "regressed", "failed"]
    return f"{len(rows)} checks: " + ", ".join(f"{counts[k]} {k}" for k in order if k in counts)
