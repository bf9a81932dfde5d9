"""Regenerate the committed MLRC ``mini`` boards loss by loss, resumably, from a clean clone.

A change of the ``mini`` budget (or of its trunk weights) changes every record's board settings
(:func:`benchmark.records.board_settings`); a leaderboard then shows the records made before it
in an "earlier settings" section until every loss has been rerun. On a 2-core machine that is
tens of CPU-hours, so it spans many sessions. This script says which records are still at
earlier settings and reruns them one at a time:

    python benchmarks/regenerate_boards.py status [--datasets glyphs,omniglot]   # with a time estimate
    python benchmarks/regenerate_boards.py run [--datasets ...] [--losses ...] [--limit N] [--until 01:40]
    python benchmarks/regenerate_boards.py run --extend-earlier   # where mini only adds trials
    python benchmarks/regenerate_boards.py adopt --from results/sensitivity/calibp10 [--datasets ...]

**The plan** of a dataset is every built-in loss (the loss registry, no plugin) at search seed 0,
then each further search seed that a committed record of that loss has (the multi-seed rows of
the claims issue), so a regenerated board keeps its replicate rows. Seed-0 runs come first, so a
partly regenerated board has a ranking of every loss before it gains replicates.

**Current** means: the committed record ``results/<dataset>/mlrc/records/<loss>.mini.seed<S>.json``
exists and its board settings equal those a run of this checkout would record (its config
resolved by the same preflight ``dmlbench run`` uses, with the trunk weights' checksum), compared
by :func:`benchmark.records.settings_key`, and its ``search`` ranges and fixed parameters equal
those the run would search (:func:`benchmark.protocol.space.search_document`: a loss's default
ranges are code, which board settings leave out). Nothing is timed or trained to decide it.

``run`` refuses a checkout with uncommitted changes to tracked source files (the boards come from
clean clones; ``--allow-dirty`` for trials). What runs write under ``results/`` does not count, so
a clone that has landed records resumes at the same code identity its run directories hold. It
takes the machine's heavy-work lock around each run (one heavy job at a time;
``DMLBENCH_HEAVY_LOCK`` names the lock file), and writes each record where the board reads it.
A run is ``dmlbench run`` itself, so an interrupted one resumes where it stopped on the next call.
Each run also rewrites the board's tables and plots in the clone from every record there, so as a
record lands, copy ``results/<dataset>/mlrc/`` (records, tables, plots) from the clone into main,
look at the plots, refresh the README excerpt (``python -m benchmark.report.readme``), rewrite the
calibration pages when the loss is one of the calibration check's six (``benchmarks/sensitivity.py``
reads its ``calibp10`` references from the boards) and commit.

``run --until TIME`` (UTC, ``HH:MM`` or ISO 8601) starts a record only if it is expected to land
by then: with ``--extend-earlier``, a run that extends an earlier record is expected to take that
record's median sampled-trial time for each extra trial plus its test stage's time, less what a
stopped run of it left in its run directory (the trials its study counts, the test folds saved);
any other run, the
median training time (search + test) of the same loss's current records on that dataset, else of
all the dataset's current records (every built-in loss's, whichever ``--losses`` selects to run),
counting only records searched from scratch (an extended record's timings cover its extra trials).
That must fit in the time left; a record that
does not fit is named with its estimate and skipped, and a later, shorter one may still start.
A record with nothing to estimate from is not started. Why: a run's unfinished state lives in the
clone's ``runs/``, which does not survive a change of machine, so a run started too late for the
session that started it is often lost whole (benchmarks/README.md counts four such losses). The
estimate is only that; stop a run that overruns with Ctrl-C or SIGTERM (it resumes on the same
machine). A script started with ``&`` from a non-interactive shell ignores SIGINT (the shell sets
it so, and Python then never raises KeyboardInterrupt), so stop a background run with SIGTERM.

``run --extend-earlier`` starts each search from the board's record at earlier settings where
today's settings differ from it only in more ``search.n_trials`` (and the search ranges are the
same): ``dmlbench run --extend-search`` with a copy of that record (under ``runs/``, since the run
replaces the board's file) and ``--resume-mixed-code``, so only the extra trials and the test stage
are trained, and the record says which record its first trials came from and that its folds mix
code versions. Any other record is searched from scratch, saying why.

``adopt --from DIR`` takes records another script already made at today's settings instead of
rerunning them: each planned record that the board lacks or holds at earlier settings is copied
from ``DIR/<dataset>/mlrc/records/`` (the same file name) when that record's board settings equal
what a run of this checkout would record, and each board it changed gets its tables and plots
rewritten from every record. The calibration check's ``calibp10`` records are such records
(``benchmarks/sensitivity.py``: ``calibp10`` is today's ``mini``), so the six losses it runs need
no second run. Records at other settings are named and left where they are. Then refresh the
README excerpt, look at the plots and commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from heavy_lock import run_heavy  # noqa: E402

from benchmark.analysis.provenance import uncommitted_code_files  # noqa: E402
from benchmark.config import config_to_dict  # noqa: E402
from benchmark.engine.host import cpu_model  # noqa: E402
from benchmark.errors import DmlbenchError  # noqa: E402
from benchmark.losses import LOSSES  # noqa: E402
from benchmark.models.pretrained import weights_record  # noqa: E402
from benchmark.protocol.extend_search import check_record_source, run_identity  # noqa: E402
from benchmark.protocol.request import RunRequest, preflight  # noqa: E402
from benchmark.protocol.run_files import JOURNAL, run_dir_name, saved_test_folds  # noqa: E402
from benchmark.protocol.space import search_document  # noqa: E402
from benchmark.records import (  # noqa: E402
    RunRecord,
    board_key,
    load_record,
    recorded_search,
    settings_key,
    settings_of,
)
from benchmark.search.study import counted_in_journal  # noqa: E402

PROTOCOL = "mlrc"
BUDGET = "mini"
DATASETS = ("glyphs", "omniglot")
#: Where a dataset's files lie when ``--data-dir`` does not say (the embedded glyphs need none).
DEFAULT_DATA_DIRS = {"omniglot": REPO.parent / "shared" / "data" / "omniglot"}


@dataclass(frozen=True)
class Entry:
    """One record of a board's plan."""

    dataset: str
    loss: str
    seed: int
    budget: str = BUDGET

    def path(self, results: Path) -> Path:
        return (
            results / self.dataset / PROTOCOL / "records" / f"{self.loss}.{self.budget}.seed{self.seed}.json"
        )


