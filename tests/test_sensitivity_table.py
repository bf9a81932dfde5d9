"""benchmarks/sensitivity.py's table: each cell is variant - committed mini row, by hand."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import scipy.stats
from conftest import load_benchmark_script, page_signed

REPO = Path(__file__).resolve().parents[1]


def _module() -> ModuleType:
    return load_benchmark_script("sensitivity")


def _pooled_by_hand(sens: ModuleType) -> tuple[dict[str, list[np.floating[Any]]], float, int]:
    """Seed means of the committed separated mini rows per loss, and tau^2 pooled over the six
    losses' seeds with its degrees of freedom, computed by hand."""
    groups = {
        name: [
            np.mean(sens.rep_values(sens.load_record(p), "separated"))
            for p in sens.mini_paths("omniglot", name)
        ]
        for name in sens.FAMILIES
    }
    ss = sum(((np.array(m) - np.mean(m)) ** 2).sum() for m in groups.values())
    df = sum(len(m) - 1 for m in groups.values())
    return groups, ss / df, df


def _own_tau2(reps: list[list[float]]) -> tuple[float, bool]:
    """One loss's tau^2 from its seed means (ddof 1), never below its training floor
    sigma_e^2 * mean(1/R) with sigma_e^2 pooled within seeds (docs/protocols.md §4.5), by hand; and
    whether the floor held it."""
    within = sum(((np.asarray(r) - np.mean(r)) ** 2).sum() for r in reps) / sum(len(r) - 1 for r in reps)
    floor = float(within * np.mean([1 / len(r) for r in reps]))
    spread = float(np.var([np.mean(r) for r in reps], ddof=1))
    return max(spread, floor), floor > spread


def test_a_cell_is_the_change_with_the_pooled_interval() -> None:
    sens = _module()
    runs = sorted((sens.OUT_ROOT / "patience5" / "omniglot" / "mlrc" / "records").glob("*.json"))
    assert runs, "no committed patience5 record"
    loss = runs[0].name.split(".")[0]
    lines = sens.table("separated", "sep", ["patience5"])
    (row,) = [line for line in lines if line.startswith(f"| {loss} |")]
    groups, tau2, df = _pooled_by_hand(sens)
    variant = np.mean(sens.rep_values(sens.load_record(runs[0]), "separated"))
    change = variant - np.mean(groups[loss])
    half = scipy.stats.t.ppf(0.975, df) * math.sqrt(tau2 * (1 + 1 / len(groups[loss])))
    assert f"{page_signed(100 * change)} ± {100 * half:.2f}" in row


def test_against_a_variant_the_reference_is_that_variants_record() -> None:
    sens = _module()
    folder = sens.OUT_ROOT / "{}" / "omniglot" / "mlrc" / "records"
    losses = sorted(
        {p.name.split(".")[0] for p in Path(str(folder).format("patience5")).glob("*.json")}
        & {p.name.split(".")[0] for p in Path(str(folder).format("eval100")).glob("*.json")}
    )
    assert losses, "no loss with both committed variants"
    loss = losses[0]
    lines = sens.table("separated", "sep", ["eval100"], against="patience5")
    (row,) = [line for line in lines if line.startswith(f"| {loss} |")]
    _, tau2, df = _pooled_by_hand(sens)
    a = np.mean(
        sens.rep_values(sens.load_record(sens.variant_paths("eval100", "omniglot", loss)[0]), "separated")
    )
    b = np.mean(
        sens.rep_values(sens.load_record(sens.variant_paths("patience5", "omniglot", loss)[0]), "separated")
    )
    half = scipy.stats.t.ppf(0.975, df) * math.sqrt(2 * tau2)  # one seed on each side
    assert f"{page_signed(100 * (a - b))} ± {100 * half:.2f}" in row
    assert row.split(" | ")[2] == f"{100 * b:.2f} (1)"


def test_the_check_states_holm_adjusted_tests_and_the_repetition_spread() -> None:
    """Against a variant, the table also gives each change's test Holm-adjusted over the losses
    (scipy's t on the pooled df, Holm by hand) and the within-seed spread its intervals assume."""
    sens = _module()
    lines = sens.table("separated", "sep", ["eval100"], against="patience5")
    _, tau2, df = _pooled_by_hand(sens)
    p_raw = {}
    for loss in sens.FAMILIES:
        a = np.mean(
            sens.rep_values(sens.load_record(sens.variant_paths("eval100", "omniglot", loss)[0]), "separated")
        )
        b = np.mean(
            sens.rep_values(
                sens.load_record(sens.variant_paths("patience5", "omniglot", loss)[0]), "separated"
            )
        )
        p_raw[loss] = 2 * scipy.stats.t.sf(abs(a - b) / math.sqrt(2 * tau2), df)
    order = sorted(p_raw, key=lambda k: p_raw[k])
    adjusted, running = {}, 0.0
    for i, loss in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p_raw[loss]))
        adjusted[loss] = running
    (note,) = [line for line in lines if line.startswith("`eval100` against `patience5`")]
    for loss in sens.FAMILIES:
        assert f"{loss} {adjusted[loss]:.2g}" in note
    assert "with probability 26%" in note  # 1 - 0.95^6
    (spread,) = [line for line in lines if line.startswith("Test repetitions' spread")]
    values = [
        sens.rep_values(sens.load_record(p), "separated")
        for loss in sens.FAMILIES
        for p in sens.variant_paths("eval100", "omniglot", loss)
    ]
    ss = sum(((np.array(v) - np.mean(v)) ** 2).sum() for v in values)
    dof = sum(len(v) - 1 for v in values)
    assert f"`eval100` {100 * math.sqrt(ss / dof):.2f} ({dof} df)" in spread


