"""The leaderboard model, derived from run records only (docs/protocols.md §6): never typed by hand.

One :class:`Leaderboard` object is built per dataset/protocol: the records are read (and
validated, :mod:`benchmark.records`) once, grouped by budget, the newest record per loss chosen
once (:func:`latest_per_loss`), the metric columns resolved once (:func:`shared_metrics`), and the
rows, best means and footers computed once. Every output renders that object: Markdown and CSV
here, LaTeX and JSON in :mod:`benchmark.report.tables`, plots in :mod:`benchmark.report.plots`,
the published-value join in :mod:`benchmark.report.published`; ``dmlbench compare`` tests the same
chosen records.

One section per budget (numbers from different budgets are not comparable); rows are losses plus
the untrained row. A section ranks only records made under identical board settings
(:func:`~benchmark.records.board_settings`: the resolved config without the loss's own parameters,
search ranges and file locations, with the trunk weights' checksum): a budget whose records were
made under several (e.g. while its definition changes and losses are rerun one by one) gets one
section per settings group, the newest group labelled by the budget, the others ``<budget>
(earlier settings <key>)`` with a note naming the settings that differ (:func:`settings_notes`).
Rows, bold, tiers and tests never span two sections. Columns are modes × metrics as mean ± 95%
CI half-width in %; the best mean per column is bold; the footer states reps, deviations from the
paper and provenance.

Metric columns (one rule for every format): the metrics every record holds, MLRC's first in
their usual order, then the others in the oldest record's order. When the records share none
(e.g. two budgets with different metrics), the files still get written, all with no metric
column and a note saying so; ``dmlbench report --budget`` shows one budget's metrics.

Protocols other than MLRC (``traditional``, ``cbir``) name their own evaluation modes in the
record (``test.modes`` with ``test.mode_labels``); their tables have one column group per mode, a
cell of a mode a loss lacks (e.g. cbir's two-stage for a pair-based loss) is shown as ``–``, and
the footer adds the records' notes (e.g. selection on test) and further per-rep summaries.

Convergence (docs/protocols.md §2.6; :mod:`benchmark.analysis.convergence`): the footer gives, per loss, the
share of fold trainings that stopped by patience in the test and the search stage; a loss whose
run is "not converged" (fewer than 90% of its test-stage folds stopped by patience) carries that
mark next to its name in the table, and the CSV/JSON carry the counts and the verdict. The
``smoke`` budget's section says that it is exempt.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from benchmark import records as record_schema
from benchmark.analysis.bounds import BOUND_TOLERANCE, BoundHit, bound_hits
from benchmark.analysis.convergence import EXEMPT_BUDGETS, RULE
from benchmark.analysis.provenance import short_code
from benchmark.errors import DmlbenchError, UnknownNameError
from benchmark.io import write_text_atomic
from benchmark.metrics import METRICS, MLRC_METRICS
from benchmark.records import (
    MLRC_MODES,
    IntervalDoc,
    RunRecord,
    SettingChange,
    as_record,
    board_key,
    completed_trials,
    latest_per_loss,
    nan_if_none,
    parse_plugins,
    recorded_as_text,
    replicates_per_loss,
    settings_diff,
    settings_groups,
)
from benchmark.registry import PluginSource
from benchmark.stats.seeds import (
    HOMOGENEITY_ALPHA,
    SCOPE_BOTH,
    SCOPE_TRAINING,
    Estimate,
    SeedVariance,
    row_estimates,
    seed_variance,
    training_estimate,
)
from benchmark.stats.tiers import Tiers, column_tiers

MODES = MLRC_MODES
UNTRAINED = "untrained"
#: What the untrained row's interval covers when its section holds several seeds: each seed's
#: fold models start from their own random embedder.
SCOPE_UNTRAINED = "seeds of the untrained models"
#: Level of the tier tests (Holm over all pairs of a column).
TIER_ALPHA = 0.05
Modes = Sequence[tuple[str, str]]
#: A typed record or a plain record document (parsed on the way in; for scripts and tests).
RecordLike = RunRecord | Mapping[str, Any]
#: How an exempt budget's section is labelled.
EXEMPT_NOTE = "exempt from the convergence rule: checks the machinery, not the ranking (protocols.md §2.6)"
#: The note of a leaderboard whose records share no metric.
NO_SHARED_METRIC = (
    "The records share no test metric (their budgets measure different ones), so no metric column "
    "is shown; `dmlbench report --budget <budget>` shows one budget's metrics."
)


def load_record_files(folder: Path) -> list[RunRecord]:
    """The validated records in ``folder`` (the one read of a leaderboard refresh; tests count it)."""
    return record_schema.load_records(folder)


# -- reading and choosing records -------------------------------------------------------------


def load_records(results_dir: Path, dataset: str, protocol: str) -> list[RunRecord]:
    """Every run record of a dataset/protocol, validated, oldest first."""
    return load_record_files(results_dir / dataset / protocol / "records")


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
) -> dict[str, list[RunRecord]]:
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
    by_budget = group_by_budget(records)
    if budget is not None:
        if budget not in by_budget:
            raise DmlbenchError(
                f"No {dataset}/{protocol} records with budget {budget!r}; "
                f"budgets with records: {', '.join(sorted(by_budget))}."
            )
        return {budget: by_budget[budget]}
    return by_budget


def group_by_budget(records: Sequence[RecordLike]) -> dict[str, list[RunRecord]]:
    """Records grouped by budget (in first-seen order), each group in the given order."""
    by_budget: dict[str, list[RunRecord]] = {}
    for r in map(as_record, records):
        by_budget.setdefault(r.budget, []).append(r)
    return by_budget


def record_modes(records: Sequence[RecordLike]) -> tuple[tuple[str, str], ...]:
    """The (mode, label) column groups of ``records``: every record's modes, first-seen order."""
    out: dict[str, str] = {}
    for r in map(as_record, records):
        for mode, label in r.modes:
            out.setdefault(mode, label)
    return tuple(out.items()) if out else MODES


