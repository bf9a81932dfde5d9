"""How much the ``mini`` budget's own settings move the omniglot board (docs/sensitivity.md).

MLRC's headline is that class/proxy losses beat pair-based ones by about one MAP@R point; on the
``mini`` boards the gap is several points. Part of that may be ``mini``'s short patience, its few
trials and its dense validation. This script reruns the MLRC protocol at ``mini`` with one setting
changed at a time and compares each loss's test MAP@R with its earlier ``mini`` row (see below):

* ``patience5``: ``train.patience = 5`` (MLRC's CUB patience; ``mini`` has 2);
* ``trials25``: ``search.n_trials = 25`` (``mini`` has 10);
* ``eval100``: ``train.eval_every = 2``, validation every 100 iterations instead of 50 (the
  patience, counted in validations, then also spans twice the iterations, as in MLRC's schedules);
* ``double``: patience 4 and 20 trials, the "budget-insensitive" check of the current ``mini``
  (not run: the patience surveys already show the current ``mini`` is not budget-insensitive, and
  ``calib2x`` against ``calib`` is the check that matters);
* ``calib``: the first candidate calibrated ``mini`` (docs/calibration-patience5.md): MLRC's own
  CUB stopping schedule in iterations (100-iteration epochs, validation every 2 epochs = 200
  iterations, patience 5 = stop 1000 iterations after the best), with ``max_epochs`` 300 as a cap
  far above the stops the long-patience surveys saw (``results/sensitivity/saturation``: up to 177
  epochs of 50 iterations on glyphs),
  the trunk pretrained on the look-alike-filtered symbols (``builtin:smallcnn-symbols-v3``,
  issue 30), which the regenerated boards will use, and ranges spanning two orders of magnitude
  searched on a log scale (``search.log_wide_ranges``: at 10 trials a linear [0.01, 200] put one
  point below 10). The calib and calib2x records of contrastive, triplet and margin were made at
  76d510c, before that key existed; none of their ranges is that wide, so it leaves their searches
  unchanged (tests/test_mlrc_search_ranges.py checks the rule over every loss);
* ``calib2x``: ``calib`` with patience and trials doubled (10, 20 trials): its check is
  ``table --variants calib2x --against calib``;
* ``calibp10``: ``calib`` with patience 10 and its 10 trials: patience alone against ``calib``
  (``table --variants calibp10 --against calib``), where the glyphs stopping survey saw patience 5
  cut every fold of margin and contrastive. Patience 5 failed that check on glyphs margin
  (docs/calibration-patience5.md), and ``calibp10`` was ``mini`` until ``mini`` took 20 trials
  (its omniglot references were the board records of then; they are copied under
  ``results/sensitivity/calibp10/`` so that the boards' regeneration leaves its pages as they
  are); its doubled check is ``calibp10x2`` (patience 20,
  20 trials): ``table --variants calibp10x2 --against calibp10`` (docs/calibration.md, with the
  replay of its test folds at patience 10 and the folds its 300-epoch cap ended, ``‡``).
* ``calibt20``: ``calibp10`` with 20 trials, the candidate ``mini`` where margin's 10-trial
  searches sometimes fail (docs/concepts/budgets.md: more trials for every loss alike is the
  remedy that cannot tilt the ranking); its doubled check is ``calibt20x2`` (patience 20,
  40 trials): ``table --variants calibt20x2 --against calibt20``. ``table --variants calibt20
  --against calibp10`` is trials alone at today's patience (docs/calibration-trials20.md). The
  samplers do not see the trial count, so a ``calibt20`` record's first 10 trials are a 10-trial
  search on its host: on the board's host they equal the board record's (benchmarks/README.md).
  Every loss of the study passed that check, so ``calibt20`` is today's ``mini``.

**Spot checks.** ``run --losses`` also takes the losses of :data:`SPOT_CHECKS`, outside the study:
the many-parameter mean-field losses, whose glyphs board searches at today's ``mini`` both chose
their last trial. ``run --dataset glyphs --variants calibt20x2 --losses mfcwms`` is the doubled
check of one of them; its reference is the glyphs board record (``calibt20`` has no glyphs records
of its own, so the board's at today's settings count: :func:`board_paths`). A table gives such a
loss a row below the six, on the six's seed-mean variance, and leaves it out of the family gap.

Usage (from the repository root of a clean clone; runs are resumable, one at a time, each taking
the heavy-work lock so nothing else heavy shares the cores)::

    python benchmarks/sensitivity.py run [--variants patience5,trials25] [--losses contrastive,...]
    python benchmarks/sensitivity.py table [--out docs/sensitivity.md]
    python benchmarks/sensitivity.py table --variants calib2x --against calib
    python benchmarks/sensitivity.py run --dataset glyphs --variants calib,calib2x --losses margin
    python benchmarks/sensitivity.py table --dataset glyphs --variants calib2x --against calib
    python benchmarks/sensitivity.py table --dataset omniglot,glyphs --variants calib2x --against calib \
        --out docs/calibration.md
    python benchmarks/sensitivity.py run --variants calibt20x2 --losses margin --seed 1 \
        --extend-from calibp10x2 --resume-mixed-code

``--extend-from SOURCE`` starts each search from SOURCE's run directory of the same loss and seed
(a variant, or ``board`` for the board's runs), or from its committed record where this checkout
has no run directory, whose settings differ only in fewer trials: only the extra trials are
trained (``dmlbench run --extend-search``).

``run`` writes each variant's records under ``results/sensitivity/<variant>/`` (search seed 0 only:
a variant costs 1-3x a ``mini`` run). A board record (``results/<dataset>/mlrc/records/``) made at
the board settings of a variant's own records on that dataset counts as that variant's record too
(:func:`board_paths`): ``calibt20``'s references come from the regenerated boards, and ``run``
skips them. So a board record of one of the six losses landing changes
docs/calibration-trials20.md and docs/calibration-trials20-check.md; rewrite both with the
command on their "Generated by" line.
``table`` compares them with the earlier ``mini`` rows
``results/sensitivity/mini-earlier/<dataset>/mlrc/records/<loss>.mini.seed*.json``: the board
records of the study's losses made at the ``mini`` of the study (50-iteration epochs, validation
after each, patience 2, ``builtin:smallcnn-symbols``), copied unchanged from
``results/<dataset>/mlrc/records/`` when ``mini`` was redefined, since regenerating the boards at
the new ``mini`` replaces those files. ``--dataset glyphs`` does the same on the embedded dataset
(the calibration check there: its long-patience survey showed the candidate's stop cutting every
fold of contrastive and margin); tau^2 then still comes from the omniglot rows, the only ones with
several seeds, and the table says so.

**Statistics.** The earlier ``mini`` row of a loss is the mean of its search seeds' means; a variant
has one search seed. The variance of a seed mean (tau^2: the search plus test-repetition noise,
``benchmark.stats.seeds``) is pooled over the baseline rows of the six losses, and the change
variant - baseline has variance tau^2 (1/S_variant + 1/S_baseline) on the pool's degrees of freedom;
when Bartlett's test rejects equal seed spreads across those rows (as the leaderboard does,
:func:`benchmark.stats.seeds.seed_variance`), each loss uses its own tau^2 on S - 1 degrees of
freedom instead (:class:`TauModel`) and the family gap Welch-Satterthwaite's. This assumes a
variant's seed-to-seed spread is that of ``mini`` (of the loss's ``mini`` row, when per loss); with
one variant seed it cannot be checked, and the table says so. The family gap is the mean of the
class/proxy losses' rows minus the mean of the pair-based rows, its variance summed the same way.
Each interval is 95% and uncorrected: it describes a change, it does not test one (tests over the
losses would be Holm-corrected over the table's cells). A cell whose records and reference records
were made in different environments (CPU kind or model, torch threads per fold: the leaderboard
footer's ``ROW_ENVIRONMENT``) is marked ``§`` with a footnote naming both sides: its change also
carries what that environment moves, which one seed per side cannot separate from the setting's.
Against a reference variant with at least two seeds per loss on omniglot (``calibp10``: the board's
records), each section also gives its cells with tau from that reference's own records, and names
the cells whose verdict the choice of seed spread decides (:func:`other_source_notes`); against one
where only some losses have two seeds (``calibt20``: margin), those losses' cells on their own. Each
check also pairs the records by search seed (:func:`paired_half`): records of one seed share its
quasi-random points (and, where only the trial count differs, on one host its first trials), so
they are not the independent samples the intervals above assume. The paired interval uses only
the shared seeds' differences, on n - 1 degrees of freedom: it borrows no seed spread from other
rows, and with few pairs it can be far wider than the pooled one (omniglot margin, calibt20).
"""

