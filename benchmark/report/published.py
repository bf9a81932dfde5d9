"""Published numbers beside our own (``dmlbench report/compare --published``; docs/protocols.md §8).

The papers' tables live as data in ``results/published/*.tsv`` (format ``dmlbench.published/1``:
a ``# key: value`` header block naming the paper, source, protocol and trunk, then one TSV row
per published cell). This module parses them strictly, joins them with a dataset's run records on
(dataset, protocol, mode, embedding size, metric, loss) and renders a separate Markdown section:
published rows never enter the leaderboard's own rows, its bold best-per-column or its tests.

Each match is an equivalence test (:mod:`benchmark.stats.equivalence`, TOST at alpha 0.05): the
difference ours - published with both standard errors in quadrature (a published half-width is
a 95% t-interval over :data:`PUBLISHED_REPS` repetitions; a cell published without one counts as
exact), verdict ``consistent``, ``differs`` or ``inconclusive``. The margin per metric is derived
from the shipped tables (:func:`equivalence_margins`), not typed here: the largest margin (in
steps of 0.05 points) at which fewer than 10% of the pairs of *different* losses in one paper's
table come out consistent, so that "consistent" tells one loss's number from another's.
:func:`confusion` validates it on the published tables (docs/protocols.md §8).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.errors import DmlbenchError
from benchmark.records import RunRecord, as_record, replicates_per_loss
from benchmark.report.numbers import signed
from benchmark.stats.equivalence import VERDICTS, Equivalence, combined, se_from_half_width, tost

FORMAT = "dmlbench.published/1"
COLUMNS = (
    "table",
    "protocol",
    "dataset",
    "embedding_dim",
    "mode",
    "published_name",
    "loss",
    "metric",
    "value",
    "pm",
)
REQUIRED_HEADER = ("format", "paper", "source", "tables", "protocol", "trunk", "embedding", "units")
NOT_REGISTERED_MARK = "-"
UNTRAINED = "untrained"
# Losses of the published tables that dmlbench does not implement, and why they are left out.
NOT_REGISTERED = {
    "Margin/class": "Margin loss with one learnable β per class; dmlbench's `margin` learns one β",
    "FastAP": "not implemented in dmlbench",
}
#: Test repetitions behind a published value: both papers' headers (MLRC's protocol and the
#: Mean-Field paper's Tables 2-5) state 10.
PUBLISHED_REPS = 10
#: The TOST level, and the largest share of different-loss pairs the margin may call consistent.
EQUIVALENCE_ALPHA = 0.05
MAX_CROSS_LOSS_CONSISTENT = 0.10
MARGIN_STEP = 0.05
# The repository's own tables, used when ``<results-dir>/published`` does not exist.
SHIPPED_DIR = Path(__file__).resolve().parents[2] / "results" / "published"


@dataclass(frozen=True)
class PublishedValue:
    """One published cell, in the paper's units (percent; epochs for ``epochs_to_best``)."""

    paper: str  # file stem, e.g. "mlrc2020"
    title: str  # the header's ``paper`` line
    table: str
    protocol: str
    dataset: str
    embedding_dim: int
    mode: str
    published_name: str
    loss: str  # registry name, ``untrained`` or ``-``
    metric: str
    value: float
    pm: float | None  # published 95% half-width, None when not published


@dataclass(frozen=True)
class PublishedTable:
    """One paper's file: its header block and its cells."""

    path: Path
    header: dict[str, str]
    values: tuple[PublishedValue, ...]