def builtin_losses() -> list[str]:
    """The loss registry's built-in names, in registration order (installed plugins left out)."""
    return [name for name in LOSSES.names() if LOSSES.source_of(name) is None]


def committed_seeds(results: Path, dataset: str, loss: str, budget: str = BUDGET) -> list[int]:
    """The search seeds of ``loss``'s committed ``budget`` records on ``dataset``."""
    folder = results / dataset / PROTOCOL / "records"
    seeds = []
    for path in folder.glob(f"{loss}.{budget}.seed*.json"):
        tail = path.name.removeprefix(f"{loss}.{budget}.seed").removesuffix(".json")
        if tail.isdigit():
            seeds.append(int(tail))
    return sorted(seeds)


def plan(results: Path, datasets: Sequence[str], losses: Sequence[str], budget: str = BUDGET) -> list[Entry]:
    """Seed 0 of every loss on every dataset first, then the committed further seeds."""
    first = [Entry(d, loss, 0, budget) for d in datasets for loss in losses]
    more = [
        Entry(d, loss, s, budget)
        for d in datasets
        for loss in losses
        for s in committed_seeds(results, d, loss, budget)
        if s != 0
    ]
    return first + more


def request(entry: Entry, data_dirs: dict[str, Path], results: Path) -> RunRequest:
    data_dir = data_dirs.get(entry.dataset)
    return RunRequest(
        loss=entry.loss,
        protocol=PROTOCOL,
        dataset=entry.dataset,
        data_dir=None if data_dir is None else str(data_dir),
        budget=entry.budget,
        seed=entry.seed,
        results_dir=results,
        out=REPO / "runs",
    )