from __future__ import annotations

import argparse
import functools
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from heavy_lock import run_heavy  # noqa: E402

from benchmark.protocol.space import searches_as_today  # noqa: E402
from benchmark.records import RunRecord, TrialDoc, board_key, load_record  # noqa: E402
from benchmark.report.leaderboard import ROW_ENVIRONMENT  # noqa: E402
from benchmark.report.numbers import signed  # noqa: E402
from benchmark.stats.intervals import holm, t_interval  # noqa: E402
from benchmark.stats.seeds import (  # noqa: E402
    Difference,
    Estimate,
    OwnVariance,
    SeedVariance,
    contrast,
    difference,
    own_seed_variance,
    pooled_within_variance,
    seed_variance,
)


def calibrated(patience: int, *more: str) -> tuple[str, ...]:
    """The overrides of a variant on ``mini``'s calibrated schedule (100-iteration epochs,
    validation every 2, a 300-epoch cap, trunk v3, wide ranges on a log scale) at ``patience``,
    then ``more``."""
    return (
        "train.iters_per_epoch=100",
        "train.eval_every=2",
        f"train.patience={patience}",
        "train.max_epochs=300",
        "model.trunk_weights=builtin:smallcnn-symbols-v3",
        "search.log_wide_ranges=true",
        *more,
    )


#: Variant name -> the ``--set`` overrides it applies to ``mini``.
VARIANTS: dict[str, tuple[str, ...]] = {
    "patience5": ("train.patience=5",),
    "trials25": ("search.n_trials=25",),
    "eval100": ("train.eval_every=2",),
    "double": ("train.patience=4", "search.n_trials=20"),
    # mini had 10 trials when calib and calibp10 ran; said here so they stay what their records are.
    "calib": calibrated(5, "search.n_trials=10"),
    "calib2x": (
        "model.trunk_weights=builtin:smallcnn-symbols-v3",
        "search.log_wide_ranges=true",
        "train.iters_per_epoch=100",
        "train.eval_every=2",
        "train.patience=10",
        "train.max_epochs=300",
        "search.n_trials=20",
    ),
    "calibp10": calibrated(10, "search.n_trials=10"),
    "calibp10x2": calibrated(20, "search.n_trials=20"),
    # The candidate remedy for margin's failed 10-trial searches (docs/concepts/budgets.md): twice
    # the trials for every loss alike at today's patience, and its doubled check (patience 20,
    # 40 trials). MLRC ran 50 trials per loss.
    "calibt20": calibrated(10, "search.n_trials=20"),
    "calibt20x2": calibrated(20, "search.n_trials=40"),
}
#: The variant whose settings are today's ``mini`` (benchmark/budgets.py): the one whose references
#: include the board records (:func:`board_paths`). Named, not derived: older variants that override
#: few keys (``eval100``, ``calib2x``) set nothing ``mini`` does not either; a test holds it to ``mini``.
MINI_VARIANT = "calibt20"
#: The losses of the study and their family (the issue's pair-based vs class/proxy split).
FAMILIES: dict[str, str] = {
    "contrastive": "pair",
    "triplet": "pair",
    "ms": "pair",
    "margin": "pair",
    "arcface": "class/proxy",
    "proxyanchor": "class/proxy",
}
#: Losses outside the study that ``run --losses`` also takes, one check at a time: the
#: many-parameter mean-field losses, whose 20-trial glyphs board searches both chose their last
#: trial, so the six losses' pass says least about them. In a table they get rows below the six,
#: take the six's seed-mean variance (their own seed spread is not measured) and stay out of the
#: family gap; a spot-check loss with no record of any variant shown gets no row.
SPOT_CHECKS: dict[str, str] = {"mfcwms": "class/proxy", "mfcont": "class/proxy"}
#: Every loss a check may have records of: the study's, then the spot checks.
CHECKED: dict[str, str] = {**FAMILIES, **SPOT_CHECKS}
#: The study's dataset (the issue's); ``--dataset glyphs`` reruns the calibration check on the
#: embedded dataset, whose long-patience survey showed the candidate's stop cutting pair-based folds.
DATASETS = ("omniglot", "glyphs")
#: Where the seed-mean variance tau^2 is pooled: the only board with multi-seed ``mini`` rows of
#: the six losses. A glyphs table borrows it (and says so); its own rows have one seed each.
TAU_DATASET = "omniglot"
OUT_ROOT = REPO / "results" / "sensitivity"
#: The committed boards (``results/<dataset>/mlrc/records``), read by :func:`board_paths`.
BOARD_ROOT = REPO / "results"
MODES = (("separated", "separated (128-d)"), ("concatenated", "concatenated (512-d)"))
METRIC = "map_at_r"


#: The earlier ``mini``'s board records of the study's losses (see the module docstring).
EARLIER_MINI = "mini-earlier"


def mini_paths(dataset: str, loss: str) -> list[Path]:
    """The earlier ``mini`` records of ``loss`` on ``dataset`` (one per search seed)."""
    return own_paths(EARLIER_MINI, dataset, loss)


