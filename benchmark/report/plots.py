"""Plots derived from run records (§6), written as PNG and PDF to ``<dataset>/<protocol>/plots/``.

Per budget (numbers of different budgets are not comparable). ``metrics`` and ``wall_time`` show
the leaderboard rows (a loss's search seeds folded); the others show one search per loss, its
newest record's, named by seed where the row folds several:

- ``metrics-<budget>``: every test metric, mean ± 95% CI per loss, separated and concatenated;
  the untrained model as a dashed reference line (a grey band: its interval over seeds, if any).
- ``history-<budget>``: optimisation history per loss — objective (mean over folds of the best
  validation MAP@R, ± fold standard error) per trial, best-so-far line, best trial starred, failed
  and pruned trials marked at the bottom.
- ``val_curves-<budget>``: validation MAP@R per epoch for each fold of the best trial.
- ``wall_time-<budget>``: test MAP@R (± CI) against training cost in fold epochs per seed (search
  + test stages), a unit that depends on neither the host nor its load, unlike the record's
  ``timings_s`` (which also miss the time of an invocation that ended without saving them; the
  file keeps its name).
- ``importance-<budget>``: hyperparameter importance per loss by Optuna's PED-ANOVA
  (:class:`optuna.importance.PedAnovaImportanceEvaluator`) over the record's complete trials, on
  an in-memory study rebuilt from them; losses with fewer than :data:`MIN_IMPORTANCE_TRIALS`
  complete trials or nothing tuned are skipped with a note.

Figures are built with the object-oriented API on the Agg canvas (no pyplot, no global backend).
A ``README.md`` in the plot folder explains the files and lists what was skipped.
"""

from __future__ import annotations

import math
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backend_bases import RendererBase
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

from benchmark.analysis.convergence import stage_fold_stats
from benchmark.errors import DmlbenchError
from benchmark.io import write_text_atomic
from benchmark.metrics import METRICS
from benchmark.records import (
    RunRecord,
    SearchDoc,
    TrialDoc,
    as_record,
    latest_per_loss,
    nan_if_none,
    replicates_per_loss,
)
from benchmark.report.figure_files import FORMATS, save_figures
from benchmark.report.leaderboard import (
    MODES,
    UNTRAINED,
    Leaderboard,
    RecordLike,
    build_leaderboard,
    build_rows,
    group_by_budget,
    load_records,
    mode_titles,
    record_modes,
)

# PED-ANOVA compares the top 10% of the trials with all of them: below 20 complete trials that top
# is fewer than 2 trials, and the bars are noise with no uncertainty shown, so none are drawn
# (the `mini` budget's 10 trials get none; `paper`'s 50 do).
MIN_IMPORTANCE_TRIALS = 20
OBJECTIVE_LABEL = "objective (mean best val MAP@R)"
#: The figures a section can have; each is saved as ``<kind>-<section slug>.{png,pdf}``. A kind
#: drawn must be one of these (the type says so), so that :func:`stale_plots` prunes its old files.
PlotKind = Literal["metrics", "history", "val_curves", "wall_time", "importance"]
PLOT_KINDS: tuple[PlotKind, ...] = get_args(PlotKind)
Log = Callable[[str], None]
_UMASK = os.umask(0)
os.umask(_UMASK)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def _grid(
    n: int, width: float = 4.2, height: float = 3.2, max_cols: int = 3, sharey: bool = False
) -> tuple[Figure, list[Axes]]:
    """n panels; ``sharey``: one y scale for all (so a flat panel does not look dramatic)."""
    cols = min(n, max_cols)
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(max(width * cols, 7.0), height * rows), layout="constrained")
    axes: list[Axes] = []
    for i in range(n):
        axes.append(fig.add_subplot(rows, cols, i + 1, sharey=axes[0] if sharey and axes else None))
    return fig, axes


def _name(record: RunRecord) -> str:
    return record.loss_display_name


def _panel_title(record: RunRecord, records: Sequence[RecordLike], text: str) -> tuple[str, str]:
    """A panel's title for one record (its search, its curves) and that title broken after the
    loss's name. It is ``"<loss>: <text>"`` on one line, which :func:`_fit_panel_titles` breaks
    where it does not fit; where the loss's row folds several search seeds, which the panel does
    not, the name gives the record's seed and the title is always broken."""
    seeds = [r.seed for r in replicates_per_loss(records).get(record.loss, [])]
    if len(seeds) < 2:
        return f"{_name(record)}: {text}", f"{_name(record)}:\n{text}"
    broken = f"{_name(record)} (search seed {record.seed} of {', '.join(map(str, seeds))}):\n{text}"
    return broken, broken


