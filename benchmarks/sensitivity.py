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
  cut every fold of margin and contrastive. On glyphs margin it moved separated MAP@R by
  +3.55 +- 3.10, so patience 5 failed, and ``calibp10`` is today's ``mini`` (benchmark/budgets.py:
  its records are ``mini`` board records too); its doubled check is ``calibp10x2`` (patience 20,
  20 trials): ``table --variants calibp10x2 --against calibp10`` (docs/calibration.md). On
  glyphs margin it moved separated MAP@R by +1.27 +- 3.10 (a pass), while its test folds replayed
  at patience 10 keep checkpoints 2.11 +- 1.11 validation points lower and its 300-epoch cap ended
  8 of its 96 folds (``‡`` in the table).

Usage (from the repository root of a clean clone; runs are resumable, one at a time, each taking
the heavy-work lock so nothing else heavy shares the cores)::

    python benchmarks/sensitivity.py run [--variants patience5,trials25] [--losses contrastive,...]
    python benchmarks/sensitivity.py table [--out docs/sensitivity.md]
    python benchmarks/sensitivity.py table --variants calib2x --against calib
    python benchmarks/sensitivity.py run --dataset glyphs --variants calib,calib2x --losses margin
    python benchmarks/sensitivity.py table --dataset glyphs --variants calib2x --against calib
    python benchmarks/sensitivity.py table --dataset omniglot,glyphs --variants calib2x --against calib \
        --out docs/calibration.md

