"""Leaderboard output formats from synthetic records: exact Markdown/CSV/JSON, well-formed LaTeX, CLI."""

from __future__ import annotations

import argparse
import csv
import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from record_factory import MLRC, SCHEMA, run_record, searched, spread

from benchmark.cli import report_cmd
from benchmark.errors import DmlbenchError, UnknownNameError
from benchmark.report.tables import (
    latex_escape,
    leaderboard_data,
    render,
    render_latex,
    resolve_metrics,
    select_records,
    write_tables,
)


def make_record(
    loss: str,
    display: str,
    base: dict[str, float],
    created: str,
    *,
    budget: str = "mini",
    metrics: list[str] | None = None,
    concat_gain: float = 0.05,
) -> dict[str, Any]:
    """A record whose per-rep values are ``base[metric] + record_factory.OFFSETS`` (+ ``concat_gain``
    concatenated)."""
    return run_record(
        loss,
        created,
        per_rep=spread({m: base[m] for m in metrics or MLRC}, concat_gain),
        display=display,
        budget=budget,
        schema=SCHEMA,
        config={"model": {"embedding_dim": 128}, "protocol": {"n_folds": 4}},
        deviations=[{"key": "test.reps", "paper": 10, "value": 3}],
        search=searched(3, failed=1),
    )


def write(root: Path, records: list[dict[str, Any]], dataset: str = "glyphs") -> Path:
    folder = root / dataset / "mlrc" / "records"
    folder.mkdir(parents=True, exist_ok=True)
    for r in records:
        (folder / f"{r['loss']}.{r['budget']}.{r['created']}.json").write_text(json.dumps(r))
    return root


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return write(
        tmp_path,
        [
            make_record(
                "mfcont", "MFCont", {"map_at_r": 0.30, "precision_at_1": 0.60, "r_precision": 0.40}, "2"
            ),
            make_record(
                "arcface", "ArcFace", {"map_at_r": 0.20, "precision_at_1": 0.70, "r_precision": 0.30}, "1"
            ),
        ],
    )


def test_markdown_exact(root: Path) -> None:
    by_budget = select_records(root, "glyphs", "mlrc")
    text = render("md", "glyphs", "mlrc", by_budget, resolve_metrics(by_budget))
    table = [line for line in text.splitlines() if line.startswith("|")]
    # Sorted by the first column (Sep. MAP@R), the untrained row last; every pair differs by 10
    # points at a 1-point spread (Welch p < 0.001), so one loss per column is in the best tier.
    assert table == [
        "| Loss | Group | Sep. MAP@R | Sep. P@1 | Sep. RP | Concat. MAP@R | Concat. P@1 | Concat. RP "
        "| Seeds | Reps | Interval covers | Stopped by patience (test; search) | Commit |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        "| MFCont | a | **30.00 ± 2.48** | 60.00 ± 2.48 | **40.00 ± 2.48** | **35.00 ± 2.48** | 65.00 ± 2.48 "
        "| **45.00 ± 2.48** | 0 | 3 | training seeds | –; – | 0123456789 |",
        "| ArcFace | b | 20.00 ± 2.48 | **70.00 ± 2.48** | 30.00 ± 2.48 | 25.00 ± 2.48 | **75.00 ± 2.48** "
        "| 35.00 ± 2.48 | 0 | 3 | training seeds | –; – | 0123456789 |",
        "| Untrained (init trunk + random embedder) |  | 5.00 | 5.00 | 5.00 | 5.00 | 5.00 | 5.00 "
        "| 0 | 1 | – | – | 0123456789 |",
    ]
    assert "Budget `mini`; search trials complete: 3/4 for every loss." in text
    assert "Deviations from the paper protocol:\n\n- `test.reps` = 3 (paper 10)" in text


def test_csv_exact(root: Path) -> None:
    by_budget = select_records(root, "glyphs", "mlrc")
    rows = list(csv.reader(io.StringIO(render("csv", "glyphs", "mlrc", by_budget, ["map_at_r"]))))
    assert rows[0] == [
        "budget", "loss", "name", "seeds", "reps_per_seed", "interval_covers", "commit", "unit",
        "separated_map_at_r_mean", "separated_map_at_r_half_width", "separated_map_at_r_df",
        "separated_map_at_r_best_tier", "separated_map_at_r_group",
        "concatenated_map_at_r_mean", "concatenated_map_at_r_half_width", "concatenated_map_at_r_df",
        "concatenated_map_at_r_best_tier", "concatenated_map_at_r_group",
        "test_patience_stops", "test_fold_trainings", "search_patience_stops",
        "search_fold_trainings", "convergence", "stops_derived",
        "cpu_capability", "cpu_model", "torch_threads_per_job", "best_params_at_bound",
    ]  # fmt: skip
    assert rows[3] == ["mini", "untrained", "Untrained (init trunk + random embedder)", "0", "1", "",
                       "0123456789", "fraction", "0.05", "", "", "", "", "0.05", "", "", "", "",
                       "", "", "", "", "", "", "", "", "", ""]  # fmt: skip
    assert [r[1] for r in rows[1:3]] == ["mfcont", "arcface"]
    assert float(rows[1][8]) == pytest.approx(0.30)
    assert float(rows[1][9]) == pytest.approx(0.024841377117503)
    assert rows[1][10:13] == ["2.0", "true", "a"] and rows[2][10:13] == ["2.0", "false", "b"]