def run_command(variant: str, loss: str, dataset: str, data_dir: Path, seed: int) -> list[str]:
    """The ``dmlbench run`` command of one variant run (glyphs is embedded: no data folder)."""
    cmd = [sys.executable, "-m", "benchmark.cli.main", "run", "--protocol", "mlrc", "--loss", loss]
    cmd += ["--dataset", dataset]
    if dataset != "glyphs":
        cmd += ["--data-dir", str(data_dir)]
    cmd += ["--budget", "mini", "--seed", str(seed)]
    for override in VARIANTS[variant]:
        cmd += ["--set", override]
    cmd += ["--results-dir", str(OUT_ROOT / variant), "--out", str(run_root(variant))]
    return [*cmd, "--quiet"]


def run_root(variant: str) -> Path:
    """Where a variant's run directories are (``--out`` of its runs)."""
    return REPO / "runs" / "sensitivity" / variant


#: ``--extend-from``'s name for the board's own runs (benchmarks/regenerate_boards.py's ``--out``).
BOARD_RUNS = "board"


def shorter_search(source: str, loss: str, dataset: str, seed: int) -> Path | None:
    """The run directory of ``source``'s run (a variant, or :data:`BOARD_RUNS`) of ``loss`` and
    ``seed`` if this checkout has one, else its committed record if there is one (run directories
    are git-ignored and do not outlive the machine; ``--extend-search`` rebuilds the journal from
    the record)."""
    root = REPO / "runs" if source == BOARD_RUNS else run_root(source)
    found = sorted((root / dataset / "mlrc").glob(f"{loss}-mini-seed{seed}-*"))
    if len(found) > 1:
        raise SystemExit(f"{source}: several run directories of {loss} seed {seed}: {found}")
    if found:
        return found[0]
    record = (
        REPO / "results" / dataset / "mlrc" / "records" / f"{loss}.mini.seed{seed}.json"
        if source == BOARD_RUNS
        else record_path(source, dataset, loss, seed)
    )
    return record if record.is_file() else None


def record_path(variant: str, dataset: str, loss: str, seed: int) -> Path:
    return OUT_ROOT / variant / dataset / "mlrc" / "records" / f"{loss}.mini.seed{seed}.json"


def cmd_run(args: argparse.Namespace) -> int:
    for variant in args.variants:
        for loss in args.losses:
            label = f"{variant} {loss}" + ("" if args.dataset == "omniglot" else f" ({args.dataset})")
            if record_path(variant, args.dataset, loss, args.seed).exists():
                print(f"{label}: record exists, skipped", flush=True)
                continue
            board = [p for p in board_paths(variant, args.dataset, loss) if record_facts(p).seed == args.seed]
            if board:
                print(
                    f"{label}: the board's record is at this variant's settings ({board[0]}), skipped",
                    flush=True,
                )
                continue
            cmd = run_command(variant, loss, args.dataset, args.data_dir, args.seed)
            if args.extend_from is not None:
                # Same settings but fewer trials: its trials are this search's first ones (--extend-search).
                source = shorter_search(args.extend_from, loss, args.dataset, args.seed)
                if source is None:
                    print(
                        f"{label}: no {args.extend_from} run directory or record; searching from scratch",
                        flush=True,
                    )
                else:
                    print(f"{label}: extending {source}", flush=True)
                    cmd += ["--extend-search", str(source)]
            if args.resume_mixed_code:
                cmd += ["--resume-mixed-code"]
            code = run_heavy(label, cmd, REPO)
            if code != 0:
                return code
    return 0


def rep_values(record: RunRecord, mode: str) -> tuple[float, ...]:
    """The record's per-repetition test values of MAP@R in ``mode``."""
    return tuple(record.test["per_rep"][mode][METRIC])


@dataclass(frozen=True)
class Row:
    loss: str
    baseline: Estimate
    variants: dict[str, Estimate]


@dataclass(frozen=True)
class TauModel:
    """The seed-mean variance the cells use: pooled over the tau rows of the six losses, or, when
    Bartlett's test rejects equal spreads across them (:func:`benchmark.stats.seeds.seed_variance`),
    each loss's own on S - 1 df (a loss with one tau seed then borrows the pool)."""

    variance: SeedVariance
    #: Per loss with >= 2 tau seeds: its own tau^2 and df, and whether that is its training floor.
    own: dict[str, OwnVariance]

    def of(self, loss: str) -> tuple[float, int]:
        """The tau^2 and degrees of freedom of ``loss``'s cells."""
        if self.variance.pooled or loss not in self.own:
            return self.variance.tau2, self.variance.df
        return self.own[loss].tau2, self.own[loss].df

    def floored(self) -> list[str]:
        """The losses whose cells use their training floor (none while the rows pool)."""
        return [] if self.variance.pooled else [loss for loss, o in self.own.items() if o.floored]

    def header(self, borrowed: str, losses: Sequence[str] = tuple(FAMILIES)) -> str:
        """The section's line on the seed-mean variance of the rows of ``losses``."""
        v = self.variance
        if v.pooled:
            return (
                f"Pooled seed-mean variance: tau = {100 * math.sqrt(v.tau2):.2f} points on {v.df} degrees"
                f" of freedom{borrowed} ({v.test()}: equal seed spreads not rejected)."
            )
        floor = ", at the training floor"
        own = ", ".join(
            f"{loss} {100 * math.sqrt(o.tau2):.2f} ({o.df} df{floor if o.floored else ''})"
            for loss, o in self.own.items()
        )
        lone = [loss for loss in losses if loss not in self.own]
        lent = (
            f"; {', '.join(lone)} borrow the pool's {100 * math.sqrt(v.tau2):.2f} ({v.df} df)" if lone else ""
        )
        return (
            f"Seed-mean variance per loss{borrowed}: {v.describe()}; tau in points: {own}{lent}. "
            "A loss's change and the family gap's then use those on Welch-Satterthwaite degrees of freedom."
        )


def tau_model(mode: str, source: str | None = None) -> TauModel:
    """The :class:`TauModel` of ``mode`` from the earlier :data:`TAU_DATASET` ``mini`` rows, or
    from variant ``source``'s own :data:`TAU_DATASET` records."""
    groups = {
        loss: load_groups(
            mini_paths(TAU_DATASET, loss) if source is None else variant_paths(source, TAU_DATASET, loss),
            mode,
        )
        for loss in FAMILIES
    }
    own = {loss: v for loss, g in groups.items() if (v := own_seed_variance(g)) is not None}
    return TauModel(seed_variance(list(groups.values())), own)


def seed_estimate(groups: Sequence[Sequence[float]], tau2: float, df: int) -> Estimate:
    """Mean of seed means with variance tau2 / S on the pool's df (see the module docstring)."""
    means = [sum(g) / len(g) for g in groups]
    return Estimate(
        sum(means) / len(means),
        tau2 / len(means),
        float(df),
        len(means),
        sum(map(len, groups)),
        "search and training seeds",
        pooled=True,
    )


def load_groups(paths: Sequence[Path], mode: str) -> list[tuple[float, ...]]:
    return [rep_values(load_record(p), mode) for p in paths]


def fmt(value: float, half: float) -> str:
    return f"{signed(100 * value)} ± {100 * half:.2f}" if not math.isnan(half) else signed(100 * value)