def test_saturation_surveys_get_their_replayed_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sens = _module()
    monkeypatch.setattr(sens, "SATURATION", tmp_path)
    monkeypatch.setattr(sens, "REPO", tmp_path.parent)
    assert sens.saturation_sections() == []
    curve = [[e, 0.1 * e] for e in range(1, 6)] + [[e, 0.0] for e in range(6, 26)]
    fold = {"dataset": "omniglot", "loss": "ms", "patience": 20, "eval_every": 1, "iters_per_epoch": 50}
    (tmp_path / "omniglot.jsonl").write_text(
        json.dumps({**fold, "stopped_by": "patience", "curve": curve}) + "\n"
    )
    (tmp_path / "omniglot.cmd").write_text("python benchmarks/fold_convergence.py --set train.patience=20\n")
    text = "\n".join(sens.saturation_sections())
    assert "Survey: `python benchmarks/fold_convergence.py --set train.patience=20`" in text
    # The curve rises to epoch 5 and then falls: every patience keeps epoch 5.
    assert "| omniglot | ms | 20 (1000 it.) | 1 of 1 | −0.00 ± 0.00; 0%; 0.28 |" in text


def test_a_glyphs_run_has_no_data_folder_and_writes_beside_omniglot() -> None:
    sens = _module()
    cmd = sens.run_command("calib", "margin", "glyphs", Path("/data/omniglot"), 0)
    assert cmd[cmd.index("--dataset") + 1] == "glyphs"
    assert "--data-dir" not in cmd
    omni = sens.run_command("calib", "margin", "omniglot", Path("/data/omniglot"), 0)
    assert omni[omni.index("--data-dir") + 1] == "/data/omniglot"
    assert sens.record_path("calib", "glyphs", "margin", 0) == (
        sens.OUT_ROOT / "calib" / "glyphs" / "mlrc" / "records" / "margin.mini.seed0.json"
    )


def test_a_glyphs_table_borrows_omniglots_seed_variance_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Glyphs' committed rows have one seed each, so tau comes from the omniglot rows (the same
    value as an omniglot table's), and the table names where it came from."""
    sens = _module()
    omniglot = sens.table("separated", "sep", ["patience5"])
    glyphs = sens.table("separated", "sep", ["patience5"], dataset="glyphs")
    heads = ("Pooled seed-mean variance", "Seed-mean variance per loss")
    (tau_omni,) = [line for line in omniglot if line.startswith(heads)]
    (tau_glyphs,) = [line for line in glyphs if line.startswith(heads)]
    assert ", borrowed from the omniglot rows" in tau_glyphs
    assert tau_glyphs.replace(", borrowed from the omniglot rows", "") == tau_omni
    # No glyphs variant is committed: every row is the glyphs mini row and "not run".
    for loss in sens.FAMILIES:
        (row,) = [line for line in glyphs if line.startswith(f"| {loss} |")]
        (record,) = sens.mini_paths("glyphs", loss)
        mean = np.mean(sens.rep_values(sens.load_record(record), "separated"))
        assert row == f"| {loss} | {sens.FAMILIES[loss]} | {100 * mean:.2f} (1) | not run |"


def test_the_seed_variance_line_names_the_losses_held_at_their_training_floor() -> None:
    """On its own variances (Bartlett rejected) the line gives each loss's tau, marks those whose
    seed means agreed more closely than their repetitions' training noise allows, and names the
    losses that borrow the pool; a pooled line names no floor."""
    from benchmark.stats.seeds import OwnVariance, SeedVariance

    sens = _module()
    own = {"contrastive": OwnVariance(0.0004, 2, True), "ms": OwnVariance(0.0009, 1, False)}
    rejected = sens.TauModel(SeedVariance(False, 0.0016, 3, 2, 0.01), own)
    line = rejected.header("", ("contrastive", "ms", "margin"))
    assert (
        "contrastive 2.00 (2 df, at the training floor), ms 3.00 (1 df); margin borrow the pool's 4.00 (3 df)"
        in line
    )
    assert rejected.of("contrastive") == (0.0004, 2) and rejected.of("margin") == (0.0016, 3)
    pooled = sens.TauModel(SeedVariance(True, 0.0016, 3, 2, 0.5), own)
    assert "floor" not in pooled.header("") and pooled.of("contrastive") == (0.0016, 3)


def _kept(curve: list[list[float]], patience: int) -> float:
    """The validation value a patience rule keeps on ``curve``, by hand: walk the validations,
    stop once ``patience`` of them in a row failed to beat the best."""
    best, since = curve[0][1], 0
    for _, value in curve[1:]:
        if value > best:
            best, since = value, 0
        else:
            since += 1
            if since == patience:
                break
    return best


def test_the_check_replays_the_variants_test_folds_at_the_references_patience() -> None:
    sens = _module()
    losses = [
        loss
        for loss in sens.FAMILIES
        if sens.variant_paths("calib2x", "omniglot", loss) and sens.variant_paths("calib", "omniglot", loss)
    ]
    assert losses, "no loss with both committed calib and calib2x records"
    lines = sens.stopping_half("calib2x", "calib", "omniglot")
    for loss in losses:
        record = sens.load_record(sens.variant_paths("calib2x", "omniglot", loss)[0]).document
        longer = record["config"]["train"]["patience"]
        shorter = sens.load_record(sens.variant_paths("calib", "omniglot", loss)[0]).document["config"][
            "train"
        ]
        folds = [f for rep in record["test"]["rep_details"] for f in rep["folds"]]
        usable = [f for f in folds if f["stopped_by"] == "patience"]
        drops = [100 * (_kept(f["curve"], longer) - _kept(f["curve"], shorter["patience"])) for f in usable]
        half = scipy.stats.t.ppf(0.975, len(drops) - 1) * np.std(drops, ddof=1) / math.sqrt(len(drops))
        (row,) = [line for line in lines if line.startswith(f"| {loss} |")]
        assert row.startswith(
            f"| {loss} | {longer} → {shorter['patience']} | {len(usable)} of {len(folds)} "
            f"| −{np.mean(drops):.2f} ± {half:.2f} |"
        ), row


def test_one_check_document_holds_each_dataset_under_its_own_heading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``table --dataset omniglot,glyphs`` writes each dataset's sections, the same lines a
    one-dataset table gives, under a ``## <dataset>`` heading; an unknown dataset fails naming it."""
    sens = _module()
    out = tmp_path / "calibration.md"
    args = ["table", "--variants", "calib2x", "--against", "calib", "--dataset", "omniglot,glyphs"]
    assert sens.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Calibration check: `calib2x` against `calib`\n")
    assert "--against calib --dataset omniglot,glyphs`" in text
    omniglot, glyphs = text.split("\n## omniglot\n")[1].split("\n## glyphs\n")
    for dataset, section in (("omniglot", omniglot), ("glyphs", glyphs)):
        for mode, label in sens.MODES:
            expected = "\n".join(sens.table(mode, label, ["calib2x"], "calib", dataset))
            assert expected.strip() in section
    with pytest.raises(SystemExit, match=r"unknown dataset \['glyph'\]; valid: omniglot, glyphs"):
        sens.main(["table", "--dataset", "glyph"])


