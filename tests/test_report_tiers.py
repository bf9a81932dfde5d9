"""Multi-seed rows, tiers and their agreement across the four formats, compare and plan."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from record_factory import MLRC, run_record, spread
from test_report_tables import make_record, write

from benchmark.cli.main import main
from benchmark.report.compare import compare_budget
from benchmark.report.leaderboard import UNTRAINED, build_leaderboard, load_leaderboard
from benchmark.report.plan import components, plan, render
from benchmark.report.tables import FORMATS, render_leaderboard
from benchmark.stats.seeds import SCOPE_BOTH, SCOPE_TRAINING, row_estimates

ROOT = Path(__file__).resolve().parent.parent


def replicate(root: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    """``benchmarks/replication.py`` on the glyphs mini board under ``root``; ``check``: raise
    unless it exits 0."""
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "replication.py"), "--dataset", "glyphs",
         "--results-dir", str(root), "--budget", "mini"],
        capture_output=True, text=True, check=check, cwd=ROOT,
    )  # fmt: skip


def seeded(loss: str, value: float, seed: int, created: str, **kw: Any) -> dict[str, Any]:
    rec = make_record(loss, loss.upper(), dict.fromkeys(MLRC, value), created, **kw)
    rec["seed"] = seed
    return rec


def _board() -> list[dict[str, Any]]:
    # a: two seeds (0.50, 0.54), b: two seeds (0.30, 0.33), c: one seed 0.52, d: one seed 0.20.
    return [
        seeded("a", 0.50, 0, "1"),
        seeded("a", 0.54, 1, "2"),
        seeded("b", 0.30, 0, "3"),
        seeded("b", 0.33, 1, "4"),
        seeded("c", 0.52, 0, "5"),
        seeded("d", 0.20, 0, "6"),
    ]


def test_seeds_fold_into_one_row_with_the_two_level_interval() -> None:
    lb = build_leaderboard("glyphs", "mlrc", {"mini": _board()}, ["map_at_r"])
    (s,) = lb.sections
    rows = {r.loss: r for r in s.rows}
    assert rows["a"].seeds == (0, 1) and rows["a"].scope == SCOPE_BOTH and rows["a"].reps_text == "2×3"
    assert rows["c"].seeds == (0,) and rows["c"].scope == SCOPE_TRAINING
    # The same estimates as the pure function on the per-rep values.
    per: dict[str, list[list[float]]] = {r["loss"]: [] for r in _board()}
    for r in _board():
        per[r["loss"]].append(r["test"]["per_rep"]["separated"]["map_at_r"])
    expected = dict(zip(sorted(per), row_estimates([per[k] for k in sorted(per)]), strict=True))
    for loss, est in expected.items():
        mean, hw = rows[loss].cells[("separated", "map_at_r")]
        assert mean == pytest.approx(est.mean) and hw == pytest.approx(est.half_width)
    assert rows["a"].cells[("separated", "map_at_r")][0] == pytest.approx(0.52)
    # Sorted by the first column, the untrained row last.
    assert [r.loss for r in s.rows] == ["a", "c", "b", "d", UNTRAINED]


def test_other_configurations_are_not_folded_in() -> None:
    other = seeded("a", 0.90, 2, "0")
    other["config"]["model"]["embedding_dim"] = 64  # another configuration, older
    lb = build_leaderboard("glyphs", "mlrc", {"mini": [*_board(), other]}, ["map_at_r"])
    row = next(r for r in lb.sections[0].rows if r.loss == "a")
    assert row.seeds == (0, 1)


def test_a_wide_row_can_share_the_best_tier_that_a_narrower_higher_row_leaves() -> None:
    # What the Markdown, LaTeX and JSON headers warn: the tier is what the tests cannot separate
    # from the best, so low power keeps a noisy row in it while a precise, better row drops out.
    per_rep = {
        "best": [0.600, 0.601, 0.599],
        "narrow": [0.590, 0.591, 0.589],
        "wide": [0.50, 0.62, 0.47],
    }
    board = []
    for i, (loss, values) in enumerate(per_rep.items()):
        per = spread(dict.fromkeys(MLRC, 0.5))
        per["separated"]["map_at_r"] = values
        rec = seeded(loss, 0.5, 0, str(i))
        rec["test"] = run_record(loss, str(i), per_rep=per)["test"]  # summary recomputed from per
        board.append(rec)
    lb = build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"])
    (s,) = lb.sections
    rows = {r.loss: r for r in s.trained}
    mean = {loss: rows[loss].cells[("separated", "map_at_r")][0] for loss in rows}
    assert mean["best"] > mean["narrow"] > mean["wide"]
    tier = {loss: s.is_best(rows[loss], "separated", "map_at_r") for loss in rows}
    assert tier == {"best": True, "narrow": False, "wide": True}
    from benchmark.report.leaderboard import markdown_text

    assert "Not significantly different is not equal" in markdown_text(lb)


def test_formats_agree_on_tiers(tmp_path: Path) -> None:
    root = write(tmp_path, _board())
    lb = load_leaderboard(root, "glyphs", "mlrc", metrics=["map_at_r"])
    (s,) = lb.sections
    best = {r.loss: s.is_best(r, "separated", "map_at_r") for r in s.trained}
    letters = {r.loss: s.letters(r, "separated", "map_at_r") for r in s.trained}
    assert best["a"] and not best["d"]  # d is 30 points below a
    texts = {fmt: render_leaderboard(fmt, lb) for fmt in FORMATS}
    data = json.loads(texts["json"])
    jrows = {r["loss"]: r for r in data["budgets"][0]["rows"]}
    crows = {r["loss"]: r for r in csv.DictReader(io.StringIO(texts["csv"]))}
    for loss in best:
        cell = jrows[loss]["cells"]["separated"]["map_at_r"]
        assert cell["best"] == best[loss] and cell["group"] == letters[loss]
        assert crows[loss]["separated_map_at_r_best_tier"] == str(best[loss]).lower()
        assert crows[loss]["separated_map_at_r_group"] == letters[loss]
        md_row = next(line for line in texts["md"].splitlines() if line.startswith(f"| {loss.upper()} |"))
        assert md_row.split(" | ")[1] == letters[loss]
        assert ("**" in md_row.split(" | ")[2]) == best[loss]
        tex_row = next(line for line in texts["tex"].splitlines() if line.startswith(f"{loss.upper()} &"))
        assert tex_row.split(" & ")[1] == letters[loss]
        assert ("textbf" in tex_row.split(" & ")[2]) == best[loss]
    # compare tests the same rows with the same pooled variance: its uncorrected p for (a, d)
    # is the leaderboard's raw p for that pair.
    (c,) = [
        c
        for c in compare_budget("mini", list(s.records), ["d"], ["a"], "map_at_r", use_holm=False)
        if c.mode == "separated"
    ]
    assert c.scope == SCOPE_BOTH and c.reference_scope == SCOPE_TRAINING and c.seeds == 2
    assert c.diff_low < c.diff < c.diff_high and c.significant


def test_plan_reads_the_components(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    comps = components([*map(_typed, _board())], "separated", "map_at_r")
    # Within-seed: offsets -0.01, 0, +0.01 -> variance 1e-4 in every (loss, seed).
    assert comps.sigma_e2 == pytest.approx(1e-4) and comps.df_e == 6 * 2
    # Seed means: a 0.50/0.54, b 0.30/0.33 -> tau^2 = (0.02^2*2 + 0.015^2*2) / 2.
    assert comps.tau2 == pytest.approx((2 * 0.02**2 + 2 * 0.015**2) / 2)
    assert comps.sigma_a2 == pytest.approx(comps.tau2 - 1e-4 / 3)
    p = plan(comps, 0.05)
    assert p.cheapest is not None and p.grid[p.cheapest] >= 0.8
    assert all(p.grid[(s, 20)] <= p.grid[(s + 1, 20)] + 1e-12 for s in (2, 3, 4, 5))
    root = write(tmp_path, _board())
    assert main(["plan", "--dataset", "glyphs", "--results-dir", str(root), "--difference", "5"]) == 0
    out = capsys.readouterr().out
    assert "Search-seed sd σ_a" in out and "Cheapest design" in out
    assert main(["plan", "--dataset", "glyphs", "--results-dir", str(root), "--difference", "0"]) == 2


def test_plan_says_when_the_losses_seed_spreads_differ() -> None:
    """Records of one erratic loss (seed means 0.24/0.46/0.39) and one calm one: the plan keeps
    its pooled σ_a but says that Bartlett's test rejected equal spreads and what that means."""
    recs = []
    for loss, means in (("margin", (0.24, 0.46, 0.39)), ("ms", (0.467, 0.471, 0.469))):
        for seed, m in enumerate(means):
            per_rep = {"separated": {"map_at_r": [m - 0.001, m, m + 0.001]}}
            recs.append(_typed(run_record(loss, f"{loss}{seed}", per_rep=per_rep, seed=seed)))
    comps = components(recs, "separated", "map_at_r")
    assert not comps.seed_model.pooled
    text = render("glyphs", "mini", "separated", "map_at_r", comps, plan(comps, 0.05), 1)
    assert "The losses' seed spreads differ (Bartlett's p = " in text and "optimistic" in text
    calm = components(recs[3:], "separated", "map_at_r")  # ms alone: nothing to compare
    assert calm.seed_model.pooled
    assert "seed spreads differ" not in render(
        "glyphs", "mini", "separated", "map_at_r", calm, plan(calm, 0.05), 1
    )