def gap_weights(losses: Sequence[str]) -> dict[str, float]:
    """The family gap's weight per loss: 1/n for class/proxy, -1/n for pair-based losses."""
    n = {f: sum(1 for loss in losses if FAMILIES[loss] == f) for f in ("class/proxy", "pair")}
    return {loss: (1.0 if FAMILIES[loss] == "class/proxy" else -1.0) / n[FAMILIES[loss]] for loss in losses}


def gap(estimates: dict[str, Estimate], pooled: bool) -> Difference:
    """Mean of the class/proxy rows minus the mean of the pair rows: the :func:`contrast` of the
    rows, on the pool's df when they share the pooled tau^2, else Welch-Satterthwaite's."""
    w = gap_weights(list(estimates))
    return contrast([(w[loss], replace(e, pooled=pooled)) for loss, e in estimates.items()])


def gap_change(variant: dict[str, Estimate], base: dict[str, Estimate], pooled: bool) -> Difference:
    """The change of the family gap, variant − base: the contrast of the per-loss changes, each of
    variance tau_l^2 (1/S_variant + 1/S_base) on its loss's df (the two sides of a loss share its
    tau, so they are one term, not two independent ones)."""
    w = gap_weights(list(base))
    terms = [
        (
            w[loss],
            replace(
                e, mean=e.mean - base[loss].mean, var_mean=e.var_mean + base[loss].var_mean, pooled=pooled
            ),
        )
        for loss, e in variant.items()
    ]
    return contrast(terms)


def own_paths(variant: str, dataset: str, loss: str) -> list[Path]:
    """The records of ``loss`` on ``dataset`` that ``run`` wrote for ``variant`` (one per seed)."""
    return sorted((OUT_ROOT / variant / dataset / "mlrc" / "records").glob(f"{loss}.mini.seed*.json"))


def board_paths(variant: str, dataset: str, loss: str) -> list[Path]:
    """The board records of ``loss`` on ``dataset`` made at the board settings of ``variant``'s own
    records on that dataset (of any loss: the settings leave the loss out), for the seeds the
    variant has no record of, and at what ``run`` would search now: no ``--set loss.X`` or
    ``space.X`` (``run`` sets none) and today's ranges and fixed parameters for the loss
    (:func:`benchmark.protocol.space.searches_as_today`; the ranges are code, which the settings
    leave out). Only :data:`MINI_VARIANT`, the variant that is today's ``mini``, takes board
    records, so it takes its references from the regenerated boards instead of rerunning them;
    on a dataset where it has no record of its own, at the settings a run would use now
    (:func:`todays_key`).
    Another variant may share some board settings (``calib2x`` has ``calibt20``'s) but keeps its
    own records only: its pages then do not change as the boards are regenerated."""
    if variant != MINI_VARIANT:
        return []
    folder = OUT_ROOT / variant / dataset / "mlrc" / "records"
    keys = {record_facts(p).key for p in folder.glob("*.mini.seed*.json")}
    if not keys:
        # No record of its own on this dataset (glyphs, where only the boards ran today's mini):
        # its settings are today's mini (a test holds it so), the board settings a run would use now.
        keys = {todays_key(dataset, loss)}
    seeds = {record_facts(p).seed for p in own_paths(variant, dataset, loss)}
    board = sorted((BOARD_ROOT / dataset / "mlrc" / "records").glob(f"{loss}.mini.seed*.json"))
    return [
        p
        for p in board
        if (facts := record_facts(p)).seed not in seeds and facts.key in keys and facts.as_run_would
    ]


@functools.cache
def todays_key(dataset: str, loss: str) -> str:
    """The board key of a ``mini`` run of ``loss`` on ``dataset`` by this checkout (one preflight
    of ``benchmarks/regenerate_boards.py``, no compute; omniglot read from its default folder)."""
    from regenerate_boards import DEFAULT_DATA_DIRS, Entry, target

    return target(Entry(dataset, loss, 0), DEFAULT_DATA_DIRS, BOARD_ROOT).key


class RecordFacts(NamedTuple):
    """What :func:`board_paths` asks of a record."""

    key: str
    """Its board key (:func:`benchmark.records.board_key`)."""
    seed: int | None
    """Its search seed."""
    as_run_would: bool
    """Whether it has no loss parameter or range overrides and searched today's ranges."""


def record_facts(path: Path) -> RecordFacts:
    """:class:`RecordFacts` of the record at ``path``."""
    stat = path.stat()
    return _record_facts(path, stat.st_mtime_ns, stat.st_size)


@functools.cache
def _record_facts(path: Path, mtime_ns: int, size: int) -> RecordFacts:
    # A table asks for the same records' facts once per loss, mode and note: parse each file once
    # (the file's time stamp and size in the cache key, so a rewritten record is read again).
    record = load_record(path)
    config = record.document.get("config", {})
    plain = not config.get("loss") and not config.get("space")
    return RecordFacts(board_key(record), record.seed, plain and searches_as_today(record.document))


def variant_paths(variant: str, dataset: str, loss: str) -> list[Path]:
    """A variant's records of ``loss`` on ``dataset`` (one per search seed): its own, then the
    board's at its settings (:func:`board_paths`)."""
    return [*own_paths(variant, dataset, loss), *board_paths(variant, dataset, loss)]


def shown_losses(variants: Sequence[str], dataset: str) -> dict[str, str]:
    """A table's rows on ``dataset``, loss -> family: the study's six, then each spot check of which
    one of ``variants`` has a record there."""
    spot = {
        loss: family
        for loss, family in SPOT_CHECKS.items()
        if any(variant_paths(v, dataset, loss) for v in variants)
    }
    return {**FAMILIES, **spot}


def spot_check_note(losses: Sequence[str], tested: bool) -> list[str]:
    """The footnote of a table with spot-check rows (``losses``, outside the study); ``tested``:
    the table is a check, whose notes Holm-correct its tests over every row."""
    if not losses:
        return []
    holm_clause = " their tests count in the Holm correction below," if tested else ""
    return [
        "",
        f"Spot checks ({', '.join(losses)}): losses outside the study, each run alone at these settings."
        " Their cells take the six losses' seed-mean variance (their own seed spread is not measured),"
        f"{holm_clause} and the family gap leaves them out.",
    ]


