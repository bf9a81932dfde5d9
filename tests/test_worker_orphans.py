"""Workers die with their parent: a SIGKILLed ``dmlbench`` (OOM killer, job scheduler) leaves no
fold-pool process training on (they stayed for over an hour before), even one killed while its
workers were still starting, and no idle pool worker waiting for work (the figure-saving pool's
stayed in CI)."""

from __future__ import annotations

import ast
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import alive, children, stop_at, wait_gone, wait_until_stopped

GRANDCHILD = """
import time
from benchmark.orphans import die_with_parent
print("armed" if die_with_parent() else "unarmed", flush=True)
time.sleep(600)
"""


def child_script(grandchild: str) -> str:
    """A parent that starts ``grandchild``, prints its pid and first line, and sleeps."""
    return f"""
import subprocess, sys, time
g = subprocess.Popen([sys.executable, "-c", {grandchild!r}], stdout=subprocess.PIPE, text=True)
print(g.pid, g.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


# The grandchild is a guarded call whose arguments take 600 s to unpickle, as a worker's import of
# torch can take long under load: it must already be armed while they load.
GUARDED_GRANDCHILD = """
import os, pickle, sys, time
from benchmark.orphans import guarded_call

class SlowToLoad:
    def __reduce__(self):
        return (time.sleep, (600,))

call = pickle.dumps((print, (SlowToLoad(),)))
print("loading", flush=True)
guarded_call(os.getppid(), True, call)
"""

# A pool whose two workers have done their tasks and wait, idle, for more: as the figure-saving pool's
# after its figures, and the fold pool's between trials.
IDLE_POOL = """
import os, time
from benchmark.orphans import guarded_pool

pool = guarded_pool(2)
for future in [pool.submit(os.getpid) for _ in range(2)]:
    future.result()
print("idle", flush=True)
time.sleep(600)
"""


def describe(pid: int) -> str:
    """What a surviving process is and where it waits, for the failure message."""
    proc = Path(f"/proc/{pid}")
    parts = [str(pid)]
    try:
        parts.append(
            " ".join(proc.joinpath("cmdline").read_bytes().decode(errors="replace").split("\0"))[:160]
        )
        keep = ("State", "PPid", "Threads", "SigBlk", "SigCgt")
        parts += [line for line in proc.joinpath("status").read_text().splitlines() if line.startswith(keep)]
        parts.append("wchan " + proc.joinpath("wchan").read_text())
        parts.append("stack " + proc.joinpath("stack").read_text().replace("\n", " | "))
    except OSError as e:  # gone meanwhile, or /proc/<pid>/stack needs root
        parts.append(f"({e.strerror})")
    return "; ".join(parts)


def survivors_of_killed_parent(grandchild: str, state: str, settle_s: float, wait_s: float) -> list[str]:
    """Start ``grandchild`` under a parent, check its first line is ``state``, let it run ``settle_s``
    more, SIGKILL the parent only, and describe the grandchild if it is alive ``wait_s`` later."""
    child = subprocess.Popen(
        [sys.executable, "-c", child_script(grandchild)], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    pid_text, first_line = child.stdout.readline().split()
    pid = int(pid_text)
    assert first_line == state and alive(pid)
    time.sleep(settle_s)
    return kill_and_describe_survivors(child, [pid], wait_s)


def kill_and_describe_survivors(parent: subprocess.Popen[str], pids: list[int], wait_s: float) -> list[str]:
    """SIGKILL ``parent`` only; describe those of ``pids`` alive ``wait_s`` later (then kill them)."""
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    survivors = wait_gone(pids, wait_s)
    states = [describe(p) for p in survivors]
    for p in survivors:
        os.kill(p, signal.SIGKILL)
    return states


LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux's"
)


@LINUX_ONLY
def test_the_parent_death_signal_kills_a_worker_at_once() -> None:
    """No polling: the grandchild only armed the signal and sleeps; its parent is SIGKILLed."""
    assert survivors_of_killed_parent(GRANDCHILD, "armed", 0.0, 3.0) == []


@LINUX_ONLY
def test_a_guarded_worker_is_armed_before_its_call_is_unpickled() -> None:
    """A parent killed while its worker still loads the call's modules leaves no worker behind.

    One second puts the kill inside the 600-s unpickling (arming takes milliseconds).
    """
    assert survivors_of_killed_parent(GUARDED_GRANDCHILD, "loading", 1.0, 5.0) == []


@LINUX_ONLY
def test_idle_workers_of_a_guarded_pool_exit_with_their_parent() -> None:
    """Idle workers block reading their task pipe, whose write end they hold themselves: without the
    guard they wait for ever (checked by making ``guarded_pool`` return a plain pool: both workers
    and the resource tracker were still there)."""
    parent = subprocess.Popen([sys.executable, "-c", IDLE_POOL], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == "idle"
    pool = children(parent.pid)  # the two workers and multiprocessing's resource tracker
    assert len(pool) == 3
    assert kill_and_describe_survivors(parent, pool, 10.0) == []


def process_starts(tree: ast.AST) -> list[ast.Call]:
    """Calls in ``tree`` that start processes of ``multiprocessing`` or ``concurrent.futures``."""
    names = {"ProcessPoolExecutor", "Process", "Pool"}
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)) in names
    ]


def test_every_worker_process_of_the_package_is_guarded() -> None:
    """Pools come from ``orphans.guarded_pool``; single processes run ``orphans.guarded_call``."""
    package = Path(__file__).resolve().parents[1] / "benchmark"
    unguarded = []
    for path in sorted(package.rglob("*.py")):
        for call in process_starts(ast.parse(path.read_text(), str(path))):
            target = next((k.value for k in call.keywords if k.arg == "target"), None)
            guarded = path == package / "orphans.py" or (
                isinstance(target, ast.Name) and target.id == "guarded_call"
            )
            if not guarded:
                unguarded.append(f"{path.relative_to(package.parent)}:{call.lineno}")
    assert unguarded == [], f"process starts outside benchmark.orphans: {unguarded}"


@pytest.mark.slow
def test_fold_workers_exit_when_only_the_main_process_is_killed(tmp_path: Path, cache_dir: Path) -> None:
    # The main process freezes itself once the first search fold is in (DMLBENCH_KILL_SIGNAL=STOP):
    # the kill then lands while the pool trains the other folds on any machine. A sleep of 8 s,
    # then 2 s, after the pool started raced the smoke run's end on a fast, unloaded CI.
    env = {**os.environ, "DMLBENCH_CACHE": str(cache_dir), **stop_at("search.fold_done:0:0")}
    cmd = [sys.executable, "-m", "benchmark.cli.main", "run", "--loss", "contrastive", "--budget", "smoke"]
    cmd += ["--quiet", "--jobs", "2", "--out", str(tmp_path / "runs"), "--results-dir", str(tmp_path / "r")]
    main = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    everyone: list[int] = []
    try:
        wait_until_stopped(main)
        workers = [p for p in children(main.pid) if b"spawn_main" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) >= 2, "the fold pool is not running"
        everyone = children(main.pid)  # the pool's workers and multiprocessing's resource tracker
        main.send_signal(signal.SIGKILL)  # the main process only, not its process group
        main.wait()
        # An armed worker dies at once (the tests above); a worker the pool was still starting
        # (replacing one) is armed before it imports torch, so it dies on reaching that point.
        survivors = wait_gone(everyone, 120.0)
        assert survivors == [], (
            f"still alive 120 s after the parent was killed: {[describe(p) for p in survivors]}"
        )
    finally:
        if main.poll() is None:
            main.kill()
        for pid in everyone + children(main.pid):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
