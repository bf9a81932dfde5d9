"""Plots from synthetic records: PNG/PDF files written and non-empty, skips noted, PED-ANOVA sane."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure
from matplotlib.layout_engine import ConstrainedLayoutEngine
from record_factory import MLRC, run_record, spread

from benchmark.cli import report_cmd
from benchmark.orphans import guarded_pool
from benchmark.report import figure_files
from benchmark.report.figure_files import save_figure, save_figures
from benchmark.report.plots import (
    MIN_IMPORTANCE_TRIALS,
    PLOT_KINDS,
    importance_target_quantile,
    param_importances,
    training_wall_s,
    write_plots,
)

SPACE = {"margin": {"low": 0.0, "high": 1.0, "log": False}, "lr": {"low": 1e-6, "high": 1.0, "log": True}}
KINDS = PLOT_KINDS


def trial(
    number: int, margin: float, lr: float, value: float | None, state: str = "COMPLETE"
) -> dict[str, Any]:
    folds = [
        {"best_val_map_at_r": value or 0.0, "best_epoch": 2, "epochs": 3,
         "curve": [[1, 0.1 + 0.01 * k], [2, 0.2 + 0.01 * k], [3, 0.15 + 0.01 * k]]}
        for k in range(4)
    ]  # fmt: skip
    return {
        "number": number,
        "state": state,
        "origin": "sobol" if number < 2 else "sampler",
        "params": {"margin": margin, "lr": lr},
        "value": value,
        "fold_sem": None if value is None else 0.01,
        "wall_s": 10.0,
        "folds": folds if state == "COMPLETE" else [],
    }


def make_record(loss: str, trials: list[dict[str, Any]], sep_map: float, created: str) -> dict[str, Any]:
    """A record of ``trials`` whose per-rep values are ``sep_map`` ± 0.01, 0.1 higher concatenated."""
    best = max((t for t in trials if t["state"] == "COMPLETE"), key=lambda t: t["value"])
    return run_record(
        loss,
        created,
        per_rep=spread(dict.fromkeys(MLRC, sep_map), concat_gain=0.1),
        display=loss.title(),
        config={"model": {"embedding_dim": 16}, "protocol": {"n_folds": 4}},
        commit=None,
        search={"n_trials": len(trials), "space": SPACE, "best_trial": best["number"], "trials": trials},
        timings_s={"data": 1.0, "search": 300.0 if loss == "mfcont" else 150.0, "test": 60.0, "total": 362.0},
    )


@pytest.fixture(scope="module")
def plotted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Two losses (one with too few trials for importance), plotted once through ``report --plots``."""
    root = tmp_path_factory.mktemp("results")
    rng = random.Random(0)
    many = [
        trial(i, rng.random(), 10 ** rng.uniform(-6, 0), rng.random() * 0.5)
        for i in range(MIN_IMPORTANCE_TRIALS)
    ]
    n = MIN_IMPORTANCE_TRIALS
    many += [trial(n, 0.5, 1e-3, None, "FAIL"), trial(n + 1, 0.4, 1e-2, None, "PRUNED")]
    few = [trial(i, rng.random(), 10 ** rng.uniform(-6, 0), rng.random() * 0.3) for i in range(3)]
    folder = root / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    for r in (make_record("mfcont", many, 0.3, "2"), make_record("arcface", few, 0.2, "1")):
        (folder / f"{r['loss']}.json").write_text(json.dumps(r))
    args = argparse.Namespace(dataset="glyphs", protocol="mlrc", metrics=None, format="md", budget=None,
                              results_dir=root, plots=True)  # fmt: skip
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert report_cmd.handle(args) == 0
    return root, err.getvalue()


def test_files_exist_and_are_non_empty(plotted: tuple[Path, str]) -> None:
    root, messages = plotted
    folder = root / "glyphs" / "mlrc" / "plots"
    for kind in KINDS:
        png, pdf = folder / f"{kind}-mini.png", folder / f"{kind}-mini.pdf"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000, kind
        assert pdf.read_bytes()[:5] == b"%PDF-" and pdf.stat().st_size > 2000, kind
        assert f"plot: {png}" in messages and f"plot: {pdf}" in messages