def table(
    mode: str, label: str, variants: Sequence[str], against: str | None = None, dataset: str = "omniglot"
) -> list[str]:
    """The Markdown section of one evaluation mode on ``dataset``: each variant against the
    earlier ``mini`` rows, or against the variant ``against`` (the calibration check: a
    calibrated setting against its doubled patience and trials). tau^2 is pooled over the earlier
    :data:`TAU_DATASET` ``mini`` rows either way (:class:`TauModel`)."""
    tau = tau_model(mode)
    reference = "earlier mini (seeds)" if against is None else f"{against} (seeds)"
    rows = shown_losses(variants, dataset)
    base_paths = {
        loss: paths
        for loss in rows
        if (paths := mini_paths(dataset, loss) if against is None else variant_paths(against, dataset, loss))
    }
    base = {
        loss: seed_estimate(load_groups(paths, mode), *tau.of(loss)) for loss, paths in base_paths.items()
    }
    lines = [f"### {label}", ""]
    borrowed = "" if dataset == TAU_DATASET else f", borrowed from the {TAU_DATASET} rows"
    lines.append(tau.header(borrowed, list(rows)))
    lines.append("")
    head = f"| loss | family | {reference} | " + " | ".join(f"{v}: change" for v in variants) + " |"
    lines += [head, "|" + "---|" * (3 + len(variants))]
    var_est: dict[str, dict[str, Estimate]] = {v: {} for v in variants}
    p_values: dict[str, dict[str, float]] = {v: {} for v in variants}
    # Per cell, its 95% interval on this table's tau: the notes derive each pass's reach and verdict.
    intervals: dict[str, dict[str, tuple[float, float]]] = {v: {} for v in variants}
    # Cells whose records differ from the reference's in an environment setting, by difference.
    env_cells: dict[str, dict[str, list[str]]] = {}
    for loss, family in rows.items():
        family = family if loss in FAMILIES else f"{family} (spot check)"
        if loss not in base:
            lines.append(f"| {loss} | {family} | not run |" + " – |" * len(variants))
            continue
        cells = [loss, family, f"{100 * base[loss].mean:.2f} ({base[loss].n_seeds})"]
        for v in variants:
            paths = variant_paths(v, dataset, loss)
            if not paths:
                cells.append("not run")
                continue
            est = seed_estimate(load_groups(paths, mode), *tau.of(loss))
            var_est[v][loss] = est
            d = difference(est, base[loss])
            p_values[v][loss] = d.p
            lo, hi = d.interval()
            intervals[v][loss] = (lo, hi)
            capped = "" if not any(n for n, _ in capped_folds(paths).values()) else " ‡"
            differs = environment_difference(paths, base_paths[loss])
            if differs:
                env_cells.setdefault(differs, {}).setdefault(v, []).append(loss)
            cells.append(
                fmt(d.diff, (hi - lo) / 2)
                + ("" if lo > 0 or hi < 0 else " (0 inside)")
                + capped
                + (" §" if differs else "")
            )
        lines.append("| " + " | ".join(cells) + " |")
    # Notes only for the rows shown with a reference: a loss the reference lacks is "not run".
    cap_lines = cap_notes([*variants, *([] if against is None else [against])], dataset, list(base))
    cap_lines += environment_notes(env_cells, reference.split(" (")[0])
    cap_lines += spot_check_note([loss for loss in rows if loss not in FAMILIES], tested=against is not None)
    notes = (
        cap_lines
        if against is None
        else [
            *cap_lines,
            "",
            *check_notes(mode, variants, against, p_values, dataset, intervals, list(rows)),
            *other_source_notes(mode, variants, against, dataset, intervals),
        ]
    )
    # The family gap is the study's: the six losses' rows only.
    study = {loss: e for loss, e in base.items() if loss in FAMILIES}
    if set(study) != set(FAMILIES):
        return [*lines, "", "Family gap: the reference is incomplete.", *notes, ""]
    pooled = tau.variance.pooled
    base_gap = gap(study, pooled)
    lo, hi = base_gap.interval()
    cells = ["**family gap**", "class/proxy − pair", fmt(base_gap.diff, (hi - lo) / 2)]
    for v in variants:
        ours = {loss: e for loss, e in var_est[v].items() if loss in FAMILIES}
        if set(ours) != set(FAMILIES):
            cells.append("incomplete")
            continue
        d = gap_change(ours, study, pooled)
        lo, hi = d.interval()
        cells.append(f"{signed(100 * gap(ours, pooled).diff)} (change {fmt(d.diff, (hi - lo) / 2)})")
    lines += ["| " + " | ".join(cells) + " |", *notes, ""]
    return lines


def environment_difference(paths: Sequence[Path], reference_paths: Sequence[Path]) -> str:
    """The settings of :data:`ROW_ENVIRONMENT` (CPU kind and model, torch threads per fold) in which
    the records at ``paths`` differ from the reference's, with both sides' values; "" if none."""
    ours = [load_record(p) for p in paths]
    theirs = [load_record(p) for p in reference_paths]
    parts = []
    for section, key, what in ROW_ENVIRONMENT:
        values = sorted({r.recorded_text(section, key) for r in ours})
        ref_values = sorted({r.recorded_text(section, key) for r in theirs})
        if values != ref_values:
            parts.append(f"{what}: {', '.join(values)} (the reference's: {', '.join(ref_values)})")
    return "; ".join(parts)


def environment_notes(cells: dict[str, dict[str, list[str]]], reference: str) -> list[str]:
    """The footnotes of the ``§`` cells, one per difference (:func:`environment_difference`):
    such a change also carries what the environment moves, which the check cannot separate."""
    notes = []
    for differs, by_variant in cells.items():
        where = "; ".join(
            f"`{v}` " + ("all losses" if len(losses) == len(FAMILIES) else ", ".join(losses))
            for v, losses in by_variant.items()
        )
        notes += [
            "",
            f"§ {where}: these records and the reference's (`{reference}`) differ in {differs}."
            " Such a change also carries whatever"
            " the environment moves, which this check cannot separate from the setting's"
            " (benchmarks/README measures a change of host on identical trials).",
        ]
    return notes


def capped_folds(paths: Sequence[Path]) -> dict[str, tuple[int, int]]:
    """Per stage (``search``, ``test``) of the records at ``paths``: how many fold trainings
    stopped at ``train.max_epochs`` before their patience ran out, and how many there were (from
    each record's :attr:`~benchmark.records.RunRecord.convergence` summary)."""
    summaries = [load_record(path).convergence for path in paths]
    return {
        stage: (
            sum(int(c[stage]["counts"].get("max_epochs", 0)) for c in summaries),
            sum(int(c[stage]["n"]) for c in summaries),
        )
        for stage in ("search", "test")
    }


def cap_notes(names: Sequence[str], dataset: str, losses: Sequence[str] = tuple(FAMILIES)) -> list[str]:
    """The footnote of the ``‡`` cells: each record set of ``losses`` whose folds hit ``train.max_epochs``.
    Such a fold trained shorter than its patience asks, so the setting was measured with the cap
    binding, and the change shown is not the patience's alone."""
    notes = []
    for name in names:
        for loss in losses:
            paths = variant_paths(name, dataset, loss)
            counts = capped_folds(paths)
            if not any(n for n, _ in counts.values()):
                continue
            caps = sorted({int(load_record(p).document["config"]["train"]["max_epochs"]) for p in paths})
            notes.append(
                f"‡ `{name}` {loss}: "
                + " and ".join(f"{n} of {total} {stage} folds" for stage, (n, total) in counts.items())
                + f" stopped at `train.max_epochs` = {', '.join(map(str, caps))} before their patience ran"
                " out. On those folds the cap, not the patience, ended training, so this check did not"
                " measure the patience alone; a higher cap could only let them train longer."
            )
    return ["", *notes] if notes else []