def test_json_rows(root: Path) -> None:
    by_budget = select_records(root, "glyphs", "mlrc")
    data = json.loads(render("json", "glyphs", "mlrc", by_budget, ["map_at_r", "precision_at_1"]))
    assert data == json.loads(
        json.dumps(leaderboard_data("glyphs", "mlrc", by_budget, ["map_at_r", "precision_at_1"]))
    )
    assert data["schema"] == "dmlbench.leaderboard/1"
    assert data["unit"].startswith("fraction")  # the Markdown and LaTeX tables show percent
    assert [m["name"] for m in data["metrics"]] == ["map_at_r", "precision_at_1"]
    (section,) = data["budgets"]
    assert section["budget"] == "mini"
    assert [r["loss"] for r in section["rows"]] == ["mfcont", "arcface", "untrained"]
    mfcont, arcface, untrained = section["rows"]
    assert untrained["cells"]["separated"]["map_at_r"] == {
        "mean": 0.05,
        "half_width": None,
        "df": None,
        "best": False,
        "group": "",
    }
    assert mfcont["seeds"] == [0] and mfcont["interval_covers"] == "training seeds"
    assert mfcont["cells"]["separated"]["map_at_r"]["group"] == "a"
    cell = mfcont["cells"]["concatenated"]["map_at_r"]
    assert cell["mean"] == pytest.approx(0.35) and cell["half_width"] == pytest.approx(0.0248413771175)
    assert cell["best"] is True
    assert arcface["cells"]["separated"]["precision_at_1"]["best"] is True
    assert mfcont["cells"]["separated"]["precision_at_1"]["best"] is False
    assert section["search_trials"] == {
        "arcface": {"complete": 3, "n_trials": 4},
        "mfcont": {"complete": 3, "n_trials": 4},
    }
    assert section["deviations"] == [{"key": "test.reps", "paper": 10, "value": 3}]


def _strip_escapes(text: str) -> str:
    return re.sub(r"\\[{}&%$#_]", "", text)


def test_latex_well_formed_and_escaped(tmp_path: Path) -> None:
    special = "MS_v2 & #1 {x} 5% $~^"
    root = write(
        tmp_path,
        [
            make_record("ms", special, {"map_at_r": 0.30, "precision_at_1": 0.60, "r_precision": 0.40}, "2"),
            make_record(
                "arcface", "ArcFace", {"map_at_r": 0.20, "precision_at_1": 0.70, "r_precision": 0.30}, "1"
            ),
        ],
    )
    by_budget = select_records(root, "glyphs", "mlrc")
    text = render_latex("glyphs", "mlrc", by_budget, MLRC)
    body = [line for line in text.splitlines() if not line.startswith("%")]
    assert body.count(r"\begin{tabular}{l|l|rrr|rrr|rr}") == 1 and body.count(r"\end{tabular}") == 1
    assert body.index(r"\end{tabular}") > body.index(r"\begin{tabular}{l|l|rrr|rrr|rr}")
    code = "\n".join(body)
    unescaped = _strip_escapes(code)
    assert unescaped.count("{") == unescaped.count("}")
    depth = 0
    for ch in unescaped:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        assert depth >= 0
    assert not re.search(r"(?<!\\)[#_%]", code), "unescaped special character"
    assert r"MS\_v2 \& \#1 \{x\} 5\% \$\textasciitilde{}\textasciicircum{}" in code
    assert r"\textbf{30.00 $\pm$ 2.48}" in code and r"\textbf{70.00 $\pm$ 2.48}" in code
    rows = [line for line in body if line.endswith(r"\\")]
    assert len(rows) == 2 + 3  # two header lines, untrained + two losses
    for line in rows:
        cells = re.split(r"(?<!\\)&", line[: -len(r"\\")])
        spans = [int(m.group(1)) if (m := re.match(r"\s*\\multicolumn\{(\d+)\}", c)) else 1 for c in cells]
        assert sum(spans) == 10, line
    assert "% Budget mini; search trials per loss: arcface 3/4, ms 3/4." in text
    assert "% Reps and commits: arcface 3 reps @ 0123456789, ms 3 reps @ 0123456789." in text
    assert "% Deviations from the paper protocol: test.reps = 3 (paper 10)." in text