@dataclass(frozen=True)
class Target:
    """What a run of an entry by this checkout would record, as far as a board tells runs apart."""

    key: str
    """Its board-settings key (:func:`benchmark.records.board_key`)."""
    search: dict[str, Any]
    """Its ``search`` ranges and fixed parameters (``{"space", "fixed"}``): a loss's default ranges
    are code, not config, so the key cannot tell a record made before a range changed."""
    identity: dict[str, Any]
    """Its run directory's identity (``run.json``), which ``--extend-search`` compares."""


def target(entry: Entry, data_dirs: dict[str, Path], results: Path) -> Target:
    """What a run of ``entry`` by this checkout would record (one preflight, no compute)."""
    config = preflight(request(entry, data_dirs, results))
    model = config.model
    trunk = weights_record(model.trunk, model.pretrained, model.trunk_weights)
    key = settings_key(settings_of(config_to_dict(config), trunk))
    identity = run_identity(PROTOCOL, entry.loss, entry.budget, entry.seed, config_to_dict(config))
    return Target(key, search_document(config, entry.loss), identity)


def holds(path: Path, todays: Target) -> bool:
    """Whether ``path`` is a record made at the board settings and search ranges of ``todays``."""
    if not path.exists():
        return False
    record = load_record(path)
    return board_key(record) == todays.key and recorded_search(record.document) == todays.search


def is_current(entry: Entry, data_dirs: dict[str, Path], results: Path) -> bool:
    """Whether the board already holds ``entry`` at this checkout's board settings and ranges."""
    return holds(entry.path(results), target(entry, data_dirs, results))


def run_command(entry: Entry, data_dirs: dict[str, Path], results: Path) -> list[str]:
    """The ``dmlbench run`` command of one planned record (records into ``results``)."""
    cmd = [sys.executable, "-m", "benchmark.cli.main", "run", "--protocol", PROTOCOL, "--loss", entry.loss]
    cmd += ["--dataset", entry.dataset, "--budget", entry.budget, "--seed", str(entry.seed)]
    if entry.dataset in data_dirs:
        cmd += ["--data-dir", str(data_dirs[entry.dataset])]
    return [*cmd, "--results-dir", str(results), "--out", str(REPO / "runs"), "--quiet"]


def extension_refusal(path: Path, todays: Target) -> str | None:
    """Why the board's record ``path`` cannot be the first trials of today's run (None: it can):
    what ``--extend-search`` would refuse (``check_record_source``), asked before the run starts so
    that a refused record means a search from scratch rather than a failed run."""
    if not path.exists():
        return "no earlier record"
    try:
        check_record_source(path, todays.identity)
    except DmlbenchError as exc:
        return str(exc)
    return None


def earlier_copy(entry: Entry) -> Path:
    """Where ``run --extend-earlier`` keeps the earlier record a run extends: the run replaces the
    board's file when it lands, and the run directory names its source by path (and sha256)."""
    return REPO / "runs" / entry.dataset / PROTOCOL / "earlier-records" / entry.path(Path()).name


@dataclass(frozen=True)
class PartWay:
    """What a stopped run left in its run directory, which the next run of it reuses."""

    trials: int
    """Trials counted in its study (an extension's include those of the record it extends)."""
    folds: int
    """Test-stage fold trainings saved."""
    of_folds: int
    """Test-stage fold trainings in all (``test.reps`` × ``protocol.n_folds``)."""


def part_way(entry: Entry, todays: Target) -> PartWay | None:
    """What the run directory of ``entry``'s run by this checkout holds (None: there is none);
    read as the run reads it on resuming, without opening the run."""
    run_dir = REPO / "runs" / entry.dataset / PROTOCOL / run_dir_name(todays.identity)
    if not run_dir.exists():
        return None
    config = todays.identity["config"]
    reps, n_folds = int(config["test"]["reps"]), int(config["protocol"]["n_folds"])
    saved = saved_test_folds(run_dir, reps, n_folds)
    return PartWay(counted_in_journal(run_dir / JOURNAL), saved, reps * n_folds)


