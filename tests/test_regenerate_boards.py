"""benchmarks/regenerate_boards.py: which committed board records a run of this checkout would
replace, and in what order it reruns them (the run itself is ``dmlbench run``; its end-to-end
check, against a record a real run wrote, is in test_e2e_run.py)."""

from __future__ import annotations

import datetime as dt
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import committed_checkout, load_benchmark_script
from optuna.storages.journal import JournalFileBackend
from record_factory import run_record, spread

from benchmark.losses import LOSSES
from benchmark.protocol.run_files import run_dir_name
from benchmark.records import SCHEMA, RunRecord, parse_record

rb = load_benchmark_script("regenerate_boards")


def touch(results: Path, dataset: str, name: str) -> None:
    folder = results / dataset / "mlrc" / "records"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("{}", encoding="utf-8")


def test_the_plan_is_every_built_in_loss_at_seed_0_first_then_the_committed_further_seeds(
    tmp_path: Path,
) -> None:
    touch(tmp_path, "omniglot", "ms.mini.seed2.json")
    touch(tmp_path, "omniglot", "ms.mini.seed1.json")
    touch(tmp_path, "omniglot", "ms.smoke.seed3.json")  # another budget's record is not planned
    touch(tmp_path, "omniglot", "ms.mini.seedx.json")  # not a seed
    losses = rb.builtin_losses()
    entries = rb.plan(tmp_path, ["glyphs", "omniglot"], losses)
    assert entries[: 2 * len(losses)] == [
        rb.Entry(d, loss, 0) for d in ("glyphs", "omniglot") for loss in losses
    ]
    assert entries[2 * len(losses) :] == [rb.Entry("omniglot", "ms", 1), rb.Entry("omniglot", "ms", 2)]


def test_built_in_losses_are_the_registry_without_plugins() -> None:
    names = rb.builtin_losses()
    assert names == [n for n in LOSSES.names() if LOSSES.source_of(n) is None]
    assert "mfcont" in names and "contrastive" in names


