"""Study storage: torn journal repair, the global trial budget under racing workers, `--workers N`
on the journal, and several `dmlbench run --storage postgresql://...` processes on a real server."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
from cli_helpers import stop_at, wait_until_stopped
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from benchmark.errors import ConfigError, DmlbenchError
from benchmark.search.storage import (
    check_storage_url,
    open_shared_study,
    redact_url,
    repair_torn_journal,
)
from benchmark.search.study import (
    FAILURE_ATTR,
    budget_rank,
    budget_state,
    counted_trials,
    is_counted,
    is_interrupted,
    recover_stale,
)

# Small enough for seconds per trial; the machinery, not the numbers, is under test.
TINY = [
    "--budget",
    "smoke",
    "--quiet",
    "--set",
    "train.max_epochs=1",
    "--set",
    "train.iters_per_epoch=2",
    "--set",
    "search.n_trials=3",
    "--set",
    "search.n_startup_trials=1",
]


def _journal_study(path: Path, name: str = "search") -> optuna.Study:
    storage = JournalStorage(JournalFileBackend(str(path)))
    return optuna.create_study(study_name=name, storage=storage, direction="maximize", load_if_exists=True)


# -- torn journal ------------------------------------------------------------------------------------


def test_torn_last_line_is_cut_and_backed_up(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    study = _journal_study(journal)
    study.enqueue_trial({"x": 0.5})
    intact = journal.read_bytes()
    torn = intact + b'{"op_code":4,"worker_id":"abc","study_id":0,"datetime'  # killed mid-write
    journal.write_bytes(torn)

    message = repair_torn_journal(journal)

    assert message is not None and "study.journal.torn" in message
    assert journal.read_bytes() == intact
    assert (tmp_path / "study.journal.torn").read_bytes() == torn
    # The repaired journal opens and accepts new writes that read back correctly.
    again = _journal_study(journal)
    again.enqueue_trial({"x": 0.25})
    trials = _journal_study(journal).get_trials()
    assert [t.state for t in trials] == [TrialState.WAITING, TrialState.WAITING]


def test_torn_journal_without_repair_is_unreadable_after_the_next_write(tmp_path: Path) -> None:
    # Why the repair exists: Optuna glues the next line onto the torn one.
    journal = tmp_path / "study.journal"
    _journal_study(journal).enqueue_trial({"x": 0.5})
    journal.write_bytes(journal.read_bytes() + b'{"op_code":5,"tri')
    with pytest.raises(Exception):  # noqa: B017 - Optuna raises ValueError or JSONDecodeError
        study = _journal_study(journal)
        study.enqueue_trial({"x": 0.25})
        _journal_study(journal).get_trials()


def test_intact_or_missing_journal_is_left_alone(tmp_path: Path) -> None:
    journal = tmp_path / "study.journal"
    assert repair_torn_journal(journal) is None
    _journal_study(journal).enqueue_trial({"x": 0.5})
    before = journal.read_bytes()
    assert repair_torn_journal(journal) is None
    assert journal.read_bytes() == before and not (tmp_path / "study.journal.torn").exists()


# -- budget accounting -------------------------------------------------------------------------------


def _frozen(number: int, state: TrialState, attrs: dict[str, Any]) -> optuna.trial.FrozenTrial:
    t = optuna.trial.create_trial(
        state=state, value=0.5 if state == TrialState.COMPLETE else None, user_attrs=attrs
    )
    t.number = number
    return t


def naive_counted(trials: list[optuna.trial.FrozenTrial]) -> int:
    # Reference: complete, or failed with a reason (a parameter failure); nothing else.
    return len(
        [
            t
            for t in trials
            if t.state == TrialState.COMPLETE
            or (
                t.state == TrialState.FAIL
                and t.user_attrs.get(FAILURE_ATTR)
                and not t.user_attrs.get("interrupted")
            )
        ]
    )


def test_counting_rules() -> None:
    trials = [
        _frozen(0, TrialState.COMPLETE, {}),
        _frozen(1, TrialState.FAIL, {FAILURE_ATTR: "fold 0: NaN loss"}),  # parameters' fault: counts
        _frozen(2, TrialState.FAIL, {}),  # failed by heartbeat: process died
        _frozen(3, TrialState.FAIL, {"interrupted": True}),  # recovered journal trial
        _frozen(4, TrialState.PRUNED, {"surplus": True}),
        _frozen(5, TrialState.RUNNING, {}),
        _frozen(6, TrialState.WAITING, {}),
    ]
    assert [is_counted(t) for t in trials] == [True, True, False, False, False, False, False]
    assert [is_interrupted(t) for t in trials] == [False, False, True, True, False, False, False]
    assert budget_state(trials) == (2, 1, 1) and naive_counted(trials) == 2
    # Rank = live (counted, running, waiting) trials with a lower number.
    assert [budget_rank(trials, n) for n in range(8)] == [0, 1, 2, 2, 2, 2, 3, 4]


def _simulate(order: tuple[int, ...], target: int, rank_check: bool) -> int:
    """Run the runner's search-loop steps for 3 workers interleaved as ``order``; counted trials.

    A worker's steps: (1) budget check, (2) ask, (3) rank check (surplus -> PRUNED), (4) tell.
    """
    study = optuna.create_study(direction="maximize")
    checked: set[int] = set()
    held: dict[int, optuna.Trial] = {}
    ranked: set[int] = set()
    for w in order:
        if w not in held and w not in checked:
            counted, running, waiting = budget_state(study.get_trials())
            if counted + running < target or waiting:
                checked.add(w)
        elif w in checked:
            checked.discard(w)
            held[w] = study.ask()
        elif w not in ranked:
            if rank_check and budget_rank(study.get_trials(), held[w].number) >= target:
                study.tell(held.pop(w), state=TrialState.PRUNED)
            else:
                ranked.add(w)
        else:
            study.tell(held.pop(w), 1.0)
            ranked.discard(w)
    for w in list(held):  # let every worker finish what it holds
        if w not in ranked and rank_check and budget_rank(study.get_trials(), held[w].number) >= target:
            study.tell(held.pop(w), state=TrialState.PRUNED)
        else:
            study.tell(held.pop(w), 1.0)
    return len(counted_trials(study))


def test_racing_workers_never_overshoot_the_budget() -> None:
    import itertools

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    target = 1
    orders = list(itertools.product(range(3), repeat=7))
    with_rank = [_simulate(order, target, rank_check=True) for order in orders]
    without = [_simulate(order, target, rank_check=False) for order in orders]
    assert max(without) > target  # the interleavings do contain races that overshoot ...
    assert set(with_rank) == {target}  # ... which the rank check removes, without undershooting


def test_recover_stale_then_count(tmp_path: Path) -> None:
    study = _journal_study(tmp_path / "study.journal")
    done = study.ask()
    study.tell(done, 1.0)
    stale = study.ask({"x": optuna.distributions.FloatDistribution(0, 1)})
    assert recover_stale(study) == 1
    trials = study.get_trials()
    # Retried in its own place (tests/test_search_resume.py): waiting again, not counted, no copy.
    assert len(trials) == 2 and len(counted_trials(study)) == 1
    assert trials[stale.number].state == TrialState.WAITING and not is_interrupted(trials[stale.number])
    assert study.ask().number == stale.number


def test_study_identity_is_checked(tmp_path: Path) -> None:
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "s.journal")))
    sampler = optuna.samplers.RandomSampler(seed=0)
    calls: list[int] = []
    open_shared_study(storage, "s", sampler, {"loss": "a"}, lambda s: calls.append(1), exclusive=False)
    open_shared_study(storage, "s", sampler, {"loss": "a"}, lambda s: calls.append(1), exclusive=False)
    assert calls == [1]  # the one-time setup ran once
    with pytest.raises(DmlbenchError, match="different run configuration"):
        open_shared_study(storage, "s", sampler, {"loss": "b"}, lambda s: None, exclusive=False)


def test_dead_workers_trial_is_failed_by_heartbeat_and_retried(tmp_path: Path) -> None:
    """A RUNNING trial whose heartbeats stopped is failed and re-enqueued with its parameters, seen
    from a study *loaded* by another process (Optuna wraps its storage in a cache layer)."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    from benchmark.search.storage import fail_stale, heartbeat, open_storage

    dead = open_storage(url, tmp_path / "unused.journal", heartbeat_s=1)
    study = optuna.create_study(study_name="s", storage=dead, direction="maximize")
    x = optuna.distributions.FloatDistribution(0, 1)
    with heartbeat(dead, study.ask()._trial_id):
        pass  # one heartbeat is recorded, then the "process" dies with its trial RUNNING
    trial = study.get_trials()[0]
    study._storage.set_trial_param(trial._trial_id, "x", 0.25, x)

    survivor = optuna.load_study(study_name="s", storage=open_storage(url, tmp_path / "u", 1))
    fail_stale(survivor)
    assert [t.state for t in survivor.get_trials()] == [TrialState.RUNNING]  # within the grace period
    time.sleep(3.5)  # grace period = 2 heartbeats
    fail_stale(survivor)
    failed, retry = survivor.get_trials()
    assert failed.state == TrialState.FAIL and is_interrupted(failed) and not is_counted(failed)
    assert retry.state == TrialState.WAITING and retry.params == {"x": 0.25}
    assert retry.system_attrs["failed_trial"] == failed.number