def _agg_renderer(fig: Figure) -> RendererBase:
    """Draw ``fig`` with Agg and return the renderer, for measuring rendered text: the layout
    helpers below place and break text by its drawn size, whatever backend the caller uses."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # type: ignore[no-untyped-call]  # backend_agg is unannotated
    renderer: RendererBase = canvas.get_renderer()  # type: ignore[no-untyped-call]
    return renderer


def _fit_panel_titles(fig: Figure, titles: Sequence[tuple[Axes, str]]) -> None:
    """Give each panel in ``titles`` its broken title (the ``str``) where its one-line title,
    rendered, is wider than the panel's column of the figure: it would run into the next panel's
    title or, in the last column, off the figure (MFCWMS's validation-curve title lost its end
    there). Measured rather than counted in characters, since glyph widths differ."""
    renderer = _agg_renderer(fig)
    for ax, broken in titles:
        spec = ax.get_subplotspec()
        if spec is None or ax.get_title() == broken:
            continue
        column = fig.bbox.width / spec.get_gridspec().ncols
        box = Text.get_window_extent(ax.title, renderer)
        if box.x0 < spec.colspan.start * column or box.x1 > spec.colspan.stop * column:
            ax.set_title(broken, fontsize="medium")


def _searched(record: RunRecord) -> SearchDoc:
    """The record's search (the plots that need one are drawn only for searched records)."""
    if record.search is None:
        raise DmlbenchError(f"The record of {record.loss!r} ({record.source}) has no hyperparameter search.")
    return record.search


# -- (a) metric ± CI ----------------------------------------------------------------------------


def plot_metrics(records: Sequence[RecordLike], metrics: Sequence[str], budget: str) -> Figure:
    """Mean ± 95% interval (percent) per leaderboard row (seeds folded, sorted by the first
    column as the table is), one row of panels per metric, one column per mode."""
    typed = [as_record(r) for r in records]
    modes = record_modes(typed)
    titles = mode_titles(typed)
    rows = build_rows(typed, metrics, modes)
    untrained_row = next(r for r in rows if r.loss == UNTRAINED)
    rows = [r for r in rows if r.loss != UNTRAINED]
    n = len(rows)
    fig = Figure(figsize=(5 * len(modes), len(metrics) * (0.2 * n + 1.1)), layout="constrained")
    y = np.arange(n)
    labels = [r.name + (f" ({len(r.seeds)} seeds)" if len(r.seeds) > 1 else "") for r in rows]
    for i, m in enumerate(metrics):
        spec = METRICS.get(m)
        for j, (mode, _) in enumerate(modes):
            ax = fig.add_subplot(len(metrics), len(modes), len(modes) * i + j + 1)
            means = np.array([100 * r.cells[(mode, m)][0] for r in rows])
            hws = np.array([100 * r.cells[(mode, m)][1] for r in rows])
            ax.errorbar(
                means, y, xerr=np.nan_to_num(hws), fmt="o", color="tab:blue", ecolor="tab:blue", capsize=3
            )
            untrained, untrained_hw = untrained_row.cells[(mode, m)]
            if not math.isnan(untrained):
                ax.axvline(100 * untrained, color="grey", linestyle="--", linewidth=1, label="untrained")
                if not math.isnan(untrained_hw):  # several seeds: the row's interval over them
                    lo, hi = 100 * (untrained - untrained_hw), 100 * (untrained + untrained_hw)
                    ax.axvspan(lo, hi, color="grey", alpha=0.2, linewidth=0)
                if i == 0 and j == 0:
                    ax.legend(loc="best", fontsize="small")
            ax.set_yticks(y, labels if j == 0 else [""] * n)
            ax.invert_yaxis()
            ax.set_xlabel(f"{spec.display_name} (%)")
            ax.set_title(f"{titles.get(mode, mode)}: {spec.display_name}", fontsize="medium")
            ax.grid(axis="x", alpha=0.3)
    fig.suptitle(
        f"Test metrics, mean ± 95% interval (budget {budget})\none-seed rows: over training seeds; "
        "rows with k seeds: over search and training seeds",
        fontsize="medium",
    )
    return fig