@dataclass(frozen=True)
class Extension:
    """What ``run --extend-earlier`` decided for one entry, before anything runs."""

    earlier: RunRecord | None
    """The board's record whose trials the run's search starts from; None: it searches from scratch."""
    n_trials: int
    """Today's trial count (``search.n_trials`` of a run of this checkout)."""
    why: str
    """Why it searches from scratch (empty where it extends)."""
    part_way: PartWay | None = None
    """What a stopped run of the extension left (None: no run directory yet)."""


def extension_of(entry: Entry, data_dirs: dict[str, Path], results: Path) -> Extension:
    """Whether ``entry``'s run can start from the board's record of it (one preflight, no compute)."""
    board_file = entry.path(results)
    todays = target(entry, data_dirs, results)
    n_trials = int(todays.identity["config"]["search"]["n_trials"])
    why = extension_refusal(board_file, todays)
    if why is not None:
        return Extension(None, n_trials, why)
    return Extension(load_record(board_file), n_trials, "", part_way(entry, todays))


def extension_args(entry: Entry, results: Path, extension: Extension) -> tuple[list[str], str]:
    """``run --extend-earlier``: the options that start ``entry``'s search from the board's earlier
    record of it, and what was decided (an empty list: it searches from scratch, and why)."""
    if extension.earlier is None:
        return [], f"searching from scratch ({extension.why})"
    copy = earlier_copy(entry)
    if not copy.exists():  # an interrupted run keeps the copy its run directory was seeded from
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(entry.path(results), copy)
    # The earlier record's trials were trained by earlier code: the new record says it mixes code.
    return ["--extend-search", str(copy), "--resume-mixed-code"], f"extending its earlier record ({copy})"


def dirty_files() -> list[str]:
    """Tracked source files with uncommitted changes in this checkout.

    What runs write under ``results/`` does not count, as for a record's code identity: a clone
    that has landed records keeps regenerating at the same code (see
    :func:`benchmark.analysis.provenance.uncommitted_code_files`).
    """
    return uncommitted_code_files(REPO)


def parse_data_dirs(values: Sequence[str]) -> dict[str, Path]:
    dirs = {name: path for name, path in DEFAULT_DATA_DIRS.items() if path.is_dir()}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"--data-dir takes DATASET=PATH, got {value!r}.")
        dirs[name] = Path(path)
    return dirs


def from_scratch_wall_s(record: RunRecord) -> float | None:
    """The record's training time (search + test, :meth:`RunRecord.training_wall_s`) where it
    estimates a search from scratch; None for a record whose search started from an earlier run's
    trials (:attr:`RunRecord.search_extended`), whose timings cover only its extra trials: glyphs'
    board at 20 trials held ten such records, whose median was about half a full search's."""
    return None if record.search_extended else record.training_wall_s()


def from_scratch_hours(current: Sequence[RunRecord]) -> list[tuple[RunRecord, float]]:
    """The current records that estimate a search from scratch, each with its training time in
    hours (:func:`from_scratch_wall_s`); both time-left lines take their median from these."""
    return [(r, t / 3600) for r in current if (t := from_scratch_wall_s(r)) is not None]


def time_left(current: Sequence[RunRecord], n_left: int) -> str | None:
    """An estimate of the wall time the ``n_left`` runs still to make take when each searches from
    scratch: ``n_left`` times the median training time (:func:`from_scratch_hours`) of the
    dataset's current records, with their range, CPU kinds and jobs so a reader can judge it. None
    with nothing left or no current record searched from scratch with both timings.

    Only an estimate: a record's time includes any time it ran beside other work, and the losses
    left may train longer or shorter than those landed."""
    timed = from_scratch_hours(current)
    if not timed or n_left <= 0:
        return None
    hours = [h for _, h in timed]
    kinds = sorted({r.recorded_text("environment", "cpu_capability") for r, _ in timed})
    jobs = sorted({r.recorded_text("execution", "jobs") for r, _ in timed})
    median = statistics.median(hours)
    # A median of few records is as fast or slow as their losses: name them so a reader can judge.
    few = f"{', '.join(f'{r.loss} seed {r.seed}' for r, _ in timed)}; " if len(timed) <= 3 else ""
    return (
        f"time left ≈ {n_left} × {median:.1f} h ≈ {n_left * median:.0f} h of wall time searching each "
        f"from scratch: the median training time of the {len(hours)} current record(s) searched from "
        f"scratch ({few}range {min(hours):.1f}–{max(hours):.1f} h; CPU kinds {', '.join(kinds)}; jobs "
        f"{', '.join(jobs)}); an estimate, longer where those records ran beside other work"
    )


