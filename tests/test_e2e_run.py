"""End-to-end: `dmlbench run --budget smoke` as a subprocess; record structure; leaderboard = record;
resume after SIGKILL; determinism across processes."""

from __future__ import annotations

import copy
import csv
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import optuna
import pytest
from cli_helpers import children, default_sigint, dmlbench, stop_at, wait_gone, wait_until_stopped
from conftest import load_benchmark_script
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

pytestmark = pytest.mark.slow

SMOKE = ["--budget", "smoke", "--quiet"]


def load_record(results: Path, loss: str = "mfcont", budget: str = "smoke") -> dict[str, Any]:
    path = results / "glyphs" / "mlrc" / "records" / f"{loss}.{budget}.seed0.json"
    rec: dict[str, Any] = json.loads(path.read_text())
    return rec


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> tuple[Path, Path, str]:
    root = tmp_path_factory.mktemp("e2e")
    proc = dmlbench(
        "run",
        "--loss",
        "mfcont",
        *SMOKE,
        "--out",
        str(root / "runs"),
        "--results-dir",
        str(root / "results"),
        cache=cache_dir,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "runs", root / "results", proc.stdout


def test_record_structure(smoke_run: tuple[Path, Path, str]) -> None:
    _, results, _ = smoke_run
    rec = load_record(results)
    assert rec["schema"] == "dmlbench.run/1"
    assert (rec["protocol"], rec["dataset"], rec["loss"], rec["budget"]) == (
        "mlrc",
        "glyphs",
        "mfcont",
        "smoke",
    )
    assert rec["search"]["n_trials"] == 3
    trials = rec["search"]["trials"]
    assert len([t for t in trials if t["state"] == "COMPLETE"]) == 3
    assert [t["origin"] for t in trials[:2]] == ["sobol", "sobol"]
    for t in trials:
        assert len(t["folds"]) == 4 and all(0 <= f["best_val_map_at_r"] <= 1 for f in t["folds"])
        assert t["value"] == pytest.approx(sum(f["best_val_map_at_r"] for f in t["folds"]) / 4)
    best = max(trials, key=lambda t: t["value"])
    assert rec["search"]["best_trial"] == best["number"]
    for mode in ("separated", "concatenated"):
        for metric in ("map_at_r", "precision_at_1", "r_precision"):
            values = rec["test"]["per_rep"][mode][metric]
            assert len(values) == 2 and all(0 <= v <= 1 for v in values)
            assert rec["test"]["summary"][mode][metric]["mean"] == pytest.approx(sum(values) / 2)
            assert 0 <= rec["untrained"][mode][metric] <= 1
    # Separated = mean over the 4 fold models of each rep.
    for rep in rec["test"]["rep_details"]:
        per_fold = [pf["map_at_r"] for pf in rep["per_fold"]]
        assert rep["separated"]["map_at_r"] == pytest.approx(sum(per_fold) / 4)
    keys = {d["key"] for d in rec["deviations"]}
    assert {"model.trunk", "search.n_trials", "test.reps"} <= keys
    assert rec["data"]["n_classes"] == 100 and rec["data"]["n_test_classes"] == 50
    assert rec["environment"]["packages"]["torch"]
    assert set(rec["timings_s"]) >= {"data", "search", "test", "total"}


def test_leaderboard_row_matches_record(smoke_run: tuple[Path, Path, str]) -> None:
    _, results, stdout = smoke_run
    rec = load_record(results)
    with (results / "glyphs" / "mlrc" / "leaderboard.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    row = next(r for r in rows if r["loss"] == "mfcont" and r["budget"] == "smoke")
    for mode in ("separated", "concatenated"):
        for metric in ("map_at_r", "precision_at_1", "r_precision"):
            summary = rec["test"]["summary"][mode][metric]
            assert float(row[f"{mode}_{metric}_mean"]) == summary["mean"]
            # The leaderboard recomputes the interval from the per-rep values (one seed: the same t).
            assert float(row[f"{mode}_{metric}_half_width"]) == pytest.approx(
                summary["half_width"], rel=1e-12
            )
    untrained = next(r for r in rows if r["loss"] == "untrained")
    assert float(untrained["separated_map_at_r_mean"]) == rec["untrained"]["separated"]["map_at_r"]
    md = (results / "glyphs" / "mlrc" / "leaderboard.md").read_text()
    s = rec["test"]["summary"]["separated"]["map_at_r"]
    assert f"{100 * s['mean']:.2f} ± {100 * s['half_width']:.2f}" in md
    assert "Deviations from the paper protocol" in md and "`search.n_trials` = 3 (paper 50)" in md
    assert "leaderboard.md" in stdout and "MeanFieldContrastive" in stdout


def test_rerun_is_a_noop_resume(smoke_run: tuple[Path, Path, str], cache_dir: Path) -> None:
    runs, results, _ = smoke_run
    before = load_record(results)
    proc = dmlbench(
        "run", "--loss", "mfcont", *SMOKE, "--out", str(runs), "--results-dir", str(results), cache=cache_dir
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = load_record(results)
    assert after["search"]["trials"] == before["search"]["trials"]
    assert after["test"]["per_rep"] == before["test"]["per_rep"]


def test_regeneration_driver_knows_the_board_settings_a_run_writes(
    smoke_run: tuple[Path, Path, str], tmp_path: Path
) -> None:
    """benchmarks/regenerate_boards.py resolves a run's board settings without running it; they
    must be those the run then records, or a regeneration would rerun (or skip) the wrong records."""
    _, results, _ = smoke_run
    rb = load_benchmark_script("regenerate_boards")
    entry = rb.Entry("glyphs", "mfcont", 0, "smoke")
    assert rb.is_current(entry, {}, results)
    # Any setting changed since the record was written makes it one to rerun...
    board = tmp_path / "results"
    shutil.copytree(results, board)
    rec = load_record(board)
    rec["config"]["train"]["patience"] += 1
    entry.path(board).write_text(json.dumps(rec), encoding="utf-8")
    assert not rb.is_current(entry, {}, board)
    # ...a key added since, at its neutral value, does not (records predating eval.knn lack it).
    rec["config"]["train"]["patience"] -= 1
    del rec["config"]["eval"]
    entry.path(board).write_text(json.dumps(rec), encoding="utf-8")
    assert rb.is_current(entry, {}, board)
    # A default range or fixed parameter of the loss changed since (code, not config) is one to rerun.
    wider, refixed = copy.deepcopy(rec), copy.deepcopy(rec)
    wider["search"]["space"]["m_n"]["high"] += 1.0
    refixed["search"]["fixed"]["m_p"] = 0.5
    for changed in (wider, refixed):
        entry.path(board).write_text(json.dumps(changed), encoding="utf-8")
        assert not rb.is_current(entry, {}, board)
    # A missing record is planned.
    entry.path(board).unlink()
    assert not rb.is_current(entry, {}, board)


def test_unknown_loss_exits_2_before_compute(tmp_path: Path, cache_dir: Path) -> None:
    proc = dmlbench("run", "--loss", "mfcnt", "--out", str(tmp_path), cache=cache_dir)
    assert proc.returncode == 2
    assert "Did you mean 'mfcont'" in proc.stderr and "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())


def _trial_states(journal: Path) -> tuple[int, bool]:
    """(complete trials, whether a running trial already has its parameters)."""
    storage = JournalStorage(JournalFileBackend(str(journal)))
    trials = optuna.load_study(study_name="search", storage=storage).get_trials(deepcopy=False)
    complete = sum(t.state == TrialState.COMPLETE for t in trials)
    return complete, any(t.state == TrialState.RUNNING and t.params for t in trials)


def test_resume_after_sigkill_runs_exactly_the_configured_trials(tmp_path: Path, cache_dir: Path) -> None:
    out, results = tmp_path / "runs", tmp_path / "results"
    args = [
        "run",
        "--loss",
        "contrastive",
        *SMOKE,
        "--set",
        "search.n_trials=4",
        "--jobs",
        "2",
        "--out",
        str(out),
        "--results-dir",
        str(results),
    ]
    # Trial 2's fold 0 is in and trial 2 is not told: the run freezes there, with trials 0-1
    # complete, trial 2 running with its parameters and its other folds training. (Polled from
    # outside, a fast CI machine finished trials 2-3 between a journal read and a SIGSTOP.)
    env = {**os.environ, "DMLBENCH_CACHE": str(cache_dir), **stop_at("search.fold_done:2:0")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmark.cli.main", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until_stopped(proc)
        workers = children(proc.pid)
        assert workers, "expected fold worker processes"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # Workers notice their parent died and exit instead of training on as orphans.
    assert not wait_gone(workers, 15)
    (journal,) = out.glob("glyphs/mlrc/*/study.journal")
    killed_at, training = _trial_states(journal)
    assert (killed_at, training) == (2, True)
    assert not (results / "glyphs" / "mlrc" / "records").exists()
    storage = JournalStorage(JournalFileBackend(str(journal)))
    left = optuna.load_study(study_name="search", storage=storage).get_trials()
    running = {t.number: t.params for t in left if t.state == TrialState.RUNNING}

    done = dmlbench(*args, cache=cache_dir)
    assert done.returncode == 0, done.stderr[-3000:]
    rec = load_record(results, loss="contrastive")
    trials = rec["search"]["trials"]
    # Exactly the configured trials, numbered as in an uninterrupted run: nothing failed or added.
    assert [(t["number"], t["state"]) for t in trials] == [(n, "COMPLETE") for n in range(4)], trials
    assert not any(t["interrupted"] for t in trials)
    # The trial killed while training was retried in its own place, with the parameters it had.
    assert list(running) == [killed_at], left
    for number, params in running.items():
        assert trials[number]["interruptions"] == 1
        assert params and trials[number]["params"] == params
    assert sum(t["interruptions"] for t in trials) == 1


def test_same_seed_same_numbers_across_processes(tmp_path: Path, cache_dir: Path) -> None:
    records = []
    for name in ("a", "b"):
        proc = dmlbench(
            "run",
            "--loss",
            "proxyanchor",
            *SMOKE,
            "--set",
            "search.n_trials=2",
            "--set",
            "search.n_startup_trials=1",
            "--out",
            str(tmp_path / name / "runs"),
            "--results-dir",
            str(tmp_path / name / "results"),
            cache=cache_dir,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        records.append(load_record(tmp_path / name / "results", loss="proxyanchor"))
    a, b = records
    assert a["data"]["split_fingerprint"] == b["data"]["split_fingerprint"]
    assert [t["params"] for t in a["search"]["trials"]] == [t["params"] for t in b["search"]["trials"]]
    assert [t["value"] for t in a["search"]["trials"]] == [t["value"] for t in b["search"]["trials"]]
    assert a["test"]["per_rep"] == b["test"]["per_rep"]
    assert a["untrained"] == b["untrained"]


def test_ctrl_c_stops_fold_workers_in_flight(tmp_path: Path, cache_dir: Path) -> None:
    # Fold trainings that would run for hours: Ctrl-C must not wait for them (nor for the fold
    # the pool has already queued), as it did when the pool was shut down with wait=True.
    args = [
        "run",
        "--loss",
        "contrastive",
        "--budget",
        "smoke",
        "--set",
        "train.max_epochs=100000",
        "--set",
        "train.patience=100000",
        "--jobs",
        "2",
        "--out",
        str(tmp_path / "runs"),
        "--results-dir",
        str(tmp_path / "results"),
    ]
    # Every epoch line in the (non-terminal) log: the test waits for epochs of two folds.
    env = {**os.environ, "DMLBENCH_CACHE": str(cache_dir), "DMLBENCH_PROGRESS": "all"}
    # Own session: the SIGINT goes to the whole process group, as a terminal's Ctrl-C does.
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmark.cli.main", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=default_sigint,
    )
    assert proc.stderr is not None
    stderr = proc.stderr  # the narrowed type, for the lambda below
    log: list[str] = []
    reader = threading.Thread(target=lambda: log.extend(iter(lambda: stderr.read(256), "")), daemon=True)
    reader.start()
    try:
        # Both workers past their start-up and training (progress shows epochs of two folds).
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            text = "".join(log)
            if "fold 1/4 epoch 3 " in text and "fold 2/4 epoch 3 " in text:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the run ended or timed out before two folds were training:\n" + "".join(log)[-2000:])
        workers = children(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        # Bounded only to turn a hang into a failure; a stop takes a few seconds.
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    reader.join(timeout=10)
    assert proc.returncode == 130, "".join(log)[-3000:]
    assert "interrupted" in "".join(log).lower()
    # multiprocessing's resource tracker exits on its own once the parent is gone.
    assert not wait_gone(workers, 15)