def test_latex_escape() -> None:
    assert latex_escape("a_b&c%d#e") == r"a\_b\&c\%d\#e"
    assert latex_escape("x\\y") == r"x\textbackslash{}y"
    assert latex_escape("1 ± 2") == r"1 $\pm$ 2"


def test_metric_selection(tmp_path: Path) -> None:
    base = {"map_at_r": 0.3, "precision_at_1": 0.6, "r_precision": 0.4, "nmi": 0.5}
    root = write(
        tmp_path,
        [
            make_record("a", "A", base, "1", metrics=["nmi", *MLRC]),
            make_record("b", "B", base, "2", metrics=[*MLRC, "nmi"]),
            make_record("c", "C", base, "3", budget="smoke"),
        ],
    )
    mini = select_records(root, "glyphs", "mlrc", "mini")
    assert resolve_metrics(mini) == [*MLRC, "nmi"]  # MLRC first, extras only when present
    assert resolve_metrics(select_records(root, "glyphs", "mlrc")) == MLRC
    assert resolve_metrics(mini, ["nmi", "map_at_r"]) == ["nmi", "map_at_r"]
    with pytest.raises(DmlbenchError, match="records have: map_at_r, precision_at_1, r_precision"):
        resolve_metrics(select_records(root, "glyphs", "mlrc", "smoke"), ["nmi"])
    with pytest.raises(UnknownNameError, match="Unknown metric 'mapr'"):
        resolve_metrics(mini, ["mapr"])
    with pytest.raises(DmlbenchError, match="budgets with records: mini, smoke"):
        select_records(root, "glyphs", "mlrc", "paper")


def test_missing_dataset_names_existing(root: Path) -> None:
    with pytest.raises(DmlbenchError, match=r"dataset 'cub200'.*Records exist for: glyphs/mlrc"):
        select_records(root, "cub200", "mlrc")
    with pytest.raises(DmlbenchError, match="no records under"):
        select_records(root / "nowhere", "glyphs", "mlrc")


def test_write_tables(root: Path) -> None:
    paths = write_tables(root, "glyphs", "mlrc")
    assert [p.name for p in paths] == [
        "leaderboard.md",
        "leaderboard.csv",
        "leaderboard.tex",
        "leaderboard.json",
    ]
    assert all(p.stat().st_size > 0 for p in paths)


def _args(root: Path, **kw: Any) -> argparse.Namespace:
    base = {"dataset": None, "protocol": "mlrc", "metrics": None, "format": "md", "budget": None,
            "results_dir": root, "plots": False}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_report_cli(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_cmd.handle(_args(root, metrics="map_at_r", format="csv")) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].endswith("separated_map_at_r_group,concatenated_map_at_r_mean,"
                                        "concatenated_map_at_r_half_width,concatenated_map_at_r_df,"
                                        "concatenated_map_at_r_best_tier,concatenated_map_at_r_group,"
                                        "test_patience_stops,test_fold_trainings,search_patience_stops,"
                                        "search_fold_trainings,convergence,stops_derived,"
                                        "cpu_capability,cpu_model,torch_threads_per_job,"
                                        "best_params_at_bound")  # fmt: skip
    with pytest.raises(DmlbenchError, match="Records exist for: glyphs/mlrc"):
        report_cmd.handle(_args(root, dataset="cars196"))
    write(root, [make_record("x", "X", {m: 0.1 for m in MLRC}, "1")], dataset="omniglot")
    with pytest.raises(DmlbenchError, match="datasets with 'mlrc' records: glyphs, omniglot"):
        report_cmd.handle(_args(root))


@pytest.mark.parametrize(
    ("model", "label"),
    [
        ({"embedding_dim": 128}, "Untrained (init trunk + random embedder)"),
        ({"embedding_dim": 128, "pretrained": False}, "Untrained (init trunk + random embedder)"),
        ({"embedding_dim": 128, "pretrained": True}, "Pretrained trunk + random embedder (no training)"),
    ],
)
def test_baseline_row_names_a_pretrained_trunk(model: dict[str, Any], label: str) -> None:
    """The row of models without training says whether their trunk was pretrained (the mini
    budget's symbol-pretrained smallcnn, the paper's ImageNet trunk) or random."""
    base = {"map_at_r": 0.30, "precision_at_1": 0.60, "r_precision": 0.40}
    rec = make_record("mfcont", "MFCont", base, "1")
    rec["config"]["model"] = model
    rows = list(csv.reader(io.StringIO(render("csv", "glyphs", "mlrc", {"mini": [rec]}, ["map_at_r"]))))
    assert rows[-1][:3] == ["mini", "untrained", label]


