"""Published tables (results/published/): transcription against the sources, parsing, loss names,
the reproduction tolerance and the join with synthetic cub200 records (docs/protocols.md §8)."""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import scipy.stats
from conftest import page_signed
from record_factory import MLRC
from test_report_tables import make_record, write

from benchmark.cli import compare_cmd, report_cmd
from benchmark.errors import DmlbenchError
from benchmark.losses import LOSSES
from benchmark.report.published import (
    MARGIN_STEP,
    MAX_CROSS_LOSS_CONSISTENT,
    NOT_REGISTERED,
    NOT_REGISTERED_MARK,
    SHIPPED_DIR,
    UNTRAINED,
    PublishedTable,
    PublishedValue,
    confusion,
    equivalence_margins,
    join,
    load_published,
    parse_table,
    reproduction_tolerance,
)

# shared/ lies beside the checkout (as ../shared/data/omniglot in conftest), on CI too.
SHARED = Path(__file__).resolve().parent.parent.parent / "shared"
MLRC_TSV = SHARED / "published" / "mlrc2020_cub_cars.tsv"
MF_TEXT = SHARED / "papers" / "mean-field-dml-iclr2024.txt"
SHIPPED = sorted(SHIPPED_DIR.glob("*.tsv"))


def _values(name: str) -> list[PublishedValue]:
    return list(parse_table(SHIPPED_DIR / name).values)


# -- every shipped file ---------------------------------------------------------------------------


