"""The leaderboard's untrained row: a fixed choice of records (the section's most common embedding
space, one record per seed), a mean with a t-interval over seeds when there are several, and the
published-value join reading the same row."""

from __future__ import annotations

import math
from typing import Any

import pytest
import scipy.stats
from record_factory import MLRC, MODES, run_record, spread
from test_report_published import _table

from benchmark.records import as_record
from benchmark.report.leaderboard import (
    SCOPE_UNTRAINED,
    UNTRAINED,
    Row,
    build_rows,
    untrained_records,
)
from benchmark.report.published import join

BASE = {"map_at_r": 0.3, "precision_at_1": 0.6, "r_precision": 0.4}
SEP = ("separated", "map_at_r")


def _record(loss: str, created: str, *, seed: int, space: str, untrained: float) -> dict[str, Any]:
    doc = run_record(
        loss,
        created,
        per_rep=spread(BASE),
        seed=seed,
        config={"model": {"embedding_dim": 128}, "protocol": {"n_folds": 4}},
        untrained=untrained,
    )
    doc["embedding_space"] = space
    return doc


def _untrained(docs: list[dict[str, Any]]) -> Row:
    rows = build_rows([as_record(d) for d in docs], MLRC)
    (row,) = [r for r in rows if r.loss == UNTRAINED]
    assert rows[-1] is row  # the last row
    return row


def test_a_newer_record_of_another_space_does_not_move_the_row() -> None:
    cosine = [
        _record("a", "2026-01-01", seed=0, space="cosine", untrained=0.10),
        _record("b", "2026-01-02", seed=0, space="cosine", untrained=0.10),
    ]
    newest = _record("c", "2026-01-03", seed=0, space="euclidean", untrained=0.20)
    before, after = _untrained(cosine), _untrained([*cosine, newest])
    # Read from the newest record, the row would have become 0.20 (the euclidean loss's value).
    assert after.cells[SEP] == before.cells[SEP]
    assert after.cells[SEP][0] == pytest.approx(0.10) and math.isnan(after.cells[SEP][1])
    assert after.name == "Untrained (init trunk + random embedder; cosine)"
    assert after.seeds == (0,) and after.scope == ""


def test_a_tie_of_spaces_takes_the_first_by_name() -> None:
    docs = [
        _record("z", "2026-01-01", seed=0, space="euclidean", untrained=0.20),
        _record("y", "2026-01-02", seed=0, space="cosine", untrained=0.10),
    ]
    space, chosen = untrained_records([as_record(d) for d in docs])
    assert space == "cosine" and [r.loss for r in chosen] == ["y"]
    assert _untrained(docs[::-1]).cells[SEP][0] == pytest.approx(0.10)


def test_several_seeds_give_a_mean_with_a_t_interval_over_them() -> None:
    values = {0: 0.10, 1: 0.12, 2: 0.17}
    docs = [
        _record(loss, f"2026-01-0{seed + 1}-{loss}", seed=seed, space="cosine", untrained=v)
        for loss in ("a", "b")
        for seed, v in values.items()
    ]
    row = _untrained(docs)
    x = list(values.values())
    low, high = scipy.stats.t.interval(0.95, len(x) - 1, loc=sum(x) / 3, scale=scipy.stats.sem(x))
    mean, hw = row.cells[SEP]
    assert mean == pytest.approx(sum(x) / 3) and hw == pytest.approx((high - low) / 2)
    assert row.seeds == (0, 1, 2) and row.scope == SCOPE_UNTRAINED and row.reps_text == "3×1"
    # One record per seed: the second loss's identical values are not counted twice (3 seeds, 2 df).
    assert row.estimates[SEP].df == pytest.approx(2.0)


def test_the_published_join_reads_the_same_row() -> None:
    docs = [
        _record("ms", f"2026-01-0{seed + 1}", seed=seed, space="cosine", untrained=v)
        for seed, v in {0: 0.10, 1: 0.12, 2: 0.17}.items()
    ] + [_record("cam", "2026-01-09", seed=0, space="euclidean", untrained=0.30)]
    table = _table("a", {(UNTRAINED, mode, "map_at_r"): 20.0 for mode in MODES})
    row = _untrained(docs)
    matches = {m.mode: m for m in join(docs, [table], "cub200", "mlrc") if m.loss == UNTRAINED}
    assert set(matches) == set(MODES)
    sep = matches["separated"]
    mean, hw = row.cells[SEP]
    assert sep.ours == pytest.approx(100 * mean) and sep.ours_hw == pytest.approx(100 * hw)
    assert sep.ours_df == pytest.approx(2.0)


def test_a_section_without_records_has_no_untrained_row() -> None:
    assert build_rows([], MLRC) == []
    with pytest.raises(ValueError, match="at least one record"):
        untrained_records([])