#: Every docs page written by ``sensitivity.py table`` (found by its "Generated by" line, so a new
#: page is checked without being listed here).
GENERATED = sorted(
    p.name
    for p in (REPO / "docs").glob("*.md")
    if "\nGenerated by `python benchmarks/sensitivity.py table" in p.read_text()
)


def test_the_generated_pages_are_found() -> None:
    assert {"sensitivity.md", "calibration.md"} <= set(GENERATED), GENERATED


@pytest.mark.parametrize("doc", GENERATED)
def test_the_committed_tables_are_what_their_generating_command_writes(doc: str, tmp_path: Path) -> None:
    """The pages ``sensitivity.py table`` writes are not hand-edited: rerunning the command each
    names on its "Generated by" line, on the committed records, rewrites it byte for byte."""
    sens = _module()
    committed = (REPO / "docs" / doc).read_text()
    (command,) = [line for line in committed.splitlines() if line.startswith("Generated by `")]
    argv = command.split("`")[1].split()
    assert argv[:3] == ["python", "benchmarks/sensitivity.py", "table"], argv
    out = tmp_path / doc
    assert sens.main([*argv[2:], "--out", str(out)]) == 0
    assert out.read_text() == committed, f"docs/{doc} is stale: rewrite it with `{' '.join(argv)}`"


def _glyphs_margin_calibp10x2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[ModuleType, Path, dict[str, Any]]:
    """The sensitivity module reading ``tmp_path``: the committed earlier ``mini`` rows, glyphs
    margin's ``calibp10`` record, and as the only ``calibp10x2`` record a copy of it (its path and
    document, to rewrite)."""
    sens = _module()
    source = sens.variant_paths("calibp10", "glyphs", "margin")[0]
    (tmp_path / "mini-earlier").symlink_to(sens.OUT_ROOT / "mini-earlier")
    reference = tmp_path / "calibp10" / "glyphs" / "mlrc" / "records" / source.name
    reference.parent.mkdir(parents=True)
    reference.write_bytes(source.read_bytes())  # margin alone: other losses' cells have other folds
    monkeypatch.setattr(sens, "OUT_ROOT", tmp_path)
    monkeypatch.setattr(sens, "BOARD_ROOT", tmp_path / "no-board")  # only the variant's own records
    target = tmp_path / "calibp10x2" / "glyphs" / "mlrc" / "records" / source.name
    target.parent.mkdir(parents=True)
    document: dict[str, Any] = json.loads(source.read_text())
    target.write_text(json.dumps(document))
    return sens, target, document


def _margin_row(lines: list[str]) -> str:
    (row,) = [line for line in lines if line.startswith("| margin |")]
    return row


def test_cells_whose_folds_hit_max_epochs_are_marked_and_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variant record whose fold trainings stopped at ``train.max_epochs`` (the cap, not the
    patience) gets ``‡`` on its cells and a footnote counting those folds per stage; the same
    record with every fold stopped by patience gets neither."""
    sens, target, document = _glyphs_margin_calibp10x2(tmp_path, monkeypatch)

    lines = sens.table("separated", "sep", ["calibp10x2"], "calibp10", "glyphs")
    assert "‡" not in _margin_row(lines)
    assert not [line for line in lines if line.startswith("‡")]

    search_folds = [f for trial in document["search"]["trials"] for f in trial.get("folds") or []]
    test_folds = [f for rep in document["test"]["rep_details"] for f in rep["folds"]]
    for fold in (search_folds[0], search_folds[5], test_folds[3]):
        fold["stopped_by"] = "max_epochs"
    target.write_text(json.dumps(document))
    lines = sens.table("separated", "sep", ["calibp10x2"], "calibp10", "glyphs")
    assert _margin_row(lines).endswith(" ‡ |")
    (note,) = [line for line in lines if line.startswith("‡")]
    cap = document["config"]["train"]["max_epochs"]
    assert note.startswith(
        f"‡ `calibp10x2` margin: 2 of {len(search_folds)} search folds and 1 of {len(test_folds)} test "
        f"folds stopped at `train.max_epochs` = {cap} before their patience ran out."
    ), note


def test_cells_whose_records_ran_in_another_environment_are_marked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A variant record made on another CPU model (or kind, or torch threads per fold) than its
    reference gets ``§`` and a footnote naming both sides' values; the same environment gets neither."""
    sens, target, document = _glyphs_margin_calibp10x2(tmp_path, monkeypatch)

    lines = sens.table("separated", "sep", ["calibp10x2"], "calibp10", "glyphs")
    assert "§" not in _margin_row(lines)
    assert not [line for line in lines if line.startswith("§")]

    theirs = document["environment"]["cpu_model"]
    document["environment"]["cpu_model"] = "Some Other CPU"
    target.write_text(json.dumps(document))
    lines = sens.table("separated", "sep", ["calibp10x2"], "calibp10", "glyphs")
    assert _margin_row(lines).endswith(" § |")
    (note,) = [line for line in lines if line.startswith("§")]
    assert note.startswith(
        "§ `calibp10x2` margin: these records and the reference's (`calibp10`) differ in CPU models: "
        f"Some Other CPU (the reference's: {theirs})."
    ), note


