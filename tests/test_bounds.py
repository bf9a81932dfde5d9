"""Best settings at a bound of the searched range (benchmark.analysis.bounds) and their leaderboard line."""

from __future__ import annotations

import csv
import io
import math
from typing import Any

import pytest
from test_report_tiers import _board

from benchmark.analysis.bounds import BOUND_TOLERANCE, BoundHit, bound_hits, position
from benchmark.report.leaderboard import build_leaderboard, csv_text, markdown_text
from benchmark.report.tables import json_data, latex_text

SPACE = {
    "margin": {"low": 0.0, "high": 1.0, "log": False},
    "scale": {"low": 0.01, "high": 200.0, "log": True},
    "param_lr": {"low": 1e-6, "high": 1.0, "log": True},
}


def test_position_is_the_share_of_the_width_on_the_searched_scale() -> None:
    assert position(0.25, 0.0, 1.0, log=False) == 0.25
    # Log ranges: 1e-3 lies half-way between 1e-6 and 1 in log space, not near the low end.
    assert position(1e-3, 1e-6, 1.0, log=True) == pytest.approx(0.5)
    naive = (math.log10(2.0) - math.log10(0.01)) / (math.log10(200.0) - math.log10(0.01))
    assert position(2.0, 0.01, 200.0, log=True) == pytest.approx(naive)


def test_values_within_the_tolerance_of_a_bound_are_hits_on_their_side() -> None:
    best = {"margin": 1.0, "scale": 199.99999999999991, "param_lr": 7.99e-6}
    assert bound_hits(SPACE, best) == [
        BoundHit("margin", 1.0, 1.0, "high"),
        BoundHit("scale", 199.99999999999991, 200.0, "high"),
    ]
    # Just inside and just outside the tolerance, on each side (linear range of width 1).
    assert [h.side for h in bound_hits(SPACE, {"margin": BOUND_TOLERANCE * 0.9})] == ["low"]
    assert bound_hits(SPACE, {"margin": BOUND_TOLERANCE * 1.1}) == []
    assert [h.side for h in bound_hits(SPACE, {"margin": 1 - BOUND_TOLERANCE * 0.9})] == ["high"]
    assert bound_hits(SPACE, {"margin": 1 - BOUND_TOLERANCE * 1.1}) == []
    # 1e-6 * (1e6)**0.005 is 0.5% of the log width above the low bound of param_lr.
    assert [h.side for h in bound_hits(SPACE, {"param_lr": 1e-6 * 1e6**0.005})] == ["low"]


def test_fixed_values_and_degenerate_ranges_are_never_hits() -> None:
    assert bound_hits(SPACE, {"temperature": 0.0}) == []  # not in the space: fixed, not searched
    assert bound_hits({"a": {"low": 1.0, "high": 1.0}}, {"a": 1.0}) == []
    assert bound_hits({"a": {"low": 1.0, "high": 10.0, "log": True}}, {"a": 0.0}) == []


def _search(best: dict[str, float]) -> dict[str, Any]:
    return {
        "sampler": "gp",
        "n_trials": 1,
        "space": SPACE,
        "fixed": {},
        "best_trial": 0,
        "best_value": 0.8,
        "best_params": best,
        "trials": [],
    }


def test_the_leaderboard_names_each_seed_whose_best_setting_is_at_a_bound() -> None:
    board = _board()
    for r in board:
        r["search"] = _search({"margin": 0.5, "scale": 3.0, "param_lr": 1e-3})
    clean = build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"])
    assert "Best setting at a bound" not in markdown_text(clean)
    assert "search_bounds" not in json_data(clean)["budgets"][0]  # optional: absent when none
    board[0]["search"] = _search({"margin": 1.0, "scale": 200.0, "param_lr": 1e-3})
    board[4]["search"] = _search({"margin": 0.5, "scale": 3.0, "param_lr": 1e-6})
    lb = build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"])
    text = markdown_text(lb)
    labels = [f"{r['loss']}/seed{r['seed']}" for r in (board[0], board[4])]
    assert (
        "Best setting at a bound of its searched range (within 1% of the width, on the scale "
        "searched): a better one may lie outside the range, unless the bound is the loss's natural "
        f"limit. {labels[0]}: margin = 1 (high bound 1), scale = 200 (high bound 200); "
        f"{labels[1]}: param_lr = 1e-06 (low bound 1e-06)." in text
    )
    # The LaTeX table carries the same line as a comment; a clean board has none there either.
    line = next(x for x in text.splitlines() if x.startswith("Best setting at a bound"))
    assert f"% {line}" in latex_text(lb).splitlines()
    assert "Best setting at a bound" not in latex_text(clean)
    # The CSV, which has no footer, gives each row its seeds' part of the same line; a row of two
    # seeds with one at a bound names that seed only, and rows without a hit leave the cell empty.
    cells = {r["loss"]: r["best_params_at_bound"] for r in csv.DictReader(io.StringIO(csv_text(lb)))}
    assert cells[board[0]["loss"]] == f"{labels[0]}: margin = 1 (high bound 1), scale = 200 (high bound 200)"
    assert cells[board[4]["loss"]] == f"{labels[1]}: param_lr = 1e-06 (low bound 1e-06)"
    assert {loss for loss, cell in cells.items() if cell} == {board[0]["loss"], board[4]["loss"]}
    assert not any(r["best_params_at_bound"] for r in csv.DictReader(io.StringIO(csv_text(clean))))
    # The JSON board holds the same values, one entry per hyperparameter at a bound.
    assert json_data(lb)["budgets"][0]["search_bounds"] == [
        {
            "loss": board[0]["loss"],
            "seed": board[0]["seed"],
            "name": "margin",
            "value": 1.0,
            "bound": 1.0,
            "side": "high",
        },
        {
            "loss": board[0]["loss"],
            "seed": board[0]["seed"],
            "name": "scale",
            "value": 200.0,
            "bound": 200.0,
            "side": "high",
        },
        {
            "loss": board[4]["loss"],
            "seed": board[4]["seed"],
            "name": "param_lr",
            "value": 1e-6,
            "bound": 1e-6,
            "side": "low",
        },
    ]
