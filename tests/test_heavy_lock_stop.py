"""A stop request to a board script reaches its run gently (benchmarks/heavy_lock.py ``wait_for``).

Each test starts a small driver process that waits on a child with ``wait_for``, signals the
driver (or its process group) the way a terminal, ``kill`` or a scheduler would, and reads what
the child received and how it ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import default_sigint

REPO = Path(__file__).resolve().parents[1]

# The child records each signal it gets, then (``polite``) exits as a run does after saving its
# work, or (``stubborn``) ignores them all.
CHILD = """
import signal, sys, time
from pathlib import Path
log, mode = Path(sys.argv[1]), sys.argv[2]
got = []
def on_signal(signum, frame):
    got.append(signum)
    log.write_text(" ".join(map(str, got)))
    if mode == "polite" and len(got) == 1:
        time.sleep(0.2)  # saving its work
        sys.exit(128 + signum)
for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, on_signal if mode == "polite" else signal.SIG_IGN)
log.write_text("ready")
time.sleep(60)
"""

DRIVER = """
import subprocess, sys
sys.path.insert(0, sys.argv[1])
from heavy_lock import wait_for
child = subprocess.Popen([sys.executable, "-c", sys.argv[2], sys.argv[3], sys.argv[4]])
print(wait_for(child, grace_s=float(sys.argv[5])), flush=True)
"""


def start(tmp_path: Path, mode: str, grace_s: float) -> tuple[subprocess.Popen[str], Path]:
    log = tmp_path / "child.log"
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(REPO / "benchmarks"), CHILD, str(log), mode, str(grace_s)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, to signal it as a terminal or scheduler does
        preexec_fn=default_sigint,  # a background job's ignored SIGINT would make Ctrl-C a no-op
    )
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text() == "ready"):
        if time.monotonic() > deadline or driver.poll() is not None:
            driver.kill()
            pytest.fail("the child never became ready")
        time.sleep(0.05)
    return driver, log


def outcome(driver: subprocess.Popen[str], log: Path) -> tuple[int, list[int]]:
    out, _ = driver.communicate(timeout=60)
    assert driver.returncode == 0, "the driver itself must end normally, reporting the child's code"
    text = log.read_text()
    return int(out.strip()), [] if text == "ready" else [int(s) for s in text.split()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_script_alone_is_passed_on_after_the_grace(tmp_path: Path, sig: int) -> None:
    driver, log = start(tmp_path, "polite", grace_s=0.5)
    os.kill(driver.pid, sig)
    code, got = outcome(driver, log)
    assert (code, got) == (128 + sig, [sig])


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_group_reaches_the_run_once(tmp_path: Path, sig: int) -> None:
    """Ctrl-C in a terminal, or ``kill -TERM -<pgid>``: the run got it already; no second copy
    interrupts its shutdown."""
    driver, log = start(tmp_path, "polite", grace_s=5.0)
    os.killpg(driver.pid, sig)
    code, got = outcome(driver, log)
    assert (code, got) == (128 + sig, [sig])


def test_a_run_that_will_not_stop_is_killed_after_two_graces(tmp_path: Path) -> None:
    driver, log = start(tmp_path, "stubborn", grace_s=0.3)
    os.kill(driver.pid, signal.SIGTERM)
    code, _ = outcome(driver, log)
    assert code == -signal.SIGKILL