def within_seed_sd(paths: Sequence[Path], mode: str) -> tuple[float, int]:
    """The test repetitions' standard deviation within a seed, pooled over ``paths`` (and its df)."""
    var, df = pooled_within_variance(load_groups(paths, mode))
    return math.sqrt(var), df


def check_notes(
    mode: str,
    variants: Sequence[str],
    against: str,
    p_values: dict[str, dict[str, float]],
    dataset: str,
    intervals: dict[str, dict[str, tuple[float, float]]],
    rows: Sequence[str] = tuple(FAMILIES),
) -> list[str]:
    """What the calibration check's table (rows: ``rows``) rests on: the tests behind its
    intervals, Holm-corrected over the losses of the column; what each pass (0 inside its interval
    in ``intervals``) still allows, the largest change that interval contains; and whether the
    variants' repetition spread is ``mini``'s (the intervals borrow ``mini``'s seed variance
    because one variant seed cannot estimate its own)."""
    notes: list[str] = []
    for v in variants:
        losses = list(p_values[v])
        if not losses:
            continue
        allowed = {loss: max(-lo, hi) for loss, (lo, hi) in intervals[v].items() if lo <= 0 <= hi}
        if allowed:
            # "0 inside" is the rule, but a wide interval passes as easily as a small
            # change: say how large a change each pass leaves possible, so a weak pass reads as one.
            notes.append(
                f"A pass of `{v}` (0 inside) still allows a change of up to, in points (either sign; the "
                "interval's end farther from 0): "
                + ", ".join(f"{loss} {100 * reach:.2f}" for loss, reach in allowed.items())
                + ". A wider interval passes more easily, so a pass is only as strong as its number is small."
            )
            notes.append("")
        adjusted = dict(zip(losses, holm([p_values[v][loss] for loss in losses]), strict=True))
        below = [loss for loss in losses if adjusted[loss] < 0.05]
        plural = "" if len(losses) == 1 else "s"
        notes.append(
            f"`{v}` against `{against}`, the test of each change (p, Holm-adjusted over the {len(losses)} "
            f"loss{'e' if plural else ''}{plural}): "
            + ", ".join(f"{loss} {adjusted[loss]:.2g}" for loss in losses)
            + "; "
            + (f"{len(below)} below 0.05 ({', '.join(below)})." if below else "none below 0.05.")
            + f" Uncorrected, {len(losses)} interval{plural} would exclude 0 for at least one loss by chance "
            f"alone with probability {100 * (1 - 0.95 ** len(losses)):.0f}%."
        )
        notes.append("")
    spreads = []
    for name in (*variants, against):
        paths = [p for loss in rows for p in variant_paths(name, dataset, loss)]
        if not paths:
            continue
        sd, df = within_seed_sd(paths, mode)
        spreads.append(f"`{name}` {100 * sd:.2f} ({df} df)")
    mini_sd, mini_df = within_seed_sd([p for loss in FAMILIES for p in mini_paths(dataset, loss)], mode)
    notes.append(
        "Test repetitions' spread within a seed, in points: "
        + "".join(f"{s}, " for s in spreads)
        + f"earlier {dataset} `mini` rows {100 * mini_sd:.2f} ({mini_df} df). The intervals take"
        f" the variance of a seed mean from the earlier {TAU_DATASET} `mini` rows; a variant whose"
        " repetitions spread much more than `mini`'s would have wider intervals than shown."
    )
    return notes


def other_source_notes(
    mode: str,
    variants: Sequence[str],
    against: str,
    dataset: str,
    intervals: dict[str, dict[str, tuple[float, float]]],
) -> list[str]:
    """Each cell again with tau from ``against``'s own :data:`TAU_DATASET` records (the reference's
    settings rather than the earlier ``mini``'s), naming the cells whose verdict (0 inside its
    interval in ``intervals``, on the table's tau) changes.

    When each of the six losses has >= 2 seeds there, the tau model is that of the six rows
    (:func:`tau_model`); otherwise each loss with >= 2 seeds there gets its own tau^2 on S - 1 df
    and the others no cell (no committed reference since each got >= 2 seeds of every study loss;
    ``calibt20`` once had several of margin alone)."""
    # Which seed spread the intervals assume is itself a choice: with 2 df per loss it can decide
    # a verdict, so the table shows the other defensible choice beside its own.
    seeds = {loss: len(variant_paths(against, TAU_DATASET, loss)) for loss in FAMILIES}
    tau = tau_model(mode, source=against)
    of: dict[str, tuple[float, int]]
    if min(seeds.values()) >= 2:
        of = {loss: tau.of(loss) for loss in FAMILIES}
        floored = tau.floored()
        source = f"at least {min(seeds.values())} seeds per loss; {tau.variance.describe()}" + (
            f"; at the training floor: {', '.join(floored)}" if floored else ""
        )
    else:
        of = {loss: (o.tau2, o.df) for loss, o in tau.own.items()}
        spreads = [
            f"{loss} {seeds[loss]} seeds, tau {100 * math.sqrt(o.tau2):.2f}"
            + (", at the training floor" if o.floored else "")
            for loss, o in tau.own.items()
        ]
        source = "each loss's own seed spread, S − 1 df, where it has at least 2 seeds there: " + ", ".join(
            spreads
        )
    base = {
        loss: seed_estimate(load_groups(variant_paths(against, dataset, loss), mode), *tau_df)
        for loss, tau_df in of.items()
        if variant_paths(against, dataset, loss)
    }
    notes: list[str] = []
    for v in variants:
        cells, changed = [], []
        for loss, (lo0, hi0) in intervals[v].items():
            if loss not in base:
                continue
            est = seed_estimate(load_groups(variant_paths(v, dataset, loss), mode), *of[loss])
            d = difference(est, base[loss])
            lo, hi = d.interval()
            inside = lo <= 0 <= hi
            cells.append(f"{loss} {fmt(d.diff, (hi - lo) / 2)}{' (0 inside)' if inside else ''}")
            if inside != (lo0 <= 0 <= hi0):
                changed.append(loss)
        if not cells:
            continue
        notes += [
            f"The same cells of `{v}` with tau from `{against}`'s own {TAU_DATASET} records instead "
            f"(its settings, {source}): "
            + ", ".join(cells)
            + ". "
            + (
                f"The verdict changes for {', '.join(changed)}: it rests on seed spreads of a few degrees of "
                "freedom, and more seeds on both sides would settle it."
                if changed
                else "No verdict changes."
            ),
            "",
        ]
    return notes


