"""`dmlbench regress`: tolerance maths against a naive reference, verdicts, table and diff, baseline
files, suite parsing, bad input (exit 2) and one tiny real case end to end through the CLI."""

from __future__ import annotations

import dataclasses
import json
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
import scipy.stats
import torch

from benchmark.cli.main import main
from benchmark.engine.environment import environment_info
from benchmark.errors import ConfigError, DmlbenchError, UnknownNameError
from benchmark.io import differing_keys
from benchmark.regress.baselines import (
    build_case_baseline,
    load_baselines,
    save_baselines,
)
from benchmark.regress.cases import DEFAULT_SUITE, load_suite, parse_suite, select_cases
from benchmark.regress.check import environment_note, single_thread
from benchmark.regress.compare import (
    Status,
    compare_case,
    improvement_note,
    regression_diff,
    render_table,
    tolerance_from_seeds,
    verdict,
)
from benchmark.regress.training import case_config, comparable_config

# ---------------------------------------------------------------------------------------------
# Tolerances and verdicts


def naive_tolerance(values: list[float], q: float, floor: float, k: int = 1) -> float:
    # The difference of two independent k-seed means: sd * sqrt(1/k + 1/k).
    sd = statistics.stdev(values)
    return max(floor, scipy.stats.t.ppf(q, len(values) - 1) * math.sqrt(1 / k + 1 / k) * sd)


@pytest.mark.parametrize("values", [[0.30, 0.31, 0.29], [0.5, 0.52, 0.47, 0.55, 0.49], [0.1, 0.9]])
def test_tolerance_matches_naive_reference(values: list[float]) -> None:
    assert tolerance_from_seeds(values, 0.99, 0.0) == pytest.approx(naive_tolerance(values, 0.99, 0.0))
    # A larger quantile allows a larger drop.
    assert tolerance_from_seeds(values, 0.999, 0.0) > tolerance_from_seeds(values, 0.9, 0.0)
    # Averaging 4 check seeds halves it.
    four = tolerance_from_seeds(values, 0.99, 0.0, k=4)
    assert four == pytest.approx(naive_tolerance(values, 0.99, 0.0, 4))
    assert four == pytest.approx(tolerance_from_seeds(values, 0.99, 0.0) / 2)


def test_tolerance_floor_applies_to_zero_spread() -> None:
    assert tolerance_from_seeds([0.4, 0.4, 0.4], 0.99, 0.005) == 0.005


def test_tolerance_needs_two_seeds() -> None:
    with pytest.raises(DmlbenchError, match="at least 2 seeds"):
        tolerance_from_seeds([0.4], 0.99, 0.005)


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        (0.50, Status.IDENTICAL),
        (0.47, Status.WITHIN),
        (0.53, Status.WITHIN),
        (0.449, Status.REGRESSED),
        (0.551, Status.IMPROVED),
        (None, Status.FAILED),
        (float("nan"), Status.FAILED),
    ],
)
def test_verdict(now: float | None, expected: Status) -> None:
    assert verdict(0.50, now, 0.05) is expected


def test_only_regressions_and_failures_fail() -> None:
    assert {s for s in Status if s.fails} == {Status.REGRESSED, Status.FAILED, Status.CHANGED}


def test_exact_fails_on_any_difference() -> None:
    assert verdict(0.50, 0.5000001, 0.05, exact=True) is Status.CHANGED
    assert verdict(0.50, 0.50, 0.05, exact=True) is Status.IDENTICAL
    rows = compare_case("glyphs/ms", BASE, {"val_map_at_r": 0.60, "test_map_at_r": 0.3001}, exact=True)
    assert [r.status for r in rows] == [Status.IDENTICAL, Status.CHANGED]
    assert "glyphs/ms" in regression_diff(rows) and "--exact" in regression_diff(rows)


BASE = {"val_map_at_r": (0.60, 0.05), "test_map_at_r": (0.30, 0.02)}