def test_saving_processes_write_the_same_bytes(
    plotted: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plots saved by 2 spawned processes are the bytes one process writes, in the same order."""
    root, _ = plotted
    submitted: list[str] = []

    def counting_pool(workers: int) -> ProcessPoolExecutor:  # the real pool, counting what it is given
        pool = guarded_pool(workers)
        submit = pool.submit

        def counted(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            submitted.append(args[1])
            return submit(fn, *args, **kwargs)

        pool.submit = counted  # type: ignore[method-assign]
        return pool

    monkeypatch.setattr(figure_files, "guarded_pool", counting_pool)
    written: dict[int, dict[str, bytes]] = {}
    for jobs in (1, 2):
        copy = tmp_path / f"jobs{jobs}"
        shutil.copytree(root, copy)
        paths = write_plots(copy, "glyphs", "mlrc", log=lambda _: None, jobs=jobs)
        written[jobs] = {p.name: p.read_bytes() for p in paths}
        assert [p.name for p in paths][-1] == "README.md"
        # jobs=1 saves in this process; jobs=2 hands every figure to the pool.
        assert len(submitted) == (0 if jobs == 1 else len(KINDS))
    assert list(written[1]) == list(written[2]) and len(written[1]) == 2 * len(KINDS) + 1
    assert written[1] == written[2]


def test_save_figure_keeps_the_layout_engine(tmp_path: Path) -> None:
    fig = Figure(layout="constrained")
    fig.add_subplot().plot([0, 1], [1, 0])
    paths = save_figure(fig, tmp_path / "fig")
    assert [p.name for p in paths] == ["fig.png", "fig.pdf"]
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    with pytest.raises(ValueError, match="jobs must be at least 1, got 0"):
        save_figures([(fig, tmp_path / "fig")], jobs=0)


def test_too_few_trials_noted(plotted: tuple[Path, str]) -> None:
    root, messages = plotted
    note = (
        "importance-mini: arcface skipped: 3 complete trials "
        f"(PED-ANOVA here needs at least {MIN_IMPORTANCE_TRIALS})."
    )
    assert note in messages
    readme = (root / "glyphs" / "mlrc" / "plots" / "README.md").read_text()
    assert note in readme and "fold epochs per seed (search + test stages)" in readme


def test_figures_no_longer_drawn_are_removed(plotted: tuple[Path, str], tmp_path: Path) -> None:
    """A figure file of a section or kind the leaderboard no longer draws goes; other files stay."""
    root, _ = plotted
    copy = tmp_path / "results"
    shutil.copytree(root, copy)
    folder = copy / "glyphs" / "mlrc" / "plots"
    stale = [f"{kind}-mini-earlier-f4cab4.{fmt}" for kind in KINDS for fmt in figure_files.FORMATS]
    stale += ["importance-paper.png", "metrics-paper.pdf"]
    others = ["notes.png", "metrics.txt", "my-metrics-mini.png"]
    for name in stale + others:
        (folder / name).write_bytes(b"old")
    logged: list[str] = []
    paths = write_plots(copy, "glyphs", "mlrc", log=logged.append, jobs=1)
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([p.name for p in paths] + others)
    assert not set(stale) & set(left)
    assert {f"{kind}-mini.{fmt}" for kind in KINDS for fmt in figure_files.FORMATS} <= set(left)
    removed = [m for m in logged if m.startswith("plots: removed ")]
    assert sorted(m.split()[2] for m in removed) == sorted(stale)


def test_no_records_no_plots(tmp_path: Path) -> None:
    logged: list[str] = []
    assert write_plots(tmp_path, "glyphs", "mlrc", log=logged.append) == []
    assert logged and "nothing plotted" in logged[0]


def test_ped_anova_finds_the_important_parameter() -> None:
    rng = random.Random(1)
    trials = []
    for i in range(30):
        margin, lr = rng.random(), 10 ** rng.uniform(-6, 0)
        trials.append(trial(i, margin, lr, 1.0 - abs(margin - 0.8)))  # only the margin matters
    result = param_importances(make_record("mfcont", trials, 0.3, "1"))
    assert not isinstance(result, str)
    importances, n, q = result
    assert n == 30 and q == pytest.approx(0.1)
    assert sum(importances.values()) == pytest.approx(1.0)
    assert importances["margin"] > 0.8 > importances["lr"]


def test_importance_skips_and_quantile() -> None:
    record = make_record("x", [trial(i, 0.1 * i, 1e-3, 0.1 * i) for i in range(5)], 0.3, "1")
    record["search"]["space"] = {}
    assert param_importances(record) == "nothing was searched (empty search space)"
    assert importance_target_quantile(8) == 0.25 and importance_target_quantile(50) == 0.1
    assert importance_target_quantile(5) == 0.4
    assert training_wall_s(record) == 210.0
    assert training_wall_s({"timings_s": {"search": 1.0}}) is None


def _label_boxes(fig: Figure, texts: list[Any]) -> list[Any]:
    """The labels' own text boxes in pixels (an annotation's extent would include its leader line)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    canvas = FigureCanvasAgg(fig)
    # matplotlib's backend_agg is unannotated (as in benchmark.report.plots.separate_labels).
    canvas.draw()  # type: ignore[no-untyped-call]
    renderer = canvas.get_renderer()  # type: ignore[no-untyped-call]
    return [Text.get_window_extent(t, renderer) for t in texts]