def test_storage_url_is_validated() -> None:
    with pytest.raises(ConfigError, match="database URL"):
        check_storage_url("runs/study.journal")
    check_storage_url(None)
    check_storage_url("sqlite:///x.db")
    assert redact_url("postgresql://me:s3cret@db.lab:5432/dml") == "postgresql://me@db.lab:5432/dml"


# -- subprocess runs ---------------------------------------------------------------------------------


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchmark.cli.main", *args]


def _env(cache: Path) -> dict[str, str]:
    return {**os.environ, "DMLBENCH_CACHE": str(cache)}


def _record(results: Path, loss: str) -> dict[str, Any]:
    rec: dict[str, Any] = json.loads(
        (results / "glyphs" / "mlrc" / "records" / f"{loss}.smoke.seed0.json").read_text()
    )
    return rec


def _check_search(rec: dict[str, Any], n_trials: int) -> list[dict[str, Any]]:
    trials: list[dict[str, Any]] = rec["search"]["trials"]
    numbers = [t["number"] for t in trials]
    assert len(numbers) == len(set(numbers)), "duplicated trial numbers"
    counted = [
        t for t in trials if t["state"] == "COMPLETE" or (t["state"] == "FAIL" and not t["interrupted"])
    ]
    assert len(counted) == n_trials
    # No queued point (a Sobol start, or a killed trial's retry, which keeps the origin) was trained
    # twice to completion. Sampler draws may coincide: a GP may propose a point again (a noisy
    # objective, an optimum on a range corner), and two workers asking at the same moment do not
    # see each other's point; CI once saw two GP draws of one run at the corner (-0.2, -0.2).
    queued = [
        json.dumps(t["params"], sort_keys=True)
        for t in trials
        if t["state"] == "COMPLETE" and t["origin"] != "sampler"
    ]
    assert len(queued) == len(set(queued)), queued
    return trials