def _number(text: str, what: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise DmlbenchError(f"{where}: {what} {text!r} is not a number.") from None
    if not math.isfinite(value):
        raise DmlbenchError(f"{where}: {what} {text!r} is not finite.")
    return value


def parse_table(path: Path) -> PublishedTable:
    """Parse one ``dmlbench.published/1`` file; errors name the file and line."""
    header: dict[str, str] = {}
    body: list[str] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        if line.startswith("#") and not body:
            key, sep, value = line[1:].partition(":")
            if not sep or not key.strip():
                raise DmlbenchError(f"{path}:{number}: header lines read '# key: value'.")
            key = key.strip()
            # A key may repeat (e.g. several ``omitted`` notes): keep every value.
            header[key] = f"{header[key]}; {value.strip()}" if key in header else value.strip()
        elif line.strip():
            body.append(line)
    missing = [k for k in REQUIRED_HEADER if k not in header]
    if missing:
        raise DmlbenchError(f"{path}: header lacks {', '.join(missing)}.")
    if not header["format"].startswith(FORMAT):
        raise DmlbenchError(f"{path}: format {header['format']!r}, expected {FORMAT}.")
    reader = csv.reader(body, delimiter="\t")
    head = next(reader, None)
    if head is None or tuple(head) != COLUMNS:
        raise DmlbenchError(f"{path}: the column line must be {chr(9).join(COLUMNS)!r}.")
    values = []
    first_row = len(lines) - len(body) + 2
    for offset, row in enumerate(reader):
        where = f"{path}:{first_row + offset}"
        if len(row) != len(COLUMNS):
            raise DmlbenchError(f"{where}: {len(row)} fields, expected {len(COLUMNS)}.")
        cell = dict(zip(COLUMNS, row, strict=True))
        dim = _number(cell["embedding_dim"], "embedding_dim", where)
        if dim != int(dim) or dim <= 0:
            raise DmlbenchError(
                f"{where}: embedding_dim {cell['embedding_dim']!r} is not a positive integer."
            )
        pm = _number(cell["pm"], "pm", where) if cell["pm"] else None
        values.append(
            PublishedValue(
                paper=path.stem,
                title=header["paper"],
                table=cell["table"],
                protocol=cell["protocol"],
                dataset=cell["dataset"],
                embedding_dim=int(dim),
                mode=cell["mode"],
                published_name=cell["published_name"],
                loss=cell["loss"],
                metric=cell["metric"],
                value=_number(cell["value"], "value", where),
                pm=pm,
            )
        )
    return PublishedTable(path, header, tuple(values))


def published_dir(results_dir: Path) -> Path:
    """``<results_dir>/published`` when it exists, else the tables shipped with the repository."""
    own = results_dir / "published"
    return own if own.is_dir() else SHIPPED_DIR


def load_published(folder: Path) -> list[PublishedTable]:
    """Every ``*.tsv`` table in ``folder``, sorted by file name."""
    if not folder.is_dir():
        raise DmlbenchError(f"No published tables: {folder} does not exist.")
    return [parse_table(p) for p in sorted(folder.glob("*.tsv"))]


# -- tolerance ----------------------------------------------------------------------------------


def _key(v: PublishedValue) -> tuple[str, str, str, int, str, str]:
    return (v.protocol, v.dataset, v.mode, v.embedding_dim, v.loss, v.metric)


def reproduction_tolerance(tables: Sequence[PublishedTable]) -> dict[str, float]:
    """Per metric: the largest |difference| between two papers' values of the same cell (a
    description of the between-lab spread; the verdicts use :func:`equivalence_margins`)."""
    out: dict[str, float] = {}
    for a, b in same_loss_pairs(tables):
        out[a.metric] = max(out.get(a.metric, 0.0), abs(a.value - b.value))
    return out


def published_se(v: PublishedValue) -> float:
    """The standard error behind a published value (0 when no half-width was published)."""
    return 0.0 if v.pm is None else se_from_half_width(v.pm, PUBLISHED_REPS)


def _cells(tables: Sequence[PublishedTable]) -> dict[tuple[str, str, str, int, str], list[PublishedValue]]:
    by: dict[tuple[str, str, str, int, str], list[PublishedValue]] = {}
    for t in tables:
        for v in t.values:
            if v.loss not in (NOT_REGISTERED_MARK, UNTRAINED):
                by.setdefault((v.protocol, v.dataset, v.mode, v.embedding_dim, v.metric), []).append(v)
    return by


def same_loss_pairs(tables: Sequence[PublishedTable]) -> list[tuple[PublishedValue, PublishedValue]]:
    """Pairs of two papers' values of the same cell and loss (independent reproductions)."""
    return [
        (a, b)
        for vs in _cells(tables).values()
        for i, a in enumerate(vs)
        for b in vs[i + 1 :]
        if a.loss == b.loss and a.paper != b.paper
    ]


def cross_loss_pairs(tables: Sequence[PublishedTable]) -> list[tuple[PublishedValue, PublishedValue]]:
    """Pairs of different losses in the same paper's table cell (what a check must tell apart)."""
    return [
        (a, b)
        for vs in _cells(tables).values()
        for i, a in enumerate(vs)
        for b in vs[i + 1 :]
        if a.loss != b.loss and a.paper == b.paper
    ]


def pair_test(a: PublishedValue, b: PublishedValue, margin: float) -> Equivalence:
    """TOST of two published values (each over :data:`PUBLISHED_REPS` repetitions)."""
    se, df = combined(published_se(a), PUBLISHED_REPS - 1, published_se(b), PUBLISHED_REPS - 1)
    return tost(a.value - b.value, se, df, margin, EQUIVALENCE_ALPHA)


def equivalence_margins(tables: Sequence[PublishedTable]) -> dict[str, float]:
    """Per metric: the largest margin (a multiple of :data:`MARGIN_STEP`) at which fewer than
    :data:`MAX_CROSS_LOSS_CONSISTENT` of the cross-loss pairs test consistent. Metrics without
    cross-loss pairs get none (no verdict)."""
    pairs: dict[str, list[tuple[PublishedValue, PublishedValue]]] = {}
    for a, b in cross_loss_pairs(tables):
        pairs.setdefault(a.metric, []).append((a, b))
    out: dict[str, float] = {}
    for metric, ps in sorted(pairs.items()):
        best = None
        for k in range(1, 401):
            margin = round(k * MARGIN_STEP, 10)
            share = sum(pair_test(a, b, margin).verdict == "consistent" for a, b in ps) / len(ps)
            if share >= MAX_CROSS_LOSS_CONSISTENT:
                break
            best = margin
        if best is not None:
            out[metric] = best
    return out


def confusion(
    tables: Sequence[PublishedTable], margins: Mapping[str, float] | None = None
) -> dict[str, dict[str, dict[str, int]]]:
    """Per metric, verdict counts of the same-loss (two papers) and the cross-loss (one paper)
    pairs at the metric's margin: the validation of the rule on the published tables."""
    margins = equivalence_margins(tables) if margins is None else margins
    out: dict[str, dict[str, dict[str, int]]] = {}
    for kind, pairs in (
        ("same loss", same_loss_pairs(tables)),
        ("different losses", cross_loss_pairs(tables)),
    ):
        for a, b in pairs:
            if a.metric not in margins:
                continue
            verdict = pair_test(a, b, margins[a.metric]).verdict
            counts = out.setdefault(a.metric, {}).setdefault(kind, dict.fromkeys(VERDICTS, 0))
            counts[verdict] += 1
    return out


# -- join ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Match:
    """Our value of one (loss, mode, metric) beside one published value."""

    loss: str
    loss_name: str
    mode: str
    embedding_dim: int
    metric: str
    ours: float  # percent (or the metric's own units for epochs)
    ours_hw: float  # 95% half-width, NaN when unknown
    published: PublishedValue
    #: The metric's equivalence margin (None: no verdict).
    margin: float | None
    #: Standard error and degrees of freedom of ours (NaN when unknown).
    ours_se: float = math.nan
    ours_df: float = math.nan

    @property
    def difference(self) -> float:
        return self.ours - self.published.value

    @property
    def equivalence(self) -> Equivalence | None:
        """The TOST of ours vs published at the margin (None without a margin)."""
        if self.margin is None:
            return None
        se, df = combined(self.ours_se, self.ours_df, published_se(self.published), PUBLISHED_REPS - 1)
        return tost(self.difference, se, df, self.margin, EQUIVALENCE_ALPHA)

    @property
    def verdict(self) -> str | None:
        e = self.equivalence
        return None if e is None else e.verdict


def _mode_dims(record: RunRecord) -> dict[str, int]:
    """Embedding size of each evaluation mode of a record (MLRC: concatenated = folds × dim)."""
    dim, folds = record.embedding_dim, record.n_folds
    if dim is None:
        return {}
    out = {mode: dim for mode, _ in record.modes} if record.named_modes else {}
    out.setdefault("separated", dim)
    if folds is not None:
        out.setdefault("concatenated", dim * folds)
    return out


def _scale(metric: str) -> float:
    # Records hold fractions for the ranking metrics and plain counts for epochs.
    return 1.0 if metric == "epochs_to_best" else 100.0


#: Our ``epochs_to_best`` counts from 1 (epochs trained up to the best); the Mean-Field authors'
#: Table 2 "Epoch" is their loop's 0-based index (docs/protocols.md §2.5), so ours is shifted by
#: this before the comparison.
EPOCH_OFFSET = {"epochs_to_best": -1.0}


def _ours(
    replicates: Sequence[RunRecord], mode: str, metric: str, estimates: Mapping[str, Any]
) -> tuple[float, float, float, float] | None:
    """(value, half-width, se, df) of ours in the published units: from the leaderboard's row
    model (``estimates``, the column's) when the records hold per-rep values, else the stored
    interval of the newest record."""
    import scipy.stats

    scale = _scale(metric)
    est = estimates.get(replicates[0].loss)
    if est is not None and not math.isnan(est.mean):
        se = math.sqrt(est.var_mean) if not math.isnan(est.var_mean) else math.nan
        return scale * est.mean + EPOCH_OFFSET.get(metric, 0.0), scale * est.half_width, scale * se, est.df
    record = max(replicates, key=lambda r: r.created)
    test = record.test
    cell = test["summary"].get(mode, {}).get(metric)
    if cell is None and (not record.named_modes or record.has_mode(mode)):
        cell = test.get("extra_summary", {}).get(metric)
    if cell is None or cell["mean"] is None:
        return None
    hw = math.nan if cell["half_width"] is None else scale * cell["half_width"]
    n = test["reps"]
    se = hw / float(scipy.stats.t.ppf(0.975, n - 1)) if n >= 2 and not math.isnan(hw) else math.nan
    return scale * cell["mean"] + EPOCH_OFFSET.get(metric, 0.0), hw, se, float(n - 1)


def join(
    records: Sequence[RunRecord | Mapping[str, Any]],
    tables: Sequence[PublishedTable],
    dataset: str,
    protocol: str,
    metrics: Iterable[str] | None = None,
) -> list[Match]:
    """Every (record loss, mode, metric) with a published value of the same dataset, protocol,
    mode, embedding size and metric; the untrained row is joined with published ``untrained``
    rows (MLRC's Pretrained). ``records`` are one budget's; each loss's seeds are folded as in the
    leaderboard."""
    from benchmark.report.leaderboard import column_estimates, untrained_records, untrained_row

    margins = equivalence_margins(tables)
    wanted = None if metrics is None else set(metrics)
    replicates = replicates_per_loss(records)
    names = sorted(replicates)
    latest = {name: max(rs, key=lambda r: r.created) for name, rs in replicates.items()}
    published = [
        v
        for t in tables
        for v in t.values
        if v.dataset == dataset and v.protocol == protocol and (wanted is None or v.metric in wanted)
    ]
    column_cache: dict[tuple[str, str], dict[str, Any]] = {}

    def estimates(mode: str, metric: str) -> dict[str, Any]:
        if (mode, metric) not in column_cache:
            have = [
                n for n in names if all(r.test["per_rep"].get(mode, {}).get(metric) for r in replicates[n])
            ]
            values = column_estimates([replicates[n] for n in have], mode, metric) if have else []
            column_cache[(mode, metric)] = dict(zip(have, values, strict=True))
        return column_cache[(mode, metric)]

    out: list[Match] = []
    for loss in names:
        r = latest[loss]
        dims = _mode_dims(r)
        for v in published:
            if v.loss != loss or dims.get(v.mode) != v.embedding_dim:
                continue
            ours = _ours(replicates[loss], v.mode, v.metric, estimates(v.mode, v.metric))
            if ours is not None:
                value, hw, se, df = ours
                out.append(
                    Match(
                        loss, r.loss_display_name, v.mode, v.embedding_dim, v.metric, value, hw, v,
                        margins.get(v.metric), se, df,
                    )
                )  # fmt: skip
    if latest:  # the untrained row: the leaderboard's (over seeds, with an interval when several)
        section = [r for rs in replicates.values() for r in rs]
        dims = _mode_dims(untrained_records(section)[1][0])
        for v in published:
            if v.loss != UNTRAINED or dims.get(v.mode) != v.embedding_dim:
                continue
            e = untrained_row(section, [(v.mode, v.metric)]).estimates[(v.mode, v.metric)]
            if math.isnan(e.mean):
                continue
            scale = _scale(v.metric)
            se = scale * math.sqrt(e.var_mean) if not math.isnan(e.var_mean) else math.nan
            out.append(
                Match(
                    UNTRAINED, "Untrained", v.mode, v.embedding_dim, v.metric, scale * e.mean,
                    scale * e.half_width, v, margins.get(v.metric), se, e.df,
                )
            )  # fmt: skip
    return out


# -- rendering ----------------------------------------------------------------------------------


def _metric_label(metric: str) -> str:
    if metric == "epochs_to_best":
        return "epochs to best"
    try:
        from benchmark.metrics import METRICS

        return METRICS.get(metric).display_name
    except DmlbenchError:
        return metric


def _fmt(value: float, hw: float | None) -> str:
    if hw is None or math.isnan(hw):
        return f"{value:.2f}"
    return f"{value:.2f} ± {hw:.2f}"


def _verdict(m: Match) -> str:
    e = m.equivalence
    if e is None:
        return "no margin"
    if math.isnan(e.low):
        return f"{e.verdict} (our interval unknown)"
    return f"{e.verdict} (90% CI {signed(e.low)}, {signed(e.high)}; margin ±{e.margin:.2f})"


def coverage(tables: Sequence[PublishedTable]) -> list[str]:
    """``dataset/protocol`` pairs that some published table covers."""
    return sorted({f"{v.dataset}/{v.protocol}" for t in tables for v in t.values})


def render_markdown(
    dataset: str,
    protocol: str,
    by_budget: Mapping[str, Sequence[RunRecord | Mapping[str, Any]]],
    tables: Sequence[PublishedTable],
    folder: Path,
    metrics: Iterable[str] | None = None,
    losses: Iterable[str] | None = None,
) -> str:
    """The "published numbers beside ours" section (Markdown), one table per budget.

    ``losses`` limits the rows (e.g. to the losses ``compare`` tests). A dataset/protocol no
    table covers yields a short note saying so, not an error.
    """
    wanted_metrics = None if metrics is None else list(metrics)
    keep = None if losses is None else set(losses) | {UNTRAINED}
    lines = ["", f"# Published numbers beside ours: `{dataset}`, protocol `{protocol}`", ""]
    if f"{dataset}/{protocol}" not in coverage(tables):
        lines.append(
            f"No published table covers dataset `{dataset}` with protocol `{protocol}` "
            f"(tables in {folder} cover: {', '.join(coverage(tables)) or 'nothing'})."
        )
        return "\n".join(lines) + "\n"
    margins = equivalence_margins(tables)
    lines += [
        f"Published values from {folder} ({', '.join(t.path.name for t in tables)}); they are kept out of "
        "the leaderboard's rows, its bold best values and its significance tests.",
        "Δ = ours − published (points). Verdict: two one-sided tests (TOST, α = 0.05) of |Δ| < margin, "
        "our and the published standard errors in quadrature (a published ± is a 95% t-interval over "
        f"{PUBLISHED_REPS} repetitions; a value published without one counts as exact): consistent "
        "(the 90% interval of Δ lies inside ±margin), differs (it lies beyond), inconclusive (neither).",
        "Margin per metric, derived from the published tables (the largest at which fewer than 10% of "
        "the pairs of different losses in one paper's table test consistent): "
        + (", ".join(f"{_metric_label(m)} {t:.2f}" for m, t in sorted(margins.items())) or "none")
        + " (docs/protocols.md §8).",
    ]
    titles = {t.path.stem: t.header["paper"] for t in tables}
    for budget in sorted(by_budget):
        records = [as_record(r) for r in by_budget[budget]]
        matches = [
            m
            for m in join(records, tables, dataset, protocol, wanted_metrics)
            if keep is None or m.loss in keep
        ]
        lines += ["", f"## Budget `{budget}`", ""]
        deviating = sorted({d.key for r in records for d in r.deviations})
        if deviating:
            lines.append(
                f"These records deviate from the paper protocol ({', '.join(f'`{k}`' for k in deviating)}): "
                "the comparison is indicative only, not a reproduction."
            )
            lines.append("")
        if not matches:
            lines.append("No record matches a published cell (same loss, mode, embedding size and metric).")
            continue
        lines += [
            "| Loss | Mode | Metric | Ours | Paper | Table | Published | Δ | Verdict |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        modes = {"separated": 0, "concatenated": 1}
        for m in sorted(
            matches,
            key=lambda m: (m.loss != UNTRAINED, m.loss, modes.get(m.mode, 2), m.metric, m.published.paper),
        ):
            v = m.published
            lines.append(
                f"| {m.loss_name} | {m.mode} ({m.embedding_dim}-d) | {_metric_label(m.metric)} | "
                f"{_fmt(m.ours, m.ours_hw)} | {v.paper} | {v.table} | {_fmt(v.value, v.pm)} | "
                f"{signed(m.difference)} | {_verdict(m)} |"
            )
        matched = {m.loss for m in matches}
        unmatched = sorted(
            {
                v.published_name
                for t in tables
                for v in t.values
                if v.dataset == dataset and v.protocol == protocol and v.loss not in matched
            }
        )
        if unmatched:
            lines += ["", "Published but not in these records: " + ", ".join(unmatched) + "."]
    lines += ["", "Papers: " + "; ".join(f"{k} = {v}" for k, v in sorted(titles.items())) + "."]
    return "\n".join(lines) + "\n"


def published_section(
    results_dir: Path,
    dataset: str,
    protocol: str,
    by_budget: Mapping[str, Sequence[RunRecord | Mapping[str, Any]]],
    metrics: Iterable[str] | None = None,
    losses: Iterable[str] | None = None,
) -> str:
    """Load the tables for ``results_dir`` and render the section (the CLI's entry point)."""
    folder = published_dir(results_dir)
    return render_markdown(dataset, protocol, by_budget, load_published(folder), folder, metrics, losses)