def test_place_labels_moves_labels_off_markers_and_each_other() -> None:
    """Five points in a row, closer than their labels are long: at the default spot (right of the
    point) each label covers its neighbour's marker; placed, none covers a marker or another
    label, and all stay inside the axes. Synthetic, so it does not depend on the committed boards."""
    from benchmark.report.plots import place_labels

    fig = Figure(figsize=(7, 5), layout="constrained")
    ax = fig.add_subplot()
    points = [(float(x), 0.0) for x in range(1, 6)]
    ax.plot([x for x, _ in points], [y for _, y in points], "o")
    ax.set_xlim(0, 6)
    ax.set_ylim(-1, 1)
    texts = [
        ax.annotate(
            f"a label wider than the gap {i}",
            xy,
            textcoords="offset points",
            xytext=(6, -3),
            ha="left",
            fontsize="x-small",
            arrowprops={"arrowstyle": "-"},
        )
        for i, xy in enumerate(points)
    ]

    def markers_covered() -> int:
        boxes = _label_boxes(fig, texts)  # drawn first: the layout moves the axes
        centres = ax.transData.transform(np.asarray(points))
        return sum(any(box.contains(x, y) for x, y in centres) for box in boxes)

    assert markers_covered() >= 3, "the layout does not test anything: labels miss the markers anyway"
    place_labels(fig, ax, texts, points)
    assert markers_covered() == 0
    boxes = _label_boxes(fig, texts)
    frame = ax.get_window_extent()
    for i, box in enumerate(boxes):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert not any(box.overlaps(b) for b in boxes[:i]), texts[i].get_text()


def test_wall_time_labels_never_overlap_on_the_committed_boards() -> None:
    """Rendered from the repository's own records (21 losses): the labels' text boxes are pairwise
    disjoint, cover no marker, each has a leader line to its point, and only the Pareto front is
    labelled."""
    from matplotlib.text import Annotation

    from benchmark.report.leaderboard import load_records
    from benchmark.report.plots import plot_wall_time

    results = Path(__file__).resolve().parent.parent / "results"
    for dataset in ("glyphs", "omniglot"):
        fig = plot_wall_time(load_records(results, dataset, "mlrc"), "map_at_r", "mini", lambda _: None)
        assert fig is not None
        (ax,) = fig.axes
        texts = [t for t in ax.texts if t.get_text()]
        assert texts, "the Pareto front is labelled"
        boxes = _label_boxes(fig, texts)
        # A label moved off its point keeps a line back to it.
        assert all(isinstance(t, Annotation) and t.arrow_patch is not None for t in texts)
        for i in range(len(boxes)):
            for j in range(i):
                assert not boxes[i].overlaps(boxes[j]), (texts[i].get_text(), texts[j].get_text())
        # No label covers a point's marker centre (either mode's: "o" and "s"; the errorbar caps
        # are markers too, "_", and may be covered), so every point stays visible.
        centres = [
            xy
            for line in ax.lines
            if line.get_marker() in ("o", "s")
            for xy in ax.transData.transform(line.get_xydata())
        ]
        assert len(centres) >= 2 * len(texts)
        for t, box in zip(texts, boxes, strict=True):
            assert not any(box.contains(x, y) for x, y in centres), (dataset, t.get_text())
        assert "fold epochs" in ax.get_xlabel()