def test_a_loss_with_several_records_gets_a_replay_row_per_search_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record of a loss is replayed on its own; with several, each row names its search seed."""
    sens, target, document = _glyphs_margin_calibp10x2(tmp_path, monkeypatch)
    # The copy is a calibp10 record; as a longer patience it has a stop to replay (a record at the
    # reference's patience has none, test_trials_alone_has_no_stop_to_replay).
    document["config"]["train"]["patience"] = 20
    target.write_text(json.dumps(document))
    (alone,) = [line for line in sens.stopping_half("calibp10x2", "calibp10", "glyphs") if "→" in line]
    assert alone.startswith("| margin | ")
    target.with_name(target.name.replace("seed0", "seed1")).write_text(json.dumps({**document, "seed": 1}))
    rows = [line for line in sens.stopping_half("calibp10x2", "calibp10", "glyphs") if "→" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| margin (search seed 0)", "| margin (search seed 1)"]
    assert {row.split(" | ", 1)[1] for row in rows} == {alone.split(" | ", 1)[1]}  # the same folds


def test_a_record_with_no_fold_stopped_by_patience_gets_an_empty_replay_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A longer-patience record whose test folds all ended another way (the cap) has nothing to
    replay: its row counts none of them usable and leaves the three replay cells empty, where the
    same record with its folds stopped by patience fills them."""
    sens, target, document = _glyphs_margin_calibp10x2(tmp_path, monkeypatch)
    document["config"]["train"]["patience"] = 20
    folds = [f for rep in document["test"]["rep_details"] for f in rep["folds"]]
    assert folds and all(f["stopped_by"] == "patience" for f in folds)
    target.write_text(json.dumps(document))
    filled = _margin_row(sens.stopping_half("calibp10x2", "calibp10", "glyphs"))
    assert f"| {len(folds)} of {len(folds)} | −" in filled, filled
    for fold in folds:
        fold["stopped_by"] = "max_epochs"
    target.write_text(json.dumps(document))
    empty = _margin_row(sens.stopping_half("calibp10x2", "calibp10", "glyphs"))
    assert empty == f"| margin | 20 → 10 | 0 of {len(folds)} | – | – | – |", empty


def test_the_gap_row_is_the_family_means_difference_on_the_pool_df() -> None:
    sens = _module()
    means = {
        "contrastive": 0.50,
        "triplet": 0.52,
        "ms": 0.48,
        "margin": 0.54,
        "arcface": 0.60,
        "proxyanchor": 0.58,
    }
    var = {loss: 1e-4 * (i + 1) for i, loss in enumerate(means)}
    est = {
        loss: sens.Estimate(m, var[loss], 7.0, 3, 12, "search and training seeds", pooled=True)
        for loss, m in means.items()
    }
    got = sens.gap(est, pooled=True)
    pair = [x for x, f in sens.FAMILIES.items() if f == "pair"]
    cls = [x for x, f in sens.FAMILIES.items() if f == "class/proxy"]
    assert got.diff == pytest.approx(np.mean([means[x] for x in cls]) - np.mean([means[x] for x in pair]))
    by_hand = sum(var[x] for x in cls) / len(cls) ** 2 + sum(var[x] for x in pair) / len(pair) ** 2
    assert got.se**2 == pytest.approx(by_hand, rel=1e-12) and got.df == 7.0
    # Each loss on its own tau (Bartlett rejected a pool): Welch-Satterthwaite over the weighted terms.
    own = sens.gap({loss: dataclasses.replace(e, df=2.0) for loss, e in est.items()}, pooled=False)
    w = sens.gap_weights(list(means))
    parts = [w[x] ** 2 * var[x] for x in means]
    assert own.df == pytest.approx(sum(parts) ** 2 / sum(v * v / 2.0 for v in parts), rel=1e-12)
    assert own.diff == got.diff and own.se == pytest.approx(got.se, rel=1e-12)


def test_a_gap_change_is_one_term_per_loss_on_its_tau() -> None:
    """The two sides of a loss share its tau estimate: the change is one term of variance
    tau_l^2 (1/S_v + 1/S_b) per loss, on the pool's df when pooled."""
    sens = _module()
    losses = list(sens.FAMILIES)
    base = {
        x: sens.Estimate(0.5 + 0.01 * i, 1e-4 / 3, 12.0, 3, 12, "s", pooled=True)
        for i, x in enumerate(losses)
    }
    var = {
        x: sens.Estimate(0.51 + 0.01 * i, 1e-4, 12.0, 1, 4, "s", pooled=True) for i, x in enumerate(losses)
    }
    d = sens.gap_change(var, base, pooled=True)
    assert d.df == 12.0 and d.diff == pytest.approx(0.01 * sum(sens.gap_weights(losses).values()), abs=1e-12)
    w = sens.gap_weights(losses)
    assert d.se**2 == pytest.approx(sum(w[x] ** 2 * (1e-4 + 1e-4 / 3) for x in losses), rel=1e-12)


def _copy_record(
    source: Path,
    target: Path,
    patience: int | None = None,
    loss: dict[str, float] | None = None,
    scale_high: float | None = None,
    settings_from: Path | None = None,
) -> None:
    """Copy the record ``source`` to ``target``: with the board settings of the record
    ``settings_from`` (its config but for ``loss`` and ``space``, and its trunk weights), then the
    given changes. The committed boards' settings move as they are regenerated; a test that needs
    two records at one setting makes them so."""
    document = json.loads(source.read_text())
    if settings_from is not None:
        other = json.loads(settings_from.read_text())
        kept = {key: document["config"][key] for key in ("loss", "space") if key in document["config"]}
        document["config"] = {
            **{k: v for k, v in other["config"].items() if k not in ("loss", "space")},
            **kept,
        }
        document["trunk_weights"] = other["trunk_weights"]
    if patience is not None:
        document["config"]["train"]["patience"] = patience
    if loss is not None:
        document["config"]["loss"] = loss
    if scale_high is not None:
        document["search"]["space"]["scale"]["high"] = scale_high
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(document))