def test_pass_table_has_no_diff() -> None:
    rows = compare_case("glyphs/mfcont", BASE, {"val_map_at_r": 0.60, "test_map_at_r": 0.31})
    assert [r.status for r in rows] == [Status.IDENTICAL, Status.WITHIN]
    table = render_table(rows)
    assert "glyphs/mfcont" in table and "+0.0100" in table and "±0.0200" in table
    assert regression_diff(rows) == "" and improvement_note(rows) == ""


def test_regression_diff_names_the_loss_and_the_numbers() -> None:
    rows = compare_case("glyphs/mfcont", BASE, {"val_map_at_r": 0.61, "test_map_at_r": 0.20})
    rows += compare_case("glyphs/ms", BASE, {"val_map_at_r": 0.60, "test_map_at_r": 0.30})
    assert rows[1].status is Status.REGRESSED
    diff = regression_diff(rows, {"glyphs/mfcont": "commit abc"})
    assert "REGRESSION in 1 case(s)" in diff
    assert "glyphs/mfcont" in diff and "glyphs/ms" not in diff
    assert "test_map_at_r: 0.3000 -> 0.2000 (-0.1000; allowed drop 0.0200, 5.0x" in diff
    assert "val_map_at_r" not in diff  # within tolerance: not part of the diff
    assert "baseline: commit abc" in diff
    assert "REGRESSED" in render_table(rows)


def test_failed_training_is_a_regression_with_its_reason() -> None:
    rows = compare_case("glyphs/arcface", BASE, None, "training diverged: loss became nan")
    assert all(r.status is Status.FAILED for r in rows)
    assert "training diverged" in regression_diff(rows)


def test_improvement_is_loud_but_not_a_failure() -> None:
    rows = compare_case("omniglot/mfcont", BASE, {"val_map_at_r": 0.70, "test_map_at_r": 0.30})
    assert rows[0].status is Status.IMPROVED and not any(r.status.fails for r in rows)
    note = improvement_note(rows)
    assert "omniglot/mfcont" in note and "--update --cases omniglot/mfcont" in note


# ---------------------------------------------------------------------------------------------
# Baseline files


def _baseline(case: str, shift: float = 0.0) -> Any:
    per_seed = {
        s: {"val_map_at_r": 0.5 + 0.01 * s + shift, "test_map_at_r": 0.3 - 0.01 * s} for s in range(3)
    }
    return build_case_baseline(
        case,
        per_seed,
        check_seeds=(0, 1),
        quantile=0.99,
        floor=0.005,
        identity={"config": {"train": {"lr": 1e-4}}, "params": {"m": 0.1}, "fold": 0, "hash": "x"},
        data_fingerprint="fp",
        provenance={"command": "dmlbench regress --update", "git": {"commit": "abc", "dirty": False}},
        wall_s={0: 1.0, 1: 1.1, 2: 1.2},
    )


def test_baseline_values_and_tolerance_come_from_the_seeds() -> None:
    b = _baseline("glyphs/mfcont")
    val = b.metrics["val_map_at_r"]
    assert val.value == pytest.approx(0.505)  # the mean over the check seeds 0 and 1, not all seeds
    assert val.per_seed == {0: 0.5, 1: 0.51, 2: 0.52}
    assert val.tolerance == pytest.approx(naive_tolerance([0.5, 0.51, 0.52], 0.99, 0.005, k=2))
    assert b.tolerance["n_seeds"] == 3 and b.tolerance["k_check_seeds"] == 2
    assert "sqrt(2/k)" in b.tolerance["formula"]
    with pytest.raises(DmlbenchError, match="check seeds"):
        build_case_baseline("x", {0: {"m": 0.1}, 1: {"m": 0.2}}, (0, 5), 0.99, 0.0, {}, "", {}, {})


def test_update_replaces_a_file_of_an_older_schema(tmp_path: Path) -> None:
    old = {"schema": "dmlbench.regress-baseline/1", "dataset": "glyphs", "cases": {"ms": {"x": 1}}}
    (tmp_path / "glyphs.json").write_text(json.dumps(old))
    with pytest.raises(DmlbenchError, match="schema"):
        load_baselines(tmp_path, "glyphs")  # a check refuses it ...
    save_baselines(tmp_path, "glyphs", {"mfcont": _baseline("glyphs/mfcont")})  # ... --update replaces it
    assert set(load_baselines(tmp_path, "glyphs")) == {"mfcont"}


