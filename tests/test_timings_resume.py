"""A resumed record counts the wall time of every invocation; a no-op re-run changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import default_sigint
from test_kill_points import ARGS

from benchmark.faults import ENV, SIGNAL_ENV

pytestmark = pytest.mark.slow


def run(
    root: Path, cache: Path, interrupt_at: str | None = None, signal_name: str = "INT"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DMLBENCH_CACHE": str(cache)}
    env.pop(ENV, None)
    if interrupt_at is not None:
        env[ENV], env[SIGNAL_ENV] = interrupt_at, signal_name
    return subprocess.run(
        [sys.executable, "-m", "benchmark.cli.main", *ARGS, "--out", str(root / "runs"),
         "--results-dir", str(root / "results")],
        capture_output=True, text=True, env=env, timeout=600,
        # Without it the INT kill point did nothing when the suite ran as a background job.
        preexec_fn=default_sigint,
    )  # fmt: skip


def test_timings_add_up_over_invocations_and_a_finished_rerun_is_a_no_op(
    tmp_path: Path, cache_dir: Path
) -> None:
    interrupted = run(tmp_path, cache_dir, interrupt_at="search.trial_told:1")
    assert interrupted.returncode == 130, interrupted.stderr[-2000:]
    (run_dir,) = (tmp_path / "runs" / "glyphs" / "mlrc").iterdir()
    (first,) = json.loads((run_dir / "timings.json").read_text())
    assert first["total"] > 0 and first["search"] > 0

    finished = run(tmp_path, cache_dir)
    assert finished.returncode == 0, finished.stderr[-2000:]
    path = tmp_path / "results" / "glyphs" / "mlrc" / "records" / "contrastive.smoke.seed0.json"
    record = json.loads(path.read_text())
    assert record["execution"]["invocations"] == 2
    assert record["execution"]["invocations_without_timings"] == 0  # the interrupted one saved its share
    # The total covers both invocations: more than the interrupted one's alone.
    assert record["timings_s"]["total"] > first["total"]
    assert record["timings_s"]["search"] >= first["search"]

    before = path.read_bytes()
    again = run(tmp_path, cache_dir)
    assert again.returncode == 0, again.stderr[-2000:]
    assert path.read_bytes() == before  # byte-identical: same timings, same 'created'
    # And a record deleted from results/ comes back as it was.
    path.unlink()
    assert run(tmp_path, cache_dir).returncode == 0
    assert path.read_bytes() == before


def test_sigterm_stops_a_run_as_ctrl_c_does(tmp_path: Path, cache_dir: Path) -> None:
    """SIGTERM (a scheduler, ``timeout``, ``kill``) takes the Ctrl-C path: message, exit 143, and
    the timings so far saved, which the signal's default (the process ends at once) would lose."""
    terminated = run(tmp_path, cache_dir, interrupt_at="search.trial_told:1", signal_name="TERM")
    assert terminated.returncode == 143, terminated.stderr[-2000:]
    assert "dmlbench: terminated (SIGTERM)" in terminated.stderr
    assert "Traceback" not in terminated.stderr
    (run_dir,) = (tmp_path / "runs" / "glyphs" / "mlrc").iterdir()
    (saved,) = json.loads((run_dir / "timings.json").read_text())
    assert saved["total"] > 0 and saved["search"] > 0