def test_a_board_record_at_a_variants_settings_is_one_of_its_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Of the variant that is today's ``mini`` (here ``calibp10``, as it was), a board record made
    at the board settings of the variant's own records (of any loss) is its reference too, so the
    check needs no second run of it; a board record at other settings is not, a seed the variant
    ran itself is not counted twice, another variant without records of its own takes none from
    the board, and neither does another variant whose own records have the same settings."""
    sens = _module()
    monkeypatch.setattr(sens, "MINI_VARIANT", "calibp10")
    committed = REPO / "results" / "glyphs" / "mlrc" / "records"
    own = sens.OUT_ROOT / "calibp10" / "glyphs" / "mlrc" / "records" / "margin.mini.seed0.json"
    sens_root, board_root = tmp_path / "sensitivity", tmp_path / "results"
    monkeypatch.setattr(sens, "OUT_ROOT", sens_root)
    monkeypatch.setattr(sens, "BOARD_ROOT", board_root)
    board = board_root / "glyphs" / "mlrc" / "records"
    _copy_record(own, sens_root / "calibp10" / "glyphs" / "mlrc" / "records" / own.name)
    _copy_record(own, board / own.name)  # the same seed: the variant's own record wins
    _copy_record(
        committed / "contrastive.mini.seed0.json", board / "contrastive.mini.seed0.json", settings_from=own
    )
    _copy_record(
        committed / "triplet.mini.seed0.json",
        board / "triplet.mini.seed0.json",
        patience=3,
        settings_from=own,
    )
    assert sens.record_facts(board / "contrastive.mini.seed0.json").key == sens.record_facts(own).key

    assert sens.variant_paths("calibp10", "glyphs", "contrastive") == [board / "contrastive.mini.seed0.json"]
    assert sens.variant_paths("calibp10", "glyphs", "margin") == [
        sens_root / "calibp10" / "glyphs" / "mlrc" / "records" / own.name
    ]
    assert sens.variant_paths("calibp10", "glyphs", "triplet") == []  # other settings (patience 3)
    # At the variant's board settings but not as its run would search: a loss parameter set by
    # hand, or ranges other than today's (default ranges are code, which the settings leave out).
    _copy_record(
        committed / "ms.mini.seed0.json", board / "ms.mini.seed0.json", loss={"base": 0.5}, settings_from=own
    )
    _copy_record(
        committed / "arcface.mini.seed0.json",
        board / "arcface.mini.seed0.json",
        scale_high=300.0,
        settings_from=own,
    )
    assert sens.record_facts(board / "arcface.mini.seed0.json").key == sens.record_facts(own).key
    assert sens.variant_paths("calibp10", "glyphs", "ms") == []
    assert sens.variant_paths("calibp10", "glyphs", "arcface") == []
    assert sens.variant_paths("calibp10x2", "glyphs", "contrastive") == []  # no records of its own
    _copy_record(own, sens_root / "calib2x" / "glyphs" / "mlrc" / "records" / own.name)
    assert sens.variant_paths("calib2x", "glyphs", "contrastive") == []  # same settings, not today's mini

    lines = sens.table("separated", "sep", ["calibp10x2"], "calibp10", "glyphs")
    (row,) = [line for line in lines if line.startswith("| contrastive |")]
    mean = np.mean(sens.rep_values(sens.load_record(committed / "contrastive.mini.seed0.json"), "separated"))
    assert row == f"| contrastive | pair | {100 * mean:.2f} (1) | not run |"
    (row,) = [line for line in lines if line.startswith("| triplet |")]
    assert row == "| triplet | pair | not run | – |"

    def no_run(*args: object) -> int:
        raise AssertionError(f"ran {args}")

    monkeypatch.setattr(sens, "run_heavy", no_run)
    assert sens.main(["run", "--variants", "calibp10", "--losses", "contrastive", "--dataset", "glyphs"]) == 0
    assert (
        "calibp10 contrastive (glyphs): the board's record is at this variant's settings"
        in capsys.readouterr().out
    )


def test_todays_mini_without_records_of_its_own_takes_the_boards_at_todays_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the variant that is today's ``mini`` has no record of its own on a dataset (glyphs:
    only the boards ran it there), the board records at the settings a run would use now are its
    records, and those at other settings are not; another variant still takes none."""
    sens = _module()
    committed = REPO / "results" / "glyphs" / "mlrc" / "records"
    sens_root, board_root = tmp_path / "sensitivity", tmp_path / "results"
    monkeypatch.setattr(sens, "OUT_ROOT", sens_root)
    monkeypatch.setattr(sens, "BOARD_ROOT", board_root)
    board = board_root / "glyphs" / "mlrc" / "records"
    _copy_record(committed / "contrastive.mini.seed0.json", board / "contrastive.mini.seed0.json")
    _copy_record(committed / "triplet.mini.seed0.json", board / "triplet.mini.seed0.json", patience=3)
    today: str = sens.record_facts(board / "contrastive.mini.seed0.json").key
    assert sens.record_facts(board / "triplet.mini.seed0.json").key != today
    asked: list[tuple[str, str]] = []

    def todays_key(dataset: str, loss: str) -> str:
        asked.append((dataset, loss))
        return today

    monkeypatch.setattr(sens, "todays_key", todays_key)
    assert sens.variant_paths(sens.MINI_VARIANT, "glyphs", "contrastive") == [
        board / "contrastive.mini.seed0.json"
    ]
    assert sens.variant_paths(sens.MINI_VARIANT, "glyphs", "triplet") == []
    assert asked == [("glyphs", "contrastive"), ("glyphs", "triplet")]
    assert sens.variant_paths("calibt20x2", "glyphs", "contrastive") == []


def test_todays_key_is_the_key_of_a_run_by_this_checkout() -> None:
    """The key :func:`todays_key` gives is the one ``regenerate_boards.py`` calls current: the same
    for every loss (the settings leave the loss out), and not the key of ``mini`` before it took 20
    trials (``calibp10``'s glyphs record)."""
    sens = _module()
    key = sens.todays_key("glyphs", "mfcwms")
    assert key == sens.todays_key("glyphs", "contrastive")
    earlier = sens.OUT_ROOT / "calibp10" / "glyphs" / "mlrc" / "records" / "margin.mini.seed0.json"
    assert sens.record_facts(earlier).key != key
    regenerate = load_benchmark_script("regenerate_boards")
    entry = regenerate.Entry("glyphs", "mfcwms", 0)
    assert key == regenerate.target(entry, regenerate.DEFAULT_DATA_DIRS, REPO / "results").key


