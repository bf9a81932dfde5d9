"""benchmarks/family_gap.py: the class/proxy − pair gap of a board, recomputed by hand."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import scipy.stats
from conftest import committed_checkout, load_benchmark_script, page_signed
from record_factory import run_record

from benchmark.losses.registry import LOSSES

#: Per-rep separated MAP@R; concatenated is 0.05 higher with the same spread.
TODAY = {
    "contrastive": [0.580, 0.590, 0.575, 0.585],
    "triplet": [0.570, 0.560, 0.575, 0.565],
    "arcface": [0.640, 0.630, 0.635, 0.645],
}
BEFORE = {
    "contrastive": [0.450, 0.470, 0.440, 0.460],
    "triplet": [0.480, 0.470, 0.500, 0.490],
    "arcface": [0.610, 0.600, 0.615, 0.620],
    "proxyanchor": [0.590, 0.580, 0.600, 0.595],
}


def _module() -> ModuleType:
    return load_benchmark_script("family_gap")


def _record(loss: str, values: list[float], patience: int) -> dict[str, Any]:
    per_rep = {
        "separated": {"map_at_r": values},
        "concatenated": {"map_at_r": [v + 0.05 for v in values]},
    }
    return run_record(
        loss,
        "2026-01-01T00:00:00",
        per_rep=per_rep,
        reps=len(values),
        config={"train": {"patience": patience}},
    )


def _board(root: Path, rows: dict[str, list[float]], patience: int) -> Path:
    folder = root / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    for loss, values in rows.items():
        (folder / f"{loss}.mini.seed0.json").write_text(json.dumps(_record(loss, values, patience)))
    return root


def _by_hand(rows: dict[str, list[float]], sign: float = 1.0) -> list[tuple[float, float, float]]:
    """(weight, mean, variance of the mean) of each row in ``mean(class) − mean(pair)``."""
    pair = [x for x in rows if LOSSES.get(x).pair_based]
    cls = [x for x in rows if not LOSSES.get(x).pair_based]
    out = []
    for group, w in ((cls, 1.0 / len(cls)), (pair, -1.0 / len(pair))):
        for x in group:
            v = np.asarray(rows[x])
            out.append((sign * w, float(v.mean()), float(v.var(ddof=1) / v.size)))
    return out


def _cell(terms: list[tuple[float, float, float]], n: int = 4) -> str:
    """The table cell of a contrast, by hand: Welch-Satterthwaite df, 95% t half-width."""
    diff = sum(w * m for w, m, _ in terms)
    parts = [w * w * v for w, _, v in terms]
    df = sum(parts) ** 2 / sum(p * p / (n - 1) for p in parts)
    half = scipy.stats.t.ppf(0.975, df) * math.sqrt(sum(parts))
    return f"{page_signed(100 * diff)} ± {100 * half:.2f} (df {df:.1f})"


def test_the_family_is_the_registry_s_pair_based_flag_for_every_loss() -> None:
    fg = _module()
    for name in LOSSES.names():
        assert fg.family(name) == ("pair" if LOSSES.get(name).pair_based else "class/proxy"), name


def test_today_before_same_losses_and_change_are_the_hand_computed_contrasts(tmp_path: Path) -> None:
    fg = _module()
    today = _board(tmp_path / "today", TODAY, patience=10)
    before = _board(tmp_path / "before", BEFORE, patience=2)
    lines = fg.dataset_lines(today, before, "REV", "glyphs")
    shared = {x: BEFORE[x] for x in TODAY}
    assert [ln.counts for ln in lines] == ["2 / 1", "2 / 2", "2 / 1", "2 / 1"]
    assert lines[0].cells[0] == _cell(_by_hand(TODAY))
    assert lines[1].cells[0] == _cell(_by_hand(BEFORE))
    assert lines[2].cells[0] == _cell(_by_hand(shared))
    assert lines[3].cells[0] == _cell(_by_hand(TODAY) + _by_hand(shared, sign=-1.0))
    concat = {x: [v + 0.05 for v in TODAY[x]] for x in TODAY}
    assert lines[0].cells[1] == _cell(_by_hand(concat))
    assert lines[0].cells[0].startswith("+6.25 ")  # 63.75 − (58.25 + 56.75) / 2


def test_a_board_without_a_class_proxy_row_says_so_and_no_change_is_drawn(tmp_path: Path) -> None:
    fg = _module()
    today = _board(tmp_path / "today", {"contrastive": TODAY["contrastive"]}, patience=10)
    before = _board(tmp_path / "before", BEFORE, patience=2)
    lines = fg.dataset_lines(today, before, "REV", "glyphs")
    assert lines[0].cells == ("– (a family has no row)",) * 2
    assert lines[-1].label.startswith("change:") and lines[-1].cells == ("– (a family has no row)",) * 2


def test_the_before_board_is_read_from_a_commit(tmp_path: Path) -> None:
    fg = _module()
    repo = tmp_path / "repo"
    committed_checkout(
        repo,
        {
            f"results/glyphs/mlrc/records/{x}.mini.seed0.json": json.dumps(_record(x, v, patience=2))
            for x, v in BEFORE.items()
        },
    )
    (repo / "results" / "glyphs" / "mlrc" / "records" / "arcface.mini.seed0.json").unlink()  # work tree only
    got = fg.records_at("HEAD", ["glyphs", "omniglot"], tmp_path / "out", repo=repo)
    assert sorted(p.name for p in (got / "glyphs" / "mlrc" / "records").iterdir()) == sorted(
        f"{x}.mini.seed0.json" for x in BEFORE
    )
    assert not (got / "omniglot").exists()
    with pytest.raises(SystemExit, match="'nope' is not a commit"):
        fg.records_at("nope", ["glyphs"], tmp_path / "out2", repo=repo)