def test_an_unknown_loss_is_refused_with_the_valid_names(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        rb.parse_args(["status", "--losses", "mfcont,mfcnt"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "mfcnt are not built-in losses" in err and "valid: " in err and "contrastive" in err


def test_a_bad_data_dir_option_is_refused() -> None:
    with pytest.raises(SystemExit, match="DATASET=PATH"):
        rb.parse_args(["status", "--data-dir", "/somewhere/omniglot"])


def test_run_refuses_a_checkout_with_uncommitted_changes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setattr(rb, "dirty_files", lambda: ["benchmark/budgets.py"])
    calls: list[object] = []

    def popen(*args: object, **kwargs: object) -> None:
        calls.append(args)

    monkeypatch.setattr(subprocess, "Popen", popen)
    assert rb.main(["run", "--datasets", "glyphs", "--losses", "mfcont", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "uncommitted changes to 1 tracked source file(s) (benchmark/budgets.py)" in err
    assert calls == []


def test_what_runs_write_under_results_does_not_make_the_checkout_dirty(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A clone that has landed records resumes its regeneration; a changed source file still stops it."""
    committed_checkout(tmp_path, {"benchmark/budgets.py": "x = 1\n", "results/leaderboard.md": "old\n"})
    monkeypatch.setattr(rb, "REPO", tmp_path)
    (tmp_path / "results" / "leaderboard.md").write_text("new\n")
    assert rb.dirty_files() == []
    (tmp_path / "benchmark" / "budgets.py").write_text("x = 2\n")
    assert rb.dirty_files() == ["benchmark/budgets.py"]


def test_run_command_is_dmlbench_run_into_the_boards_results(tmp_path: Path) -> None:
    cmd = rb.run_command(rb.Entry("omniglot", "ms", 2), {"omniglot": Path("/data/omniglot")}, tmp_path)
    assert cmd[1:4] == ["-m", "benchmark.cli.main", "run"]
    text = " ".join(cmd)
    assert "--loss ms --dataset omniglot --budget mini --seed 2 --data-dir /data/omniglot" in text
    assert f"--results-dir {tmp_path}" in text


def test_run_reruns_each_stale_record_under_the_lock_and_stops_at_a_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DMLBENCH_HEAVY_LOCK", str(tmp_path / "heavy.lock"))
    monkeypatch.setattr(rb, "dirty_files", list)
    ms = rb.Entry("glyphs", "ms", 0)
    monkeypatch.setattr(rb, "current_records", lambda entries, dirs, results: {ms: _timed(60, 60, "AVX2")})
    codes = iter([0, 3])
    ran: list[list[str]] = []

    class FakeRun:  # what run_heavy starts, in place of a real (hours-long) dmlbench run
        def __init__(self, cmd: list[str], cwd: Path) -> None:
            ran.append(cmd)
            self.code = next(codes)

        def wait(self, timeout: float | None = None) -> int:
            return self.code

    monkeypatch.setattr(subprocess, "Popen", FakeRun)
    args = ["run", "--datasets", "glyphs", "--losses", "ms,mfcont,contrastive", "--results", str(tmp_path)]
    assert rb.main(args) == 3  # the second stale record's run failed: nothing after it runs
    assert [cmd[cmd.index("--loss") + 1] for cmd in ran] == ["mfcont", "contrastive"]
    out = capsys.readouterr().out
    assert f"landed: {tmp_path}/glyphs/mlrc/records/mfcont.mini.seed0.json" in out
    assert "glyphs contrastive seed 0: exit 3" in out
    assert (tmp_path / "heavy.lock").exists()


def test_adopt_copies_only_records_at_todays_settings_and_rewrites_the_board(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``adopt --from``: a calibration record at today's mini replaces the board's record at earlier
    settings and the board's tables are rewritten; a record at other settings is named and left;
    a second call adopts nothing. Today's record is an Omniglot one (``calibt20`` is today's mini),
    so the check needs the Omniglot folder to preflight what a run would record."""
    if "omniglot" not in rb.parse_data_dirs([]):
        pytest.skip(f"no omniglot folder here (looked at {rb.DEFAULT_DATA_DIRS['omniglot']})")
    repo = Path(__file__).resolve().parent.parent / "results" / "sensitivity"
    board, source = tmp_path / "board", tmp_path / "source"
    todays = repo / "calibt20" / "omniglot" / "mlrc" / "records" / "margin.mini.seed0.json"
    earlier = repo / "mini-earlier" / "omniglot" / "mlrc" / "records"
    for folder in (board, source):
        (folder / "omniglot" / "mlrc" / "records").mkdir(parents=True)
    board_margin = board / "omniglot/mlrc/records/margin.mini.seed0.json"
    shutil.copyfile(earlier / "margin.mini.seed0.json", board_margin)
    shutil.copyfile(todays, source / "omniglot/mlrc/records/margin.mini.seed0.json")
    shutil.copyfile(earlier / "ms.mini.seed0.json", source / "omniglot/mlrc/records/ms.mini.seed0.json")
    args = ["adopt", "--from", str(source), "--results", str(board), "--datasets", "omniglot"]
    assert rb.main([*args, "--losses", "margin,ms"]) == 0
    out = capsys.readouterr().out
    assert board_margin.read_bytes() == todays.read_bytes()
    assert "not adopted (other board settings or search ranges than this checkout's)" in out
    assert "ms.mini.seed0.json" in out
    assert not (board / "omniglot/mlrc/records/ms.mini.seed0.json").exists()
    assert "Margin" in (board / "omniglot/mlrc/leaderboard.md").read_text(encoding="utf-8")
    assert rb.main([*args, "--losses", "margin"]) == 0
    assert "adopted:" not in capsys.readouterr().out


def _timed(
    search: float, test: float | None, cpu: str, extended: bool = False, loss: str = "ms"
) -> RunRecord:
    """A record of ``loss`` with these timings; ``extended``: its search started from an earlier
    run's 10 trials, so its timings cover only the extra trials and the test stage."""
    timings = {"search": search} if test is None else {"search": search, "test": test}
    doc = run_record(loss, "1", per_rep=spread({"map_at_r": 0.5}), schema=SCHEMA, timings_s=timings)
    doc["environment"]["cpu_capability"] = cpu
    doc["execution"] = {"jobs": 2}
    if extended:
        doc["execution"]["search_extended_from"] = {"n_trials": 10, "timings_s": {"search": 9000.0}}
    return parse_record(doc)


def test_status_estimates_the_time_left_from_the_current_records_and_says_from_what() -> None:
    # 1 h, 3 h and 2 h of training (search + test); the third record lacks its test time, and a
    # record without both timings is left out rather than counted as zero. The fourth extended an
    # earlier search: its 10 min cover only its extra trials, so it says nothing of a full search.
    current = [_timed(3000, 600, "AVX2", loss="contrastive"), _timed(9000, 1800, "AVX512", loss="arcface")]
    current += [_timed(7200, None, "AVX2"), _timed(300, 300, "AVX2", extended=True)]
    # So few records are named: the median is as fast as their losses.
    assert rb.time_left(current, 5) == (
        "time left ≈ 5 × 2.0 h ≈ 10 h of wall time searching each from scratch: the median training "
        "time of the 2 current record(s) searched from scratch (contrastive seed 0, arcface seed 0; "
        "range 1.0–3.0 h; CPU kinds AVX2, AVX512; jobs 2); an estimate, longer where those records "
        "ran beside other work"
    )
    # Four are not: the line would grow with the board.
    four = [_timed(3600 * h, 0, "AVX2") for h in (1, 2, 3, 4)]
    assert "searched from scratch (range 1.0–4.0 h;" in str(rb.time_left(four, 1))
    assert rb.time_left(current, 0) is None  # nothing left
    assert rb.time_left(current[2:], 5) is None  # nothing to estimate from


def test_status_sums_the_extension_estimates_for_the_time_left_with_extend_earlier() -> None:
    """Each run that would extend an earlier record counts its own estimate (seconds here); one
    searched from scratch counts the from-scratch median (2 h), or nothing when there is none."""
    current = [_timed(3000, 600, "AVX2"), _timed(9000, 1800, "AVX512"), _timed(300, 300, "AVX2", True)]
    tail = "; each rests on its earlier record's trial times (benchmarks/README.md compares runs)"
    assert rb.time_left_extending(current, [3600, 7200]) == (
        "time left with --extend-earlier ≈ 3 h: the sum of the 2 estimate(s) above" + tail
    )
    assert rb.time_left_extending(current, [3600, None, 7200, None]) == (
        "time left with --extend-earlier ≈ 7 h: the sum of the 2 estimate(s) above (3 h) + 2 × 2.0 h "
        "for those it would search from scratch" + tail
    )
    assert rb.time_left_extending(current[2:], [3600, None]) == (
        "time left with --extend-earlier ≥ 1 h: the sum of the 1 estimate(s) above, + 1 run(s) it "
        "would search from scratch, with nothing to estimate them from" + tail
    )
    # Extensions that sum to more than searching them from scratch (2 × 2.0 h) contradict the
    # median they are read beside: an extension trains fewer trials. The line says so.
    assert rb.time_left_extending(current, [9000, 9000]) == (
        "time left with --extend-earlier ≈ 5 h: the sum of the 2 estimate(s) above" + tail + "; more "
        "than searching those 2 from scratch at the median above (4 h), though an extension trains "
        "fewer trials: the two rest on different records, so at least one of them is off"
    )
    assert rb.time_left_extending(current, [None, None]) is None  # time_left says it all
    assert rb.time_left_extending(current, []) is None
    # A run it would extend from an earlier record that lacks trial timings: estimated as a whole
    # search, and said to be an extension rather than a search from scratch.
    assert rb.time_left_extending(current, [3600, None], n_untimed=1) == (
        "time left with --extend-earlier ≈ 5 h: the sum of the 1 estimate(s) above (1 h) + 2 × 2.0 h "
        "for those it would search from scratch or extend from an earlier record without trial "
        "timings" + tail
    )
    assert rb.time_left_extending(current[2:], [], n_untimed=2) == (
        "time left with --extend-earlier ≥ 0 h: the sum of the 0 estimate(s) above, + 2 run(s) it "
        "would extend from an earlier record without trial timings, with nothing to estimate them "
        "from" + tail
    )


def test_until_is_the_next_such_utc_time_or_an_iso_time() -> None:
    at = dt.datetime(2026, 12, 3, 23, 30, tzinfo=dt.timezone.utc)
    assert rb.parse_until("01:40", at) == dt.datetime(2026, 12, 4, 1, 40, tzinfo=dt.timezone.utc)
    assert rb.parse_until("23:45", at) == dt.datetime(2026, 12, 3, 23, 45, tzinfo=dt.timezone.utc)
    # A time a few minutes past is past (a chain's later run must not get a whole day), and the
    # nearest such time is taken either way: 12:00 read at 23:30 is noon today, 11:00 tomorrow's.
    assert rb.parse_until("23:20", at) == dt.datetime(2026, 12, 3, 23, 20, tzinfo=dt.timezone.utc)
    assert rb.parse_until("12:00", at) == dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.timezone.utc)
    assert rb.parse_until("11:00", at) == dt.datetime(2026, 12, 4, 11, 0, tzinfo=dt.timezone.utc)
    early = dt.datetime(2026, 12, 4, 0, 30, tzinfo=dt.timezone.utc)
    assert rb.parse_until("23:50", early) == dt.datetime(2026, 12, 3, 23, 50, tzinfo=dt.timezone.utc)
    # Exactly 12 hours away either way is the coming time, on either side of noon.
    assert rb.parse_until("11:30", at) == dt.datetime(2026, 12, 4, 11, 30, tzinfo=dt.timezone.utc)
    morning = dt.datetime(2026, 12, 3, 11, 0, tzinfo=dt.timezone.utc)
    assert rb.parse_until("23:00", morning) == dt.datetime(2026, 12, 3, 23, 0, tzinfo=dt.timezone.utc)
    assert rb.parse_until("10:59", morning) == dt.datetime(2026, 12, 3, 10, 59, tzinfo=dt.timezone.utc)
    assert rb.parse_until("22:59", morning) == dt.datetime(2026, 12, 3, 22, 59, tzinfo=dt.timezone.utc)
    assert rb.parse_until("23:01", morning) == dt.datetime(2026, 12, 2, 23, 1, tzinfo=dt.timezone.utc)
    assert rb.parse_until("2026-12-04T01:40", at) == dt.datetime(2026, 12, 4, 1, 40, tzinfo=dt.timezone.utc)
    assert rb.parse_until("2026-12-04T02:40+01:00", at) == dt.datetime(
        2026, 12, 4, 1, 40, tzinfo=dt.timezone.utc
    )
    with pytest.raises(SystemExit, match="HH:MM"):
        rb.parse_until("tonight", at)


def test_the_estimate_is_the_same_losss_median_else_the_datasets() -> None:
    current = {
        rb.Entry("omniglot", "ms", 0): _timed(1000, 500, "AVX2"),  # 1,500 s
        rb.Entry("omniglot", "ms", 1): _timed(2000, 500, "AVX2"),  # 2,500 s
        rb.Entry("omniglot", "margin", 0): _timed(3000, 1000, "AVX2"),  # 4,000 s
        # Extended from an earlier search: its timings cover its extra trials only, never counted.
        rb.Entry("omniglot", "ms", 3): _timed(100, 100, "AVX2", extended=True),
        rb.Entry("omniglot", "triplet", 0): _timed(100, 100, "AVX2", extended=True),
        rb.Entry("glyphs", "ms", 0): _timed(9000, 1000, "AVX2"),  # another dataset: never counted
    }
    assert rb.estimate_s(rb.Entry("omniglot", "ms", 2), current) == (
        2000,
        "median of ms's 2 current record(s)",
    )
    assert rb.estimate_s(rb.Entry("omniglot", "cwms", 1), current) == (
        2500,
        "median of 3 current omniglot record(s)",
    )
    assert rb.estimate_s(rb.Entry("omniglot", "ms", 2), {}) is None
    # A run that extends an earlier record without trial timings is estimated as a whole search,
    # and the basis says why.
    untimed = rb.Extension(earlier=_timed(1000, 500, "AVX2"), n_trials=20, why="")
    assert rb.extension_estimate_s(untimed.earlier, 20) is None
    assert rb.estimate_s(rb.Entry("omniglot", "ms", 2), current, untimed) == (
        2000,
        "median of ms's 2 current record(s); the earlier record it extends lacks the trial timings "
        "to estimate from",
    )


def _trial(origin: str, wall_s: float | None, state: str = "COMPLETE") -> dict[str, object]:
    return {"number": None, "state": state, "origin": origin, "params": {}, "value": 0.5,
            "sampler_value": 0.5, "interruptions": 0, "fold_sem": None, "wall_s": wall_s,
            "failure": None, "interrupted": False, "folds": []}  # fmt: skip


def _searched_for(
    trials: list[dict[str, object]], test: float | None, cpu_model: str | None = None
) -> RunRecord:
    search = {"sampler": "gp", "n_trials": len(trials), "space": {}, "fixed": {}, "best_trial": 0,
              "best_value": 0.5, "best_params": {}, "trials": trials}  # fmt: skip
    timings = {"search": 1.0} if test is None else {"search": 1.0, "test": test}
    doc = run_record(
        "ms", "1", per_rep=spread({"map_at_r": 0.5}), schema=SCHEMA, timings_s=timings, search=search
    )
    if cpu_model is not None:
        doc["environment"]["cpu_model"] = cpu_model
    return parse_record(doc)


def test_an_extension_estimate_names_an_earlier_record_from_another_cpu_model() -> None:
    """The estimate does not scale for the host (no two hosts' speeds are measured apart), but its
    basis says when the earlier record trained on another CPU model; on the same one, or where
    the record names none, it says nothing of it."""
    trials = [_trial("sobol", 3000), _trial("sampler", 300), _trial("sampler", 900)]
    earlier = _searched_for(trials, test=600, cpu_model="AMD EPYC")
    seconds, basis = rb.extension_estimate_s(earlier, 5, "Intel(R) Xeon(R) Processor")
    assert seconds == 2 * 600 + 600
    assert basis.endswith("; that record ran on AMD EPYC, this machine is Intel(R) Xeon(R) Processor")
    assert "ran on" not in rb.extension_estimate_s(earlier, 5, "AMD EPYC")[1]
    assert "ran on" not in rb.extension_estimate_s(earlier, 5)[1]
    unnamed = _searched_for(trials, test=600)
    assert "ran on" not in rb.extension_estimate_s(unnamed, 5, "Intel(R) Xeon(R) Processor")[1]


def test_an_extension_is_expected_to_take_its_extra_sampled_trials_and_a_test_stage() -> None:
    """The quasi-random start's trials share one pool (each wall time runs from the pool's start),
    a failed trial's time is not a trial's cost, and a trial without a wall time says nothing: only
    the complete sampled trials' times count (median 600 s here)."""
    trials = [_trial("sobol", 3000), _trial("sobol", 3000), _trial("sobol", 3000)]
    trials += [_trial("sampler", 300), _trial("sampler", 900), _trial("sampler", 600)]
    trials += [_trial("sampler", 60, state="FAIL"), _trial("sampler", None)]
    earlier = _searched_for(trials, test=1200)  # 8 trials
    assert rb.extension_estimate_s(earlier, 12) == (
        4 * 600 + 1200,
        "4 more trial(s) × the median 10.0 min of its earlier record's 3 sampled trials, + that "
        "record's test stage, 20 min",
    )
    assert rb.extension_estimate_s(earlier, 8)[0] == 1200  # the test stage only
    assert rb.extension_estimate_s(_searched_for(trials[:3], test=1200), 12) is None  # no sampled trial
    assert rb.extension_estimate_s(_searched_for(trials, test=None), 12) is None  # no test time
    # It comes before the medians of current records; a run searched from scratch uses those.
    current = {rb.Entry("glyphs", "ms", 1): _timed(1000, 500, "AVX2")}
    entry = rb.Entry("glyphs", "ms", 0)
    assert rb.estimate_s(entry, current, rb.Extension(earlier, 12, ""))[0] == 3600
    assert rb.estimate_s(entry, current, rb.Extension(None, 12, "no earlier record")) == (
        1500,
        "median of ms's 1 current record(s)",
    )


def test_until_skips_a_record_expected_to_land_too_late_and_starts_a_shorter_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DMLBENCH_HEAVY_LOCK", str(tmp_path / "heavy.lock"))
    monkeypatch.setattr(rb, "dirty_files", list)
    clock = [dt.datetime(2026, 12, 3, 23, 0, tzinfo=dt.timezone.utc)]
    monkeypatch.setattr(rb, "now", lambda: clock[0])
    current = {
        rb.Entry("glyphs", "margin", 0): _timed(3000, 600, "AVX2"),  # margin: 60 min
        rb.Entry("glyphs", "ms", 0): _timed(1000, 200, "AVX2"),  # ms: 20 min
    }
    monkeypatch.setattr(rb, "current_records", lambda entries, dirs, results: dict(current))
    monkeypatch.setattr(rb, "committed_seeds", lambda results, d, loss, budget: [0, 1])
    ran: list[tuple[str, str]] = []

    class FakeRun:  # each run takes 20 minutes of the fake clock
        def __init__(self, cmd: list[str], cwd: Path) -> None:
            ran.append((cmd[cmd.index("--loss") + 1], cmd[cmd.index("--seed") + 1]))
            clock[0] += dt.timedelta(minutes=20)

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeRun)
    args = ["run", "--datasets", "glyphs", "--losses", "margin,ms,cwms", "--results", str(tmp_path)]
    # 45 minutes left: cwms seed 0 (no cwms record: the dataset's median, 40 min) starts; then, 25
    # minutes left, margin seed 1 (60 min) is skipped and ms seed 1 (20 min) starts; with 5 minutes
    # left cwms seed 1 is skipped.
    assert rb.main([*args, "--until", "23:45"]) == 0
    assert ran == [("cwms", "0"), ("ms", "1")]
    out = capsys.readouterr().out
    assert (
        "not started: glyphs margin seed 1: expected 60 min (median of margin's 1 current record(s)), "
        "25 min left before --until" in out
    )
    assert (
        "not started: glyphs cwms seed 1: expected 40 min (median of 2 current glyphs record(s)), 5 min"
        in out
    )
    assert out.count("landed: ") == 2
    # Nothing to estimate from: not started.
    assert rb.fits(rb.Entry("omniglot", "ms", 0), current, clock[0] + dt.timedelta(hours=9)) == (
        "no current record to estimate its time from (run it without --until)"
    )
    # Without --until every stale record starts, in plan order.
    ran.clear()
    assert rb.main(args) == 0
    assert ran == [("cwms", "0"), ("margin", "1"), ("ms", "1"), ("cwms", "1")]


def test_until_estimates_from_the_whole_board_when_losses_names_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``--losses cwms --until``: cwms has no current record, the dataset's other losses do; the
    estimate draws on them (--losses names what runs, not what the estimate learns from). Both
    ``run`` and ``status`` see the whole board, so they agree."""
    monkeypatch.setenv("DMLBENCH_HEAVY_LOCK", str(tmp_path / "heavy.lock"))
    monkeypatch.setattr(rb, "dirty_files", list)
    clock = [dt.datetime(2026, 12, 3, 23, 0, tzinfo=dt.timezone.utc)]
    monkeypatch.setattr(rb, "now", lambda: clock[0])
    board = {
        rb.Entry("glyphs", "margin", 0): _timed(1500, 300, "AVX2"),  # 30 min
        rb.Entry("glyphs", "ms", 0): _timed(2100, 300, "AVX2"),  # 40 min
    }
    # Honours the entries it is asked about, as the real one does.
    monkeypatch.setattr(
        rb, "current_records", lambda entries, dirs, results: {e: board[e] for e in entries if e in board}
    )
    ran: list[str] = []

    class FakeRun:
        def __init__(self, cmd: list[str], cwd: Path) -> None:
            ran.append(cmd[cmd.index("--loss") + 1])

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeRun)
    args = ["--datasets", "glyphs", "--losses", "cwms", "--results", str(tmp_path)]
    assert rb.main(["run", *args, "--until", "23:30"]) == 0  # 35 min expected, 30 left
    assert ran == []
    assert (
        "not started: glyphs cwms seed 0: expected 35 min (median of 2 current glyphs record(s)), "
        "30 min left before --until" in capsys.readouterr().out
    )
    assert rb.main(["run", *args, "--until", "23:40"]) == 0
    assert ran == ["cwms"]
    assert rb.main(["status", *args]) == 0
    out = capsys.readouterr().out
    assert "glyphs: 0 of 1 mini records at this checkout's board settings" in out
    assert "time left ≈ 1 × 0.6 h ≈ 1 h of wall time searching each from scratch: the median" in out
    assert "--extend-earlier" not in out  # no record to extend


def _extendable_board(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, n_trials: int
) -> tuple[Path, dict[str, Any], list[list[str]]]:
    """A glyphs board holding Margin at today's settings but for its first ``n_trials`` trials (a
    record ``--extend-earlier`` extends) and MS at other settings (one it searches from scratch);
    runs are recorded, not started. Returns the records folder, Margin's record and the runs."""
    monkeypatch.setenv("DMLBENCH_HEAVY_LOCK", str(tmp_path / "heavy.lock"))
    monkeypatch.setattr(rb, "dirty_files", list)
    monkeypatch.setattr(rb, "REPO", tmp_path / "clone")
    repo = Path(__file__).resolve().parent.parent / "results" / "sensitivity"
    board = tmp_path / "board" / "glyphs" / "mlrc" / "records"
    board.mkdir(parents=True)
    shorter = json.loads((repo / "calibp10/glyphs/mlrc/records/margin.mini.seed0.json").read_text())
    shorter["config"]["search"]["n_trials"] = shorter["search"]["n_trials"] = n_trials
    shorter["search"]["trials"] = shorter["search"]["trials"][:n_trials]
    (board / "margin.mini.seed0.json").write_text(json.dumps(shorter))
    shutil.copyfile(
        repo / "mini-earlier/glyphs/mlrc/records/ms.mini.seed0.json", board / "ms.mini.seed0.json"
    )
    ran: list[list[str]] = []

    class FakeRun:
        def __init__(self, cmd: list[str], cwd: Path) -> None:
            ran.append(cmd)

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(subprocess, "Popen", FakeRun)
    return board, shorter, ran


def test_extend_earlier_starts_from_the_boards_record_only_where_it_differs_in_fewer_trials(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``run --extend-earlier``: a record at today's settings but with fewer trials seeds the run
    (from a copy, since the run replaces the board's file); one at other settings does not."""
    board, shorter, ran = _extendable_board(monkeypatch, tmp_path, 5)
    args = ["run", "--datasets", "glyphs", "--losses", "margin,ms", "--results", str(tmp_path / "board")]
    assert rb.main([*args, "--extend-earlier"]) == 0
    margin, ms = ran
    copy = tmp_path / "clone" / "runs" / "glyphs" / "mlrc" / "earlier-records" / "margin.mini.seed0.json"
    assert margin[margin.index("--extend-search") + 1] == str(copy) and "--resume-mixed-code" in margin
    assert copy.read_bytes() == (board / "margin.mini.seed0.json").read_bytes()
    assert "--extend-search" not in ms and "--resume-mixed-code" not in ms
    out = capsys.readouterr().out
    assert f"glyphs margin seed 0: extending its earlier record ({copy})" in out
    assert "glyphs ms seed 0: searching from scratch (--extend-search " in out
    assert "it differs in config." in out
    # Without the option every run searches from scratch.
    ran.clear()
    assert rb.main(args) == 0
    assert all("--extend-search" not in cmd for cmd in ran) and len(ran) == 2
    # A record that --extend-search would refuse (here: an interrupted trial) is searched from
    # scratch, not handed to a run that would fail.
    shorter["search"]["trials"][3]["interrupted"] = True
    (board / "margin.mini.seed0.json").write_text(json.dumps(shorter))
    copy.unlink()
    ran.clear()
    assert rb.main([*args, "--extend-earlier"]) == 0
    assert all("--extend-search" not in cmd for cmd in ran) and not copy.exists()
    assert "trials [3] are neither complete nor failed" in capsys.readouterr().out


def test_until_and_status_estimate_an_extension_from_its_earlier_record(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """``run --extend-earlier --until``: a record that can be extended is expected to take its extra
    trials and test stage (:func:`extension_estimate_s`), not the board's median; one searched from
    scratch, with no current record on the board, has nothing to estimate from. ``status`` shows the
    same estimate beside the record it would extend."""
    clock = dt.datetime(2026, 12, 3, 23, 0, tzinfo=dt.timezone.utc)
    monkeypatch.setattr(rb, "now", lambda: clock)
    # Seven trials: the five of the quasi-random start and two sampled ones.
    _, shorter, ran = _extendable_board(monkeypatch, tmp_path, 7)
    seconds, basis = rb.extension_estimate_s(parse_record(shorter), 20, rb.cpu_model())  # as run does
    assert basis.startswith("13 more trial(s) × the median ")
    common = ["--datasets", "glyphs", "--losses", "margin,ms", "--results", str(tmp_path / "board")]
    left = dt.timedelta(seconds=seconds - 60)  # a minute short of the extension's estimate
    until = (clock + left).isoformat()
    assert rb.main(["run", *common, "--extend-earlier", "--until", until]) == 0
    assert ran == []
    out = capsys.readouterr().out
    assert f"not started: glyphs margin seed 0: expected {seconds / 60:.0f} min ({basis})" in out
    assert "not started: glyphs ms seed 0: no current record to estimate its time from" in out
    assert not (tmp_path / "clone" / "runs").exists()  # nothing copied for a run not started
    until = (clock + left + dt.timedelta(seconds=120)).isoformat()  # a minute to spare
    only_margin = [*common[:2], "--losses", "margin", *common[4:]]
    assert rb.main(["run", *only_margin, "--extend-earlier", "--until", until]) == 0
    assert [cmd[cmd.index("--loss") + 1] for cmd in ran] == ["margin"]
    assert rb.main(["status", *common]) == 0
    out = capsys.readouterr().out
    assert (
        f"to run: margin seed 0 (at earlier settings; --extend-earlier ≈ {seconds / 60:.0f} min: {basis})"
        in out
    )
    # The board has no current record to estimate MS's search from scratch from.
    assert "time left ≈" not in out
    assert (
        f"time left with --extend-earlier ≥ {seconds / 3600:.0f} h: the sum of the 1 estimate(s) above, "
        "+ 1 run(s) it would search from scratch, with nothing to estimate them from" in out
    )
    assert "to run: ms seed 0 (at earlier settings)" in out
    # Without its sampled trials' wall times the record is still one it extends, with no estimate.
    for trial in shorter["search"]["trials"]:
        trial["wall_s"] = None
    (tmp_path / "board/glyphs/mlrc/records/margin.mini.seed0.json").write_text(json.dumps(shorter))
    assert rb.main(["status", *common]) == 0
    out = capsys.readouterr().out
    assert (
        "to run: margin seed 0 (at earlier settings; --extend-earlier extends it, but its trial "
        "timings are missing: no estimate)" in out
    )
    assert (
        "time left with --extend-earlier ≥ 0 h: the sum of the 0 estimate(s) above, + 2 run(s) it "
        "would search from scratch or extend from an earlier record without trial timings" in out
    )


def _stopped_run(run_dir: Path, counted: int, rep_saved: int, folds_saved: int) -> None:
    """A run directory as a stopped run leaves it: ``counted`` complete trials and one still
    running in its journal; repetitions below ``rep_saved`` saved whole, and of the next one
    ``folds_saved`` folds with both files and one more with its result file alone."""
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(run_dir / "study.journal")))
    study = optuna.create_study(storage=storage, direction="maximize")
    x = optuna.distributions.FloatDistribution(0, 1)
    for _ in range(counted):
        study.add_trial(optuna.trial.create_trial(params={"x": 0.5}, distributions={"x": x}, value=0.5))
    study.ask()  # running when the run stopped: not counted, trained again
    test = run_dir / "test"
    test.mkdir()
    for r in range(rep_saved):
        (test / f"rep{r}.json").write_text("{}")
    for f in range(folds_saved):
        (test / f"rep{rep_saved}-fold{f}.npy").write_bytes(b"")
        (test / f"rep{rep_saved}-fold{f}.json").write_text("{}")
    (test / f"rep{rep_saved}-fold{folds_saved}.json").write_text("{}")


def test_a_stopped_extension_is_expected_to_take_only_what_its_run_directory_lacks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A run stopped part-way (a backstop, a session's end) resumes from its run directory, so its
    estimate leaves out the trials its study counts and the test folds it saved (the test stage's
    time in proportion); ``--until`` then starts a run that only its whole estimate did not fit."""
    clock = dt.datetime(2026, 12, 3, 23, 0, tzinfo=dt.timezone.utc)
    monkeypatch.setattr(rb, "now", lambda: clock)
    _, shorter, ran = _extendable_board(monkeypatch, tmp_path, 7)  # 7 of 20 trials
    results = tmp_path / "board"
    entry = rb.Entry("glyphs", "margin", 0)
    assert rb.extension_of(entry, {}, results).part_way is None  # no run directory yet
    earlier = parse_record(shorter)
    whole, _ = rb.extension_estimate_s(earlier, 20)
    test = shorter["timings_s"]["test"]
    per_trial = (whole - test) / 13
    run_dir = (
        tmp_path / "clone" / "runs" / "glyphs" / "mlrc" / run_dir_name(rb.target(entry, {}, results).identity)
    )
    run_dir.mkdir(parents=True)
    _stopped_run(run_dir, counted=20, rep_saved=1, folds_saved=2)
    done = rb.extension_of(entry, {}, results).part_way
    assert done == rb.PartWay(trials=20, folds=6, of_folds=16)
    seconds, basis = rb.extension_estimate_s(earlier, 20, None, done)
    assert seconds == pytest.approx(test * 10 / 16)
    assert basis == (
        f"0 more trial(s) × the median {per_trial / 60:.1f} min of its earlier record's 2 sampled "
        f"trials, + 10 of its 16 test-stage fold trainings at that record's pace, {test * 10 / 16 / 60:.0f} "
        "min; its run directory already holds 20 counted trial(s) and 6 of 16 test-stage fold trainings"
    )
    # Part-way through the search, with nothing of the test stage saved yet: the extra trials left
    # and the whole test stage.
    shutil.rmtree(run_dir)
    run_dir.mkdir()
    _stopped_run(run_dir, counted=15, rep_saved=0, folds_saved=0)
    part = rb.extension_of(entry, {}, results).part_way
    assert part == rb.PartWay(trials=15, folds=0, of_folds=16)
    seconds, basis = rb.extension_estimate_s(earlier, 20, None, part)
    assert seconds == pytest.approx(5 * per_trial + test)
    assert basis.startswith("5 more trial(s) × ") and ", + that record's test stage, " in basis
    # --until: a window shorter than the whole extension but longer than what is left starts it.
    until = (clock + dt.timedelta(seconds=seconds + 60)).isoformat()
    assert seconds + 60 < whole
    args = ["--datasets", "glyphs", "--losses", "margin", "--results", str(results), "--extend-earlier"]
    assert rb.main(["run", *args, "--until", until]) == 0
    assert [cmd[cmd.index("--loss") + 1] for cmd in ran] == ["margin"]
    assert rb.main(["status", *args[:-1]]) == 0
    assert f"--extend-earlier ≈ {seconds / 60:.0f} min: {basis}" in capsys.readouterr().out