def test_a_row_of_several_seeds_is_one_cost_point_and_one_seeds_panels_say_which(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wall_time draws the leaderboard row (seeds folded: its mean and interval) at the mean fold
    epochs per seed, labelled with its seed count; the one-search panels name the seed they show."""
    from benchmark.records import as_record
    from benchmark.report.leaderboard import build_rows
    from benchmark.report.plots import fold_epochs, plot_history, plot_wall_time

    def trials(epochs: int) -> list[dict[str, Any]]:
        out = [trial(i, 0.1 * i, 1e-3, 0.1 * (i + 1)) for i in range(3)]
        for t in out:
            for fold in t["folds"]:
                fold["epochs"] = epochs
        return out

    seed0 = make_record("mfcont", trials(30), 0.30, "1")
    seed1 = {**make_record("mfcont", trials(50), 0.40, "2"), "seed": 1}
    other = make_record("arcface", trials(3), 0.20, "3")
    records = [seed0, seed1, other]
    fig = plot_wall_time(records, "map_at_r", "mini", lambda _: None)
    assert fig is not None
    (ax,) = fig.axes
    separated = ax.containers[0]
    assert isinstance(separated, ErrorbarContainer) and separated.lines[0] is not None
    points = np.asarray(separated.lines[0].get_xydata(), dtype=float)
    assert len(points) == 2  # one per row, not per record
    rows = {r.loss: r for r in build_rows(records, ["map_at_r"])}
    cost = (fold_epochs(as_record(seed0)) or 0) + (fold_epochs(as_record(seed1)) or 0)
    assert cost > 0
    folded = rows["mfcont"].cells[("separated", "map_at_r")][0]
    assert folded == pytest.approx(0.35)  # the mean of the two seeds' means
    by_cost = {round(float(x), 6): float(y) for x, y in points.tolist()}
    assert by_cost[round(cost / 2, 6)] == pytest.approx(100 * folded)
    assert sorted(t.get_text() for t in ax.texts) == ["Arcface", "Mfcont (2 seeds)"]

    titles = [a.get_title() for a in plot_history(records, "mini").axes if a.get_title()]
    assert titles == ["Arcface: 3/3 complete", "Mfcont (search seed 1 of 0, 1):\n3/3 complete"]

    # write_plots hands these plots every record of the board section, not one per loss.
    from benchmark.report import plots

    given: list[int] = []

    def spy(real: Any) -> Any:
        def plot(recs: list[Any], *args: Any) -> Any:
            given.append(len(recs))
            return real(recs, *args)

        return plot

    for name in ("plot_history", "plot_val_curves", "plot_wall_time", "plot_importance"):
        monkeypatch.setattr(plots, name, spy(getattr(plots, name)))
    folder = tmp_path / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    for i, r in enumerate(records):
        (folder / f"{i}.json").write_text(json.dumps(r))
    plots.write_plots(tmp_path, "glyphs", "mlrc", log=lambda _: None)
    assert given == [3, 3, 3, 3]


def test_pareto_front_by_hand() -> None:
    from benchmark.report.plots import pareto_front

    # (cost, value): 0 dominates 1 (cheaper and better); 2 is dearer but the best; 3 equals 0.
    assert pareto_front([(1.0, 5.0), (2.0, 4.0), (3.0, 9.0), (1.0, 5.0)]) == [0, 2, 3]


def test_history_panels_share_one_y_scale(plotted: tuple[Path, str]) -> None:
    from benchmark.report.leaderboard import load_records
    from benchmark.report.plots import plot_history

    root, _ = plotted
    fig = plot_history(load_records(root, "glyphs", "mlrc"), "mini")
    limits = {tuple(ax.get_ylim()) for ax in fig.axes if ax.has_data()}
    assert len(limits) == 1


def test_a_panel_title_is_broken_only_where_it_is_wider_than_its_column() -> None:
    """Three panels in a row: the middle one's title (glyphs MFCWMS's, which ran off the figure on
    one line in the last column) is broken after the loss name and then lies inside its column; the
    short titles beside it stay on one line."""
    from benchmark.report.plots import _fit_panel_titles, _grid

    fig, axes = _grid(3)
    long = "MeanFieldClassWiseMultiSimilarity: trial #20 (objective 82.73%)"
    texts = ["Short: 10/10", long, "Short: 20/20"]
    titles = []
    for ax, text in zip(axes, texts, strict=True):
        ax.set_title(text, fontsize="medium")
        titles.append((ax, text.replace(": ", ":\n", 1)))
    _fit_panel_titles(fig, titles)
    assert [ax.get_title().count("\n") for ax in axes] == [0, 1, 0]
    column = fig.bbox.width / 3
    box = _label_boxes(fig, [axes[1].title])[0]
    assert column <= box.x0 and box.x1 <= 2 * column


def test_panel_titles_stay_inside_the_figure_and_apart_on_the_committed_boards() -> None:
    """Rendered from the repository's own records, every section of both boards: each panel title
    of the one-record-per-panel plots lies inside the figure and overlaps no other title (a
    one-line title longer than its panel ran off the figure's right edge)."""
    from benchmark.report.leaderboard import build_leaderboard, group_by_budget, load_records
    from benchmark.report.plots import plot_history, plot_importance, plot_val_curves

    results = Path(__file__).resolve().parent.parent / "results"
    drawn = 0
    for dataset in ("glyphs", "omniglot"):
        board = build_leaderboard(dataset, "mlrc", group_by_budget(load_records(results, dataset, "mlrc")))
        for section in board.sections:
            records = list(section.records)
            for fig in (
                plot_history(records, section.label),
                plot_val_curves(records, section.label, lambda _: None),
                plot_importance(records, section.label, lambda _: None),
            ):
                if fig is None:
                    continue
                titled = [ax for ax in fig.axes if ax.get_title()]
                boxes = _label_boxes(fig, [ax.title for ax in titled])
                width = fig.bbox.width
                for i, (ax, box) in enumerate(zip(titled, boxes, strict=True)):
                    assert box.x0 >= 0 and box.x1 <= width, (dataset, ax.get_title())
                    assert not any(box.overlaps(b) for b in boxes[:i]), (dataset, ax.get_title())
                drawn += len(titled)
    assert drawn > 40, "the boards' panels were drawn"