def time_left_extending(
    current: Sequence[RunRecord], extensions: Sequence[float | None], n_untimed: int = 0
) -> str | None:
    """The time left with ``--extend-earlier``: the sum of the per-record estimates of the runs it
    would extend (``extensions``: seconds, :func:`extension_estimate_s`; None for a run it would
    search from scratch), plus the from-scratch median of :func:`time_left` for each of the others
    and for each of the ``n_untimed`` runs it would extend from an earlier record that lacks the
    trial timings to estimate them from (each counted at that median too, but named as an extension).
    Where the extensions alone come to more than as many searches from scratch at that median, the
    line says the two bases disagree. None where no run would extend an earlier record
    (:func:`time_left` says it all)."""
    extended = [s for s in extensions if s is not None]
    if not extended and not n_untimed:
        return None
    n_scratch = len(extensions) - len(extended)
    others = n_scratch + n_untimed
    verbs = " or ".join(
        verb
        for n, verb in (
            (n_scratch, "search from scratch"),
            (n_untimed, "extend from an earlier record without trial timings"),
        )
        if n
    )
    hours = sum(extended) / 3600
    walls = [h for _, h in from_scratch_hours(current)]
    # An extension trains fewer trials than the search from scratch it stands for, so a sum above
    # those searches' median means the two bases disagree (glyphs' status on 2026-12-07: 8
    # extensions ≈ 17 h against 8 × 0.9 h from one current record): say so rather than print two
    # totals a reader would compare.
    off = ""
    if walls and extended and hours > len(extended) * statistics.median(walls):
        off = (
            f"; more than searching those {len(extended)} from scratch at the median above "
            f"({len(extended) * statistics.median(walls):.0f} h), though an extension trains fewer "
            "trials: the two rest on different records, so at least one of them is off"
        )
    if not others:
        total, rest = f"≈ {hours:.0f} h", ""
    elif walls:
        median = statistics.median(walls)
        total = f"≈ {hours + others * median:.0f} h"
        rest = f" ({hours:.0f} h) + {others} × {median:.1f} h for those it would {verbs}"
    else:
        total = f"≥ {hours:.0f} h"
        rest = f", + {others} run(s) it would {verbs}, with nothing to estimate them from"
    return (
        f"time left with --extend-earlier {total}: the sum of the {len(extended)} estimate(s) "
        f"above{rest}; each rests on its earlier record's trial times (benchmarks/README.md compares runs)"
        f"{off}"
    )


def now() -> dt.datetime:
    """The current time, UTC (a function so tests can set the clock)."""
    return dt.datetime.now(dt.timezone.utc)


def parse_until(value: str, at: dt.datetime) -> dt.datetime:
    """``--until``: ``HH:MM`` is that UTC time nearest to ``at`` within 12 hours either way (so
    ``01:40`` typed at 23:30 is the next day's, and ``15:50`` read at 15:55 is five minutes ago:
    nothing starts; one exactly 12 hours away is the coming one); otherwise an ISO 8601 time, UTC
    unless it names its offset.

    Why not simply the next such time: a chain of runs that all say ``--until 15:50`` would give
    a run that starts at 15:55 a whole day (a SoftTriple extension started so on 2026-12-07)."""
    try:
        clock = dt.time.fromisoformat(value)
    except ValueError:
        clock = None
    if clock is not None and len(value) <= 8:
        when = dt.datetime.combine(at.date(), clock.replace(tzinfo=dt.timezone.utc))
        # The day that puts it in (at - 12 h, at + 12 h]: a time exactly 12 hours away either way
        # is the coming one, whichever side of noon ``at`` is.
        half = dt.timedelta(hours=12)
        return when + dt.timedelta(days=(at - when - half) // dt.timedelta(days=1) + 1)
    try:
        when = dt.datetime.fromisoformat(value)
    except ValueError:
        raise SystemExit(f"--until takes HH:MM (UTC) or an ISO 8601 time, got {value!r}.") from None
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)