def _typed(rec: dict[str, Any]) -> Any:
    from benchmark.records import as_record

    return as_record(rec)


def test_compare_cli_defaults_to_holm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path, _board())
    base = ["compare", "--dataset", "glyphs", "--results-dir", str(root), "--reference", "d"]
    assert main(base) == 0
    assert "Holm-adjusted over all comparisons" in capsys.readouterr().out
    assert main([*base, "--no-correction", "--diff"]) == 0
    out = capsys.readouterr().out
    assert "NOT corrected" in out and " [+" in out


def test_replication_script_runs(tmp_path: Path) -> None:
    root = write(tmp_path, _board())
    out = replicate(root)
    assert "| single seed |" in out.stdout and "Called different" in out.stdout


def test_run_seeds_runs_the_protocol_once_per_seed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """``dmlbench run --seeds 0,1,2`` is three whole runs with those seeds (api.run stubbed)."""
    from types import SimpleNamespace

    from benchmark import api

    calls: list[int] = []
    md = tmp_path / "leaderboard.md"
    md.write_text("board\n")

    def fake_run(loss: str, **kw: Any) -> Any:
        calls.append(kw["seed"])
        return SimpleNamespace(
            leaderboard_paths=[md], record={"timings_s": {"total": 1.0}}, record_path=md, run_dir=tmp_path
        )

    monkeypatch.setattr(api, "run", fake_run)
    assert main(["run", "--loss", "ms", "--budget", "smoke", "--seeds", "2,0,1"]) == 0
    assert calls == [2, 0, 1]
    assert main(["run", "--loss", "ms", "--seeds", "0,x"]) == 2
    assert main(["run", "--loss", "ms", "--seeds", "1,1"]) == 2
    assert main(["run", "--loss", "ms", "--seeds", "1", "--seed", "2"]) == 2
    assert calls == [2, 0, 1]