def test_there_are_shipped_tables() -> None:
    assert {p.name for p in SHIPPED} >= {"mlrc2020.tsv", "meanfield2024.tsv"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_every_shipped_file_parses_and_names_registered_losses(path: Path) -> None:
    table = parse_table(path)
    assert table.values
    registered = set(LOSSES.names())
    for v in table.values:
        if v.loss == NOT_REGISTERED_MARK:
            assert v.published_name in NOT_REGISTERED, f"{path.name}: {v.published_name} unmapped"
            # A name marked unregistered must not be a registered one in disguise ("MFCWMS").
            assert re.sub(r"[^a-z]", "", v.published_name.lower()) not in registered, v.published_name
        else:
            assert v.loss in registered | {UNTRAINED}, f"{path.name}: {v.loss!r} is not a registered loss"
        assert v.mode in {"separated", "concatenated", "test"}
        assert v.metric == "epochs_to_best" or v.metric in {"map_at_r", "precision_at_1", "r_precision"}
    # One published name always maps to the same dmlbench name within a file.
    names: dict[str, set[str]] = {}
    for v in table.values:
        names.setdefault(v.published_name, set()).add(v.loss)
    assert all(len(s) == 1 for s in names.values())
    # No cell twice.
    keys = [
        (v.table, v.dataset, v.protocol, v.mode, v.embedding_dim, v.published_name, v.metric)
        for v in table.values
    ]
    assert len(keys) == len(set(keys))


def test_parse_errors_name_file_and_line(tmp_path: Path) -> None:
    good = (SHIPPED_DIR / "mlrc2020.tsv").read_text(encoding="utf-8")
    line = next(i for i, text in enumerate(good.splitlines(), start=1) if "\t50.54\t" in text)
    path = tmp_path / "bad.tsv"
    path.write_text(good.replace("\t50.54\t", "\t5O.54\t", 1), encoding="utf-8")  # letter O
    with pytest.raises(DmlbenchError, match=rf"bad.tsv:{line}: value '5O.54' is not a number"):
        parse_table(path)
    path.write_text(good.split("\n", 1)[1], encoding="utf-8")  # without the format line
    with pytest.raises(DmlbenchError, match="header lacks format"):
        parse_table(path)


# -- transcription against the sources ------------------------------------------------------------


@pytest.mark.skipif(
    not MLRC_TSV.is_file(), reason=f"the shared transcription {MLRC_TSV} is not on this machine"
)
def test_mlrc_matches_the_shared_transcription_cell_by_cell() -> None:
    rows = [line for line in MLRC_TSV.read_text(encoding="utf-8").splitlines() if not line.startswith("#")]
    source = {r["loss"]: r for r in csv.DictReader(rows, delimiter="\t")}
    short = {"cub200": "cub", "cars196": "cars"}
    metric = {"precision_at_1": "p1", "r_precision": "rp", "map_at_r": "mapr"}
    values = _values("mlrc2020.tsv")
    for v in values:
        assert v.value == float(
            source[v.published_name][f"{short[v.dataset]}_{v.embedding_dim}_{metric[v.metric]}"]
        )
        assert v.pm is None
    # Every source cell is shipped: 15 rows x 2 datasets x 2 sizes x 3 metrics.
    assert len(values) == len(source) * 12 == 180


_PAIR = re.compile(r"(\d+\.\d+)\s*(?:\\pm|±)\s*(\d+\.\d+)")


def _paper_rows(text: str, start: str, end: str | None) -> dict[str, list[tuple[float, float]]]:
    """``name -> [(value, pm), ...]`` of the table rows between two markers of the paper text
    (``end`` None: to the end of the text).

    The text extraction merges some rows into one line ("CWMS MFCWMS", LaTeX arrays): a line's
    first field holds several names and each later field then holds one value ± pm per name.
    """
    begin = text.index(start)
    region = text[begin : len(text) if end is None else text.index(end, begin)]
    rows: dict[str, list[tuple[float, float]]] = {}
    for line in region.splitlines():
        fields = line.split("\t")
        names = fields[0].split()
        cells = [[(float(a), float(b)) for a, b in _PAIR.findall(f)] for f in fields[1:]]
        cells = [c for c in cells if c]
        if not names or not cells:
            continue
        assert all(len(c) == len(names) for c in cells), line
        for i, name in enumerate(names):
            rows[name] = [c[i] for c in cells]
    return rows


@pytest.mark.skipif(not MF_TEXT.is_file(), reason=f"the paper text {MF_TEXT} is not on this machine")
@pytest.mark.parametrize(
    ("table", "start", "end", "n_rows"),
    [
        ("Table 3", "B.1 MLRC RESULTS", "Table 3:", 10),
        ("Table 4", "Table 4:", "Table 5:", 10),
        ("Table 5", "Table 5:", "Moreover, we performed the T-test", 9),
        ("Table 2", "Table 2:", "4.3 BENCHMARK RESULTS", 3),
    ],
)
def test_mean_field_matches_the_paper_text_cell_by_cell(
    table: str, start: str, end: str, n_rows: int
) -> None:
    paper = _paper_rows(MF_TEXT.read_text(encoding="utf-8"), start, end)
    assert len(paper) == n_rows
    shipped = [v for v in _values("meanfield2024.tsv") if v.table == table]
    assert len(shipped) == sum(len(cells) for cells in paper.values())
    if table == "Table 2":  # columns: (MAP@R, epoch) for CUB, Cars, SOP, InShop
        columns = [
            (d, m) for d in ("cub200", "cars196", "sop", "inshop") for m in ("map_at_r", "epochs_to_best")
        ]
        position = {(v.dataset, v.metric): columns.index((v.dataset, v.metric)) for v in shipped}
    else:  # columns: MAP@R, P@1, RP separated (128-d), then the same concatenated (512-d)
        columns = [
            (mode, m)
            for mode in ("separated", "concatenated")
            for m in ("map_at_r", "precision_at_1", "r_precision")
        ]
        position = {(v.mode, v.metric): columns.index((v.mode, v.metric)) for v in shipped}
    for v in shipped:
        key = (v.dataset, v.metric) if table == "Table 2" else (v.mode, v.metric)
        assert (v.value, v.pm) == paper[v.published_name][position[key]], (table, v)


@pytest.mark.skipif(not MF_TEXT.is_file(), reason=f"the paper text {MF_TEXT} is not on this machine")
def test_mean_field_table_15_mfnca_cell_by_cell_and_its_proxynca_row_is_table_3() -> None:
    # Table 15 is the paper's last table: its rows run to the end of the text.
    paper = _paper_rows(MF_TEXT.read_text(encoding="utf-8"), "Table 15:", None)
    assert set(paper) == {"ProxyNCA", "MFNCA"}
    columns = [
        (mode, m)
        for mode in ("separated", "concatenated")
        for m in ("map_at_r", "precision_at_1", "r_precision")
    ]
    shipped = [v for v in _values("meanfield2024.tsv") if v.table == "Table 15"]
    assert {v.published_name for v in shipped} == {"MFNCA"} and len(shipped) == 6
    for v in shipped:
        assert (v.loss, v.dataset, v.protocol) == ("mfnca", "cub200", "mlrc")
        assert v.embedding_dim == (128 if v.mode == "separated" else 512)
        assert (v.value, v.pm) == paper["MFNCA"][columns.index((v.mode, v.metric))], v
    # Its ProxyNCA row is Table 3's ProxyNCA CUB row rounded to 0.1 (declared, not shipped twice).
    table3 = {
        (v.mode, v.metric): v
        for v in _values("meanfield2024.tsv")
        if (v.table, v.published_name) == ("Table 3", "ProxyNCA")
    }
    for column, (value, pm) in zip(columns, paper["ProxyNCA"], strict=True):
        full = table3[column]
        assert full.pm is not None
        assert abs(full.value - value) <= 0.05 + 1e-9 and abs(full.pm - pm) <= 0.05 + 1e-9, column
    header = parse_table(SHIPPED_DIR / "meanfield2024.tsv").header
    assert "Table 15's ProxyNCA row" in header["omitted"] and "Tables 8-13" in header["omitted"]
    assert "Table 14" in header["omitted"]
    assert "batch size 256" in parse_table(SHIPPED_DIR / "mlrc2020.tsv").header["omitted"]


def test_mean_field_spot_cells_from_the_issue() -> None:
    # MS on CUB 512-d: 24.70 (MLRC) vs 26.20 (Mean-Field), the issue's example of protocol spread.
    def cell(name: str, paper_loss: str) -> float:
        (v,) = [
            v for v in _values(name)
            if (v.dataset, v.mode, v.loss, v.metric) == ("cub200", "concatenated", paper_loss, "map_at_r")
        ]  # fmt: skip
        return v.value

    assert abs(cell("meanfield2024.tsv", "ms") - cell("mlrc2020.tsv", "ms")) == pytest.approx(1.5)


# -- tolerance and join ---------------------------------------------------------------------------


def _table(paper: str, cells: dict[tuple[str, str, str], float], pm: float | None = None) -> PublishedTable:
    values = tuple(
        PublishedValue(
            paper, paper, "T", "mlrc", "cub200", 128 if mode == "separated" else 512,
            mode, loss, loss, metric, value, pm,
        )
        for (loss, mode, metric), value in cells.items()
    )  # fmt: skip
    return PublishedTable(Path(f"{paper}.tsv"), {"paper": paper}, values)


def test_reproduction_tolerance_is_the_largest_between_paper_spread() -> None:
    a = _table("a", {("ms", "separated", "map_at_r"): 20.0, ("ms", "concatenated", "map_at_r"): 25.0,
                     ("arcface", "separated", "map_at_r"): 21.0,
                     ("ms", "separated", "r_precision"): 30.0})  # fmt: skip
    b = _table("b", {("ms", "separated", "map_at_r"): 20.5, ("ms", "concatenated", "map_at_r"): 26.25,
                     ("arcface", "separated", "map_at_r"): 20.0})  # fmt: skip
    assert reproduction_tolerance([a, b]) == {"map_at_r": pytest.approx(1.25)}
    assert reproduction_tolerance([a]) == {}


def test_shipped_tolerance() -> None:
    tol = reproduction_tolerance(load_published(SHIPPED_DIR))
    assert set(tol) == {"map_at_r", "precision_at_1", "r_precision"}  # epochs: one paper only
    assert tol["map_at_r"] == pytest.approx(1.5)  # the MS CUB 512-d cell above is the largest


def _cub_records(base: dict[str, dict[str, float]], budget: str = "paper") -> list[dict[str, Any]]:
    return [
        make_record(loss, loss.upper(), b, str(i), budget=budget) for i, (loss, b) in enumerate(base.items())
    ]


def test_join_difference_and_verdict() -> None:
    a = _table("a", {("ms", "separated", "map_at_r"): 20.0, ("ms", "concatenated", "map_at_r"): 30.0})
    b = _table("b", {("ms", "separated", "map_at_r"): 21.0}, pm=0.5)  # tolerance 1.0
    # make_record: 3 reps base-0.01/base/base+0.01 -> half-width 2.484 points; concatenated +5 points.
    rec = _cub_records({"ms": {"map_at_r": 0.17, "precision_at_1": 0.5, "r_precision": 0.3}})
    hw = 100 * rec[0]["test"]["summary"]["separated"]["map_at_r"]["half_width"]
    matches = {(m.mode, m.published.paper): m for m in join(rec, [a, b], "cub200", "mlrc") if m.loss == "ms"}
    assert set(matches) == {("separated", "a"), ("separated", "b"), ("concatenated", "a")}
    sep_a, sep_b, cat_a = matches["separated", "a"], matches["separated", "b"], matches["concatenated", "a"]
    assert sep_a.difference == pytest.approx(-3.0) and cat_a.difference == pytest.approx(-8.0)
    # Tables a and b never hold two losses in one cell: no margin can be derived, no verdict.
    assert sep_a.margin is None and sep_a.verdict is None
    # TOST by hand: ours has se = hw / t(0.975, 2) on 2 df, table a no ± (exact).
    se = hw / scipy.stats.t.ppf(0.975, 2)
    q = scipy.stats.t.ppf(0.95, 2)
    e = replace(sep_a, margin=1.0).equivalence
    assert e is not None and e.se == pytest.approx(se) and e.df == pytest.approx(2.0)
    assert e.low == pytest.approx(-3.0 - q * se) and e.high == pytest.approx(-3.0 + q * se)
    assert e.verdict == "differs"  # the whole 90% interval lies below -1
    assert replace(sep_a, margin=5.0).verdict == "consistent"  # inside (-5, 5)
    assert replace(sep_a, margin=3.0).verdict == "inconclusive"  # straddles -3
    # Table b's ± (0.5 over 10 reps) enters in quadrature, with Welch-Satterthwaite df.
    eb = replace(sep_b, margin=1.0).equivalence
    se_b = 0.5 / scipy.stats.t.ppf(0.975, 9)
    assert eb is not None and eb.se == pytest.approx(math.hypot(se, se_b))
    assert eb.df == pytest.approx((se**2 + se_b**2) ** 2 / (se**4 / 2 + se_b**4 / 9))
    # Wrong embedding size (64-d record): nothing matches.
    rec[0]["config"]["model"]["embedding_dim"] = 64
    assert [m for m in join(rec, [a, b], "cub200", "mlrc") if m.loss == "ms"] == []
    # Other dataset or protocol: nothing.
    assert join(_cub_records({"ms": dict.fromkeys(MLRC, 0.2)}), [a, b], "cars196", "mlrc") == []
    assert join(_cub_records({"ms": dict.fromkeys(MLRC, 0.2)}), [a, b], "cub200", "traditional") == []


def test_no_tolerance_no_verdict() -> None:
    a = _table("a", {("ms", "separated", "map_at_r"): 20.0})
    (m,) = [
        m
        for m in join(_cub_records({"ms": dict.fromkeys(MLRC, 0.2)}), [a], "cub200", "mlrc")
        if m.loss == "ms"
    ]
    assert m.margin is None and m.verdict is None and math.isclose(m.difference, 0.0, abs_tol=1e-9)


# -- CLI ------------------------------------------------------------------------------------------


def _args(root: Path, **kw: Any) -> argparse.Namespace:
    base = {"dataset": "cub200", "protocol": "mlrc", "metrics": None, "format": "md", "budget": None,
            "results_dir": root, "plots": False, "published": True}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


@pytest.fixture
def cub_root(tmp_path: Path) -> Path:
    base = {"ms": {"map_at_r": 0.205, "precision_at_1": 0.57, "r_precision": 0.305},
            "arcface": {"map_at_r": 0.30, "precision_at_1": 0.60, "r_precision": 0.33},
            "triplet": {"map_at_r": 0.19, "precision_at_1": 0.55, "r_precision": 0.29}}  # fmt: skip
    return write(tmp_path, _cub_records(base), dataset="cub200")


def test_report_published_section_is_separate(cub_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert report_cmd.handle(_args(cub_root, published=False)) == 0
    plain = capsys.readouterr().out
    assert report_cmd.handle(_args(cub_root)) == 0
    out = capsys.readouterr().out
    # The leaderboard itself is unchanged (published rows are not mixed in, bold unchanged) ...
    assert out.startswith(plain)
    extra = out[len(plain) :]
    assert "# Published numbers beside ours: `cub200`, protocol `mlrc`" in extra
    # ... and the section shows ours beside both papers with Δ and a verdict.
    ms_sep = [line for line in extra.splitlines() if line.startswith("| MS | separated (128-d) | MAP@R |")]
    assert len(ms_sep) == 2  # MLRC and Mean-Field
    mlrc = next(line for line in ms_sep if "mlrc2020" in line)
    published = next(v for v in _values("mlrc2020.tsv") if v.loss == "ms" and v.dataset == "cub200"
                     and v.mode == "separated" and v.metric == "map_at_r")  # fmt: skip
    # 3 repetitions at a 1-point spread cannot show |Δ| < the 0.30 margin, nor |Δ| > it.
    assert f"| {published.value:.2f} | {page_signed(20.5 - published.value)} | inconclusive (" in mlrc
    arc = [
        line for line in extra.splitlines() if line.startswith("| ARCFACE | concatenated (512-d) | MAP@R |")
    ]
    assert arc and all("| differs (" in line for line in arc)  # 35.00 is far above 26.4
    assert "Published but not in these records:" in extra and "Margin/class" in extra
    assert "deviate from the paper protocol (`test.reps`)" in extra


def test_report_published_without_a_table_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = write(tmp_path, _cub_records({"ms": dict.fromkeys(MLRC, 0.2)}), dataset="omniglot")
    assert report_cmd.handle(_args(root, dataset="omniglot")) == 0
    out = capsys.readouterr().out
    assert "No published table covers dataset `omniglot` with protocol `mlrc`" in out
    assert "cub200/mlrc" in out


def test_report_published_needs_markdown(cub_root: Path) -> None:
    with pytest.raises(DmlbenchError, match="--published is shown as Markdown"):
        report_cmd.handle(_args(cub_root, format="csv"))


def test_compare_published(cub_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(
        dataset="cub200", protocol="mlrc", reference="arcface", losses="ms", metric="r_precision",
        holm=False, alpha=0.05, format="md", budget=None, results_dir=cub_root, published=True,
    )  # fmt: skip
    assert compare_cmd.handle(args) == 0
    out = capsys.readouterr().out
    section = out[out.index("# Published numbers beside ours") :]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows and all("| RP |" in line for line in rows)  # only the compared metric
    assert {line.split(" | ")[0] for line in rows} <= {"| MS", "| ARCFACE", "| Untrained"}  # not triplet


def test_published_dir_falls_back_to_the_shipped_tables(tmp_path: Path) -> None:
    from benchmark.report.published import published_dir

    assert published_dir(tmp_path) == SHIPPED_DIR
    (tmp_path / "published").mkdir()
    assert published_dir(tmp_path) == tmp_path / "published"


def test_cli_subprocess(cub_root: Path, tmp_path: Path) -> None:
    # The option reaches the real argument parser (the handler tests above bypass it).
    from cli_helpers import dmlbench

    args = ("report", "--dataset", "cub200", "--published", "--results-dir", str(cub_root))
    ok = dmlbench(*args, cache=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "# Published numbers beside ours: `cub200`, protocol `mlrc`" in ok.stdout


def test_traditional_join_uses_the_test_mode_and_epochs() -> None:
    # A committed traditional record (one 512-d model, mode "test", epochs in extra_summary) read as
    # if it were CUB's: MAP@R gets a verdict, epochs to best (one paper only) gets none.
    path = Path(__file__).parents[1] / "results" / "omniglot" / "traditional" / "records"
    record = json.loads(next(path.glob("proxyanchor.*.json")).read_text(encoding="utf-8"))
    matches = join([record], load_published(SHIPPED_DIR), "cub200", "traditional")
    by_metric = {m.metric: m for m in matches if m.loss == "proxyanchor"}
    assert set(by_metric) == {"map_at_r", "epochs_to_best"}
    assert all(m.mode == "test" and m.embedding_dim == 512 for m in by_metric.values())
    mapr, epochs = by_metric["map_at_r"], by_metric["epochs_to_best"]
    assert mapr.ours == pytest.approx(100 * record["test"]["summary"]["test"]["map_at_r"]["mean"])
    table2 = {
        v.metric: v
        for v in _values("meanfield2024.tsv")
        if (v.table, v.dataset, v.published_name) == ("Table 2", "cub200", "ProxyAnch.")
    }
    assert mapr.published == table2["map_at_r"] and mapr.verdict is not None
    # Ours counts epochs from 1, Table 2 from 0 (the authors' loop index): compared like with like.
    assert epochs.ours == pytest.approx(record["test"]["extra_summary"]["epochs_to_best"]["mean"] - 1)
    assert epochs.published == table2["epochs_to_best"]
    assert epochs.margin == equivalence_margins(load_published(SHIPPED_DIR))["epochs_to_best"]


def test_shipped_margins_tell_losses_apart_and_the_confusion_table() -> None:
    """The margin rule on the published tables themselves (docs/protocols.md §8): at each metric's
    margin fewer than 10% of the pairs of different losses test consistent, and one step wider
    would reach 10%; the confusion table of docs/protocols.md is this function's output."""
    tables = load_published(SHIPPED_DIR)
    margins = equivalence_margins(tables)
    assert margins["map_at_r"] == pytest.approx(0.30)
    table = confusion(tables, margins)
    for metric, margin in margins.items():
        cross = table[metric]["different losses"]
        n = sum(cross.values())
        assert cross["consistent"] / n < MAX_CROSS_LOSS_CONSISTENT
        wider = confusion(tables, {metric: margin + MARGIN_STEP})[metric]["different losses"]
        assert wider["consistent"] / n >= MAX_CROSS_LOSS_CONSISTENT
    # 24 same-loss cells shared by the two papers, 548 pairs of different losses for MAP@R.
    assert sum(table["map_at_r"]["same loss"].values()) == 24
    assert table["map_at_r"] == {
        "same loss": {"consistent": 4, "differs": 10, "inconclusive": 10},
        "different losses": {"consistent": 51, "differs": 402, "inconclusive": 95},
    }
