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
]

# In the order a run reaches them; each kill lands in the middle of a different kind of step.
KILLS = [
    "search.trial_told:0",  # between trials
    "search.trial_told:2",  # the search is complete, the test stage has not started
    "write:rep0-fold1.json",  # a test fold's info file is complete but not yet renamed into place
    "test.fold_saved:0:3",  # rep 0 has all fold embeddings but is not evaluated yet
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
    return json.loads(path.read_text())


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
    for point in KILLS:
        proc = dmlbench(root, cache_dir, kill_at=point)
        if proc.returncode == -signal.SIGKILL:
            killed.append(point)
        else:
            assert proc.returncode == 0, proc.stderr[-3000:]
        # Whatever the kill left in results/ is complete JSON, never half a record.
        for path in (root / "results").rglob("*.json"):
            json.loads(path.read_text())
    assert killed == KILLS, "a kill point was never reached"

    final = dmlbench(root, cache_dir)
    assert final.returncode == 0, final.stderr[-3000:]
    rec = record(root)
    assert len(rec["search"]["trials"]) == N_TRIALS
    assert all(t["state"] == "COMPLETE" for t in rec["search"]["trials"])
    assert len(rec["test"]["rep_details"]) == REPS
    assert comparable(rec) == comparable(record(tmp_path / "reference"))
    leaderboard = (root / "results" / "glyphs" / "mlrc" / "leaderboard.md").read_text()
    assert "Contrastive" in leaderboard