def record_metrics(record: RecordLike) -> list[str]:
    """The test metrics a record holds per-rep values and summaries for."""
    return list(as_record(record).test["metrics"])


def shared_metrics(records: Sequence[RecordLike]) -> list[str]:
    """The default metric columns: registered metrics every record holds, MLRC's first (in their
    usual order), then the others in the oldest record's order. Empty when they share none."""
    typed = sorted(map(as_record, records), key=lambda r: (r.created, r.loss))
    if not typed:
        return []
    common = [m for m in typed[0].test["metrics"] if m in METRICS]
    for r in typed[1:]:
        common = [m for m in common if m in r.test["metrics"]]
    return [m for m in MLRC_METRICS if m in common] + [m for m in common if m not in MLRC_METRICS]


def resolve_metrics(
    by_budget: Mapping[str, Sequence[RecordLike]], requested: Sequence[str] | None = None
) -> list[str]:
    """The metric columns: ``requested`` (validated) or :func:`shared_metrics` of all records.

    A requested name must be registered (else :class:`UnknownNameError`) and present in every
    selected record (else :class:`DmlbenchError` naming the metrics they have); without a request,
    records that share no metric are an error asking for one ``--budget``.
    """
    records = [r for rs in by_budget.values() for r in rs]
    if not requested:
        ordered = shared_metrics(records)
        if not ordered:
            raise DmlbenchError("The selected records share no test metric; select one --budget.")
        return ordered
    typed = sorted(map(as_record, records), key=lambda r: (r.created, r.loss))
    common = list(typed[0].test["metrics"]) if typed else []
    for r in typed[1:]:
        common = [m for m in common if m in r.test["metrics"]]
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


# -- the model --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One leaderboard row: a loss (or the untrained model) with per-column intervals.

    A loss's row folds the records of its search seeds together (:func:`replicates_per_loss`);
    ``estimates`` hold each column's :class:`~benchmark.stats.seeds.Estimate` (mean, variance of
    the mean, degrees of freedom, scope) from which ``cells`` and the tiers are derived.
    """

    name: str
    loss: str
    #: The search seeds behind the row (one per record folded in).
    seeds: tuple[int | None, ...]
    #: Test repetitions per seed (of the newest record).
    reps: int
    cells: dict[tuple[str, str], tuple[float, float]]  # (mode, metric) -> (mean, half_width)
    commit: str
    #: :func:`~benchmark.analysis.convergence.convergence_summary` of the loss's record (the
    #: least converged seed's); None for the untrained row.
    convergence: Mapping[str, Any] | None = None
    estimates: Mapping[tuple[str, str], Estimate] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The name as the table shows it: with the "not converged" mark where it applies."""
        if self.convergence is not None and self.convergence["verdict"] == "not converged":
            return f"{self.name} (not converged)"
        return self.name

    @property
    def scope(self) -> str:
        """Which seeds the row's intervals cover ("" for an untrained row of one seed, a single
        measurement)."""
        if self.loss == UNTRAINED:
            return SCOPE_UNTRAINED if len(self.seeds) > 1 else ""
        return SCOPE_BOTH if len(self.seeds) > 1 else SCOPE_TRAINING

    @property
    def seeds_text(self) -> str:
        """``0`` or ``0,1,2``."""
        return ",".join("–" if s is None else str(s) for s in self.seeds)

    @property
    def reps_text(self) -> str:
        """``4`` for one seed, ``3×4`` for 3 seeds of 4 repetitions."""
        return f"{len(self.seeds)}×{self.reps}" if len(self.seeds) > 1 else str(self.reps)


def untrained_label(record: RunRecord) -> str:
    """The baseline row's name: what the trunk of ``record``'s untrained models was.

    With pretrained weights (the paper's ImageNet trunk, the ``mini`` budget's symbol-pretrained
    smallcnn) the row is the transfer baseline the training must beat, not a random network.
    """
    model = record.document.get("config", {}).get("model", {})
    if model.get("pretrained"):
        return "Pretrained trunk + random embedder (no training)"
    return "Untrained (init trunk + random embedder)"


def _seed_values(record: RunRecord, mode: str, metric: str) -> list[float] | IntervalDoc | None:
    """A record's per-rep values of a column; its summary interval (None: none) when it lacks them."""
    values = record.test["per_rep"].get(mode, {}).get(metric)
    if values:
        return [nan_if_none(v) for v in values]
    return record.test["summary"].get(mode, {}).get(metric)


def _summary_estimate(cell: IntervalDoc | None, n: int, confidence: float) -> Estimate:
    """An estimate from a stored interval alone (records without per-rep values of a column)."""
    mean, hw = (
        (math.nan, math.nan) if cell is None else (nan_if_none(cell["mean"]), nan_if_none(cell["half_width"]))
    )
    if n < 2 or math.isnan(hw):
        return Estimate(mean, math.nan, math.nan, 1, n, SCOPE_TRAINING, confidence)
    import scipy.stats

    se = hw / float(scipy.stats.t.ppf(0.5 + confidence / 2.0, n - 1))
    return Estimate(mean, se * se, float(n - 1), 1, n, SCOPE_TRAINING, confidence)


def _column_groups(
    replicates: Sequence[Sequence[RunRecord]], mode: str, metric: str, confidence: float
) -> tuple[list[list[list[float]]], dict[int, Estimate]]:
    """Per row, each seed's per-rep values of the column; and the stored-interval estimates of the
    rows whose records lack them (their groups are empty)."""
    groups: list[list[list[float]]] = []
    fallback: dict[int, Estimate] = {}
    for i, reps in enumerate(replicates):
        seeds = [_seed_values(r, mode, metric) for r in reps]
        if all(isinstance(v, list) for v in seeds):
            groups.append([v for v in seeds if isinstance(v, list)])
        else:
            groups.append([])
            newest = max(reps, key=lambda r: r.created)
            cell = newest.test["summary"].get(mode, {}).get(metric)
            fallback[i] = _summary_estimate(cell, newest.test["reps"], confidence)
    return groups, fallback