def extension_estimate_s(
    earlier: RunRecord, n_trials: int, host: str | None = None, done: PartWay | None = None
) -> tuple[float, str] | None:
    """How long extending ``earlier``'s search to ``n_trials`` trials is expected to take, in
    seconds, and from what: the trials still to run times the median wall time of its completed
    sampled trials (the extra trials are all sampled ones), plus its test stage's time (the test
    stage is retrained whole). None where the record lacks either timing.

    Why not the board's median: an extension trains only the extra trials and the test stage, at
    the settings the earlier record was trained at but for the trial count, and one loss's sampled
    trials cost several times another's (medians 4.8 to 18.4 min in glyphs' 10-trial records). It
    errs either way: long where the earlier record was trained by slower code or a slower machine
    (glyphs' first ten extensions took 0.29 to 0.91 of it), short where the extra trials cost
    more than the five sampled ones it takes its median from (omniglot's NT-Xent
    1.19, MeanFieldContrastive 1.36, ClassWiseMultiSimilarity 1.44, CosFace seed 1 2.6 (its extra
    trials' median 3.8 min against 1.4, its earlier record from another host); glyphs' MPA-AP 1.38,
    its extra trials' median 7.8 min against 4.8; benchmarks/README.md). With ``done`` (what a
    stopped run of the extension left) the trials it counts and the test-stage folds it saved are
    not counted again: the test stage's time is taken in proportion to the folds left. With
    ``host`` (this machine's CPU model) the basis names an earlier record trained on another CPU
    model: the estimate does not scale for it, as no two hosts' speeds have been measured apart
    from their code and load."""
    search = earlier.search
    test = earlier.timings_s.get("test")
    if search is None or test is None:
        return None
    # Sampled trials run one at a time, so each one's wall_s is its own cost. The quasi-random
    # start's trials ("sobol") share one pool and each wall_s runs from the pool's start, so theirs
    # overstate a trial's cost (ArcFace's five on glyphs: 17 to 46 min each, the pool 46 min in all).
    walls = [
        w
        for t in search["trials"]
        if t["state"] == "COMPLETE" and t["origin"] != "sobol" and (w := t["wall_s"]) is not None
    ]
    if not walls:
        return None
    have = len(search["trials"]) if done is None else max(len(search["trials"]), done.trials)
    more = max(n_trials - have, 0)
    per_trial = statistics.median(walls)
    if done is None or done.folds == 0:
        test_s, test_basis = test, f"that record's test stage, {test / 60:.0f} min"
    else:
        left = done.of_folds - done.folds
        test_s = test * left / done.of_folds
        test_basis = (
            f"{left} of its {done.of_folds} test-stage fold trainings at that record's pace, "
            f"{test_s / 60:.0f} min"
        )
    basis = (
        f"{more} more trial(s) × the median {per_trial / 60:.1f} min of its earlier record's "
        f"{len(walls)} sampled trials, + {test_basis}"
    )
    if done is not None:
        basis += (
            f"; its run directory already holds {done.trials} counted trial(s) and {done.folds} of "
            f"{done.of_folds} test-stage fold trainings"
        )
    there = earlier.parsed["environment"].get("cpu_model")
    if host is not None and there is not None and there != host:
        basis += f"; that record ran on {there}, this machine is {host}"
    return more * per_trial + test_s, basis