def stopping_half(variant: str, against: str, dataset: str) -> list[str]:
    """The stopping part of a check, apart from its search part: each ``variant`` record's
    test-stage folds (trained at the hyperparameters its own search chose) replayed at the
    ``against`` records' patience by ``benchmarks/patience_truncation.py``. Exact per fold: patience
    only decides when a fold stops. A record whose patience is not longer than the reference's
    has no stop to replay and no row (``calibt20`` against ``calibp10``: trials alone)."""
    from patience_truncation import fold_runs, truncations

    rows = []
    for loss in CHECKED:
        paths, refs = variant_paths(variant, dataset, loss), variant_paths(against, dataset, loss)
        if not paths or not refs:
            continue
        shorter = int(load_record(refs[0]).document["config"]["train"]["patience"])
        for path in paths:
            record = load_record(path).document
            longer = int(record["config"]["train"]["patience"])
            if longer <= shorter:
                continue
            folds = [fold for phase, fold in fold_runs(record) if phase == "test"]
            usable = sum(f.get("stopped_by") == "patience" for f in folds)
            cut = next((t for t in truncations(folds, longer) if t.patience == shorter), None)
            cell = (
                "– | – | –"
                if cut is None
                else f"{signed(-cut.drop_points)} ± {cut.drop_half_width:.2f} | {cut.changed_share:.0%} "
                f"| {cut.epoch_fraction:.2f}"
            )
            # A loss with several records (search seeds) gets a row per seed, named.
            name = row_name(loss, paths, path)
            rows.append(f"| {name} | {longer} → {shorter} | {usable} of {len(folds)} | {cell} |")
    if not rows:
        return []
    return [
        f"### Stopping alone: `{variant}`'s test folds replayed at `{against}`'s patience",
        "",
        "The check changes patience and trials together. Replaying the test-stage folds of each",
        f"`{variant}` record (trained at the hyperparameters its own search chose) at `{against}`'s",
        "patience isolates the stop: validation MAP@R of the checkpoint the shorter patience keeps,",
        "minus the one kept (points, mean over the folds that stopped by patience ± 95% t",
        "half-width; it cannot be positive), the share of folds whose checkpoint changes, and the",
        "fraction of the epochs the shorter patience trains (`benchmarks/patience_truncation.py`).",
        "",
        "| loss | patience | folds stopped by patience | cut (points) | folds changed | epochs trained |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
    ]


def best_within(trials: Sequence[TrialDoc], first: int) -> tuple[float, int] | None:
    """The highest validation value among the completed trials (state ``COMPLETE``, as
    :func:`benchmark.records.completed_trials` counts them) numbered below ``first``, with its trial
    number (None if none completed)."""
    done = [
        (float(t["value"]), int(t["number"]))
        for t in trials
        if t["state"] == "COMPLETE"
        and t["value"] is not None
        and t["number"] is not None
        and t["number"] < first
    ]
    # max over (value, -number): the earliest trial wins a tie, as the search's own best does.
    return max(done, key=lambda vn: (vn[0], -vn[1]), default=None)


def row_name(loss: str, paths: Sequence[Path], path: Path) -> str:
    """A table row's name for the record at ``path``: the loss alone, or with its search seed when
    the loss has several records (``paths``)."""
    return loss if len(paths) == 1 else f"{loss} (search seed {record_facts(path).seed})"