# -- (b) optimisation history -------------------------------------------------------------------


def plot_history(records: Sequence[RecordLike], budget: str) -> Figure:
    """Objective per trial, best-so-far line, best trial starred, failed/pruned trials marked."""
    chosen = latest_per_loss(records)
    fig, axes = _grid(len(chosen), sharey=True)
    titles: list[tuple[Axes, str]] = []
    for ax, r in zip(axes, chosen, strict=True):
        search = _searched(r)
        trials = sorted(search["trials"], key=lambda t: _number(t))
        done = [t for t in trials if t["state"] == "COMPLETE" and t["value"] is not None]
        values = [_value(t) for t in done]
        for origin, marker, label in (("sobol", "s", "quasi-random start"), (None, "o", "sampler")):
            sel = [t for t in done if (t["origin"] == "sobol") == (origin == "sobol")]
            if sel:
                ax.errorbar(
                    [_number(t) + 1 for t in sel],
                    [_value(t) for t in sel],
                    yerr=[t["fold_sem"] if t["fold_sem"] is not None else 0.0 for t in sel],
                    fmt=marker,
                    markersize=4,
                    capsize=2,
                    alpha=0.8,
                    label=label,
                )
        if done:
            xs = [_number(t) + 1 for t in done]
            ax.step(
                xs,
                np.maximum.accumulate(values),
                where="post",
                color="black",
                linewidth=1.2,
                label="best so far",
            )
            best = max(done, key=lambda t: (_value(t), -_number(t)))
            ax.plot(
                [_number(best) + 1],
                [_value(best)],
                marker="*",
                markersize=13,
                color="gold",
                markeredgecolor="black",
                linestyle="none",
                label=f"best (#{_number(best) + 1})",
            )
        bottom = min(values) if values else 0.0
        for state, marker, color in (("FAIL", "x", "tab:red"), ("PRUNED", "v", "tab:grey")):
            bad = [_number(t) + 1 for t in trials if t["state"] == state]
            if bad:
                ax.plot(
                    bad,
                    [bottom] * len(bad),
                    marker=marker,
                    color=color,
                    linestyle="none",
                    markersize=8,
                    label=state.lower(),
                )
        title, broken = _panel_title(r, records, f"{len(done)}/{search['n_trials']} complete")
        ax.set_title(title, fontsize="medium")
        titles.append((ax, broken))
        ax.set_xlabel("trial (1-based, as the progress display counts)")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(OBJECTIVE_LABEL)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.suptitle(f"Optimisation history (budget {budget}); error bars: fold s.e.", fontsize="medium")
    _fit_panel_titles(fig, titles)
    return fig


# -- (c) validation curves of the best trial ----------------------------------------------------


def _number(trial: TrialDoc) -> int:
    number = trial["number"]
    return -1 if number is None else number


def _value(trial: TrialDoc) -> float:
    return nan_if_none(trial["value"])


def _best_trial(record: RunRecord) -> TrialDoc | None:
    search = _searched(record)
    for t in search["trials"]:
        if t["number"] is not None and t["number"] == search["best_trial"]:
            return t
    return None