def column_estimates(
    replicates: Sequence[Sequence[RunRecord]], mode: str, metric: str, confidence: float = 0.95
) -> list[Estimate]:
    """One column's estimates for rows of replicate records (:mod:`benchmark.stats.seeds`): the
    multi-seed rows pool their seed variance unless their spreads differ
    (:func:`column_seed_variance`); a row whose records lack per-rep values of the column keeps
    its stored interval (training seeds)."""
    groups, fallback = _column_groups(replicates, mode, metric, confidence)
    estimates = row_estimates(groups, confidence)
    return [fallback.get(i, e) for i, e in enumerate(estimates)]


def column_seed_variance(replicates: Sequence[Sequence[RunRecord]], mode: str, metric: str) -> SeedVariance:
    """How :func:`column_estimates` gets the multi-seed rows' seed variance for this column."""
    groups, _ = _column_groups(replicates, mode, metric, 0.95)
    return seed_variance(groups)


def _least_converged(records: Sequence[RunRecord]) -> Mapping[str, Any]:
    """The convergence summary of the seed whose test stage stopped by patience least often."""
    return min(
        (r.convergence for r in records),
        key=lambda c: (c["verdict"] != "not converged", float(c["test"].get("share") or 0.0)),
    )


def _commits(records: Sequence[RunRecord]) -> str:
    out: list[str] = []
    for r in records:
        if r.commit not in out:
            out.append(r.commit)
    return ",".join(out)


def _direction(metric: str) -> float:
    return 1.0 if METRICS.get(metric).higher_is_better else -1.0


def build_rows(records: Sequence[RecordLike], metrics: Sequence[str], modes: Modes = MODES) -> list[Row]:
    """Rows of one budget: one per loss (its seeds folded together), sorted by the first column
    (best first, rows without a value after), then the untrained model (:func:`untrained_row`).

    A (mode, metric) a record does not hold is (NaN, NaN).
    """
    replicates = replicates_per_loss(records)
    if not replicates:
        return []
    losses = sorted(replicates)
    groups = [replicates[name] for name in losses]
    cols = _columns(metrics, modes)
    estimates = {col: column_estimates(groups, *col) for col in cols}
    rows = []
    for i, name in enumerate(losses):
        reps = groups[i]
        newest = max(reps, key=lambda r: r.created)
        est = {col: estimates[col][i] for col in cols}
        cells = {col: (e.mean, e.half_width) for col, e in est.items()}
        rows.append(
            Row(
                newest.loss_display_name,
                name,
                tuple(r.seed for r in reps),
                newest.test["reps"],
                cells,
                _commits(reps),
                _least_converged(reps),
                est,
            )
        )
    if cols:
        first = cols[0]
        sign = _direction(first[1])
        rows.sort(
            key=lambda r: (math.isnan(r.cells[first][0]), -sign * nan_to_zero(r.cells[first][0]), r.name)
        )
    rows.append(untrained_row([r for g in groups for r in g], cols))
    return rows


def untrained_records(records: Sequence[RunRecord]) -> tuple[str, list[RunRecord]]:
    """The embedding space and the records the untrained row reads: the section's most common
    space (ties: the first by name), one record per seed in it (the first loss by name).

    Within a section a record's untrained value depends on its seed and embedding space alone
    (the same fold models, scored by that space's distance), so a fixed choice keeps the row
    where it is when a record of another loss lands; the newest record, used before, moved it
    with that loss's space (16.23 to 16.34 separated MAP@R on omniglot when a euclidean loss
    landed among cosine ones).
    """
    if not records:
        raise ValueError("untrained_records needs at least one record (got none)")

    def space(r: RunRecord) -> str:
        return str(r.document.get("embedding_space", ""))

    counts: dict[str, int] = {}
    for r in records:
        counts[space(r)] = counts.get(space(r), 0) + 1
    chosen = min(counts, key=lambda s: (-counts[s], s))
    per_seed: dict[int | None, RunRecord] = {}
    for r in sorted((r for r in records if space(r) == chosen), key=lambda r: (r.loss, r.created)):
        per_seed.setdefault(r.seed, r)
    return chosen, [per_seed[s] for s in sorted(per_seed, key=lambda s: (s is None, s or 0))]


def untrained_row(
    records: Sequence[RunRecord], cols: Sequence[tuple[str, str]], confidence: float = 0.95
) -> Row:
    """The baseline row (:func:`untrained_records`): one measurement per seed, their mean with a
    t-interval over the seeds when there are several (:data:`SCOPE_UNTRAINED`), none for one."""
    space, chosen = untrained_records(records)
    est = {}
    for mode, m in cols:
        values = [nan_if_none(r.untrained.get(mode, {}).get(m)) for r in chosen]
        e = training_estimate(values, confidence)
        est[(mode, m)] = replace(e, n_seeds=len(values), scope=SCOPE_UNTRAINED)
    label = untrained_label(chosen[0])
    return Row(
        f"{label[:-1]}; {space})" if space and label.endswith(")") else label,
        UNTRAINED,
        tuple(r.seed for r in chosen),
        1,
        {col: (e.mean, e.half_width) for col, e in est.items()},
        _commits(chosen),
        None,
        est,
    )


def nan_to_zero(x: float) -> float:
    """0 for NaN (a sort key; NaN rows are ordered apart first)."""
    return 0.0 if math.isnan(x) else x


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