def search_half(variant: str, against: str, dataset: str) -> list[str]:
    """The search part of a check, apart from its stop: for each ``variant`` record that searched more
    trials than the ``against`` records, the best validation MAP@R among its first trials (as many
    as the reference ran) and among all, beside each reference record's best."""
    rows = []
    for loss in CHECKED:
        paths, refs = variant_paths(variant, dataset, loss), variant_paths(against, dataset, loss)
        if not paths or not refs:
            continue
        ref_searches = [load_record(p).document["search"] for p in refs]
        fewer = int(ref_searches[0]["n_trials"])
        ref_best = ", ".join(f"{100 * float(s['best_value']):.2f}" for s in ref_searches)
        for path in paths:
            search = load_record(path).document["search"]
            total = int(search["n_trials"])
            early, best = best_within(search["trials"], fewer), best_within(search["trials"], total)
            if total <= fewer or early is None or best is None:
                continue
            name = row_name(loss, paths, path)
            rows.append(
                f"| {name} | {100 * early[0]:.2f} (trial {early[1]} of {fewer}) | {100 * best[0]:.2f} "
                f"(trial {best[1]} of {total}) | {signed(100 * (best[0] - early[0]))} | {ref_best} |"
            )
    if not rows:
        return []
    return [
        f"### Searching alone: `{variant}`'s best trial within `{against}`'s trial count",
        "",
        f"The best mean validation MAP@R (points) of each `{variant}` search among its first trials, as",
        f"many as `{against}` ran, and among all its trials; their difference is what the extra trials",
        f"found at the variant's patience. Beside them, each `{against}` record's best (its own seeds,",
        "at its own patience).",
        "One search per row: the difference is that search's, not a between-seed estimate; its first",
        "trials need not be the reference's (a model-based sampler proposes from values that depend on",
        "the patience and, through rounding, on the CPU). Trials are numbered from 0, as in the records.",
        "",
        f"| loss | best of its first trials | best of all | extra trials found | `{against}` best per seed |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def paired_half(variant: str, against: str, dataset: str) -> list[str]:
    """The check paired by search seed: for each loss with ``variant`` and ``against`` records of
    the same search seed, each seed's change of test MAP@R (mean over its test repetitions) and
    the mean change over those seeds with a 95% t interval on their differences (n - 1 df)."""
    rows = []
    for loss in CHECKED:
        ours = {record_facts(p).seed: p for p in variant_paths(variant, dataset, loss)}
        theirs = {record_facts(p).seed: p for p in variant_paths(against, dataset, loss)}
        seeds = sorted(s for s in ours.keys() & theirs.keys() if s is not None)
        if not seeds:
            continue
        marks = ["§" if environment_difference([ours[s]], [theirs[s]]) else "" for s in seeds]
        for mode, _ in MODES:
            changes = [
                statistics.fmean(rep_values(load_record(ours[s]), mode))
                - statistics.fmean(rep_values(load_record(theirs[s]), mode))
                for s in seeds
            ]
            pairs = zip(seeds, changes, marks, strict=True)
            each = ", ".join(f"{s}: {signed(100 * c)}{m}" for s, c, m in pairs)
            if len(seeds) == 1:
                # One pair has no spread over seeds; its uncertainty is the unpaired cell's (tau).
                summary = "one pair: no paired interval (its interval: the table above)"
            else:
                interval = t_interval(changes)
                inside = interval.low <= 0 <= interval.high
                summary = fmt(interval.mean, interval.half_width) + (
                    f" ({len(seeds) - 1} df{', 0 inside' if inside else ''})"
                )
            rows.append(f"| {loss} | {mode} | {each} | {summary} |")
    if not rows:
        return []
    return [
        f"### Paired by search seed: `{variant}` − `{against}`",
        "",
        f"The tables above treat `{variant}`'s and `{against}`'s seeds as independent samples. Records",
        "of the same search seed share its quasi-random points, and a variant that changes only the",
        "trial count repeats the reference's first trials on the same host, so those pairs are",
        "correlated. Here each seed present on both sides gives one change of test MAP@R (points,",
        "mean over its test repetitions), and the row's interval is a 95% t interval over those",
        "changes alone (n − 1 df; uncorrected, it describes the change, it does not test it). It",
        "assumes nothing about the two sides' seed spread, and with 2 or 3 pairs it is wide. `§`: the",
        "pair's records differ in an environment setting (the tables' footnotes name it).",
        "",
        "| loss | embedding | change per seed | mean change |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


#: Long-patience fold surveys (``benchmarks/fold_convergence.py --jsonl``), one file per survey.
SATURATION = OUT_ROOT / "saturation"
SATURATION_COLUMNS = (2, 3, 5, 10, 15)


def saturation_sections() -> list[str]:
    """The patience-saturation tables: each committed survey replayed at shorter patiences by
    ``benchmarks/patience_truncation.py``, with the survey's command stored beside it."""
    files = sorted(SATURATION.glob("*.jsonl"))
    if not files:
        return []
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from patience_truncation import compare_surveys, jsonl_table

    lines = [
        "## How far the patience rule is from saturation",
        "",
        "Folds trained at each loss's default parameters with a long patience (the survey's command",
        "is given with each table), then replayed at shorter patiences by",
        "`benchmarks/patience_truncation.py`: exact per fold, since patience only decides when a fold",
        "stops. No search: this isolates the stopping rule.",
        "",
    ]
    for path in files:
        command = path.with_suffix(".cmd")
        lines += [f"### `{path.relative_to(REPO)}`", ""]
        if command.exists():
            lines += ["Survey: `" + command.read_text().strip() + "`", ""]
        lines += [jsonl_table(path, SATURATION_COLUMNS).rstrip(), ""]
        # "<dataset>-<tag>.jsonl" reruns folds of "<dataset>.jsonl" under another setting.
        base = path.with_name(path.stem.split("-")[0] + ".jsonl")
        if base != path and base.exists():
            lines += [f"Against `{base.name}` (same folds, same defaults):", ""]
            lines += [compare_surveys(base, path).rstrip(), ""]
    return lines


def cmd_table(args: argparse.Namespace) -> int:
    datasets: list[str] = args.dataset
    dataset_flag = "" if datasets == ["omniglot"] else f" --dataset {','.join(datasets)}"
    variants = ",".join(args.variants)
    if args.against is None:
        lines = [
            "# Sensitivity of the `mini` board to its own settings",
            "",
            f"Generated by `python benchmarks/sensitivity.py table --variants {variants}{dataset_flag}`;",
            f"do not edit by hand. Dataset {', '.join(datasets)}, protocol mlrc, the earlier `mini`",
            "(50-iteration epochs, validation after each, patience 2, `builtin:smallcnn-symbols`) with one",
            "setting changed (see the script's docstring for the statistics). Cells: change of test MAP@R in",
            "points, variant − earlier `mini` row, with its 95% interval; each variant is one search",
            "seed, so the interval assumes its seed-to-seed spread is `mini`'s (from the six losses'",
            f"three seeds on {TAU_DATASET}: pooled unless Bartlett's test rejects equal spreads, then each",
            "loss's own; each section says which). The family gap row gives the variant's gap and its"
            " change.",
        ]
    else:
        names = ", ".join(f"`{v}`" for v in args.variants)
        lines = [
            f"# Calibration check: {names} against `{args.against}`",
            "",
            "Generated by `python benchmarks/sensitivity.py table --variants "
            f"{variants} --against {args.against}{dataset_flag}`;",
            f"do not edit by hand. Dataset {', '.join(datasets)}, protocol mlrc. Cells: change of test",
            f"MAP@R in points, variant − `{args.against}`, with its 95% interval (tau from the earlier",
            f"{TAU_DATASET} `mini` rows' three seeds: pooled over the six losses unless Bartlett's test",
            "rejects equal spreads, then each loss's own; each section says which; see the script's",
            "docstring). A setting is",
            "budget-insensitive where 0 lies inside every loss's interval. A variant's records are its",
            "own runs and the board's records made at the same settings (`board_paths` in the script).",
            "Under each table: how large a change each pass still allows and, where the reference has",
            f"several seeds per loss on {TAU_DATASET}, the same cells with tau from those seeds instead,",
            "naming any verdict that this choice of seed spread decides.",
        ]
    lines += [
        "",
        "Variants: "
        + "; ".join(f"`{v}` = " + ", ".join(f"`{o}`" for o in VARIANTS[v]) for v in args.variants)
        + ".",
        "",
    ]
    for dataset in datasets:
        if len(datasets) > 1:
            lines += [f"## {dataset}", ""]
        for mode, label in MODES:
            lines += table(mode, label, args.variants, args.against, dataset)
        if args.against is not None:
            for v in args.variants:
                lines += stopping_half(v, args.against, dataset)
                lines += search_half(v, args.against, dataset)
                lines += paired_half(v, args.against, dataset)
    if args.against is None and "omniglot" in datasets:
        lines += saturation_sections()
    text = "\n".join(lines).rstrip() + "\n"
    if args.out:
        Path(args.out).write_text(text)
        print(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 0


def parse_list(text: str, valid: Sequence[str], what: str) -> list[str]:
    items = [t for t in text.split(",") if t]
    unknown = [t for t in items if t not in valid]
    if unknown:
        raise SystemExit(f"unknown {what} {unknown}; valid: {', '.join(valid)}")
    return items


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the variants (resumable)")
    r.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data" / "omniglot")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--dataset", choices=DATASETS, default="omniglot")
    r.add_argument(
        "--extend-from",
        choices=[*VARIANTS, BOARD_RUNS],
        default=None,
        help="start each search from this variant's run of the same loss and seed, or the board's "
        f"('{BOARD_RUNS}': runs/<dataset>/mlrc): the same settings with fewer trials "
        "(dmlbench run --extend-search); its committed record where there is no run directory",
    )
    r.add_argument(
        "--resume-mixed-code",
        action="store_true",
        help="pass --resume-mixed-code (an extended search whose trials other code trained)",
    )
    t = sub.add_parser("table", help="write the comparison table")
    t.add_argument("--dataset", default="omniglot", help=f"comma-separated, of {','.join(DATASETS)}")
    for q in (r, t):
        q.add_argument("--variants", default=",".join(VARIANTS))
    r.add_argument(
        "--losses",
        default=",".join(FAMILIES),
        help=f"comma-separated (default: the study's); also the spot checks {', '.join(SPOT_CHECKS)}",
    )
    sub.choices["table"].add_argument("--out", default=None)
    sub.choices["table"].add_argument(
        "--against", default=None, help="compare with this variant's records instead of the mini rows"
    )
    args = p.parse_args(argv)
    args.variants = parse_list(args.variants, list(VARIANTS), "variant")
    if getattr(args, "against", None) is not None:
        parse_list(args.against, list(VARIANTS), "variant")
    if args.command == "table":
        args.dataset = parse_list(args.dataset, DATASETS, "dataset")
    if args.command == "run":
        args.losses = parse_list(args.losses, list(CHECKED), "loss")
        return cmd_run(args)
    return cmd_table(args)


if __name__ == "__main__":
    raise SystemExit(main())