def _spot_check_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, Path, Path]:
    """The sensitivity module reading ``tmp_path``: the committed records of every variant, with
    ``calibt20x2`` and ``calibt20`` copied (so a test may add records to them); returns the module
    and the two omniglot records folders."""
    sens = _module()
    for variant in sens.OUT_ROOT.iterdir():
        if variant.name in ("calibt20x2", "calibt20"):
            for record in variant.glob("*/mlrc/records/*.json"):
                _copy_record(record, tmp_path / record.relative_to(sens.OUT_ROOT))
        else:
            (tmp_path / variant.name).symlink_to(variant)
    monkeypatch.setattr(sens, "OUT_ROOT", tmp_path)
    folder = "{}/omniglot/mlrc/records"
    return sens, tmp_path / folder.format("calibt20x2"), tmp_path / folder.format("calibt20")


def test_a_spot_check_gets_its_row_below_the_six_and_stays_out_of_the_family_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spot-check loss (outside the study) with records gets a row after the six, its change on
    the six's pooled tau (by hand), a footnote, and a place in the Holm correction; the family gap
    row is what it is without it; without records it gets no row."""
    sens, doubled, reference = _spot_check_tree(tmp_path, monkeypatch)
    before = sens.table("separated", "sep", ["calibt20x2"], "calibt20")
    assert not [line for line in before if line.startswith("| mfcwms |")]
    # mfcwms's records: copies of proxyanchor's, so its change is proxyanchor's (by hand below).
    _copy_record(reference / "proxyanchor.mini.seed0.json", reference / "mfcwms.mini.seed0.json")
    _copy_record(doubled / "proxyanchor.mini.seed0.json", doubled / "mfcwms.mini.seed0.json")

    lines = sens.table("separated", "sep", ["calibt20x2"], "calibt20")
    rows = [line.split(" | ")[0][2:] for line in lines if line.startswith("| ") and " | " in line]
    assert rows[rows.index("loss") + 1 :][:7] == [*sens.FAMILIES, "mfcwms"]
    (row,) = [line for line in lines if line.startswith("| mfcwms |")]
    _, tau2, df = _pooled_by_hand(sens)
    ref, ours = (
        np.mean(sens.rep_values(sens.load_record(folder / "mfcwms.mini.seed0.json"), "separated"))
        for folder in (reference, doubled)
    )
    half = scipy.stats.t.ppf(0.975, df) * math.sqrt(2 * tau2)  # one seed on each side
    change = f"{page_signed(100 * (ours - ref))} ± {100 * half:.2f}"
    assert row.startswith(f"| mfcwms | class/proxy (spot check) | {100 * ref:.2f} (1) | {change}"), row

    def gap_row(table: list[str]) -> str:
        (found,) = [line for line in table if line.startswith("| **family gap** |")]
        return found

    assert gap_row(lines) == gap_row(before)
    (note,) = [line for line in lines if line.startswith("Spot checks (mfcwms): losses outside the study")]
    assert "their tests count in the Holm correction below" in note
    (holm,) = [line for line in lines if line.startswith("`calibt20x2` against `calibt20`")]
    assert "Holm-adjusted over the 7 losses" in holm and "mfcwms " in holm


def test_run_takes_a_spot_check_loss_and_names_it_among_the_valid_ones(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sens = _module()
    commands: list[list[str]] = []

    def run_heavy(label: str, cmd: list[str], cwd: Path) -> int:
        commands.append(cmd)
        return 0

    monkeypatch.setattr(sens, "run_heavy", run_heavy)
    monkeypatch.setattr(sens, "record_path", lambda *args: Path("/nonexistent/record.json"))
    monkeypatch.setattr(sens, "board_paths", lambda *args: [])
    argv = ["run", "--variants", "calibt20x2", "--dataset", "glyphs"]
    assert sens.main([*argv, "--losses", "mfcwms"]) == 0
    (cmd,) = commands
    assert cmd[cmd.index("--loss") + 1] == "mfcwms"
    with pytest.raises(SystemExit, match=r"unknown loss \['mfc'\]; valid: contrastive, .*, mfcwms, mfcont"):
        sens.main([*argv, "--losses", "mfc"])


def test_the_studys_and_the_spot_checks_families_are_the_registrys() -> None:
    from benchmark.losses import LOSSES

    sens = _module()
    for loss, family in sens.CHECKED.items():
        assert family == ("pair" if LOSSES.get(loss).pair_based else "class/proxy"), loss


def test_the_variant_named_todays_mini_is_mini() -> None:
    """``MINI_VARIANT`` sets only what ``mini`` sets (``--set`` values read as ``dmlbench run``
    reads them), so it must be renamed when ``mini`` changes; the variant that was ``mini`` before
    it (``calibp10``, 10 trials) no longer is."""
    from benchmark.budgets import BUDGETS
    from benchmark.config import parse_set_option

    sens = _module()
    mini = BUDGETS.get("mini").overrides

    def sets_only_what_mini_sets(variant: str) -> bool:
        return all(
            key in mini and mini[key] == value for key, value in map(parse_set_option, sens.VARIANTS[variant])
        )

    assert sets_only_what_mini_sets(sens.MINI_VARIANT)
    assert not sets_only_what_mini_sets("calibp10")


@pytest.mark.parametrize("mode", ["separated", "concatenated"])
def test_each_pass_states_the_largest_change_its_interval_still_allows(mode: str) -> None:
    """A cell with 0 inside its interval passes the check; the notes give, per passing loss, the
    interval's end farther from 0 (|change| + half-width), and name no loss whose interval excludes 0."""
    sens = _module()
    lines = sens.table(mode, "m", ["calibp10x2"], against="calibp10")
    (note,) = [line for line in lines if line.startswith("A pass of `calibp10x2`")]
    stated = dict(item.rsplit(" ", 1) for item in note.split("): ", 1)[1].split(". ")[0].split(", "))
    checked = 0
    for loss in sens.FAMILIES:
        (row,) = [line for line in lines if line.startswith(f"| {loss} |")]
        cell = re.search(r"([+\u2212]\d+\.\d+) ± (\d+\.\d+)( \(0 inside\))?", row.split(" | ")[-1])
        if cell is None:  # not run
            assert loss not in stated
            continue
        change, half, inside = float(cell[1].replace("\u2212", "-")), float(cell[2]), cell[3] is not None
        if inside:
            assert float(stated[loss]) == pytest.approx(abs(change) + half, abs=0.011)
            checked += 1
        else:
            assert loss not in stated
    assert checked, "no passing cell in the committed calibration records"