def section_tiers(
    rows: Sequence[Row], metrics: Sequence[str], modes: Modes = MODES, alpha: float = TIER_ALPHA
) -> dict[tuple[str, str], Tiers]:
    """Per column, :func:`~benchmark.stats.tiers.column_tiers` over the trained rows (in row order)."""
    trained = [r for r in rows if r.loss != UNTRAINED]
    return {
        col: column_tiers([r.estimates[col] for r in trained], METRICS.get(col[1]).higher_is_better, alpha)
        for col in _columns(metrics, modes)
    }


def section_label(budget: str, earlier_key: str | None = None) -> str:
    """A section's label: the budget; ``mini (earlier settings 3f9a2c)`` for the group of board
    settings key ``earlier_key`` when the budget's newest record is of other settings."""
    return budget if earlier_key is None else f"{budget} (earlier settings {earlier_key[:6]})"


@dataclass(frozen=True)
class Section:
    """One budget of a leaderboard, or of a budget whose records were made under more than one set
    of board settings (:func:`~benchmark.records.board_settings`), one settings group of it: its
    records, the newest per loss, rows, best means and tiers. A section ranks only records of
    identical board settings; the group of the budget's newest record is labelled by the budget,
    the others ``<budget> (earlier settings <key>)`` (:attr:`label`)."""

    budget: str
    #: Every record of the section (the budget's records of one board-settings group), oldest first.
    records: tuple[RunRecord, ...]
    #: The newest record per loss, by loss name (what the footers, plots and published join use).
    chosen: tuple[RunRecord, ...]
    rows: tuple[Row, ...]
    best: Mapping[tuple[str, str], float]
    #: The metrics this budget's chosen records share (same ordering rule; the plots' panels).
    metrics: tuple[str, ...]
    #: Per column: the tiers of the trained rows, in row order (:func:`section_tiers`).
    tiers: Mapping[tuple[str, str], Tiers] = field(default_factory=dict)
    #: The records' :func:`~benchmark.records.board_key` ("" for a section built by hand).
    settings_key: str = ""
    #: Whether the budget's newest record is of other settings (this is an earlier group).
    earlier: bool = False
    #: Earlier group: the board settings that differ from the current group's (value here → there).
    changes: tuple[SettingChange, ...] = ()
    #: The labels of the budget's other sections (empty: the budget has one set of settings).
    siblings: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """The section's name in headings and tables: the budget, ``mini (earlier settings 3f9a2c)``
        for an earlier settings group."""
        return section_label(self.budget, self.settings_key if self.earlier else None)

    @property
    def slug(self) -> str:
        """The section's name in file names: the budget, ``mini-earlier-3f9a2c`` for an earlier group."""
        return f"{self.budget}-earlier-{self.settings_key[:6]}" if self.earlier else self.budget

    @property
    def exempt(self) -> bool:
        """Whether the budget is exempt from the convergence rule."""
        return self.budget in EXEMPT_BUDGETS

    @property
    def trained(self) -> tuple[Row, ...]:
        """The rows of losses (the untrained row left out), in table order."""
        return tuple(r for r in self.rows if r.loss != UNTRAINED)

    def _index(self, row: Row) -> int | None:
        for i, r in enumerate(self.trained):
            if r.loss == row.loss:
                return i
        return None

    def is_best(self, row: Row, mode: str, metric: str) -> bool:
        """Whether ``row`` is in the column's best tier: the best mean or not significantly
        different from it (Holm over the column's pairs); never the untrained row."""
        tiers = self.tiers.get((mode, metric))
        i = self._index(row)
        if tiers is None or i is None:
            return False
        return tiers.in_best_tier[i]

    def letters(self, row: Row, mode: str, metric: str) -> str:
        """The row's compact letters in a column ("" for the untrained row)."""
        tiers = self.tiers.get((mode, metric))
        i = self._index(row)
        return "" if tiers is None or i is None else tiers.letters[i]

    @property
    def multi_seed(self) -> bool:
        """Whether some row folds several search seeds."""
        return any(len(r.seeds) > 1 for r in self.trained)

    def seed_records(self) -> list[RunRecord]:
        """The records behind the trained rows, one per seed."""
        per_loss = replicates_per_loss(self.records)
        return [r for row in self.trained for r in per_loss.get(row.loss, []) if r.seed in row.seeds]

    def search_trials(self) -> dict[str, tuple[int, int]]:
        """Per loss: (complete search trials, planned trials); losses without a search left out."""
        return {
            r.loss: (completed_trials(r.search), r.search["n_trials"])
            for r in self.chosen
            if r.search is not None
        }

    def deviations(self) -> list[tuple[str, Any, Any]]:
        """(key, paper, value) of the deviations from the paper protocol, one per key, by key."""
        devs = {d.key: (d.key, d.paper, d.value) for r in self.chosen for d in r.deviations}
        return [devs[k] for k in sorted(devs)]

    def titles(self, modes: Modes) -> dict[str, str]:
        """Long column-group titles with the embedding sizes, e.g. ``"Separated (128-d)"``."""
        return mode_titles(self.chosen, modes)


def mode_titles(records: Sequence[RecordLike], modes: Modes | None = None) -> dict[str, str]:
    """Long column-group titles with the embedding sizes, e.g. ``"Separated (128-d)"``; for a
    protocol with its own modes, their labels."""
    typed = [as_record(r) for r in records]
    modes = record_modes(typed) if modes is None else tuple(modes)
    if tuple(modes) != MODES:
        return dict(modes)
    titles = {"separated": "Separated", "concatenated": "Concatenated"}
    if typed:
        newest = max(typed, key=lambda r: r.created)
        dim, folds = newest.embedding_dim, newest.n_folds
        if dim is not None and folds is not None:
            titles = {"separated": f"Separated ({dim}-d)", "concatenated": f"Concatenated ({dim * folds}-d)"}
    return titles