@pytest.mark.slow
def test_local_workers_share_the_journal(tmp_path: Path, cache_dir: Path) -> None:
    out, results = tmp_path / "runs", tmp_path / "results"
    proc = subprocess.run(
        _cmd(
            "run",
            "--loss",
            "contrastive",
            *TINY,
            "--workers",
            "2",
            "--out",
            str(out),
            "--results-dir",
            str(results),
        ),
        env=_env(cache_dir),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = _record(results, "contrastive")
    trials = _check_search(rec, 3)
    assert [t["origin"] for t in trials][:1] == ["sobol"]
    assert len(rec["test"]["rep_details"]) == 2
    journal = next(out.glob("glyphs/mlrc/*/study.journal"))
    assert len(counted_trials(_journal_study(journal))) == 3


# -- PostgreSQL --------------------------------------------------------------------------------------

PG_BIN_DIRS = [Path("/usr/lib/postgresql") / v / "bin" for v in ("17", "16", "15", "14", "13")]


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    return next((d for d in PG_BIN_DIRS if (d / "initdb").exists()), None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def postgres_url() -> Iterator[str]:
    """A throw-away PostgreSQL server on a free local port (trust auth), stopped afterwards."""
    pg_bin = _pg_bin()
    if pg_bin is None:
        pytest.skip("no PostgreSQL server binaries (initdb) on this machine; `.ci/run` installs them")
    # initdb refuses to run as root: run the server as the `postgres` OS user in a directory it owns.
    as_user: list[str] = []
    if os.geteuid() == 0:
        as_user = ["runuser", "-u", "postgres", "--"]
    root = Path(tempfile.mkdtemp(prefix="dmlbench-pg-"))  # in /tmp: reachable by the postgres user
    data = root / "data"
    if as_user:
        shutil.chown(root, "postgres", "postgres")
    port = _free_port()
    subprocess.run(
        [*as_user, str(pg_bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [
            *as_user,
            str(pg_bin / "pg_ctl"),
            "-D",
            str(data),
            "-o",
            opts,
            "-l",
            str(root / "log"),
            "-w",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            [*as_user, str(pg_bin / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def _rdb_trials(url: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)
    names = [
        s.study_name for s in optuna.get_all_study_summaries(storage) if s.study_name.endswith("/search")
    ]
    if not names:
        return []
    return optuna.load_study(study_name=names[0], storage=storage).get_trials(deepcopy=False)


@pytest.mark.slow
def test_postgres_workers_share_one_study_and_retry_a_killed_workers_trial(
    tmp_path: Path, cache_dir: Path, postgres_url: str
) -> None:
    """Two machines' worth of `dmlbench run --storage`: worker A is SIGKILLed mid-trial and
    started again; A' and B finish one study with exactly n_trials counted trials, none
    duplicated, and the killed trial retried (heartbeat) with the same parameters."""
    t0 = time.perf_counter()
    env = _env(cache_dir)

    def start(name: str, **extra: str) -> subprocess.Popen[str]:
        args = ["run", "--loss", "contrastive", *TINY, "--set", "search.n_trials=4", "--jobs", "1"]
        args += ["--storage", postgres_url, "--heartbeat", "1"]
        args += ["--out", str(tmp_path / name / "runs"), "--results-dir", str(tmp_path / name / "results")]
        log = (tmp_path / f"{name}.log").open("w")
        return subprocess.Popen(
            _cmd(*args), env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT, text=True
        )

    # A freezes once a fold of whichever trial it got is in, that trial not yet told (polling the
    # database for a running trial, then killing, could race A to the end of that trial).
    a, b = start("a", **stop_at("search.fold_done:*")), start("b")
    try:
        wait_until_stopped(a)
    except AssertionError:
        raise AssertionError((tmp_path / "a.log").read_text()[-2000:]) from None
    victim = [t for t in _rdb_trials(postgres_url) if t.state == TrialState.RUNNING and t.params]
    assert victim, "A stopped mid-trial, yet no running trial has parameters"
    a.send_signal(signal.SIGKILL)
    a.wait()
    a2 = start("a2")
    for p, name in ((b, "b"), (a2, "a2")):
        assert p.wait(timeout=600) == 0, (tmp_path / f"{name}.log").read_text()[-3000:]
    elapsed = time.perf_counter() - t0
    print(f"\npostgres two-worker test: {elapsed:.1f}s")

    rec_b, rec_a2 = (
        _record(tmp_path / "b" / "results", "contrastive"),
        _record(tmp_path / "a2" / "results", "contrastive"),
    )
    trials = _check_search(rec_b, 4)
    assert rec_a2["search"]["trials"] == trials  # both processes report the same shared study
    assert rec_a2["test"]["per_rep"] == rec_b["test"]["per_rep"]  # reps were shared, not redone
    interrupted = [t for t in trials if t["interrupted"]]
    assert len(interrupted) == 1, [(t["number"], t["state"]) for t in trials]
    lost = interrupted[0]
    # Retried by heartbeat with the same parameters, and the retry completed.
    retry = [t for t in trials if t["number"] > lost["number"] and t["params"] == lost["params"]]
    assert [t["state"] for t in retry] == ["COMPLETE"]
    stored = {t.number: t for t in _rdb_trials(postgres_url)}
    assert stored[retry[0]["number"]].system_attrs.get("failed_trial") == lost["number"]
    assert len(rec_b["test"]["rep_details"]) == 2
    assert rec_b["execution"]["storage"] == postgres_url and rec_b["execution"]["study"].endswith("/search")