@pytest.mark.parametrize(
    ("variant_name", "against"), [("calibp10x2", "calibp10"), ("calibt20x2", "calibt20")]
)
def test_the_check_repeats_its_cells_on_the_references_own_seed_spread(
    variant_name: str, against: str
) -> None:
    """Against a reference with several omniglot seeds per loss, each cell again with that loss's
    tau^2 from the reference's own seed means (ddof 1, t on S - 1 df: Bartlett rejects equal
    spreads in both references' separated columns),
    never below the reference's training noise sigma_e^2 * mean(1/R) (docs/protocols.md §4.5),
    recomputed here with numpy and scipy; a verdict that differs is named."""
    sens = _module()
    lines = sens.table("separated", "sep", [variant_name], against=against)
    (note,) = [line for line in lines if line.startswith(f"The same cells of `{variant_name}`")]
    main_rows = {loss: next(x for x in lines if x.startswith(f"| {loss} |")) for loss in sens.FAMILIES}
    checked, floored = 0, []
    for loss in sens.FAMILIES:
        variant = sens.variant_paths(variant_name, "omniglot", loss)
        reps = [
            sens.rep_values(sens.load_record(p), "separated")
            for p in sens.variant_paths(against, "omniglot", loss)
        ]
        ref = [np.mean(r) for r in reps]
        if not variant or len(ref) < 2:
            assert f" {loss} " not in note
            continue
        own = [np.mean(sens.rep_values(sens.load_record(p), "separated")) for p in variant]
        tau2, at_floor = _own_tau2(reps)
        floored += [loss] if at_floor else []
        half = scipy.stats.t.ppf(0.975, len(ref) - 1) * math.sqrt(tau2 * (1 / len(own) + 1 / len(ref)))
        change = np.mean(own) - np.mean(ref)
        inside = abs(change) <= half
        verdict = " (0 inside)" if inside else ""
        assert f"{loss} {page_signed(100 * change)} ± {100 * half:.2f}{verdict}" in note
        if inside != ("(0 inside)" in main_rows[loss]):
            assert "The verdict changes for" in note and loss in note.split("The verdict changes for")[1]
        checked += 1
    assert checked
    # The rows held at their floor are named (Bartlett rejects equal spreads in both references).
    assert (f"; at the training floor: {', '.join(floored)})" in note) == bool(floored)
    assert floored or "at the training floor" not in note