@dataclass(frozen=True)
class Leaderboard:
    """The leaderboard of one dataset/protocol: every output format renders this object."""

    dataset: str
    protocol: str
    modes: tuple[tuple[str, str], ...]
    #: The metric columns of every table (empty: the records share none, see the module doc).
    metrics: tuple[str, ...]
    #: One section per budget and board-settings group, sorted by budget name, the current
    #: settings first (:func:`build_leaderboard`).
    sections: tuple[Section, ...]
    #: Notes about the whole table (e.g. that the records share no metric).
    notes: tuple[str, ...] = ()

    @property
    def by_section(self) -> dict[str, list[RunRecord]]:
        """Every record, grouped by section (:attr:`Section.label`): records that may be compared.
        What every consumer that ranks or tests records (``compare``, the published join) reads."""
        return {s.label: list(s.records) for s in self.sections}

    @property
    def by_budget(self) -> dict[str, list[RunRecord]]:
        """Every record, grouped by budget, across board-settings groups (a listing: records of
        one budget here may be of different settings; rank :attr:`by_section`)."""
        out: dict[str, list[RunRecord]] = {}
        for s in self.sections:
            out.setdefault(s.budget, []).extend(s.records)
        return out


def build_leaderboard(
    dataset: str,
    protocol: str,
    by_budget: Mapping[str, Sequence[RecordLike]],
    metrics: Sequence[str] | None = None,
) -> Leaderboard:
    """The leaderboard of records grouped by budget; ``metrics`` None: :func:`shared_metrics`
    (when the records share none, the leaderboard has no metric column and says why).

    A budget whose records do not all share board settings (:func:`~benchmark.records.board_settings`)
    gets one section per settings group (:func:`~benchmark.records.settings_groups`): first the
    group of its newest record, labelled by the budget, then each earlier group, labelled
    ``<budget> (earlier settings <key>)`` and noting the settings that differ. Each section
    chooses its newest record per loss, ranks and tests only its own rows."""
    typed = {b: sorted(map(as_record, rs), key=lambda r: (r.created, r.loss)) for b, rs in by_budget.items()}
    every = [r for rs in typed.values() for r in rs]
    columns = tuple(shared_metrics(every) if metrics is None else metrics)
    modes = record_modes(every)
    sections: list[Section] = []
    for budget in sorted(typed):
        # A budget's records made under different board settings are never ranked together: one
        # section per settings group, the group of the budget's newest record first.
        groups = settings_groups(typed[budget])
        keys = [board_key(g[-1]) for g in groups]
        labels = [section_label(budget, k if i else None) for i, k in enumerate(keys)]
        for i, records in enumerate(groups):
            chosen = latest_per_loss(records)
            rows = build_rows(records, columns, modes)
            sections.append(
                Section(
                    budget,
                    tuple(records),
                    tuple(chosen),
                    tuple(rows),
                    best_means(rows, columns, modes),
                    tuple(shared_metrics(chosen)),
                    section_tiers(rows, columns, modes),
                    settings_key=keys[i],
                    earlier=i > 0,
                    changes=tuple(settings_diff(records[-1], groups[0][-1])) if i else (),
                    siblings=tuple(label for j, label in enumerate(labels) if j != i),
                )
            )
    notes = (NO_SHARED_METRIC,) if metrics is None and every and not columns else ()
    return Leaderboard(dataset, protocol, modes, columns, tuple(sections), notes)


def load_leaderboard(
    results_dir: Path,
    dataset: str,
    protocol: str,
    *,
    budget: str | None = None,
    metrics: Sequence[str] | None = None,
    require_metric: bool = True,
) -> Leaderboard:
    """Read a dataset/protocol's records once and build its leaderboard.

    ``metrics`` are validated (:func:`resolve_metrics`); without them, records sharing no metric
    are an error when ``require_metric`` (the ``report`` command), else a leaderboard without
    metric columns (the files a finished run refreshes: all formats are written alike).
    """
    by_budget = select_records(results_dir, dataset, protocol, budget)
    columns = resolve_metrics(by_budget, metrics) if metrics or require_metric else None
    return build_leaderboard(dataset, protocol, by_budget, columns)


# -- shared text --------------------------------------------------------------------------------


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


def _footer_view(
    record: RecordLike,
) -> tuple[str, Sequence[str], Sequence[PluginSource], Mapping[str, Mapping[str, Any]]]:
    """(loss, notes, plugins, extra summaries) of a record; a plain mapping may hold only those."""
    if isinstance(record, RunRecord):
        return record.loss, record.notes, record.plugins, record.test.get("extra_summary", {})
    extra = record.get("test", {}).get("extra_summary", {})
    return (
        str(record["loss"]),
        [str(n) for n in record.get("notes", [])],
        parse_plugins(record, "<record>"),
        extra,
    )


def footer_notes(records: Sequence[RecordLike]) -> list[str]:
    """The records' notes (each once), their plugins' provenance and their further per-rep
    summaries (``test.extra_summary``)."""
    views = [_footer_view(r) for r in records]
    out: list[str] = []
    for _, notes, _, _ in views:
        for note in notes:
            if note not in out:
                out.append(note)
    for loss, _, plugins, _ in views:
        for p in plugins:
            # Which outside code produced the row: the distribution and version, the reference, and
            # the hash of the file the component is defined in.
            sha = f"sha256 {p.sha256[:12]}" if p.sha256 else "file not hashed"
            dist = f"{p.distribution} {p.version} " if p.distribution else ""
            where = f"{dist}({p.ref}, {sha})" if dist else f"{p.ref} ({sha})"
            line = f"{loss}: {p.kind} plugin: {where}."
            if line not in out:
                out.append(line)
    for loss, _, _, extra in views:
        if extra:
            parts = [
                f"{k.replace('_', ' ')} {_plain(v.get('mean'))} ± {_plain(v.get('half_width'))}"
                for k, v in extra.items()
            ]
            out.append(f"{loss}: " + "; ".join(parts) + ".")
    return out