def test_baseline_file_round_trip_and_merge(tmp_path: Path) -> None:
    a, b = _baseline("glyphs/mfcont"), _baseline("glyphs/ms", shift=0.1)
    path = save_baselines(tmp_path, "glyphs", {"mfcont": a})
    save_baselines(tmp_path, "glyphs", {"ms": b})  # an update of one case keeps the others
    loaded = load_baselines(tmp_path, "glyphs")
    assert set(loaded) == {"mfcont", "ms"}
    assert loaded["mfcont"] == a and loaded["ms"] == b
    data = json.loads(path.read_text())
    assert data["schema"] == "dmlbench.regress-baseline/2" and "tolerance_rule" in data
    assert load_baselines(tmp_path, "omniglot") == {}


def test_malformed_baseline_file_names_the_key(tmp_path: Path) -> None:
    path = save_baselines(tmp_path, "glyphs", {"mfcont": _baseline("glyphs/mfcont")})
    data = json.loads(path.read_text())
    del data["cases"]["mfcont"]["metrics"]["test_map_at_r"]["tolerance"]
    path.write_text(json.dumps(data))
    with pytest.raises(DmlbenchError, match=r"cases\.mfcont\.metrics\.test_map_at_r\.tolerance"):
        load_baselines(tmp_path, "glyphs")


def test_environment_note_names_what_differs() -> None:
    with single_thread():
        here = environment_info(torch.device("cpu"))
    same = dataclasses.replace(
        _baseline("glyphs/mfcont"), provenance={"environment": {k: v for k, v in here.items() if k != "git"}}
    )
    assert "none found" in environment_note([same])
    env = {
        **same.provenance["environment"],
        "cpu_capability": "OLDISA",
        "packages": {**here["packages"], "numpy": "0.1"},
    }
    del env["cpu_model"]
    other = dataclasses.replace(same, provenance={"environment": env})
    note = environment_note([other, other])
    assert f"cpu_capability: OLDISA -> {here['cpu_capability']}" in note
    assert f"numpy: 0.1 -> {here['packages']['numpy']}" in note
    assert "cpu_model: not recorded" in note and "torch_threads" not in note
    assert note.count("\n") == 1  # one line per distinct environment


def test_differing_keys() -> None:
    a = {"config": {"train": {"lr": 1e-4, "iters": 100}}, "fold": 0}
    b = {"config": {"train": {"lr": 1e-4, "iters": 50}}, "fold": 0, "x": 1}
    assert differing_keys(a, b) == ["config.train.iters", "x"]
    assert differing_keys(a, a) == []


# ---------------------------------------------------------------------------------------------
# The suite file


def test_committed_suite_covers_the_required_cases() -> None:
    suite = load_suite(DEFAULT_SUITE)
    names = set(suite.names())
    required = {f"glyphs/{x}" for x in ("contrastive", "mfcont", "proxyanchor", "ms", "arcface")}
    assert required | {"omniglot/mfcont", "omniglot/contrastive"} <= names
    assert len(suite.settings.seeds) >= 3


TINY: dict[str, Any] = {
    "regress": {
        "protocol": "mlrc",
        "budget": "mini",
        "fold": 0,
        "seeds": [0, 1, 2],
        "check_seeds": 2,
        "tolerance_quantile": 0.99,
        "tolerance_floor": 0.005,
        "set": {
            "data.max_classes": 100,
            "data.max_per_class": 4,
            "train.iters_per_epoch": 20,
            "train.max_epochs": 1,
            "train.eval_every": 1,
            "train.patience": 1,
        },
    },
    "datasets": {
        "glyphs": {"losses": ["mfcont"]},
        "omniglot": {"data_dir": "../shared/data/omniglot", "losses": ["mfcont"]},
    },
}