def plot_val_curves(records: Sequence[RecordLike], budget: str, log: Log) -> Figure | None:
    """Validation MAP@R per epoch of every fold of each loss's best trial; None without curves."""
    chosen = []
    for r in latest_per_loss(records):
        best = _best_trial(r)
        if best is None or not any(f["curve"] for f in best["folds"]):
            log(f"val_curves-{budget}: {r.loss} has no validation curves for its best trial; skipped.")
            continue
        chosen.append((r, best))
    if not chosen:
        return None
    fig, axes = _grid(len(chosen))
    titles: list[tuple[Axes, str]] = []
    for ax, (r, best) in zip(axes, chosen, strict=True):
        for k, fold in enumerate(best["folds"]):
            curve = np.asarray(fold["curve"], dtype=float).reshape(-1, 2)
            if not len(curve):
                continue
            (line,) = ax.plot(curve[:, 0], 100 * curve[:, 1], marker=".", label=f"fold {k}")
            be = fold.get("best_epoch")
            hit = curve[curve[:, 0] == be] if be is not None else curve[:0]
            if len(hit):
                ax.plot(
                    hit[:1, 0],
                    100 * hit[:1, 1],
                    marker="o",
                    markersize=8,
                    markerfacecolor="none",
                    color=line.get_color(),
                )
        title, broken = _panel_title(
            r, records, f"trial #{_number(best) + 1} (objective {100 * _value(best):.2f}%)"
        )
        ax.set_title(title, fontsize="medium")
        titles.append((ax, broken))
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel("validation MAP@R (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize="x-small")
    fig.suptitle(
        f"Validation curves of the best trial (budget {budget}); circle: best epoch", fontsize="medium"
    )
    _fit_panel_titles(fig, titles)
    return fig


# -- (d) accuracy vs wall time ------------------------------------------------------------------


def training_wall_s(record: RunRecord | Mapping[str, Any]) -> float | None:
    """``timings_s["search"] + timings_s["test"]`` of a record, None when either is missing.

    A plain mapping needs only ``timings_s`` (for scripts); a record answers from its typed timings.
    """
    if isinstance(record, RunRecord):
        return record.training_wall_s()
    timings = record.get("timings_s", {})
    if timings.get("search") is None or timings.get("test") is None:
        return None
    return float(timings["search"]) + float(timings["test"])


def fold_epochs(record: RunRecord) -> int | None:
    """All fold epochs of a record (search and test stages): its cost in a unit that does not
    depend on the machine or its load (None when it stores no fold results)."""
    stats = stage_fold_stats(record.document)
    total = sum(int(v["epochs"]) for v in stats.values())
    return total or None


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both cost (lower x) and value (higher y)."""
    out = []
    for i, (x, y) in enumerate(points):
        if not any(
            (x2 <= x and y2 >= y) and (x2 < x or y2 > y) for j, (x2, y2) in enumerate(points) if j != i
        ):
            out.append(i)
    return out


def separate_labels(fig: Figure, texts: Sequence[Any], max_rounds: int = 50) -> None:
    """Move annotation labels down until no two bounding boxes overlap (rendered with Agg)."""
    for _ in range(max_rounds):
        renderer = _agg_renderer(fig)
        # The text's own box: an annotation's would include its leader line.
        boxes = [Text.get_window_extent(t, renderer) for t in texts]
        moved = False
        for i in range(len(texts)):
            for j in range(i):
                if boxes[i].overlaps(boxes[j]):
                    x, y = texts[i].xyann
                    texts[i].xyann = (x, y - 1.1 * boxes[i].height * 72.0 / fig.dpi)
                    moved = True
                    break
            if moved:
                break
        if not moved:
            return


#: Where a label may sit relative to its point (offset in points, horizontal alignment), in the
#: order tried: right, left, then ever further above and below on either side, then centred.
LABEL_SPOTS = (
    ((6, -3), "left"),
    ((-6, -3), "right"),
    *(((dx, dy), ha) for dy in (6, -12, 14, -20, 22, -28) for dx, ha in ((6, "left"), (-6, "right"))),
    ((0, 8), "center"),
    ((0, -16), "center"),
)


def place_labels(fig: Figure, ax: Any, texts: Sequence[Any], points: Sequence[tuple[float, float]]) -> None:
    """Put each annotation at the first of :data:`LABEL_SPOTS` where its text box stays inside the
    axes and covers no marker at ``points`` (data coordinates) and no label placed before it; with
    no such spot, at the one inside the axes that clears the earlier labels and covers the fewest
    markers (:func:`separate_labels` then parts any labels still touching)."""
    from matplotlib.transforms import Bbox

    renderer = _agg_renderer(fig)
    r = 5.0 * fig.dpi / 72.0  # a marker's half-width in pixels (markers are about 6 pt wide)
    markers = [
        Bbox.from_extents(x - r, y - r, x + r, y + r) for x, y in ax.transData.transform(np.asarray(points))
    ]
    frame = ax.get_window_extent(renderer)
    placed: list[Any] = []
    for t in texts:
        scored = []
        for k, (offset, ha) in enumerate(LABEL_SPOTS):
            t.xyann = offset
            t.set_horizontalalignment(ha)
            box = Text.get_window_extent(t, renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            # Sort key: outside the axes or on a label last, then the markers covered, then the order.
            clash = not inside or any(box.overlaps(b) for b in placed)
            scored.append((clash, sum(box.overlaps(m) for m in markers), k))
            if scored[-1][:2] == (False, 0):
                break
        offset, ha = LABEL_SPOTS[min(scored)[2]]
        t.xyann = offset
        t.set_horizontalalignment(ha)
        placed.append(Text.get_window_extent(t, renderer))


def plot_wall_time(records: Sequence[RecordLike], metric: str, budget: str, log: Log) -> Figure | None:
    """Test ``metric`` per leaderboard row (seeds folded: mean ± the row's interval, both modes)
    against the fold epochs the row's records trained per seed (search + test stages, mean over
    its seeds): a cost that does not depend on the host or its load, unlike wall time. Only the
    rows on the separated mode's Pareto front are labelled, and labels never overlap."""
    typed = [as_record(r) for r in records]
    replicates = replicates_per_loss(typed)
    rows = {r.loss: r for r in build_rows(typed, [metric], record_modes(typed)) if r.loss != UNTRAINED}
    chosen = []
    for loss, reps in replicates.items():
        epochs = [e for r in reps if (e := fold_epochs(r)) is not None]
        if len(epochs) < len(reps):
            log(f"wall_time-{budget}: {loss} has no fold results; skipped.")
            continue
        chosen.append((rows[loss], float(np.mean(epochs))))
    if not chosen:
        return None
    xs = np.array([e for _, e in chosen])
    spec = METRICS.get(metric)
    titles = mode_titles(typed)
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.add_subplot()
    texts = []
    for k, ((mode, _), marker) in enumerate(zip(MODES, ("o", "s"), strict=True)):
        means = [100 * row.cells[(mode, metric)][0] for row, _ in chosen]
        hws = [100 * row.cells[(mode, metric)][1] for row, _ in chosen]
        ax.errorbar(xs, means, yerr=np.nan_to_num(hws), fmt=marker, capsize=3, label=titles[mode])
        if k == 0:
            for i in pareto_front(list(zip(xs.tolist(), means, strict=True))):
                row = chosen[i][0]
                texts.append(
                    ax.annotate(
                        row.name + (f" ({len(row.seeds)} seeds)" if len(row.seeds) > 1 else ""),
                        (xs[i], means[i]),
                        textcoords="offset points",
                        xytext=(6, -3),
                        ha="left",
                        fontsize="x-small",
                        # A leader line: separate_labels may move a label off its point.
                        arrowprops={"arrowstyle": "-", "color": "grey", "linewidth": 0.5, "shrinkB": 3},
                    )
                )
    ax.set_xlim(0, 1.15 * float(xs.max()))
    ax.set_xlabel("cost: fold epochs trained per seed (search + test stages; independent of the host)")
    ax.set_ylabel(f"test {spec.display_name} (%)")
    ax.set_title(
        f"Test {spec.display_name} vs training cost (budget {budget}), mean ± 95% interval\none-seed "
        "rows: over training seeds; rows with k seeds: over search and training seeds\nlabelled: "
        "the separated mode's Pareto front",
        fontsize="small",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", loc="best")  # never over a point: a one-row board put its point under it
    points = [(x, 100 * row.cells[(mode, metric)][0]) for row, x in chosen for mode, _ in MODES]
    place_labels(fig, ax, texts, [(x, y) for x, y in points if not math.isnan(y)])
    separate_labels(fig, texts)
    return fig


# -- (e) hyperparameter importance --------------------------------------------------------------


def importance_target_quantile(n_complete: int) -> float:
    """PED-ANOVA's top quantile: 0.1 (Optuna's default) once that holds >= 2 trials, else 2/n
    (capped at 0.5), so a small search still compares at least two top trials with all of them."""
    return min(0.5, max(0.1, 2.0 / n_complete))


def param_importances(record: RecordLike) -> tuple[dict[str, float], int, float] | str:
    """PED-ANOVA importances (normalised to sum 1) of a record's searched hyperparameters.

    Returns ``(importances, n_complete_trials, target_quantile)``, or a string saying why none
    were computed (too few complete trials, nothing searched).
    """
    import optuna
    from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances
    from optuna.trial import TrialState

    from benchmark.search.study import distributions, space_from_document

    search = _searched(as_record(record))
    if not search["space"]:
        return "nothing was searched (empty search space)"
    dists = distributions(space_from_document(search["space"]))
    done = [
        t
        for t in search["trials"]
        if t["state"] == "COMPLETE"
        and (value := t["value"]) is not None
        and math.isfinite(value)
        and all(k in t["params"] for k in dists)
    ]
    if len(done) < MIN_IMPORTANCE_TRIALS:
        return f"{len(done)} complete trials (PED-ANOVA here needs at least {MIN_IMPORTANCE_TRIALS})"
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    try:
        study = optuna.create_study(direction="maximize")
        for t in done:
            params = {k: min(max(t["params"][k], dists[k].low), dists[k].high) for k in dists}
            study.add_trial(
                optuna.trial.create_trial(
                    params=params,
                    distributions=dict(dists),
                    value=_value(t),
                    state=TrialState.COMPLETE,
                )
            )
        q = importance_target_quantile(len(done))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            raw = get_param_importances(
                study, evaluator=PedAnovaImportanceEvaluator(target_quantile=q), normalize=False
            )
    finally:
        optuna.logging.set_verbosity(verbosity)
    total = sum(raw.values())
    if not total > 0:
        return "PED-ANOVA found no difference between the top trials and all trials"
    return {k: v / total for k, v in raw.items()}, len(done), q


def plot_importance(records: Sequence[RecordLike], budget: str, log: Log) -> Figure | None:
    """Horizontal bars of PED-ANOVA importance per loss; None when no loss qualifies."""
    results = []
    for r in latest_per_loss(records):
        res = param_importances(r)
        if isinstance(res, str):
            log(f"importance-{budget}: {r.loss} skipped: {res}.")
            continue
        results.append((r, res))
    if not results:
        return None
    fig, axes = _grid(len(results), height=2.6)
    titles: list[tuple[Axes, str]] = []
    for ax, (r, (imp, n, q)) in zip(axes, results, strict=True):
        names = list(imp)[::-1]
        ax.barh(names, [imp[k] for k in names], color="tab:green")
        ax.set_xlim(0, 1)
        ax.set_xlabel("importance (normalised)")
        title, broken = _panel_title(r, records, f"{n} trials, top {q:.0%}")
        ax.set_title(title, fontsize="medium")
        titles.append((ax, broken))
        ax.grid(axis="x", alpha=0.3)
    fig.suptitle(f"Hyperparameter importance, PED-ANOVA (budget {budget})", fontsize="medium")
    _fit_panel_titles(fig, titles)
    return fig


# -- driver -------------------------------------------------------------------------------------


_README = """# Plots of `{dataset}`, protocol `{protocol}`

Generated by `dmlbench` from the run records (per budget and board section: the leaderboard's
rows, or the newest record per loss where a plot shows one search); do not edit.
Each plot exists as PNG and PDF, one set per budget (`<kind>-<budget>`).

- `metrics-*`: test metrics per leaderboard row (seeds folded, sorted as the table), mean ± 95%
  interval (one-seed rows: over training seeds; multi-seed rows: over search and training seeds),
  separated and concatenated embeddings; dashed line = untrained model (grey band: its interval
  over seeds, where the section has several).
- `history-*`: search objective (mean over folds of the best validation MAP@R, ± fold standard
  error) per trial, one y scale for every panel; squares = quasi-random start, circles = sampler,
  line = best so far, star = best trial, red x = failed, grey triangle = pruned.
- `val_curves-*`: validation MAP@R per epoch for each fold of the best trial.
- `wall_time-*`: test MAP@R per leaderboard row (seeds folded, intervals as in `metrics-*`)
  against training cost in fold epochs per seed (search + test stages), a unit that does not
  depend on the host or its load; the rows on the separated mode's Pareto front are labelled.
- `history-*`, `val_curves-*`, `importance-*` show one search per loss, its newest record's; where
  the row folds several search seeds, the panel names the seed it shows.
- `importance-*`: Optuna PED-ANOVA hyperparameter importance from the complete search trials
  (top quantile 10%); drawn only for losses with at least {min_trials} complete trials (below
  that the top 10% is fewer than 2 trials).
"""


def stale_plots(folder: Path, written: Sequence[Path]) -> list[Path]:
    """The figure files in ``folder`` (``<kind>-*.png``/``.pdf`` of a :data:`PLOT_KINDS` kind) that
    are not in ``written``, sorted by name.

    ``write_plots`` redraws every section of every budget, so such a file is a figure of a section
    that no longer exists (an earlier-settings group whose losses were all rerun, a budget whose
    records were removed) or of a kind with nothing to plot now; left in place, it would sit beside
    the current plots as if it were one. Other files in the folder are not touched.
    """
    keep = {p.name for p in written}
    found = (
        p
        for kind in PLOT_KINDS
        for fmt in FORMATS
        for p in folder.glob(f"{kind}-*.{fmt}")
        if p.is_file() and p.name not in keep
    )
    return sorted(found, key=lambda p: p.name)


def write_plots(
    results_dir: Path,
    dataset: str,
    protocol: str,
    *,
    log: Log | None = None,
    leaderboard: Leaderboard | None = None,
    jobs: int | None = None,
) -> list[Path]:
    """(Re)write every plot of a dataset/protocol into ``results_dir/dataset/protocol/plots/``.

    Plots are drawn from ``leaderboard`` (the same object the tables render; read from the records
    when not given), per budget from its newest record per loss and the metrics those share.
    Returns the written paths (PNG and PDF of each plot, then ``README.md``, which also lists
    what was skipped). Skipped plots/losses are reported through ``log`` (default: stderr). No
    records means no plots (an empty list). The figures are saved by up to ``jobs`` processes
    (:func:`benchmark.report.figure_files.save_figures`; the files do not depend on ``jobs``).
    Figure files that this call did not write are removed (:func:`stale_plots`), so the folder
    holds the current figures only.
    """
    log = log or _stderr
    if leaderboard is None:
        records = load_records(results_dir, dataset, protocol)
        if not records:
            log(f"plots: no records for {dataset}/{protocol} under {results_dir}; nothing plotted.")
            return []
        leaderboard = build_leaderboard(dataset, protocol, group_by_budget(records))
    folder = results_dir / dataset / protocol / "plots"
    folder.mkdir(parents=True, exist_ok=True)
    notes: list[str] = []

    def note(message: str) -> None:
        notes.append(message)
        log(message)

    to_save: list[tuple[Figure, Path]] = []
    for section in leaderboard.sections:
        # One set of plots per section: records of a budget's different board settings are never
        # drawn into one figure (the label titles them, the slug names their files).
        budget, chosen, metrics = section.label, list(section.chosen), section.metrics
        slug = section.slug
        figures: list[tuple[PlotKind, Figure | None]] = []
        if metrics:
            figures.append(("metrics", plot_metrics(list(section.records), metrics, budget)))
        else:
            note(f"metrics-{slug}: the records share no registered metric; skipped.")
        if not all(r.search is not None for r in chosen):
            # traditional/cbir records: no search trials, folds or search timings to plot.
            note(f"history/val_curves/wall_time/importance-{slug}: protocol without a search; skipped.")
        else:
            # Every record of the section: these plots show the newest per loss (or the rows,
            # wall_time), and name its seed where the loss's row folds several.
            everything = list(section.records)
            figures.append(("history", plot_history(everything, budget)))
            figures.append(("val_curves", plot_val_curves(everything, budget, note)))
            wall_metric = "map_at_r" if "map_at_r" in metrics else (metrics[0] if metrics else None)
            if wall_metric is not None:
                figures.append(("wall_time", plot_wall_time(everything, wall_metric, budget, note)))
            figures.append(("importance", plot_importance(everything, budget, note)))
        for kind, fig in figures:
            if fig is None:
                note(f"{kind}-{slug}: nothing to plot.")
            else:
                to_save.append((fig, folder / f"{kind}-{slug}"))
    paths = save_figures(to_save, jobs)
    for stale in stale_plots(folder, paths):
        stale.unlink()
        log(f"plots: removed {stale.name} (a figure this leaderboard no longer draws).")
    readme = folder / "README.md"
    text = _README.format(dataset=dataset, protocol=protocol, min_trials=MIN_IMPORTANCE_TRIALS)
    earlier = [s.slug for s in leaderboard.sections if s.earlier]
    if earlier:
        text += (
            "\nSome budgets hold records made under earlier board settings; those are plotted apart, "
            "never beside the current ones: " + ", ".join(f"`<kind>-{slug}`" for slug in earlier) + ".\n"
        )
    if notes:
        text += "\nSkipped in the last run:\n\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    write_text_atomic(readme, text)
    os.chmod(readme, 0o666 & ~_UMASK)
    return [*paths, readme]
