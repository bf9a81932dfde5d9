"""Leaderboard generation from synthetic records: exact cells, bold best, footer, CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from record_factory import MLRC, run_record, searched

from benchmark.report.leaderboard import format_cell, render_csv, write_leaderboard


def record(loss: str, display: str, sep_map: float, created: str, budget: str = "mini") -> dict[str, Any]:
    """A record of summaries only: every metric ``sep_map`` ± 0.01 separated, 0.05 higher concatenated."""

    def summary(v: float) -> dict[str, dict[str, float]]:
        return {m: {"mean": v, "half_width": 0.01, "n": 3, "low": v - 0.01, "high": v + 0.01} for m in MLRC}

    return run_record(
        loss,
        created,
        summary={"separated": summary(sep_map), "concatenated": summary(sep_map + 0.05)},
        display=display,
        budget=budget,
        commit="abcdef1234567",
        deviations=[{"key": "test.reps", "paper": 10, "value": 3}],
        search=searched(8),
    )


def write(tmp_path: Path, records: list[dict[str, Any]]) -> Path:
    folder = tmp_path / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    for i, r in enumerate(records):
        (folder / f"{i}.json").write_text(json.dumps(r))
    return tmp_path


def test_format_cell() -> None:
    assert format_cell(0.25341, 0.00412) == "25.34 ± 0.41"
    assert format_cell(0.05, float("nan")) == "5.00"


def test_markdown_rows_bold_and_footer(tmp_path: Path) -> None:
    root = write(
        tmp_path, [record("mfcont", "MFCont", 0.30, "2026-01-02"), record("ms", "MS", 0.20, "2026-01-01")]
    )
    md_path, _ = write_leaderboard(root, "glyphs", "mlrc")
    lines = md_path.read_text().splitlines()
    assert (
        "| Untrained (init trunk + random embedder) |  | 5.00 | 5.00 | 5.00 | 5.00 | 5.00 | 5.00 "
        "| 0 | 1 | – | – | abcdef1234 |" in lines
    )
    assert (
        "| MFCont | a | **30.00 ± 1.00** | **30.00 ± 1.00** | **30.00 ± 1.00** | **35.00 ± 1.00** | "
        "**35.00 ± 1.00** | **35.00 ± 1.00** | 0 | 3 | training seeds | –; – | abcdef1234 |"
    ) in lines
    assert (
        "| MS | b | 20.00 ± 1.00 | 20.00 ± 1.00 | 20.00 ± 1.00 | 25.00 ± 1.00 | 25.00 ± 1.00 "
        "| 25.00 ± 1.00 | 0 | 3 | training seeds | –; – | abcdef1234 |" in lines
    )
    assert lines[lines.index("Deviations from the paper protocol:") + 2] == "- `test.reps` = 3 (paper 10)"
    assert "Budget `mini`; search trials complete: 8/8 for every loss." in lines


def test_latest_record_per_loss_wins_and_budgets_are_separate(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        [
            record("ms", "MS", 0.10, "2026-01-01"),
            record("ms", "MS", 0.20, "2026-01-03"),
            record("ms", "MS", 0.90, "2026-01-02", budget="smoke"),
        ],
    )
    write_leaderboard(root, "glyphs", "mlrc")
    rows = list(csv.DictReader(io.StringIO((root / "glyphs" / "mlrc" / "leaderboard.csv").read_text())))
    ms = {(r["budget"], r["loss"]): float(r["separated_map_at_r_mean"]) for r in rows}
    assert ms[("mini", "ms")] == 0.20 and ms[("smoke", "ms")] == 0.90
    assert "## Budget `mini`" in (root / "glyphs" / "mlrc" / "leaderboard.md").read_text()


def test_csv_header() -> None:
    text = render_csv({"mini": [record("ms", "MS", 0.2, "x")]}, MLRC)
    header = text.splitlines()[0].split(",")
    assert header[:7] == ["budget", "loss", "name", "seeds", "reps_per_seed", "interval_covers", "commit"]
    assert "concatenated_r_precision_half_width" in header and "concatenated_r_precision_group" in header