def estimate_s(
    entry: Entry, current: dict[Entry, RunRecord], extension: Extension | None = None
) -> tuple[float, str] | None:
    """How long ``entry``'s run is expected to take, in seconds, and from what: for a run that
    extends an earlier record, :func:`extension_estimate_s`; else the median training time of the
    same loss's current records on its dataset, else of all the dataset's current records (those
    searched from scratch: :func:`from_scratch_wall_s`), as for a whole search where the earlier
    record it extends lacks the trial timings (the basis says so); None with none of these."""
    untimed = ""
    if extension is not None and extension.earlier is not None:
        extended = extension_estimate_s(
            extension.earlier, extension.n_trials, cpu_model(), extension.part_way
        )
        if extended is not None:
            return extended
        untimed = "; the earlier record it extends lacks the trial timings to estimate from"
    timed = {
        e: t
        for e, r in current.items()
        if e.dataset == entry.dataset and (t := from_scratch_wall_s(r)) is not None
    }
    same = [t for e, t in timed.items() if e.loss == entry.loss]
    if same:
        return statistics.median(same), f"median of {entry.loss}'s {len(same)} current record(s){untimed}"
    if timed:
        basis = f"median of {len(timed)} current {entry.dataset} record(s){untimed}"
        return statistics.median(timed.values()), basis
    return None


def current_records(
    entries: Sequence[Entry], data_dirs: dict[str, Path], results: Path
) -> dict[Entry, RunRecord]:
    """The planned records the board already holds at this checkout's settings."""
    return {e: load_record(e.path(results)) for e in entries if is_current(e, data_dirs, results)}


def fits(
    entry: Entry, current: dict[Entry, RunRecord], until: dt.datetime, extension: Extension | None = None
) -> str | None:
    """Why ``entry`` should not start before ``until`` (None: it is expected to land in time)."""
    left = (until - now()).total_seconds()
    estimate = estimate_s(entry, current, extension)
    if estimate is None:
        return "no current record to estimate its time from (run it without --until)"
    seconds, basis = estimate
    if seconds > left:
        return f"expected {seconds / 60:.0f} min ({basis}), {max(left, 0) / 60:.0f} min left before --until"
    return None


def board_current(args: argparse.Namespace) -> dict[Entry, RunRecord]:
    """The current records of every built-in loss on the selected datasets, not only the selected
    losses': the time estimates draw on the whole board, so ``--losses`` names what runs, not what
    the estimate may learn from."""
    every = plan(args.results, args.datasets, builtin_losses(), args.budget)
    return current_records(every, args.data_dirs, args.results)


def status_extension(entry: Entry, args: argparse.Namespace) -> tuple[bool, tuple[float, str] | None]:
    """Whether ``run --extend-earlier`` would extend an earlier record for ``entry``, and the
    estimate ``--until`` would use for it (seconds and basis; None where it searches from scratch
    or the earlier record lacks the timings)."""
    ext = extension_of(entry, args.data_dirs, args.results)
    if ext.earlier is None:
        return False, None
    return True, extension_estimate_s(ext.earlier, ext.n_trials, cpu_model(), ext.part_way)