def test_a_reference_with_one_seed_of_some_losses_gives_only_its_multi_seed_losses_a_cell(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where a reference has a single seed of some study losses, the check falls back to each loss
    with >= 2 seeds there on its own tau^2 (S - 1 df, never below its training floor) and gives the
    others no cell: the reference here is calibt20 cut to its first seed but for margin's four,
    recomputed by hand with numpy and scipy."""
    sens = _module()
    real = sens.variant_paths

    def one_seed_but_margin(variant: str, dataset: str, loss: str) -> list[Path]:
        paths: list[Path] = real(variant, dataset, loss)
        return paths if variant != "calibt20" or loss == "margin" else paths[:1]

    monkeypatch.setattr(sens, "variant_paths", one_seed_but_margin)
    inside_all = {"calibt20x2": {loss: (-1.0, 1.0) for loss in sens.FAMILIES}}
    (note, blank) = sens.other_source_notes("separated", ["calibt20x2"], "calibt20", "omniglot", inside_all)
    assert blank == ""
    reps = [sens.rep_values(sens.load_record(p), "separated") for p in real("calibt20", "omniglot", "margin")]
    assert len(reps) >= 2
    means = [np.mean(r) for r in reps]
    tau2, at_floor = _own_tau2(reps)
    assert (
        f"each loss's own seed spread, S − 1 df, where it has at least 2 seeds there: "
        f"margin {len(reps)} seeds, tau {100 * math.sqrt(tau2):.2f}"
        f"{', at the training floor' if at_floor else ''}): "
    ) in note
    own = [
        np.mean(sens.rep_values(sens.load_record(p), "separated"))
        for p in real("calibt20x2", "omniglot", "margin")
    ]
    half = scipy.stats.t.ppf(0.975, len(reps) - 1) * math.sqrt(tau2 * (1 / len(own) + 1 / len(reps)))
    change = np.mean(own) - np.mean(means)
    inside = abs(change) <= half
    cells = note.split("): ", 1)[1].split(". ", 1)[0]
    assert cells == f"margin {page_signed(100 * change)} ± {100 * half:.2f}{' (0 inside)' if inside else ''}"
    assert note.endswith("No verdict changes.") == inside


def test_the_check_separates_what_the_extra_trials_found() -> None:
    """Per doubled search: the best trial value among its first trials (as many as the reference
    ran) and among all, recomputed from the record's trial list; each reference record's best beside
    them; no such section where the variant ran no more trials than its reference."""
    sens = _module()
    lines = sens.search_half("calibp10x2", "calibp10", "omniglot")
    checked = 0
    for loss in sens.FAMILIES:
        paths = sens.variant_paths("calibp10x2", "omniglot", loss)
        if not paths:
            assert not any(line.startswith(f"| {loss} ") for line in lines)
            continue
        refs = [
            sens.load_record(p).document["search"] for p in sens.variant_paths("calibp10", "omniglot", loss)
        ]
        fewer = refs[0]["n_trials"]
        for path in paths:
            trials = sens.load_record(path).document["search"]["trials"]
            values = [t["value"] for t in trials]
            first = int(np.argmax(values[:fewer]))
            overall = int(np.argmax(values))
            name = loss if len(paths) == 1 else f"{loss} (search seed {sens.load_record(path).seed})"
            expected = (
                f"| {name} | {100 * values[first]:.2f} (trial {first} of {fewer}) | "
                f"{100 * values[overall]:.2f} (trial {overall} of {len(values)}) | "
                f"{page_signed(100 * (values[overall] - values[first]))} | "
                + ", ".join(f"{100 * s['best_value']:.2f}" for s in refs)
                + " |"
            )
            assert expected in lines
            checked += 1
    assert checked, "no committed calibp10x2 record"
    assert sens.search_half("calibp10", "calib", "omniglot") == []  # both ran 10 trials


def test_trials_alone_has_no_stop_to_replay() -> None:
    """Against a reference of the same patience (``calibt20``: ``calibp10`` with 20 trials) the
    check has no "Stopping alone" rows, while its "Searching alone" rows are there."""
    sens = _module()
    assert any(sens.variant_paths("calibt20", "omniglot", loss) for loss in sens.FAMILIES)
    assert sens.stopping_half("calibt20", "calibp10", "omniglot") == []
    assert any(line.startswith("| margin ") for line in sens.search_half("calibt20", "calibp10", "omniglot"))


def test_the_paired_rows_are_each_shared_seeds_change_with_a_t_interval() -> None:
    """Omniglot margin, ``calibt20`` against ``calibp10``: the seeds on both sides, each one's
    change of mean test MAP@R, and a t interval over those changes, recomputed by hand."""
    sens = _module()
    ours = {sens.record_facts(p).seed: p for p in sens.variant_paths("calibt20", "omniglot", "margin")}
    theirs = {sens.record_facts(p).seed: p for p in sens.variant_paths("calibp10", "omniglot", "margin")}
    shared = sorted(ours.keys() & theirs.keys())
    assert len(shared) >= 2, shared
    lines = sens.paired_half("calibt20", "calibp10", "omniglot")
    for mode in ("separated", "concatenated"):

        def mean(path: Path, mode: str = mode) -> float:
            return float(np.mean(sens.load_record(path).test["per_rep"][mode]["map_at_r"]))

        changes = [100 * (mean(ours[s]) - mean(theirs[s])) for s in shared]
        half = scipy.stats.t.ppf(0.975, len(changes) - 1) * np.std(changes, ddof=1) / math.sqrt(len(changes))
        (row,) = [line for line in lines if line.startswith(f"| margin | {mode} |")]
        each = row.split(" | ")[2]
        assert [int(part.split(":")[0]) for part in each.split(", ")] == shared, row
        assert [float(part.split(": ")[1].rstrip("§")) for part in each.split(", ")] == pytest.approx(
            [round(c, 2) for c in changes], abs=0.006
        ), row
        inside = ", 0 inside" if abs(np.mean(changes)) <= half else ""
        cell = f"{page_signed(float(np.mean(changes)))} ± {half:.2f} ({len(shared) - 1} df{inside})"
        assert row.endswith(f"| {cell} |"), row


def test_a_single_shared_seed_gets_its_change_without_an_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One pair gives a change but no interval; a record identical to its reference changes by 0,
    and a variant seed the reference lacks is left out."""
    sens, target, document = _glyphs_margin_calibp10x2(tmp_path, monkeypatch)
    assert [sens.record_facts(p).seed for p in sens.variant_paths("calibp10", "glyphs", "margin")] == [0]
    target.with_name(target.name.replace("seed0", "seed1")).write_text(json.dumps({**document, "seed": 1}))
    assert len(sens.variant_paths("calibp10x2", "glyphs", "margin")) == 2
    lines = sens.paired_half("calibp10x2", "calibp10", "glyphs")
    rows = [line for line in lines if line.startswith("| margin")]
    assert rows == [
        "| margin | separated | 0: +0.00 | one pair: no paired interval (its interval: the table above) |",
        "| margin | concatenated | 0: +0.00 | one pair: no paired interval (its interval: the table above) |",
    ], rows


def test_run_extends_each_search_from_the_named_variants_run_of_the_same_loss_and_seed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sens = _module()
    monkeypatch.setattr(sens, "run_root", lambda variant: tmp_path / variant)
    source = tmp_path / "calibp10x2" / "omniglot" / "mlrc" / "margin-mini-seed7-0123456789"
    source.mkdir(parents=True)
    (tmp_path / "calibp10x2" / "omniglot" / "mlrc" / "margin-mini-seed8-0123456789").mkdir()
    commands: list[list[str]] = []

    def run_heavy(label: str, cmd: list[str], cwd: Path) -> int:
        commands.append(list(cmd))
        return 0

    monkeypatch.setattr(sens, "run_heavy", run_heavy)
    argv = ["run", "--variants", "calibt20x2", "--losses", "margin,triplet", "--seed", "7"]
    assert sens.main([*argv, "--extend-from", "calibp10x2"]) == 0
    margin, triplet = commands
    assert margin[margin.index("--extend-search") + 1] == str(source)
    assert margin[margin.index("--out") + 1] == str(tmp_path / "calibt20x2")
    # No run of that loss to extend: its search starts from scratch.
    assert "--extend-search" not in triplet and "--resume-mixed-code" not in triplet
    # The board's own runs are the source of the variants with the board's settings and more trials.
    monkeypatch.setattr(sens, "REPO", tmp_path)
    board = tmp_path / "runs" / "omniglot" / "mlrc" / "triplet-mini-seed7-0123456789"
    board.mkdir(parents=True)
    commands.clear()
    assert sens.main([*argv, "--extend-from", "board", "--resume-mixed-code"]) == 0
    margin, triplet = commands
    assert "--extend-search" not in margin
    assert triplet[triplet.index("--extend-search") + 1] == str(board) and "--resume-mixed-code" in triplet
    # Without a run directory (they do not outlive the machine), the committed record is the source.
    board.rmdir()
    board_record = tmp_path / "results" / "omniglot" / "mlrc" / "records" / "triplet.mini.seed7.json"
    board_record.parent.mkdir(parents=True)
    board_record.write_text("{}")
    commands.clear()
    assert sens.main([*argv, "--extend-from", "board"]) == 0
    assert commands[1][commands[1].index("--extend-search") + 1] == str(board_record)
    monkeypatch.setattr(sens, "OUT_ROOT", tmp_path / "results" / "sensitivity")
    variant_record = sens.record_path("calibp10x2", "omniglot", "triplet", 7)
    variant_record.parent.mkdir(parents=True)
    variant_record.write_text("{}")
    commands.clear()
    assert sens.main([*argv, "--extend-from", "calibp10x2"]) == 0
    margin, triplet = commands
    assert margin[margin.index("--extend-search") + 1] == str(source)  # a run directory comes first
    assert triplet[triplet.index("--extend-search") + 1] == str(variant_record)
