"""Crash safety: a run SIGKILLed at each named point (benchmark/faults.py) and re-run finishes with
exactly the configured trials and repetitions, and with the same numbers as a run never interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmark.faults import ENV
from benchmark.io import read_json
from benchmark.protocol.run_files import run_dir_name, saved_test_folds
from benchmark.search.study import counted_in_journal

pytestmark = pytest.mark.slow

N_TRIALS, REPS = 3, 2
ARGS = [
    "run",
    "--loss",
    "contrastive",
    "--budget",
    "smoke",
    "--quiet",
    "--jobs",
    "2",
    "--set",
    f"search.n_trials={N_TRIALS}",
    "--set",
    "search.n_startup_trials=2",
    "--set",
    f"test.reps={REPS}",
    # Every kill point lies between trials, folds, repetitions or writes, none inside an epoch:
    # one short epoch per fold reaches them all (11 runs of this test, the suite's slowest).
    "--set",
    "train.max_epochs=1",
    "--set",
    "train.iters_per_epoch=2",
]

# In the order a run reaches them; each kill lands in the middle of a different kind of step.
KILLS = [
    "search.trial_told:0",  # between trials
    "search.trial_told:2",  # the search is complete, the test stage has not started
    "write:rep0-fold1.json",  # a test fold's info file is complete but not yet renamed into place
    # rep 0 has all fold embeddings but is not evaluated yet (test.fold_saved:0:3 named this moment
    # only when fold 3 was the last saved, which depends on the order the 2 workers finish in)
    "test.folds_saved:0",
    "test.rep_saved:0",  # between test repetitions
    "write:record.json",  # the run-dir record is written but not renamed
    "record.run_dir",  # the record is in the run dir, not yet in results/
    "write:contrastive.smoke.seed0.json",  # the results/ record is written but not renamed
    "report.tables",  # leaderboard tables written, plots not
]


def dmlbench(root: Path, cache: Path, kill_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DMLBENCH_CACHE": str(cache)}
    env.pop(ENV, None)
    if kill_at is not None:
        env[ENV] = kill_at
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmark.cli.main",
            *ARGS,
            "--out",
            str(root / "runs"),
            "--results-dir",
            str(root / "results"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def record(root: Path) -> dict[str, Any]:
    path = root / "results" / "glyphs" / "mlrc" / "records" / "contrastive.smoke.seed0.json"
    rec: dict[str, Any] = json.loads(path.read_text())
    return rec


def saved_progress(root: Path) -> tuple[int, int]:
    """(trials counted, test folds saved) in the run directory, read as planning reads a stopped
    run (benchmarks/regenerate_boards.py), from the name its identity gives."""
    (identity_file,) = (root / "runs" / "glyphs" / "mlrc").glob("*/run.json")
    identity = read_json(identity_file)
    run_dir = identity_file.parent
    assert run_dir.name == run_dir_name(identity)
    config = identity["config"]
    folds = saved_test_folds(run_dir, config["test"]["reps"], config["protocol"]["n_folds"])
    return counted_in_journal(run_dir / "study.journal"), folds


def comparable(rec: dict[str, Any]) -> dict[str, Any]:
    """Everything a resumed run must reproduce exactly (not timings, dates or paths)."""
    trials = [{k: t[k] for k in ("number", "state", "params", "value")} for t in rec["search"]["trials"]]
    folds = [
        [{k: f[k] for k in ("best_val_map_at_r", "best_epoch", "curve")} for f in t["folds"]]
        for t in rec["search"]["trials"]
    ]
    return {
        "trials": trials,
        "folds": folds,
        "best": rec["search"]["best_params"],
        "per_rep": rec["test"]["per_rep"],
        "untrained": rec["untrained"],
    }


def test_killed_at_every_point_then_resumed_equals_an_uninterrupted_run(
    tmp_path: Path, cache_dir: Path
) -> None:
    reference = dmlbench(tmp_path / "reference", cache_dir)
    assert reference.returncode == 0, reference.stderr[-3000:]

    root = tmp_path / "killed"
    killed = []
    progress = []
    for point in KILLS:
        proc = dmlbench(root, cache_dir, kill_at=point)
        if proc.returncode == -signal.SIGKILL:
            killed.append(point)
        else:
            assert proc.returncode == 0, proc.stderr[-3000:]
        progress.append(saved_progress(root))
        # Whatever the kill left in results/ is complete JSON, never half a record.
        for path in (root / "results").rglob("*.json"):
            json.loads(path.read_text())
    assert killed == KILLS, "a kill point was never reached"
    # What a stopped run holds, as planning reads it: it only grows, and says where each kill fell.
    for column in zip(*progress, strict=True):
        assert list(column) == sorted(column)
    # The quasi-random start's two trials share one pool of folds, so trial 1 may be told before
    # trial 0 (presumably why a loaded CI run counted 2 here): one or both, and no test fold saved.
    trials_at_first_tell, folds_at_first_tell = progress[KILLS.index("search.trial_told:0")]
    assert trials_at_first_tell in (1, 2) and folds_at_first_tell == 0
    assert progress[KILLS.index("search.trial_told:2")] == (N_TRIALS, 0)
    assert progress[KILLS.index("test.rep_saved:0")][1] >= 4  # repetition 0's four folds
    assert progress[-1] == (N_TRIALS, REPS * 4)

    final = dmlbench(root, cache_dir)
    assert final.returncode == 0, final.stderr[-3000:]
    rec = record(root)
    assert len(rec["search"]["trials"]) == N_TRIALS
    assert all(t["state"] == "COMPLETE" for t in rec["search"]["trials"])
    assert len(rec["test"]["rep_details"]) == REPS
    assert comparable(rec) == comparable(record(tmp_path / "reference"))
    # The 6 invocations SIGKILLed before the record existed saved no timings; the record says so.
    assert rec["execution"]["invocations"] == 1
    assert rec["execution"]["invocations_without_timings"] == KILLS.index("record.run_dir")
    assert record(tmp_path / "reference")["execution"]["invocations_without_timings"] == 0
    leaderboard = (root / "results" / "glyphs" / "mlrc" / "leaderboard.md").read_text()
    assert "Contrastive" in leaderboard


# -- random moments ---------------------------------------------------------------------------------
# The named points above are moments between steps. Here the run is SIGKILLed at seeded random
# moments spread over the search and test stages, wherever they fall (inside a trial's training,
# an evaluation, a journal write), resumed each time, and must end with the record of a run never
# interrupted. The kill moments are placed on the uninterrupted run's timeline: a resumed run
# skips finished work, so its kill delay is the target moment minus the time the reference run
# had needed to reach the same saved progress.

N_RANDOM_KILLS = 10
RANDOM_ARGS = [
    "run",
    "--loss",
    "contrastive",
    "--budget",
    "smoke",
    "--quiet",
    "--jobs",
    "1",
    "--set",
    "train.max_epochs=1",
    "--set",
    "train.iters_per_epoch=2",
    "--set",
    "search.n_trials=3",
    "--set",
    "search.n_startup_trials=1",  # trials 1 and 2 are GP trials: a retry must not change them
    "--set",
    "test.reps=2",
]


def _start(root: Path, cache: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DMLBENCH_CACHE": str(cache)}
    env.pop(ENV, None)
    args = [*RANDOM_ARGS, "--out", str(root / "runs"), "--results-dir", str(root / "results")]
    return subprocess.Popen(
        [sys.executable, "-m", "benchmark.cli.main", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its own process group: the kill reaches any child too
    )


def _run_dir(root: Path) -> Path | None:
    found = list((root / "runs").glob("glyphs/mlrc/*/study.journal"))
    return found[0].parent if found else None


def _progress(root: Path) -> int:
    """Saved progress: trials told complete + test fold embeddings saved + 1 once the record exists."""
    run_dir = _run_dir(root)
    if run_dir is None:
        return -1
    journal = (run_dir / "study.journal").read_text(errors="replace")
    told = sum(1 for line in journal.splitlines() if '"op_code":6' in line and '"state":1' in line)
    folds = len(list((run_dir / "test").glob("rep*-fold*.npy"))) if (run_dir / "test").exists() else 0
    return told + folds + int((run_dir / "record.json").exists())


def _where(root: Path) -> str:
    """Where a kill landed, read from what it left on disk."""
    import optuna
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend
    from optuna.trial import TrialState

    run_dir = _run_dir(root)
    if run_dir is None:
        return "before the search started"
    storage = JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    trials = optuna.load_study(study_name="search", storage=storage).get_trials()
    running = [t.number for t in trials if t.state == TrialState.RUNNING]
    if running:
        return f"inside search trial {running[0]}"
    done = sum(t.state == TrialState.COMPLETE for t in trials)
    if done < 3:
        return f"search, {done} trials done, next not started"
    test = run_dir / "test"
    folds = sorted(p.stem for p in test.glob("rep*-fold*.npy")) if test.exists() else []
    reps = len(list(test.glob("rep?.json"))) if test.exists() else 0
    if reps < 2:
        return f"test stage, {len(folds)} fold(s) saved, {reps} rep(s) done"
    return "after the test stage (untrained row, record, report)"


def test_killed_at_random_moments_then_resumed_equals_an_uninterrupted_run(
    tmp_path: Path, cache_dir: Path
) -> None:
    import random
    import time

    # The reference run, with the moment each saved progress was first reached.
    ref = tmp_path / "reference"
    t0 = time.monotonic()
    proc = _start(ref, cache_dir)
    reached: dict[int, float] = {}
    while proc.poll() is None:
        reached.setdefault(_progress(ref), time.monotonic() - t0)
        time.sleep(0.05)
    total = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
    reached.setdefault(_progress(ref), total)
    start = reached[min(p for p in reached if p >= 0)]  # the search began: startup is over
    rng = random.Random(20260414)
    targets = sorted(start + rng.random() * (total - start) for _ in range(N_RANDOM_KILLS))

    root = tmp_path / "killed"
    landings = []
    for target in targets:
        done = _progress(root)
        # The reference needed reached[done] to get here; a resumed run also needs the startup.
        at = reached.get(done, start) if done >= 0 else 0.0
        delay = start + max(0.0, target - max(at, start))
        proc = _start(root, cache_dir)
        try:
            proc.wait(timeout=delay)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.returncode == 0:
            landings.append(f"{target:.1f}s: the run finished first")
            continue
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
        landings.append(f"{target:.1f}s (after {delay:.1f}s): {_where(root)}")
        for path in (root / "results").rglob("*.json"):
            json.loads(path.read_text())
    kills = "\n  ".join(landings)
    print(f"\nreference run {total:.1f}s, search from {start:.1f}s; kills:\n  {kills}")

    final = _start(root, cache_dir)
    assert final.wait(timeout=900) == 0, final.stderr.read().decode()[-3000:] if final.stderr else ""
    rec = record(root)
    assert len(rec["search"]["trials"]) == 3, landings
    assert all(t["state"] == "COMPLETE" for t in rec["search"]["trials"]), landings
    assert comparable(rec) == comparable(record(ref)), landings
