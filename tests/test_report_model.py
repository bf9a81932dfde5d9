"""One leaderboard model for every output: the same metric columns in md/csv/tex/json, and all four
files written alike (no mix of fresh and stale files) when the records share no metric."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path

import pytest
from record_factory import MLRC
from test_report_tables import _args, make_record, write

from benchmark.cli import report_cmd
from benchmark.errors import DmlbenchError
from benchmark.metrics import METRICS
from benchmark.records import RecordError, RunRecord
from benchmark.report.tables import write_tables

BASE = {"map_at_r": 0.3, "precision_at_1": 0.6, "r_precision": 0.4, "nmi": 0.5}
FORMATS = ("md", "csv", "tex", "json")


def _metric_order(folder: Path) -> dict[str, list[str]]:
    """The metric columns of the first mode group in each written format, as metric names."""
    by_display = {METRICS.get(m).display_name: m for m in BASE}
    md = (folder / "leaderboard.md").read_text()
    header = next(line for line in md.splitlines() if line.startswith("| Loss |"))
    md_names = [
        by_display[c.removeprefix("Sep. ")] for c in header.strip("| ").split(" | ") if c.startswith("Sep. ")
    ]
    (csv_header, *_) = csv.reader(io.StringIO((folder / "leaderboard.csv").read_text()))
    csv_names = [
        c.removeprefix("separated_").removesuffix("_mean") for c in csv_header if c.endswith("_mean")
    ]
    csv_names = [m for m in csv_names if not m.startswith("concatenated_")]
    tex = (folder / "leaderboard.tex").read_text()
    tex_header = next(line for line in tex.splitlines() if line.startswith("Loss & "))
    tex_cells = tex_header.removesuffix(r" \\").split(" & ")[2:-2]
    tex_names = [by_display[c] for c in tex_cells[: len(tex_cells) // 2]]
    json_names = [m["name"] for m in json.loads((folder / "leaderboard.json").read_text())["metrics"]]
    return {"md": md_names, "csv": csv_names, "tex": tex_names, "json": json_names}


def test_every_format_orders_the_metric_columns_alike(tmp_path: Path) -> None:
    # The oldest record lists nmi first; the newer one MLRC's first.
    root = write(
        tmp_path,
        [
            make_record("a", "A", BASE, "1", metrics=["nmi", *MLRC]),
            make_record("b", "B", BASE, "2", metrics=[*MLRC, "nmi"]),
        ],
    )
    write_tables(root, "glyphs", "mlrc")
    orders = _metric_order(root / "glyphs" / "mlrc")
    # One rule: MLRC's metrics first in their usual order, then the others (docs in leaderboard.py).
    assert orders == {fmt: [*MLRC, "nmi"] for fmt in FORMATS}
    # `dmlbench report` prints the same columns as the files.
    from benchmark.report.leaderboard import load_leaderboard

    lb = load_leaderboard(root, "glyphs", "mlrc")
    assert list(lb.metrics) == [*MLRC, "nmi"]


def test_a_bad_record_stops_the_refresh_before_any_file_is_written(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        [make_record("ms", "MS", BASE, "1"), {**make_record("arcface", "ArcFace", BASE, "1"), "seed": "0"}],
    )
    with pytest.raises(RecordError, match=r"arcface\.mini\.1\.json: key 'seed' must be an integer"):
        write_tables(root, "glyphs", "mlrc")
    assert not list((root / "glyphs" / "mlrc").glob("leaderboard.*"))


def _stale(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for fmt in FORMATS:
        (folder / f"leaderboard.{fmt}").write_text("stale\n")


def test_budgets_sharing_no_metric_write_all_four_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write(
        tmp_path,
        [
            make_record("a", "A", BASE, "1", metrics=["map_at_r"]),
            make_record("b", "B", BASE, "2", budget="smoke", metrics=["nmi"]),
        ],
    )
    folder = root / "glyphs" / "mlrc"
    _stale(folder)
    paths = write_tables(root, "glyphs", "mlrc")
    assert [p.name for p in paths] == [f"leaderboard.{fmt}" for fmt in FORMATS]
    texts = {fmt: (folder / f"leaderboard.{fmt}").read_text() for fmt in FORMATS}
    assert not any(text == "stale\n" for text in texts.values())
    from benchmark.report.leaderboard import NO_SHARED_METRIC

    # The stated rule: no metric column in any format, both budgets' rows, and a note saying why.
    assert NO_SHARED_METRIC in texts["md"] and "% " + NO_SHARED_METRIC in texts["tex"]
    assert "## Budget `mini`" in texts["md"] and "## Budget `smoke`" in texts["md"]
    assert (
        "| Loss | Group | Seeds | Reps | Interval covers | Stopped by patience (test; search) | Commit |"
        in texts["md"]
    )
    rows = list(csv.DictReader(io.StringIO(texts["csv"])))
    assert [(r["budget"], r["loss"]) for r in rows] == [
        ("mini", "a"),
        ("mini", "untrained"),
        ("smoke", "b"),
        ("smoke", "untrained"),
    ]
    assert not [c for c in rows[0] if c.endswith("_mean")]
    data = json.loads(texts["json"])
    assert data["metrics"] == [] and [b["budget"] for b in data["budgets"]] == ["mini", "smoke"]
    assert (
        re.findall(r"\\begin\{tabular\}\{l\|l\|\|\|rr\}", texts["tex"]) == [r"\begin{tabular}{l|l|||rr}"] * 2
    )
    # The report command asks for one budget instead; one budget shows its own metric.
    with pytest.raises(DmlbenchError, match="share no test metric; select one --budget"):
        report_cmd.handle(_args(root))
    capsys.readouterr()
    assert report_cmd.handle(_args(root, budget="smoke")) == 0
    assert "| Sep. NMI |" in capsys.readouterr().out


def test_a_failing_format_leaves_every_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = write(tmp_path, [make_record("a", "A", BASE, "1")])
    folder = root / "glyphs" / "mlrc"
    _stale(folder)

    def broken(_: object) -> str:
        raise DmlbenchError("json renderer broken")

    from benchmark.report import tables

    monkeypatch.setitem(tables._RENDERERS, "json", broken)
    with pytest.raises(DmlbenchError, match="json renderer broken"):
        write_tables(root, "glyphs", "mlrc")
    assert all((folder / f"leaderboard.{fmt}").read_text() == "stale\n" for fmt in FORMATS)


def test_report_and_compare_share_the_chosen_records(tmp_path: Path) -> None:
    # An older and a newer record of one loss: every consumer takes the newer (created "3").
    root = write(
        tmp_path,
        [
            make_record("a", "A", {**BASE, "map_at_r": 0.10}, "1"),
            make_record("a", "A", {**BASE, "map_at_r": 0.20}, "3"),
            make_record("b", "B", BASE, "2"),
        ],
    )
    from benchmark.report.compare import compare_leaderboard
    from benchmark.report.leaderboard import load_leaderboard

    lb = load_leaderboard(root, "glyphs", "mlrc")
    (section,) = lb.sections
    assert [(r.loss, r.created) for r in section.chosen] == [("a", "3"), ("b", "2")]
    assert len(section.records) == 3
    row = next(r for r in section.rows if r.loss == "a")
    assert row.cells[("separated", "map_at_r")][0] == pytest.approx(0.20)
    (comps,) = compare_leaderboard(lb, ["b"], None, "map_at_r").values()
    assert [c.mean for c in comps if c.mode == "separated"] == [pytest.approx(0.20)]


def test_refresh_reads_the_records_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmark.report import leaderboard
    from benchmark.report.tables import refresh

    root = write(tmp_path, [make_record("a", "A", BASE, "1"), make_record("b", "B", BASE, "2")])
    reads: list[Path] = []
    real = leaderboard.load_record_files

    def counting(folder: Path) -> list[RunRecord]:
        reads.append(folder)
        return real(folder)

    monkeypatch.setattr(leaderboard, "load_record_files", counting)
    paths = refresh(root, "glyphs", "mlrc", plots=True)
    folder = root / "glyphs" / "mlrc"
    assert paths[:4] == [folder / f"leaderboard.{fmt}" for fmt in FORMATS]
    assert folder / "plots" / "metrics-mini.png" in paths and paths[-1] == folder / "plots" / "README.md"
    assert reads == [folder / "records"]