def format_share(stage: Mapping[str, Any]) -> str:
    """``{"patience": 14, "n": 16, ...}`` -> ``"14/16 (88%)"``; ``"–"`` without fold trainings; a
    trailing ``*`` when some stops were derived (records written before ``stopped_by``)."""
    n = int(stage.get("n", 0))
    if n == 0:
        return "–"
    text = f"{int(stage['patience'])}/{n} ({100.0 * int(stage['patience']) / n:.0f}%)"
    return text + ("*" if stage.get("derived") else "")


def convergence_footer(budget: str, records: Sequence[RecordLike]) -> list[str]:
    """Footer lines: per record (``loss``, or ``loss/seedS`` where a loss has several), fold
    trainings stopped by patience (test; search) and the verdict, then the rule (and what ``*``
    means where a record needed its stops derived)."""
    if not records:
        return []
    typed = [as_record(r) for r in records]
    per_loss = Counter(r.loss for r in typed)
    summaries = [
        (r.loss if per_loss[r.loss] == 1 else f"{r.loss}/seed{r.seed}", r.convergence) for r in typed
    ]
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


def code_footer(records: Sequence[RecordLike]) -> list[str]:
    """A footer line per record whose folds were trained by more than one code version."""
    out = []
    for r in map(as_record, records):
        if r.mixed_code:
            parts = ", ".join(f"{short_code(code)} {n}" for code, n in r.code_versions.items())
            out.append(
                f"{r.loss}: mixed code: {len(r.code_versions)} code versions are behind this record "
                f"(fold trainings per version: {parts}); the commit column names the one that wrote it."
            )
    return out


def search_bound_hits(records: Sequence[RecordLike]) -> list[tuple[RunRecord, list[BoundHit]]]:
    """Each record whose best setting lies at a bound of its searched range, with those values
    (:func:`benchmark.analysis.bounds.bound_hits`), in the order given."""
    out = []
    for r in map(as_record, records):
        # A record may lack parts of its search (older or partial records).
        search: Mapping[str, Any] = r.search or {}
        hits = bound_hits(search.get("space") or {}, search.get("best_params") or {})
        if hits:
            out.append((r, hits))
    return out


def _seed_label(r: RunRecord) -> str:
    """``loss/seedS``, or the loss alone for a record without a search seed."""
    return r.loss if r.seed is None else f"{r.loss}/seed{r.seed}"


def _bound_part(r: RunRecord, hits: Sequence[BoundHit]) -> str:
    """``loss/seedS: name = value (side bound b), ...``: one record's values at a bound."""
    return f"{_seed_label(r)}: " + ", ".join(h.describe() for h in hits)


def bound_footer(records: Sequence[RecordLike]) -> list[str]:
    """A footer line naming each record of :func:`search_bound_hits`."""
    parts = [_bound_part(r, hits) for r, hits in search_bound_hits(records)]
    if not parts:
        return []
    return [
        f"Best setting at a bound of its searched range (within {BOUND_TOLERANCE:.0%} of the width, "
        "on the scale searched): a better one may lie outside the range, unless the bound is the "
        "loss's natural limit. " + "; ".join(parts) + "."
    ]


#: The settings of a row's records that change its fold results: (record section, key, what the
#: footer calls their values). :func:`reproducibility_footer` warns when a table's records differ
#: in one; the CSV and the JSON rows name them per row, as they have no footer per row.
ROW_ENVIRONMENT = (
    ("environment", "cpu_capability", "CPU kinds"),
    # The same capability on two vendors' CPUs gave different trial values (benchmarks/README,
    # "what a session can lose"), so the model is named as well.
    ("environment", "cpu_model", "CPU models"),
    ("execution", "torch_threads_per_job", "torch threads per fold"),
)


def row_environment(records: Sequence[RunRecord]) -> dict[str, list[Any]]:
    """Per :data:`ROW_ENVIRONMENT` key, the distinct values of a row's seed records in seed order
    (None for a record older than the key)."""
    return {
        key: list(dict.fromkeys(r.recorded(section, key) for r in records))
        for section, key, _ in ROW_ENVIRONMENT
    }


def reproducibility_footer(records: Sequence[RecordLike]) -> list[str]:
    """A warning line per :data:`ROW_ENVIRONMENT` setting in which the records behind a table
    differ (CPU kind, CPU model, torch threads per fold): their numbers are then not bit-for-bit
    comparable (fold results depend on each; `--jobs 1` and `--jobs 2` give different threads per
    fold)."""

    typed = [as_record(r) for r in records]
    out = []
    for section, key, what in ROW_ENVIRONMENT:
        groups: dict[str, list[str]] = {}
        for r in typed:
            groups.setdefault(r.recorded_text(section, key), []).append(_seed_label(r))
        if len(groups) > 1:
            parts = "; ".join(
                f"{value}: {', '.join(sorted(names))}" for value, names in sorted(groups.items())
            )
            out.append(
                f"Records made with different {what} ({parts}): fold results depend on the torch "
                "threads per fold (set by --jobs) and on the CPU's rounding (its kind and model), so "
                "these would not reproduce bit for bit on one machine and setting."
            )
    return out


def _plain(x: float | None) -> str:
    value = nan_if_none(x)
    return "–" if math.isnan(value) else f"{value:.3g}"


# -- Markdown -----------------------------------------------------------------------------------