def _with(path: str, value: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(json.dumps(TINY))
    *parents, last = path.split(".")
    cur = data
    for p in parents:
        cur = cur[p]
    cur[last] = value
    return data


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (_with("regress.sedes", [0, 1]), "unknown key regress.sedes"),
        (_with("regress.seeds", [0]), "at least 2 integer seeds"),
        (_with("regress.check_seeds", 3), "check_seeds must be in 1..2"),
        (_with("regress.check_seeds", 0), "check_seeds must be in 1..2"),
        (_with("regress.fold", "0"), "regress.fold must be an integer"),
        (_with("regress.tolerance_quantile", 1.5), "tolerance_quantile must be in"),
        (_with("datasets.glyphs.data_dir", "x"), "reads no files"),
        (_with("datasets.glyphs.lossses", ["x"]), "unknown key datasets.glyphs.lossses"),
    ],
)
def test_suite_errors_name_the_key(data: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_suite(data, Path("suite.toml"))


def test_suite_unknown_loss_lists_valid_choices() -> None:
    with pytest.raises(UnknownNameError, match=r"Unknown loss 'mfcontt'.*Did you mean 'mfcont'"):
        parse_suite(_with("datasets.glyphs.losses", ["mfcontt"]), Path("suite.toml"))


def test_select_cases_filters_and_errors() -> None:
    suite = parse_suite(TINY, Path("suite.toml"))
    assert [c.name for c in select_cases(suite, datasets=["glyphs"])] == ["glyphs/mfcont"]
    assert [c.name for c in select_cases(suite, losses=["mfcont"])] == ["glyphs/mfcont", "omniglot/mfcont"]
    with pytest.raises(UnknownNameError, match="Valid choices: glyphs/mfcont, omniglot/mfcont"):
        select_cases(suite, names=["glyphs/ms"])
    with pytest.raises(UnknownNameError, match="regression loss 'ms'"):
        select_cases(suite, losses=["ms"])


@pytest.mark.parametrize(
    ("key", "value", "comparable"),
    [
        # Never read by a case (it neither searches nor retrains for a test stage): still comparable.
        ("search.n_trials", 7, True),
        ("search.log_wide_ranges", False, True),
        ("test.reps", 2, True),
        # Read by the fold training: a baseline made otherwise is not comparable.
        ("train.lr", 3e-4, False),
        ("train.patience", 4, False),
        ("eval.knn", "hnsw", False),
    ],
)
def test_the_identity_holds_what_a_case_reads(key: str, value: Any, comparable: bool) -> None:
    suite = parse_suite(TINY, Path("suite.toml"))
    changed = parse_suite(_with("regress.set", {**TINY["regress"]["set"], key: value}), Path("suite.toml"))
    case = select_cases(suite, names=["glyphs/mfcont"])[0]
    before = comparable_config(case_config(case, suite.settings))
    after = comparable_config(case_config(case, changed.settings))
    assert (before == after) is comparable, differing_keys(before, after)


class _Unread:
    """Stands in for a config section a regression case must not read: any read of it fails."""

    def __init__(self, section: str) -> None:
        self._section = section

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy/pickle probes are not reads of a setting
            raise AttributeError(name)
        raise AssertionError(f"a regression case read config.{self._section}.{name}")


def test_a_case_reads_none_of_the_sections_its_identity_leaves_out(
    cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``UNREAD_SECTIONS`` is kept by hand: if preparing or training a case read one of them, a
    change there would alter the numbers while baselines still matched. Both steps run here on a
    config whose left-out sections fail on any read."""
    from benchmark.regress import training

    suite = parse_suite(TINY, Path("suite.toml"))
    case = select_cases(suite, names=["glyphs/mfcont"])[0]
    resolve = training.case_config

    def config_without_unread(case: Any, settings: Any) -> Any:
        unread: dict[str, Any] = {section: _Unread(section) for section in training.UNREAD_SECTIONS}
        return dataclasses.replace(resolve(case, settings), **unread)

    monkeypatch.setattr(training, "case_config", config_without_unread)
    prepared = training.prepare_case(case, suite.settings, cache_dir)
    with pytest.raises(AssertionError, match=r"read config\.search\.n_trials"):
        _ = prepared.config.search.n_trials  # the stand-in is in place and fails on a read
    run = training.run_case(prepared, suite.settings, seed=0)
    assert run.failure is None and set(run.metrics) == {"val_map_at_r", "test_map_at_r"}


# ---------------------------------------------------------------------------------------------
# Through the CLI: bad input (exit 2) and one tiny real case


def _write_suite(tmp_path: Path, data: dict[str, Any]) -> Path:
    lines = []
    reg = data["regress"]
    lines.append("[regress]")
    for k, v in reg.items():
        if k != "set":
            lines.append(f"{k} = {json.dumps(v)}")
    lines.append("[regress.set]")
    lines += [f'"{k}" = {json.dumps(v)}' for k, v in reg["set"].items()]
    for ds, table in data["datasets"].items():
        lines.append(f"[datasets.{ds}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in table.items()]
    path = tmp_path / "suite.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def regress(*args: str) -> int:
    return main(["regress", *args])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--cases", "glyphs/nope"], "Unknown regression case 'glyphs/nope'"),
        (["--losses", "triplet"], "Unknown regression loss 'triplet'"),
        (
            ["--datasets", "omniglot", "--data-dir", "/nonexistent/omni"],
            "/nonexistent/omni, which does not exist",
        ),
        (["--datasets", "glyphs"], "No baseline for glyphs/mfcont"),
    ],
)
def test_bad_input_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], match: str
) -> None:
    suite = _write_suite(tmp_path, TINY)
    assert regress("--suite", str(suite), "--baselines", str(tmp_path / "b"), *args) == 2
    assert match in capsys.readouterr().err


def test_tiny_case_end_to_end(tmp_path: Path, cache_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suite = _write_suite(tmp_path, TINY)
    base = tmp_path / "baselines"
    common = ["--suite", str(suite), "--baselines", str(base), "--datasets", "glyphs"]

    # --update trains every suite seed and writes the file from those runs.
    assert regress(*common, "--update") == 0
    out = capsys.readouterr().out
    assert all(f"glyphs/mfcont seed {s}" in out for s in (0, 1, 2))
    stored = json.loads((base / "glyphs.json").read_text())["cases"]["mfcont"]
    assert stored["provenance"]["command"].startswith("dmlbench regress --update")
    assert stored["provenance"]["environment"]["torch_threads"] == 1
    per_seed = stored["metrics"]["test_map_at_r"]["per_seed"]
    assert set(per_seed) == {"0", "1", "2"}
    assert stored["metrics"]["test_map_at_r"]["value"] == (per_seed["0"] + per_seed["1"]) / 2

    # Same seeds, same environment, one thread: the check reproduces the baseline bit for bit.
    assert regress(*common) == 0
    out = capsys.readouterr().out
    assert "2 checks: 2 identical" in out and "REGRESS" not in out
    assert regress(*common, "--exact") == 0  # bit-identical, so even --exact passes
    capsys.readouterr()

    # A baseline far above what the code now reaches -> exit 1 and a diff naming the loss.
    data = json.loads((base / "glyphs.json").read_text())
    metric = data["cases"]["mfcont"]["metrics"]["test_map_at_r"]
    metric["value"] += 10 * metric["tolerance"]
    (base / "glyphs.json").write_text(json.dumps(data))
    assert regress(*common) == 1
    out = capsys.readouterr().out
    assert "REGRESSION in 1 case(s):" in out and "  glyphs/mfcont:" in out and "test_map_at_r:" in out
    assert "val_map_at_r:" not in out.split("REGRESSION")[1]  # untouched metric: not in the diff

    # A baseline far below -> IMPROVED, exit 0, told to --update.
    metric["value"] -= 20 * metric["tolerance"]
    (base / "glyphs.json").write_text(json.dumps(data))
    assert regress(*common) == 0
    out = capsys.readouterr().out
    assert "IMPROVED" in out and "--update --cases glyphs/mfcont" in out

    # A suite whose schedule differs from the baseline's: refused (exit 2), naming the key.
    longer = _with("regress.set", {**TINY["regress"]["set"], "train.iters_per_epoch": 21})
    (tmp_path / "other").mkdir()
    suite2 = _write_suite(tmp_path / "other", longer)
    assert regress("--suite", str(suite2), "--baselines", str(base), "--datasets", "glyphs") == 2
    assert "config.train.iters_per_epoch" in capsys.readouterr().err