def cmd_status(args: argparse.Namespace) -> int:
    entries = plan(args.results, args.datasets, args.losses, args.budget)
    current = board_current(args)
    for d in args.datasets:
        mine = [e for e in entries if e.dataset == d]
        left = [e for e in mine if e not in current]
        print(
            f"{d}: {len(mine) - len(left)} of {len(mine)} {args.budget} records"
            " at this checkout's board settings"
        )
        extensions: list[float | None] = []
        n_untimed = 0
        for e in left:
            state = "at earlier settings" if e.path(args.results).exists() else "missing"
            extends, ext = status_extension(e, args)
            if ext is not None:
                note = f"; --extend-earlier ≈ {ext[0] / 60:.0f} min: {ext[1]}"
                extensions.append(ext[0])
            elif extends:
                note = "; --extend-earlier extends it, but its trial timings are missing: no estimate"
                n_untimed += 1
            else:
                note = ""
                extensions.append(None)
            print(f"  to run: {e.loss} seed {e.seed} ({state}{note})")
        mine_current = [r for e, r in current.items() if e.dataset == d]
        lines = (time_left(mine_current, len(left)), time_left_extending(mine_current, extensions, n_untimed))
        for estimate in lines:
            if estimate:
                print(f"  {estimate}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    dirty = dirty_files()
    if dirty and not args.allow_dirty:
        print(
            f"The checkout has uncommitted changes to {len(dirty)} tracked source file(s) "
            f"({', '.join(dirty[:5])}); "
            "boards are regenerated from clean clones (--allow-dirty to run anyway).",
            file=sys.stderr,
        )
        return 2
    done = 0
    entries = plan(args.results, args.datasets, args.losses, args.budget)
    current = board_current(args)
    for entry in entries:
        if args.limit is not None and done >= args.limit:
            break
        if entry in current:
            continue
        label = f"{entry.dataset} {entry.loss} seed {entry.seed}"
        extension = extension_of(entry, args.data_dirs, args.results) if args.extend_earlier else None
        if args.until is not None and (why := fits(entry, current, args.until, extension)) is not None:
            print(f"not started: {label}: {why}", flush=True)
            continue
        cmd = run_command(entry, args.data_dirs, args.results)
        if extension is not None:
            extra, decided = extension_args(entry, args.results, extension)
            print(f"{label}: {decided}", flush=True)
            cmd += extra
        code = run_heavy(label, cmd, REPO)
        if code != 0:
            return code
        print(f"landed: {entry.path(args.results)} (commit it)", flush=True)
        if entry.path(args.results).exists():
            current[entry] = load_record(entry.path(args.results))
        done += 1
    return 0


def cmd_adopt(args: argparse.Namespace) -> int:
    changed: list[str] = []
    for entry in plan(args.results, args.datasets, args.losses, args.budget):
        source, board_file = entry.path(args.source), entry.path(args.results)
        if not source.exists():
            continue
        # One preflight per entry: what the board holds and what the source offers are both
        # compared with it.
        todays = target(entry, args.data_dirs, args.results)
        if holds(board_file, todays):
            continue
        if not holds(source, todays):
            print(f"not adopted (other board settings or search ranges than this checkout's): {source}")
            continue
        board_file.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, board_file)
        print(f"adopted: {source} -> {board_file}")
        if entry.dataset not in changed:
            changed.append(entry.dataset)
    if changed:
        from benchmark.report.tables import refresh  # matplotlib only when a board changed

        for dataset in changed:
            refresh(args.results, dataset, PROTOCOL)
            print(f"{dataset}: tables and plots rewritten (look at the plots, commit)")
    return 0


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("status", "run", "adopt"):
        p = sub.add_parser(name)
        p.add_argument("--datasets", default=",".join(DATASETS))
        p.add_argument("--losses", default=None, help="comma-separated (default: every built-in loss)")
        p.add_argument("--data-dir", action="append", default=[], metavar="DATASET=PATH")
        p.add_argument("--results", type=Path, default=REPO / "results")
        p.add_argument("--budget", default=BUDGET, help="the boards' budget (default: mini)")
        if name == "run":
            p.add_argument("--limit", type=int, default=None, help="stop after this many runs")
            p.add_argument("--allow-dirty", action="store_true")
            p.add_argument(
                "--extend-earlier",
                action="store_true",
                help="start each search from the board's record at earlier settings where those "
                "differ only in fewer trials (dmlbench run --extend-search; the record then mixes "
                "code versions)",
            )
            p.add_argument(
                "--until",
                default=None,
                metavar="TIME",
                help=(
                    "start only records expected to land by this UTC time (ISO 8601, or HH:MM: the "
                    "nearest such time within 12 h, so a passed one starts nothing)"
                ),
            )
        if name == "adopt":
            p.add_argument(
                "--from", dest="source", type=Path, required=True, help="a results folder of the same layout"
            )
    args = parser.parse_args(argv)
    args.datasets = [d for d in args.datasets.split(",") if d]
    valid = builtin_losses()
    args.losses = valid if args.losses is None else [loss for loss in args.losses.split(",") if loss]
    unknown = sorted(set(args.losses) - set(valid))
    if unknown:
        parser.error(f"--losses: {', '.join(unknown)} are not built-in losses; valid: {', '.join(valid)}")
    args.data_dirs = parse_data_dirs(args.data_dir)
    if getattr(args, "until", None) is not None:
        args.until = parse_until(args.until, now())
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    commands = {"status": cmd_status, "run": cmd_run, "adopt": cmd_adopt}
    return commands[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
