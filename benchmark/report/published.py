"""Published numbers beside our own (``dmlbench report/compare --published``; docs/protocols.md §8).

The papers' tables live as data in ``results/published/*.tsv`` (format ``dmlbench.published/1``:
a ``# key: value`` header block naming the paper, source, protocol and trunk, then one TSV row
per published cell). This module parses them strictly, joins them with a dataset's run records on
(dataset, protocol, mode, embedding size, metric, loss) and renders a separate Markdown section:
published rows never enter the leaderboard's own rows, its bold best-per-column or its tests.

Reproduction tolerance, per metric: the largest difference between two independent published
runs of the same protocol, i.e. between the MLRC and Mean-Field tables on every (dataset, mode,
loss) cell they share (MAP@R: 1.50 points, MS on CUB 512-d, 24.70 vs 26.20). Our value lies
*within* when ``|ours - published| <= tolerance + our 95% half-width + the published ± (if
any)``: the first term is the between-lab spread of the protocol, the other two are the sampling
uncertainty of each side. The tolerance is computed from the shipped tables, not typed here.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.errors import DmlbenchError
from benchmark.records import RunRecord, as_record, latest_per_loss

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
    """Per metric: the largest |difference| between two papers' values of the same cell.

    Cells are matched on (protocol, dataset, mode, embedding size, loss, metric) with a
    registered loss; metrics no two papers share get no tolerance (no verdict is given).
    """
    by_key: dict[tuple[str, str, str, int, str, str], dict[str, float]] = {}
    for t in tables:
        for v in t.values:
            if v.loss != NOT_REGISTERED_MARK:
                by_key.setdefault(_key(v), {})[v.paper] = v.value
    out: dict[str, float] = {}
    for key, per_paper in by_key.items():
        if len(per_paper) > 1:
            spread = max(per_paper.values()) - min(per_paper.values())
            out[key[-1]] = max(out.get(key[-1], 0.0), spread)
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
    tolerance: float | None

    @property
    def difference(self) -> float:
        return self.ours - self.published.value

    @property
    def allowed(self) -> float | None:
        """The largest |difference| still within reproduction tolerance (None: no verdict)."""
        if self.tolerance is None:
            return None
        hw = 0.0 if math.isnan(self.ours_hw) else self.ours_hw
        return self.tolerance + hw + (self.published.pm or 0.0)

    @property
    def within(self) -> bool | None:
        allowed = self.allowed
        return None if allowed is None else abs(self.difference) <= allowed + 1e-9


def _mode_dims(record: RunRecord) -> dict[str, int]:
    """Embedding size of each evaluation mode of a record (MLRC: concatenated = folds × dim)."""
    dim, folds = record.embedding_dim, record.n_folds
    if dim is None:
        return {}
    out = {mode: dim for mode, _ in record.test.modes} if record.test.named_modes else {}
    out.setdefault("separated", dim)
    if folds is not None:
        out.setdefault("concatenated", dim * folds)
    return out


def _scale(metric: str) -> float:
    # Records hold fractions for the ranking metrics and plain counts for epochs.
    return 1.0 if metric == "epochs_to_best" else 100.0


def _ours(record: RunRecord, mode: str, metric: str) -> tuple[float, float] | None:
    test = record.test
    cell = test.summary.get(mode, {}).get(metric)
    if cell is None and (not test.named_modes or test.has_mode(mode)):
        cell = test.extra_summary.get(metric)
    if cell is None or cell.mean is None:
        return None
    hw = cell.half_width
    scale = _scale(metric)
    return scale * cell.mean, math.nan if hw is None else scale * hw


def join(
    records: Sequence[RunRecord | Mapping[str, Any]],
    tables: Sequence[PublishedTable],
    dataset: str,
    protocol: str,
    metrics: Iterable[str] | None = None,
) -> list[Match]:
    """Every (record loss, mode, metric) with a published value of the same dataset, protocol,
    mode, embedding size and metric; the untrained row is joined with published ``untrained``
    rows (MLRC's Pretrained). ``records`` are one budget's, newest per loss wins."""
    tolerance = reproduction_tolerance(tables)
    wanted = None if metrics is None else set(metrics)
    latest = {r.loss: r for r in latest_per_loss(records)}
    published = [
        v
        for t in tables
        for v in t.values
        if v.dataset == dataset and v.protocol == protocol and (wanted is None or v.metric in wanted)
    ]
    out: list[Match] = []
    for loss, r in sorted(latest.items()):
        dims = _mode_dims(r)
        for v in published:
            if v.loss != loss or dims.get(v.mode) != v.embedding_dim:
                continue
            ours = _ours(r, v.mode, v.metric)
            if ours is not None:
                name = r.loss_display_name
                out.append(
                    Match(loss, name, v.mode, v.embedding_dim, v.metric, *ours, v, tolerance.get(v.metric))
                )
    if latest:  # the untrained row: from the newest record, a single measurement (no interval)
        newest = max(latest.values(), key=lambda r: r.created)
        dims = _mode_dims(newest)
        for v in published:
            value = newest.untrained.get(v.mode, {}).get(v.metric)
            if v.loss == UNTRAINED and dims.get(v.mode) == v.embedding_dim and value is not None:
                out.append(
                    Match(
                        UNTRAINED,
                        "Untrained",
                        v.mode,
                        v.embedding_dim,
                        v.metric,
                        _scale(v.metric) * float(value),
                        math.nan,
                        v,
                        tolerance.get(v.metric),
                    )
                )
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
    within = m.within
    if within is None:
        return "no tolerance"
    return f"{'yes' if within else 'no'} (±{m.allowed:.2f})"


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
    tolerance = reproduction_tolerance(tables)
    lines += [
        f"Published values from {folder} ({', '.join(t.path.name for t in tables)}); they are kept out of "
        "the leaderboard's rows, its bold best values and its significance tests.",
        "Δ = ours − published (points). Within tolerance when |Δ| ≤ reproduction tolerance + our 95% "
        "half-width + the published ± (where published); the bound is shown in parentheses.",
        "Reproduction tolerance per metric = the largest difference between the MLRC and Mean-Field "
        "papers' independent runs of the same cell: "
        + (", ".join(f"{_metric_label(m)} {t:.2f}" for m, t in sorted(tolerance.items())) or "none")
        + " (see docs/protocols.md §8).",
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
            "| Loss | Mode | Metric | Ours | Paper | Table | Published | Δ | Within tolerance |",
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
                f"{m.difference:+.2f} | {_verdict(m)} |"
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
