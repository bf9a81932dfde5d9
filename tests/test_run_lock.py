"""One owner per run directory: a second process stops at once naming the owner; a killed owner's
lock is taken over; the owner's record equals an uninterrupted run's."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import stop_at, wait_until_stopped
from test_kill_points import ARGS, comparable, dmlbench, record

from benchmark.protocol import run_lock
from benchmark.protocol.run_lock import RunDirBusy

HOLD = """
import sys, time
from pathlib import Path
from benchmark.protocol import run_lock
run_lock.acquire(Path(sys.argv[1]))
print("locked", flush=True)
time.sleep(600)
"""


def hold_in_child(run_dir: Path) -> subprocess.Popen[str]:
    """A process that locks ``run_dir`` and sleeps (its first line of output says it has the lock)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
    return proc


def test_a_busy_run_dir_names_its_owner_and_a_killed_owner_frees_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "glyphs" / "mlrc" / "x"
    owner = hold_in_child(run_dir)
    try:
        with pytest.raises(RunDirBusy) as info:
            run_lock.acquire(run_dir)
        assert f"pid {owner.pid} on host {socket.gethostname()}" in str(info.value)
        assert str(run_dir) in str(info.value)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    # The kernel released the dead owner's flock: the directory is taken over, its owner rewritten.
    key = run_lock.acquire(run_dir)
    try:
        assert f'"pid": {os.getpid()}' in (run_dir / run_lock.LOCK_NAME).read_text()
    finally:
        run_lock.release(key)


def test_the_lock_is_reentrant_within_a_process_and_released_by_the_last_release(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = run_lock.acquire(run_dir)
    second = run_lock.acquire(run_dir)  # e.g. a test that resolves a run, then runs the CLI in-process
    run_lock.release(second)
    probe = [sys.executable, "-c", HOLD, str(run_dir)]
    busy = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    assert busy.returncode == 1 and "RunDirBusy" in busy.stderr  # still held after one release
    run_lock.release(first)
    owner = hold_in_child(run_dir)  # now free: another process takes it
    owner.kill()
    owner.wait()


@pytest.mark.slow
def test_two_processes_on_one_run_dir_one_runs_the_other_exits_2_at_once(
    tmp_path: Path, cache_dir: Path
) -> None:
    def start(root: Path, **extra: str) -> subprocess.Popen[str]:
        env = {**os.environ, "DMLBENCH_CACHE": str(cache_dir), **extra}
        out = ["--out", str(root / "runs"), "--results-dir", str(root / "results")]
        cmd = [sys.executable, "-m", "benchmark.cli.main", *ARGS, *out]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)

    root = tmp_path / "shared"
    # The first process freezes itself after its first trial, holding the lock, so the second
    # meets a run in progress however fast the machine finishes this tiny run.
    a = start(root, **stop_at("search.trial_told:0"))
    wait_until_stopped(a)
    assert list((root / "runs").rglob(run_lock.LOCK_NAME)), "the first process holds no run-dir lock"
    b = start(root)
    try:
        _, b_err = b.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        b.kill()
        pytest.fail("the second process waited for the first instead of stopping at once")
    finally:
        a.send_signal(signal.SIGCONT)
    _, a_err = a.communicate(timeout=600)
    print(f"second process: exit {b.returncode}, stderr: {b_err.strip()}")
    assert b.returncode == 2, b_err[-3000:]
    assert f"is in use by another dmlbench process (pid {a.pid} on host {socket.gethostname()}" in b_err
    assert "Traceback" not in b_err
    assert a.returncode == 0, a_err[-3000:]
    reference = dmlbench(tmp_path / "reference", cache_dir)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert comparable(record(root)) == comparable(record(tmp_path / "reference"))
