"""benchmarks/packing.py: a record's packing recomputed by hand."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest
from conftest import load_benchmark_script

REPO = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    return load_benchmark_script("packing")


def test_packing_of_a_committed_record_by_hand() -> None:
    pk = _module()
    path = REPO / "results" / "glyphs" / "mlrc" / "records" / "mfcont.mini.seed0.json"
    record = json.loads(path.read_text())
    search = sum(f["wall_s"] for t in record["search"]["trials"] for f in t["folds"])
    test = sum(f["wall_s"] for r in record["test"]["rep_details"] for f in r["folds"])
    jobs = record["execution"]["jobs"]
    held = jobs * (record["timings_s"]["search"] + record["timings_s"]["test"])
    p = pk.packing(record)
    assert p.total == pytest.approx((search + test) / held)
    assert p.search == pytest.approx(search / (jobs * record["timings_s"]["search"]))
    assert 0.5 < p.total <= 1.0  # folds cannot hold more core-seconds than the stage had


def test_an_extended_search_counts_only_the_folds_of_its_extra_trials() -> None:
    """Its ``timings_s`` cover the extra trials and the test stage, not the copied trials (whose
    folds it still holds): counting all of them gave packings of 150–330% on glyphs."""
    pk = _module()
    records = REPO / "results" / "glyphs" / "mlrc" / "records"
    extended = [
        r
        for p in sorted(records.glob("*.json"))
        if (r := json.loads(p.read_text()))["execution"].get("search_extended_from")
    ]
    assert extended  # the committed board holds extended searches
    for record in extended:
        copied = record["execution"]["search_extended_from"]["n_trials"]
        assert 0 < copied < len(record["search"]["trials"])
        extra = sum(f["wall_s"] for t in record["search"]["trials"][copied:] for f in t["folds"])
        jobs = record["execution"]["jobs"]
        p = pk.packing(record)
        assert p.search == pytest.approx(extra / (jobs * record["timings_s"]["search"]))
        assert p.total <= 1.0


def test_the_table_has_a_row_per_record_and_the_median(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pk = _module()
    folder = REPO / "results" / "omniglot" / "mlrc" / "records"
    assert pk.main([str(folder)]) == 0
    out = capsys.readouterr().out
    n = len(list(folder.glob("*.json")))
    assert out.count("| omniglot/") == n
    assert f"{n} records: median run packing" in out
    assert pk.main([str(tmp_path / "missing")]) == 2


def test_records_with_interrupted_trials_are_counted_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Work an interruption lost counts in the stage's wall time, in no fold's: such a record says
    how many of its trials were interrupted, and the closing lines give the median without it."""
    pk = _module()
    source = REPO / "results" / "glyphs" / "mlrc" / "records" / "mfcont.mini.seed0.json"
    record = json.loads(source.read_text())
    assert not pk.packing(record).interrupted
    (tmp_path / "a" / "b" / "clean").mkdir(parents=True)
    (tmp_path / "a" / "b" / "clean" / "mfcont.json").write_text(json.dumps(record))
    for trial in record["search"]["trials"][2:4]:
        trial["interruptions"] = 1
    assert pk.packing(record).interrupted == 2
    (tmp_path / "a" / "b" / "cut").mkdir()
    (tmp_path / "a" / "b" / "cut" / "mfcont.json").write_text(json.dumps(record))
    assert pk.main([str(tmp_path / "a" / "b" / "clean"), str(tmp_path / "a" / "b" / "cut")]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| a/mfcont")]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == ["", "2"]
    assert "2 records: median run packing" in out
    assert "The 1 records without an interrupted trial: median" in out
    assert "the other 1 count work lost to an interruption as idle time." in out