def test_records_of_different_threads_per_fold_cpu_kind_or_cpu_model_are_flagged() -> None:
    from benchmark.report.leaderboard import markdown_text
    from benchmark.report.tables import json_data, latex_text

    board = _board()
    for r in board:
        r["execution"] = {"torch_threads_per_job": 1}
        r["environment"]["cpu_capability"] = "AVX2"
        r["environment"]["cpu_model"] = "AMD EPYC"
    same = markdown_text(build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"]))
    assert "Records made with different" not in same
    board[1]["execution"]["torch_threads_per_job"] = 2  # a's seed 1, run with --jobs 1 on 2 cores
    board[4]["environment"]["cpu_capability"] = "AVX512"
    board[0]["environment"]["cpu_model"] = "Intel Xeon"  # a's seed 0: same capability, other vendor
    text = markdown_text(build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"]))
    assert (
        "Records made with different torch threads per fold "
        "(1: a/seed0, b/seed0, b/seed1, c/seed0, d/seed0; 2: a/seed1)" in text
    )
    assert (
        "Records made with different CPU kinds "
        "(AVX2: a/seed0, a/seed1, b/seed0, b/seed1, d/seed0; AVX512: c/seed0)" in text
    )
    assert (
        "Records made with different CPU models "
        "(AMD EPYC: a/seed1, b/seed0, b/seed1, c/seed0, d/seed0; Intel Xeon: a/seed0)" in text
    )
    # The LaTeX table carries the warnings as comments, word for word.
    tex = latex_text(build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"])).splitlines()
    warnings = [x for x in text.splitlines() if x.startswith("Records made with different")]
    assert len(warnings) == 3 and all(f"% {x}" in tex for x in warnings)
    # So does the JSON board, among its section's notes.
    notes = json_data(build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"]))["budgets"][0][
        "notes"
    ]
    assert all(x in notes for x in warnings)
    # The CSV has no footer: each row names its records' settings, distinct values in seed order.
    from benchmark.report.leaderboard import csv_text

    lb = build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"])
    rows = csv.DictReader(io.StringIO(csv_text(lb)))
    cells = {r["loss"]: (r["cpu_capability"], r["cpu_model"], r["torch_threads_per_job"]) for r in rows}
    assert cells == {
        "a": ("AVX2", "Intel Xeon; AMD EPYC", "1; 2"),
        "b": ("AVX2", "AMD EPYC", "1"),
        "c": ("AVX512", "AMD EPYC", "1"),
        "d": ("AVX2", "AMD EPYC", "1"),
        UNTRAINED: ("", "", ""),
    }
    # The JSON rows give the same values as lists, native types kept (None where unrecorded).
    env = {r["loss"]: r["environment"] for r in json_data(lb)["budgets"][0]["rows"]}
    assert env == {
        "a": {
            "cpu_capability": ["AVX2"],
            "cpu_model": ["Intel Xeon", "AMD EPYC"],
            "torch_threads_per_job": [1, 2],
        },
        "b": {"cpu_capability": ["AVX2"], "cpu_model": ["AMD EPYC"], "torch_threads_per_job": [1]},
        "c": {"cpu_capability": ["AVX512"], "cpu_model": ["AMD EPYC"], "torch_threads_per_job": [1]},
        "d": {"cpu_capability": ["AVX2"], "cpu_model": ["AMD EPYC"], "torch_threads_per_job": [1]},
        UNTRAINED: None,
    }
    # A record older than the key: "unrecorded" in the CSV, None in the JSON, in seed order.
    del board[3]["execution"]  # b's seed 1
    lb = build_leaderboard("glyphs", "mlrc", {"mini": board}, ["map_at_r"])
    (b_csv,) = [r for r in csv.DictReader(io.StringIO(csv_text(lb))) if r["loss"] == "b"]
    assert b_csv["torch_threads_per_job"] == "1; unrecorded"
    (b_json,) = [r for r in json_data(lb)["budgets"][0]["rows"] if r["loss"] == "b"]
    assert b_json["environment"]["torch_threads_per_job"] == [1, None]


def test_replication_compares_seeds_only_within_one_settings_group(tmp_path: Path) -> None:
    """Seeds run under other board settings are no fresh seeds of the same experiment: each
    settings group is replicated on its own, and a group with one seed says so."""
    earlier = _board()
    for r in earlier:
        r["config"]["train"] = {"patience": 3}
    today = [seeded("a", 0.20, 0, "7"), seeded("b", 0.60, 0, "8")]  # the order of a and b flips
    root = write(tmp_path, [*earlier, *today])
    out = replicate(root).stdout
    today_part, earlier_part = out.split("## `mini (earlier settings ")
    assert "## `mini`" in today_part and "Nothing to replicate yet" in today_part
    assert "seeds per loss: a [0, 1], b [0, 1]" in earlier_part
    # Within the earlier group a stays above b at both seeds; today's seed 0 (b above a) is not
    # counted as a fresh seed that reverses it.
    rows = [line for line in earlier_part.splitlines() if line.startswith("| single seed |")]
    assert rows and all(line.endswith("| 0 |") for line in rows)


def test_replication_names_the_seed_splits_that_hold_no_pair(tmp_path: Path) -> None:
    """While a board is regenerated a group's seeds can hold different losses (a's seed 2 and b's
    seed 1 moved to other settings): a split whose seeds share fewer than two losses has no pair to
    test and is listed as not evaluated, not counted as 'none called different'."""
    records = [
        seeded("a", 0.50, 0, "1"),
        seeded("a", 0.54, 1, "2"),
        seeded("b", 0.30, 0, "3"),
        seeded("b", 0.33, 2, "4"),
        seeded("c", 0.60, 1, "5"),
        seeded("c", 0.62, 2, "6"),
        seeded("d", 0.40, 1, "7"),
        seeded("d", 0.41, 2, "8"),
    ]
    root = write(tmp_path, records)
    out = replicate(root).stdout
    rows = [line for line in out.splitlines() if line.startswith("| single seed (")]
    # Only seeds 1 and 2 share two losses (c and d): those two splits, two columns each.
    assert sorted({line.split(" | ")[0] + " | " + line.split(" | ")[1] for line in rows}) == [
        "| single seed (1) | 2",
        "| single seed (2) | 1",
    ]
    assert "single seed (0) at fresh seed 1 (shared: a)" in out
    assert "single seed (0) at fresh seed 2 (shared: b)" in out
    assert "2 seeds folded (1,2) at fresh seed 0 (shared: none)" in out
    assert "Left out" not in out


def test_replication_leaves_out_a_seed_one_loss_alone_holds(tmp_path: Path) -> None:
    """Margin's fourth seed beside CosFace's three (omniglot): a seed that one loss alone has
    records at is in no pair, so it is left out and named, and the three shared seeds give folded
    boards (with it kept, every folded board included it and held margin alone)."""
    records = [seeded("a", 0.50 + 0.01 * s, s, f"a{s}") for s in range(3)]
    records += [seeded("b", 0.30 + 0.01 * s, s, f"b{s}") for s in range(4)]
    root = write(tmp_path, records)
    out = replicate(root).stdout
    assert "Left out, as one loss alone has records there: seed 3 (b)." in out
    folded = {line.split(" | ")[0] for line in out.splitlines() if "seeds folded (" in line}
    assert folded == {"| 2 seeds folded (1,2)", "| 2 seeds folded (0,2)", "| 2 seeds folded (0,1)"}
    assert "Not evaluated" not in out and "| multi-seed |" in out


def test_replication_of_one_multi_seed_loss_has_nothing_to_replicate(tmp_path: Path) -> None:
    """One loss at several seeds beside single-seed losses holds no pair at two seeds."""
    records = [seeded("a", 0.50, 0, "1"), seeded("a", 0.54, 1, "2"), seeded("b", 0.30, 0, "3")]
    root = write(tmp_path, records)
    proc = replicate(root, check=False)
    assert proc.returncode == 2 and "two losses with records at the same two search seeds" in proc.stderr
