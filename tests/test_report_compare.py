"""Significance tables: Welch p-values as scipy's, ✓/× and ↑/↓ on hand-made cases, Holm, outputs, CLI."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
import scipy.stats
from record_factory import MODES, run_record

from benchmark.cli import compare_cmd
from benchmark.errors import DmlbenchError
from benchmark.report.compare import compare_budget, compare_tables, compare_values, render
from benchmark.stats.intervals import holm

# Hand-made per-rep MAP@R values (separated; concatenated = +0.1).
STRONG = [0.30, 0.31, 0.32, 0.31, 0.30]  # clearly above BASE
BASE = [0.20, 0.21, 0.19, 0.20, 0.22]
CLOSE = [0.205, 0.215, 0.185, 0.195, 0.225]  # indistinguishable from BASE, slightly higher mean
WEAK = [0.10, 0.11, 0.09, 0.12, 0.10]  # clearly below BASE


def make_record(loss: str, sep: list[float], created: str = "1", budget: str = "mini") -> dict[str, Any]:
    """A bare record: per-rep MAP@R values ``sep`` (concatenated 0.1 higher), and no summary, seed,
    environment or untrained values."""
    per_rep = {"separated": {"map_at_r": sep}, "concatenated": {"map_at_r": [v + 0.1 for v in sep]}}
    rec = run_record(
        loss,
        created,
        per_rep=per_rep,
        reps=len(sep),
        display=loss.upper(),
        budget=budget,
        seed=None,
        commit=None,
        untrained=None,
    )
    del rec["test"]["summary"]
    return rec


def records(budget: str = "mini") -> list[dict[str, Any]]:
    return [
        make_record("arcface", BASE, budget=budget),
        make_record("proxyanchor", WEAK, budget=budget),
        make_record("mfcont", STRONG, budget=budget),
        make_record("mfcwms", CLOSE, budget=budget),
    ]


def test_compare_values_matches_scipy() -> None:
    c = compare_values(STRONG, BASE)
    ref = scipy.stats.ttest_ind(STRONG, BASE, equal_var=False)
    assert c.p == pytest.approx(float(ref.pvalue), rel=1e-12) and c.t == pytest.approx(float(ref.statistic))
    assert c.cell == "✓↑"
    close = compare_values(CLOSE, BASE)
    assert close.p > 0.5 and close.cell == "×↑"
    assert compare_values(WEAK, BASE).cell == "✓↓"
    assert compare_values(BASE, CLOSE).cell == "×↓"


def test_direction_respects_lower_is_better() -> None:
    assert compare_values(WEAK, BASE, higher_is_better=False).cell == "✓↑"
    assert compare_values(STRONG, BASE, higher_is_better=False).cell == "✓↓"


def test_untestable_and_equal() -> None:
    assert compare_values([0.3], BASE).cell == "n/a↑"  # one rep: no p-value
    assert compare_values([0.2, 0.2], [0.2, 0.2]).cell == "n/a="
    assert compare_values([0.3, 0.3], [0.2, 0.2]).cell == "✓↑"  # constant but different: p = 0


def test_compare_budget_cells_and_pvalues() -> None:
    comps = compare_budget(
        "mini", records(), ["arcface", "proxyanchor"], ["mfcont", "mfcwms"], "map_at_r", use_holm=False
    )
    assert len(comps) == 2 * 2 * 2
    cells = {(c.loss, c.reference, c.mode): c for c in comps}
    for mode in MODES:
        assert cells[("mfcont", "arcface", mode)].cell == "✓↑"
        assert cells[("mfcwms", "arcface", mode)].cell == "×↑"
        assert cells[("mfcont", "proxyanchor", mode)].cell == "✓↑"
        assert cells[("mfcwms", "proxyanchor", mode)].cell == "✓↑"
    c = cells[("mfcwms", "arcface", "concatenated")]
    ref = scipy.stats.ttest_ind([v + 0.1 for v in CLOSE], [v + 0.1 for v in BASE], equal_var=False)
    assert c.p == pytest.approx(float(ref.pvalue), rel=1e-9)
    assert (c.loss_name, c.reference_name, c.n, c.reference_n, c.p_holm) == ("MFCWMS", "ARCFACE", 5, 5, None)


def test_holm_matches_stats_holm() -> None:
    plain = compare_budget("mini", records(), ["arcface", "proxyanchor"], None, "map_at_r", use_holm=False)
    # Holm is the default (the claims rule: a "better" is corrected for the number of comparisons).
    adjusted = compare_budget("mini", records(), ["arcface", "proxyanchor"], None, "map_at_r")
    expected = holm([c.p for c in plain])
    assert [c.p_holm for c in adjusted] == expected
    assert [c.p for c in adjusted] == [c.p for c in plain]
    for c in adjusted:
        assert c.p_holm is not None and c.significant == (c.p_holm <= 0.05)
    assert {c.loss for c in plain} == {"mfcont", "mfcwms"}  # default: every non-reference loss


def test_holm_can_flip_a_decision() -> None:
    # p ~ 0.03 alone is significant; Holm over 8 comparisons makes it not.
    a, b = [0.30, 0.32, 0.31, 0.33], [0.28, 0.30, 0.30, 0.29]
    p = compare_values(a, b).p
    assert 0.01 < p < 0.05
    recs = [
        make_record("ref", b),
        make_record("x", a),
        make_record("y", a),
        make_record("z", a),
        make_record("w", a),
    ]
    comps = compare_budget("mini", recs, ["ref"], None, "map_at_r")
    assert all(c.cell == "×↑" for c in comps)
    uncorrected = compare_budget("mini", recs, ["ref"], None, "map_at_r", use_holm=False)
    assert all(c.cell == "✓↑" for c in uncorrected)


def test_a_negative_difference_is_written_with_the_typographic_minus() -> None:
    # WEAK is 10 points below BASE: the cell leads with the difference and its interval, all three
    # negative, each with U+2212 as the pages' prose writes "loss − reference".
    tables = compare_tables(
        {"mini": [make_record("base", BASE), make_record("weak", WEAK)]}, ["base"], ["weak"], "map_at_r"
    )
    md = render("md", "glyphs", "mlrc", tables, "map_at_r", True, 0.05, show_diff=True)
    row = next(line for line in md.splitlines() if line.startswith("| WEAK |"))
    diff = 100 * (sum(WEAK) - sum(BASE)) / len(WEAK)
    assert f"\u2212{abs(diff):.2f} [\u2212" in row, row
    assert re.search(r"-\d", row) is None, row


def test_missing_reference_lists_available() -> None:
    with pytest.raises(
        DmlbenchError, match=r"'cosface'.*losses with records: arcface, mfcont, mfcwms, proxyanchor"
    ):
        compare_tables({"mini": records()}, ["cosface"], None, "map_at_r")
    with pytest.raises(DmlbenchError, match="losses with records"):
        compare_tables({"mini": records()}, ["arcface"], ["nosuch"], "map_at_r")
    # A budget lacking a reference is left out when another budget has everything.
    tables = compare_tables(
        {"mini": records(), "smoke": [make_record("mfcont", STRONG, budget="smoke")]},
        ["arcface"],
        None,
        "map_at_r",
    )
    assert list(tables) == ["mini"]


def test_outputs() -> None:
    tables = compare_tables(
        {"mini": records()}, ["arcface", "proxyanchor"], ["mfcont", "mfcwms"], "map_at_r", use_holm=False
    )
    md = render("md", "glyphs", "mlrc", tables, "map_at_r", False, 0.05)
    assert "NOT corrected for the number of comparisons" in md
    assert "Minimum difference detectable with 80% power" in md
    lines = [line for line in md.splitlines() if line.startswith("|")]
    assert lines == [
        "| Loss | vs ARCFACE Sep. | vs ARCFACE Concat. | vs PROXYANCHOR Sep. | vs PROXYANCHOR Concat. |",
        "|---|---|---|---|---|",
        "| MFCONT | ✓↑ | ✓↑ | ✓↑ | ✓↑ |",
        "| MFCWMS | ×↑ | ×↑ | ✓↑ | ✓↑ |",
    ]
    rows = list(csv.DictReader(io.StringIO(render("csv", "glyphs", "mlrc", tables, "map_at_r", False, 0.05))))
    assert len(rows) == 8
    first = rows[0]
    assert (first["loss"], first["reference"], first["mode"], first["cell"]) == (
        "mfcont",
        "arcface",
        "separated",
        "✓↑",
    )
    assert float(first["p"]) == pytest.approx(
        float(scipy.stats.ttest_ind(STRONG, BASE, equal_var=False).pvalue)
    )
    assert first["p_holm"] == ""
    data = json.loads(render("json", "glyphs", "mlrc", tables, "map_at_r", True, 0.05))
    assert data["holm"] is True and data["alpha"] == 0.05
    comp = data["budgets"][0]["comparisons"][1]
    assert set(comp) >= {"p", "p_holm", "t", "significant", "direction", "cell", "mean", "reference_mean"}
    assert {"diff_low", "diff_high", "df", "se", "scope"} <= set(comp)
    assert comp["diff_low"] < comp["mean"] - comp["reference_mean"] < comp["diff_high"]
    tex = render("tex", "glyphs", "mlrc", tables, "map_at_r", False, 0.05)
    assert r"$\checkmark \uparrow$" in tex and r"$\times \uparrow$" in tex
    assert tex.count(r"\begin{tabular}") == tex.count(r"\end{tabular}") == 1


def test_as_dict_nan_is_none() -> None:
    d = compare_values([0.3], [0.2, 0.25]).as_dict()
    assert d["p"] is None and d["t"] is None and d["significant"] is False and d["cell"] == "n/a↑"


def test_compare_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "glyphs" / "mlrc" / "records"
    folder.mkdir(parents=True)
    for r in records():
        (folder / f"{r['loss']}.json").write_text(json.dumps(r))
    args = argparse.Namespace(
        dataset="glyphs",
        protocol="mlrc",
        reference="arcface, proxyanchor",
        losses="mfcont",
        metric="map_at_r",
        holm=True,
        alpha=0.05,
        format="md",
        budget=None,
        results_dir=tmp_path,
    )
    assert compare_cmd.handle(args) == 0
    out = capsys.readouterr().out
    assert "| MFCONT | ✓↑ | ✓↑ | ✓↑ | ✓↑ |" in out and "Holm-adjusted" in out
    args.reference = "cosface"
    with pytest.raises(DmlbenchError, match="losses with records: arcface"):
        compare_cmd.handle(args)