``run`` writes each variant's records under ``results/sensitivity/<variant>/`` (search seed 0
only: a variant costs 1-3x a ``mini`` run). ``table`` compares them with the earlier ``mini``
rows ``results/sensitivity/mini-earlier/<dataset>/mlrc/records/<loss>.mini.seed*.json``: the board
records of the study's losses made at the ``mini`` of the study (50-iteration epochs, validation
after each, patience 2, ``builtin:smallcnn-symbols``), copied unchanged from
``results/<dataset>/mlrc/records/`` when ``mini`` was redefined, since regenerating the boards at
the new ``mini`` replaces those files. ``--dataset glyphs`` does the same
on the embedded dataset (the calibration check there: its long-patience survey showed the
candidate's stop cutting every fold of contrastive and margin); tau^2 then still comes from the
omniglot rows, the only ones with several seeds, and the table says so.

**Statistics.** The earlier ``mini`` row of a loss is the mean of its search seeds' means; a
variant has one search seed. The variance of a seed mean (tau^2: the search plus test-repetition
noise, ``benchmark.stats.seeds``) is pooled over the baseline rows of the six losses, and the
change variant - baseline has variance tau^2 (1/S_variant + 1/S_baseline) on the pool's degrees of
freedom. This assumes a variant's seed-to-seed spread is that of ``mini``; with one variant seed it
cannot be checked, and the table says so. The family gap is the mean of the class/proxy losses'
rows minus the mean of the pair-based rows, its variance summed the same way. Each interval is
95% and uncorrected: it describes a change, it does not test one (tests over the losses would be
Holm-corrected over the table's cells).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from heavy_lock import run_heavy  # noqa: E402

from benchmark.records import RunRecord, load_record  # noqa: E402
from benchmark.stats.intervals import holm  # noqa: E402
from benchmark.stats.seeds import (  # noqa: E402
    Estimate,
    contrast,
    difference,
    pooled_seed_variance,
    pooled_within_variance,
)

#: Variant name -> the ``--set`` overrides it applies to ``mini``.
VARIANTS: dict[str, tuple[str, ...]] = {
    "patience5": ("train.patience=5",),
    "trials25": ("search.n_trials=25",),
    "eval100": ("train.eval_every=2",),
    "double": ("train.patience=4", "search.n_trials=20"),
    "calib": (
        "train.iters_per_epoch=100",
        "train.eval_every=2",
        "train.patience=5",
        "train.max_epochs=300",
        "model.trunk_weights=builtin:smallcnn-symbols-v3",
        "search.log_wide_ranges=true",
    ),
    "calib2x": (
        "model.trunk_weights=builtin:smallcnn-symbols-v3",
        "search.log_wide_ranges=true",
        "train.iters_per_epoch=100",
        "train.eval_every=2",
        "train.patience=10",
        "train.max_epochs=300",
        "search.n_trials=20",
    ),
    "calibp10": (
        "train.iters_per_epoch=100",
        "train.eval_every=2",
        "train.patience=10",
        "train.max_epochs=300",
        "model.trunk_weights=builtin:smallcnn-symbols-v3",
        "search.log_wide_ranges=true",
    ),
    "calibp10x2": (
        "train.iters_per_epoch=100",
        "train.eval_every=2",
        "train.patience=20",
        "train.max_epochs=300",
        "model.trunk_weights=builtin:smallcnn-symbols-v3",
        "search.log_wide_ranges=true",
        "search.n_trials=20",
    ),
}
#: The losses of the study and their family (the issue's pair-based vs class/proxy split).
FAMILIES: dict[str, str] = {
    "contrastive": "pair",
    "triplet": "pair",
    "ms": "pair",
    "margin": "pair",
    "arcface": "class/proxy",
    "proxyanchor": "class/proxy",
}
#: The study's dataset (the issue's); ``--dataset glyphs`` reruns the calibration check on the
#: embedded dataset, whose long-patience survey showed the candidate's stop cutting pair-based folds.
DATASETS = ("omniglot", "glyphs")
#: Where the seed-mean variance tau^2 is pooled: the only board with multi-seed ``mini`` rows of
#: the six losses. A glyphs table borrows it (and says so); its own rows have one seed each.
TAU_DATASET = "omniglot"
OUT_ROOT = REPO / "results" / "sensitivity"
MODES = (("separated", "separated (128-d)"), ("concatenated", "concatenated (512-d)"))
METRIC = "map_at_r"


#: The earlier ``mini``'s board records of the study's losses (see the module docstring).
EARLIER_MINI = "mini-earlier"


def mini_paths(dataset: str, loss: str) -> list[Path]:
    """The earlier ``mini`` records of ``loss`` on ``dataset`` (one per search seed)."""
    return sorted((OUT_ROOT / EARLIER_MINI / dataset / "mlrc" / "records").glob(f"{loss}.mini.seed*.json"))


def run_command(variant: str, loss: str, dataset: str, data_dir: Path, seed: int) -> list[str]:
    """The ``dmlbench run`` command of one variant run (glyphs is embedded: no data folder)."""
    cmd = [sys.executable, "-m", "benchmark.cli.main", "run", "--protocol", "mlrc", "--loss", loss]
    cmd += ["--dataset", dataset]
    if dataset != "glyphs":
        cmd += ["--data-dir", str(data_dir)]
    cmd += ["--budget", "mini", "--seed", str(seed)]
    for override in VARIANTS[variant]:
        cmd += ["--set", override]
    cmd += ["--results-dir", str(OUT_ROOT / variant), "--out", str(REPO / "runs" / "sensitivity" / variant)]
    return [*cmd, "--quiet"]


def record_path(variant: str, dataset: str, loss: str, seed: int) -> Path:
    return OUT_ROOT / variant / dataset / "mlrc" / "records" / f"{loss}.mini.seed{seed}.json"


def cmd_run(args: argparse.Namespace) -> int:
    for variant in args.variants:
        for loss in args.losses:
            label = f"{variant} {loss}" + ("" if args.dataset == "omniglot" else f" ({args.dataset})")
            if record_path(variant, args.dataset, loss, args.seed).exists():
                print(f"{label}: record exists, skipped", flush=True)
                continue
            cmd = run_command(variant, loss, args.dataset, args.data_dir, args.seed)
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
    return f"{100 * value:+.2f} ± {100 * half:.2f}" if not math.isnan(half) else f"{100 * value:+.2f}"


def gap(estimates: dict[str, Estimate]) -> Estimate:
    """Mean of the class/proxy rows minus the mean of the pair rows: the :func:`contrast` of the
    rows (all on the pooled tau^2, so its df is the pool's), as an estimate to difference."""
    fams = {
        f: [estimates[loss] for loss, g in FAMILIES.items() if g == f and loss in estimates]
        for f in ("class/proxy", "pair")
    }
    terms = [(1.0 / len(fams["class/proxy"]), e) for e in fams["class/proxy"]]
    terms += [(-1.0 / len(fams["pair"]), e) for e in fams["pair"]]
    d = contrast(terms)
    any_e = next(iter(estimates.values()))
    return Estimate(d.diff, d.se**2, d.df, 0, 0, any_e.scope, pooled=True)


def variant_paths(variant: str, dataset: str, loss: str) -> list[Path]:
    """A variant's committed records of ``loss`` on ``dataset`` (one per search seed run)."""
    return sorted((OUT_ROOT / variant / dataset / "mlrc" / "records").glob(f"{loss}.mini.seed*.json"))


def table(
    mode: str, label: str, variants: Sequence[str], against: str | None = None, dataset: str = "omniglot"
) -> list[str]:
    """The Markdown section of one evaluation mode on ``dataset``: each variant against the
    earlier ``mini`` rows, or against the variant ``against`` (the calibration check: a
    calibrated setting against its doubled patience and trials). tau^2 is pooled over the earlier
    :data:`TAU_DATASET` ``mini`` rows either way."""
    tau_groups = [load_groups(mini_paths(TAU_DATASET, loss), mode) for loss in FAMILIES]
    tau2, df = pooled_seed_variance(tau_groups)
    base = {
        loss: seed_estimate(load_groups(paths, mode), tau2, df)
        for loss in FAMILIES
        if (paths := mini_paths(dataset, loss))
    }
    reference = "earlier mini (seeds)"
    if against is not None:
        reference = f"{against} (seeds)"
        base = {
            loss: seed_estimate(load_groups(variant_paths(against, dataset, loss), mode), tau2, df)
            for loss in FAMILIES
            if variant_paths(against, dataset, loss)
        }
    lines = [f"### {label}", ""]
    borrowed = "" if dataset == TAU_DATASET else f", borrowed from the {TAU_DATASET} rows"
    lines.append(
        f"Pooled seed-mean variance: tau = {100 * math.sqrt(tau2):.2f} points on {df} degrees of freedom"
        f"{borrowed}."
    )
    lines.append("")
    head = f"| loss | family | {reference} | " + " | ".join(f"{v}: change" for v in variants) + " |"
    lines += [head, "|" + "---|" * (3 + len(variants))]
    var_est: dict[str, dict[str, Estimate]] = {v: {} for v in variants}
    p_values: dict[str, dict[str, float]] = {v: {} for v in variants}
    for loss, family in FAMILIES.items():
        if loss not in base:
            lines.append(f"| {loss} | {family} | not run |" + " – |" * len(variants))
            continue
        cells = [loss, family, f"{100 * base[loss].mean:.2f} ({base[loss].n_seeds})"]
        for v in variants:
            paths = variant_paths(v, dataset, loss)
            if not paths:
                cells.append("not run")
                continue
            est = seed_estimate(load_groups(paths, mode), tau2, df)
            var_est[v][loss] = est
            d = difference(est, base[loss])
            p_values[v][loss] = d.p
            lo, hi = d.interval()
            capped = "" if not any(n for n, _ in capped_folds(paths).values()) else " ‡"
            cells.append(fmt(d.diff, (hi - lo) / 2) + ("" if lo > 0 or hi < 0 else " (0 inside)") + capped)
        lines.append("| " + " | ".join(cells) + " |")
    cap_lines = cap_notes([*variants, *([] if against is None else [against])], dataset)
    notes = (
        cap_lines
        if against is None
        else [*cap_lines, "", *check_notes(mode, variants, against, p_values, dataset)]
    )
    if set(base) != set(FAMILIES):
        return [*lines, "", "Family gap: the reference is incomplete.", *notes, ""]
    base_gap = gap(base)
    cells = ["**family gap**", "class/proxy − pair", fmt(base_gap.mean, base_gap.half_width)]
    for v in variants:
        if set(var_est[v]) != set(FAMILIES):
            cells.append("incomplete")
            continue
        d = difference(gap(var_est[v]), base_gap)
        lo, hi = d.interval()
        cells.append(f"{100 * gap(var_est[v]).mean:+.2f} (change {fmt(d.diff, (hi - lo) / 2)})")
    lines += ["| " + " | ".join(cells) + " |", *notes, ""]
    return lines


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


def cap_notes(names: Sequence[str], dataset: str) -> list[str]:
    """The footnote of the ``‡`` cells: each record set whose folds hit ``train.max_epochs``.
    Such a fold trained shorter than its patience asks, so the setting was measured with the cap
    binding, and the change shown is not the patience's alone."""
    notes = []
    for name in names:
        for loss in FAMILIES:
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
    mode: str, variants: Sequence[str], against: str, p_values: dict[str, dict[str, float]], dataset: str
) -> list[str]:
    """What the calibration check's table rests on: the tests behind its intervals, Holm-corrected
    over the losses of the column, and whether the variants' repetition spread is ``mini``'s (the
    intervals borrow ``mini``'s seed variance because one variant seed cannot estimate its own)."""
    notes: list[str] = []
    for v in variants:
        losses = list(p_values[v])
        if not losses:
            continue
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
        paths = [p for loss in FAMILIES for p in variant_paths(name, dataset, loss)]
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


def stopping_half(variant: str, against: str, dataset: str) -> list[str]:
    """The stopping part of a check, apart from its search part: each ``variant`` record's
    test-stage folds (trained at the hyperparameters its own search chose) replayed at the
    ``against`` records' patience by ``benchmarks/patience_truncation.py``. Exact per fold: patience
    only decides when a fold stops."""
    from patience_truncation import fold_runs, truncations

    rows = []
    for loss in FAMILIES:
        paths, refs = variant_paths(variant, dataset, loss), variant_paths(against, dataset, loss)
        if not paths or not refs:
            continue
        shorter = int(load_record(refs[0]).document["config"]["train"]["patience"])
        for path in paths:
            record = load_record(path).document
            longer = int(record["config"]["train"]["patience"])
            folds = [fold for phase, fold in fold_runs(record) if phase == "test"]
            usable = sum(f.get("stopped_by") == "patience" for f in folds)
            cut = next((t for t in truncations(folds, longer) if t.patience == shorter), None)
            cell = (
                "–"
                if cut is None
                else f"−{cut.drop_points:.2f} ± {cut.drop_half_width:.2f} | {cut.changed_share:.0%} "
                f"| {cut.epoch_fraction:.2f}"
            )
            rows.append(f"| {loss} | {longer} → {shorter} | {usable} of {len(folds)} | {cell} |")
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
            "seed, so the interval assumes its seed-to-seed spread is `mini`'s (pooled over the six",
            f"losses' three seeds on {TAU_DATASET}). The family gap row gives the variant's gap and its"
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
            f"MAP@R in points, variant − `{args.against}`, with its 95% interval (tau pooled over the",
            f"earlier {TAU_DATASET} `mini` rows' three seeds, see the script's docstring). A setting is",
            "budget-insensitive where 0 lies inside every loss's interval.",
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
    t = sub.add_parser("table", help="write the comparison table")
    t.add_argument("--dataset", default="omniglot", help=f"comma-separated, of {','.join(DATASETS)}")
    for q in (r, t):
        q.add_argument("--variants", default=",".join(VARIANTS))
    r.add_argument("--losses", default=",".join(FAMILIES))
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
        args.losses = parse_list(args.losses, list(FAMILIES), "loss")
        return cmd_run(args)
    return cmd_table(args)


if __name__ == "__main__":
    raise SystemExit(main())