def _seeded(loss: str, seed_means: list[float], spread: float = 0.001) -> list[dict[str, Any]]:
    """One record per search seed; each seed's 3 reps are its mean ± ``spread`` (MAP@R only)."""
    out = []
    for seed, m in enumerate(seed_means):
        reps = [m - spread, m, m + spread]
        per_rep = {mode: {"map_at_r": reps} for mode in ("separated", "concatenated")}
        out.append(
            run_record(loss, f"{loss}{seed}", per_rep=per_rep, seed=seed, budget="mini", schema=SCHEMA)
        )
    return out


@pytest.mark.parametrize("erratic", [True, False])
def test_multi_seed_rows_pool_only_when_their_seed_spreads_agree(tmp_path: Path, erratic: bool) -> None:
    """One loss whose search seeds disagree by 20 points beside two that agree within 1: the
    footer (Markdown, LaTeX, JSON) reports Bartlett's rejection and each row's interval uses its
    own 3 seed means (t on 2 df); with similar spreads the rows pool and the footer says so."""
    import math

    import numpy as np
    import scipy.stats

    first = [0.24, 0.46, 0.39] if erratic else [0.44, 0.45, 0.452]
    means = {"margin": first, "ms": [0.467, 0.471, 0.469], "triplet": [0.429, 0.443, 0.437]}
    root = write(tmp_path, [r for loss, m in means.items() for r in _seeded(loss, m)])
    by_budget = select_records(root, "glyphs", "mlrc")
    md = render("md", "glyphs", "mlrc", by_budget, ["map_at_r"])
    (line,) = [x for x in md.splitlines() if x.startswith("Seed-mean variance of the multi-seed rows (3)")]
    p = float(scipy.stats.bartlett(*[np.asarray(m) for m in means.values()]).pvalue)
    assert erratic == (p < 0.05)
    assert f"separated MAP@R {'own' if erratic else 'pooled'}, p = {p:.2g}" in line, line
    data = leaderboard_data("glyphs", "mlrc", by_budget, ["map_at_r"])
    assert data["budgets"][0]["seed_variance"] == [line]
    assert line in render("tex", "glyphs", "mlrc", by_budget, ["map_at_r"])
    row = next(r for r in md.splitlines() if r.startswith("| ms "))
    if erratic:
        half = scipy.stats.t.ppf(0.975, 2) * math.sqrt(float(np.var(means["ms"], ddof=1)) / 3)
    else:
        ss = sum(float(np.var(m, ddof=1)) * 2 for m in means.values())
        half = scipy.stats.t.ppf(0.975, 6) * math.sqrt(ss / 6 / 3)
    assert f"± {100 * half:.2f}" in row, row


def test_a_row_whose_seeds_agree_closer_than_its_training_noise_is_held_at_the_floor(tmp_path: Path) -> None:
    """Bartlett rejects (an erratic margin); ms's three seed means agree within 0.2 points while
    each seed's repetitions spread by ± 1.5: its interval uses sigma_e^2 / R (computed here from
    the repetitions) on 2 df, not its seed means' variance, and the footer names it."""
    import math

    import scipy.stats

    records = _seeded("margin", [0.24, 0.46, 0.39]) + _seeded("triplet", [0.429, 0.443, 0.437])
    records += _seeded("ms", [0.4412, 0.4434, 0.4417], spread=0.015)
    by_budget = select_records(write(tmp_path, records), "glyphs", "mlrc")
    md = render("md", "glyphs", "mlrc", by_budget, ["map_at_r"])
    (line,) = [x for x in md.splitlines() if x.startswith("Seed-mean variance of the multi-seed rows (3)")]
    assert "separated MAP@R own, p = " in line and "at the training floor: ms;" in line, line
    assert line.count("at the training floor:") == 2  # both modes, ms alone
    sigma_e2 = 2 * 0.015**2 / 2  # deviations -s, 0, +s: sum of squares 2 s^2 over 2 df
    half = scipy.stats.t.ppf(0.975, 2) * math.sqrt(sigma_e2 / 3 / 3)
    row = next(r for r in md.splitlines() if r.startswith("| ms "))
    assert f"± {100 * half:.2f}" in row, row