#: What the values are (every format states it).
VALUES_NOTE = (
    "Values: mean ± half-width of the 95% interval, in percent. A row with one search seed: "
    "t-interval over its test repetitions, which covers training seeds only. A row with several "
    "seeds (Seeds 0,1,...): mean of the seed means, interval over search and training seeds "
    "(two-level model, seed-mean variance pooled over the column's multi-seed rows unless "
    "Bartlett's test rejects equal seed variances, then each row's own; the footer says which; "
    "docs/protocols.md §4.5)."
)
#: What bold and the group letters mean.
TIERS_NOTE = (
    f"Bold: the best mean of the column and every loss not significantly different from it; "
    f"Group: compact letters of the first column, losses sharing a letter are not significantly "
    f"different. Tests: t-tests between rows (Welch's on one-seed rows and on rows with their own "
    f"seed variance), Holm-adjusted over all "
    f"pairs of the column, α = {TIER_ALPHA:g} (docs/protocols.md §4.6). Not significantly "
    f"different is not equal: a row with a wide interval can share the best's tier while a "
    f"narrower row with a higher mean does not. Rows are sorted by the first column."
)


def markdown_text(lb: Leaderboard) -> str:
    """The Markdown leaderboard, one section per budget."""
    modes, metrics = lb.modes, lb.metrics
    lines = [
        f"# Leaderboard: `{lb.dataset}`, protocol `{lb.protocol}`",
        "",
        "Generated by `dmlbench` from the run records in `records/`; do not edit by hand.",
        VALUES_NOTE,
        TIERS_NOTE,
        "Sep. = each fold model's 128-d embedding alone (mean over the 4 folds); "
        "Concat. = the 4 fold embeddings concatenated (512-d)."
        if modes == MODES
        else "– = not applicable to that loss.",
        *lb.notes,
    ]
    cols = _columns(metrics, modes)
    for s in lb.sections:
        header = ["Loss", "Group"]
        header += [f"{label} {METRICS.get(m).display_name}" for _, label in modes for m in metrics]
        header += ["Seeds", "Reps", "Interval covers", "Stopped by patience (test; search)", "Commit"]
        notes = settings_notes(s)
        lines += [
            "",
            f"## Budget `{s.label}`" + (f" ({EXEMPT_NOTE})" if s.exempt else ""),
            "",
            *([*notes, ""] if notes else []),
            "| " + " | ".join(header) + " |",
            "|" + "---|" * len(header),
        ]
        for r in s.rows:
            cells = []
            for mode, m in cols:
                text = format_cell(*r.cells[(mode, m)])
                cells.append(f"**{text}**" if s.is_best(r, mode, m) else text)
            group = s.letters(r, *cols[0]) if cols else ""
            stops = (
                f"{format_share(r.convergence['test'])}; {format_share(r.convergence['search'])}"
                if r.convergence is not None
                else "–"
            )
            row = [r.label, group, *cells, r.seeds_text, r.reps_text, r.scope or "–", stops, r.commit]
            lines.append("| " + " | ".join(row) + " |")
        lines += ["", *_markdown_footer(s)]
    return "\n".join(lines) + "\n"


def settings_notes(s: Section) -> list[str]:
    """What a section of a budget with several board-settings groups says about them (empty for a
    budget of one): the current group names the earlier sections; an earlier one names the
    settings in which it differs from the current group (``key: value here → value there``)."""
    if not s.siblings:
        return []
    others = ", ".join(f"`{label}`" for label in s.siblings)
    if not s.earlier:
        return [
            f"Board settings: this budget also has records made under other settings; they are "
            f"ranked apart in {others} and never against these rows (a board compares only records "
            f"of identical settings)."
        ]
    changes = "; ".join(c.text for c in s.changes)
    return [
        f"Earlier board settings: these rows were made under settings that differ from those of "
        f"budget `{s.budget}`'s newest records, so they are ranked only among themselves, never "
        f"against {others}. Differing settings (this section → `{s.budget}`): {changes}."
    ]


def tier_footer(s: Section) -> list[str]:
    """Per column: how many losses share the best tier, out of how many, over how many pairs."""
    parts = []
    for (mode, m), t in s.tiers.items():
        if t.best is None:
            continue
        n_best = sum(t.in_best_tier)
        pairs = f"{t.n_pairs} pair" + ("" if t.n_pairs == 1 else "s")
        parts.append(f"{mode} {METRICS.get(m).display_name} {n_best}/{len(t.letters)} ({pairs})")
    return ["Best tier size per column: " + "; ".join(parts) + "."] if parts else []


def seed_variance_footer(s: Section) -> list[str]:
    """Per column, when the section has rows of several search seeds: whether their seed-mean
    variance was pooled, with the test of equal seed variances that decided it."""
    replicates = replicates_per_loss(s.records)
    groups = [replicates[name] for name in sorted(replicates)]
    if not any(len(g) > 1 for g in groups):
        return []
    models = {(mode, m): column_seed_variance(groups, mode, m) for mode, m in s.tiers}
    parts = []
    for (mode, m), v in models.items():
        part = f"{mode} {METRICS.get(m).display_name} {v.short()}"
        # The rows hold the column's estimates already (build_rows); by loss name, as the groups.
        floored = [
            r.name
            for r in sorted(s.rows, key=lambda r: r.loss)
            if r.loss != UNTRAINED and (e := r.estimates.get((mode, m))) is not None and e.floored
        ]
        parts.append(part + (f", at the training floor: {', '.join(floored)}" if floored else ""))
    n = max((v.rows for v in models.values()), default=0)
    return [
        f"Seed-mean variance of the multi-seed rows ({n}) per column: pooled unless Bartlett's test "
        f"of equal seed variances across them rejects at α = {HOMOGENEITY_ALPHA:g}, then each row's "
        "own on S − 1 df, never below the training noise of its repetitions, σ_e²/R, where the "
        "footer names the row 'at the training floor' (docs/protocols.md §4.5): " + "; ".join(parts) + "."
    ]


def _markdown_footer(s: Section) -> list[str]:
    trials = s.search_trials()
    if not trials:
        out = [f"Budget `{s.label}`; no hyperparameter search (loss defaults)."]
    elif len(set(trials.values())) == 1:
        (c, n), *_ = trials.values()
        out = [f"Budget `{s.label}`; search trials complete: {c}/{n} for every loss."]
    else:
        out = [
            f"Budget `{s.label}`; search trials per loss: "
            + ", ".join(f"{loss} {c}/{n}" for loss, (c, n) in trials.items())
            + "."
        ]
    out += tier_footer(s)
    out += seed_variance_footer(s)
    out += footer_notes(s.chosen)
    # The per-loss shares are the table's "Stopped by patience" column; the rule stays here.
    out += convergence_footer(s.budget, s.chosen)[1:]
    if any(len(r.seeds) > 1 for r in s.rows):
        out.append(
            "A row of several search seeds shows the stops of its least converged seed (the lowest "
            "test share) and is 'not converged' when that seed is."
        )
    out += code_footer(s.chosen)
    seeds = s.seed_records()
    out += bound_footer(seeds)
    out += reproducibility_footer(seeds)
    devs = s.deviations()
    if devs:
        out += ["", "Deviations from the paper protocol:", ""]
        out += [f"- `{key}` = {value!r} (paper {paper!r})" for key, paper, value in devs]
    else:
        out.append("No deviations from the paper protocol.")
    return out


# -- CSV ----------------------------------------------------------------------------------------

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


#: Provenance columns of the CSV, which has no footer: the CPU kind and torch threads per fold
#: of the row's records (distinct values joined by "; ", since both change the fold results:
#: :func:`reproducibility_footer`) and the best settings at a bound of their searched range
#: (:func:`bound_footer`'s text for the row's seeds; empty when none).
CSV_PROVENANCE = (*(key for _, key, _ in ROW_ENVIRONMENT), "best_params_at_bound")


def row_records(seeds: Sequence[RunRecord], row: Row) -> list[RunRecord]:
    """The records of a section's seeds (:meth:`Section.seed_records`) behind one row."""
    return [x for x in seeds if x.loss == row.loss]


def csv_provenance(records: Sequence[RunRecord]) -> list[str]:
    """The :data:`CSV_PROVENANCE` cells of a row from its seeds' records (empty without any, as
    for the untrained row)."""
    if not records:
        return [""] * len(CSV_PROVENANCE)

    environment = [
        "; ".join(recorded_as_text(v) for v in values) for values in row_environment(records).values()
    ]
    bounds = "; ".join(_bound_part(r, hits) for r, hits in search_bound_hits(records))
    return [*environment, bounds]


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


#: The unit of the CSV's and JSON's metric values (the Markdown and LaTeX tables show percent).
CSV_UNIT = "fraction"


def csv_text(lb: Leaderboard) -> str:
    """The same rows as the Markdown table, as machine-readable CSV (fractions, not percent):
    per column the mean, the 95% half-width, its degrees of freedom, whether the row is in the
    best tier and its compact letters; per row the seeds, the interval's scope, the convergence
    counts and the provenance the other formats give in their footers (:data:`CSV_PROVENANCE`)."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    cols = _columns(lb.metrics, lb.modes)
    writer.writerow(
        ["budget", "loss", "name", "seeds", "reps_per_seed", "interval_covers", "commit", "unit"]
        + [
            f"{mode}_{m}_{part}"
            for mode, m in cols
            for part in ("mean", "half_width", "df", "best_tier", "group")
        ]
        + list(CSV_CONVERGENCE)
        + list(CSV_PROVENANCE)
    )
    for s in lb.sections:
        seeds = s.seed_records()
        for r in s.rows:
            values: list[str] = []
            for col in cols:
                mean, hw = r.cells[col]
                est = r.estimates.get(col)
                df = "" if est is None or math.isnan(est.df) else repr(est.df)
                best = "" if r.loss == UNTRAINED else str(s.is_best(r, *col)).lower()
                values += [
                    "" if math.isnan(mean) else repr(mean),
                    "" if math.isnan(hw) else repr(hw),
                    df,
                    best,
                    s.letters(r, *col),
                ]
            writer.writerow(
                [
                    # The section's label: rows of one budget's different settings stay apart.
                    s.label,
                    r.loss,
                    r.name,
                    r.seeds_text,
                    r.reps,
                    r.scope,
                    r.commit,
                    CSV_UNIT,
                    *values,
                    *csv_convergence(r),
                    *csv_provenance(row_records(seeds, r)),
                ]
            )
    return buf.getvalue()


# -- the former entry points (records grouped by budget + metrics) -------------------------------


def render_markdown(
    dataset: str, protocol: str, by_budget: Mapping[str, Sequence[RecordLike]], metrics: Sequence[str]
) -> str:
    """:func:`markdown_text` of the leaderboard of ``by_budget`` with ``metrics``."""
    return markdown_text(build_leaderboard(dataset, protocol, by_budget, metrics))


def render_csv(by_budget: Mapping[str, Sequence[RecordLike]], metrics: Sequence[str]) -> str:
    """:func:`csv_text` of the leaderboard of ``by_budget`` with ``metrics``."""
    return csv_text(build_leaderboard("", "", by_budget, metrics))


def write_leaderboard(results_dir: Path, dataset: str, protocol: str) -> list[Path]:
    """Regenerate ``leaderboard.md`` and ``.csv`` only; return their paths.

    :func:`benchmark.report.tables.write_tables` writes all four formats; this one stays for
    scripts that want only these two. Same model, same metric columns.
    """
    lb = load_leaderboard(results_dir, dataset, protocol, require_metric=False)
    folder = results_dir / dataset / protocol
    md, csv_path = folder / "leaderboard.md", folder / "leaderboard.csv"
    texts = {md: markdown_text(lb), csv_path: csv_text(lb)}  # both rendered before either is written
    for path, text in texts.items():
        write_text_atomic(path, text)
    return [md, csv_path]
