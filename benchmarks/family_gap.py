"""The class/proxy − pair-based family gap of the ``mini`` boards, at today's and earlier settings.

Issue 27 asks whether the mini budget's own settings made the gap between the loss families
(MLRC: about 1 MAP@R point in favour of class/proxy losses) far wider here. This script reads a
dataset's board records, takes each ``mini`` section the leaderboard ranks apart (today's board
settings and each earlier group) and prints, per evaluation mode, the mean test MAP@R of the
class/proxy rows minus the mean of the pair-based rows, with its 95% interval. While a board is
being regenerated, today's section holds only some losses; the earlier section is then also
shown restricted to those losses, and the change (today − earlier, same losses) with its interval,
so the before/after comparison is like for like.

The split is the loss registry's ``pair_based`` (a sampler of m = 4 images per class); every other
loss counts as class/proxy. Each row's estimate is the leaderboard's own (one-seed rows: t over its
test repetitions, training seeds only; multi-seed rows: the two-level model). The gap is the
contrast ``mean(class/proxy) − mean(pair)`` of those rows (:func:`benchmark.stats.seeds.contrast`):
its interval describes these losses at these settings, not a population of losses, and covers
only the seeds its rows cover. It is a description, not a claim that one family is better.

    python benchmarks/family_gap.py                      # glyphs and omniglot, committed boards
    python benchmarks/family_gap.py --out results/family-gap.md
"""

from __future__ import annotations

import argparse
import io
import math
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmark.losses.registry import LOSSES  # noqa: E402
from benchmark.report.leaderboard import Section, load_leaderboard  # noqa: E402
from benchmark.report.numbers import signed  # noqa: E402
from benchmark.stats.seeds import Difference, Estimate, contrast  # noqa: E402

BUDGET = "mini"
METRIC = "map_at_r"
MODES = (("separated", "Sep."), ("concatenated", "Concat."))
PAIR, CLASS = "pair", "class/proxy"
#: The last commit whose boards were all at the earlier ``mini`` settings (glyphs f4cab4, omniglot
#: d5615f): the next one, 61fad4d, landed the first record at today's ``mini``.
BEFORE_REV = "61fad4d~1"


def family(loss: str) -> str:
    """``pair`` for a loss the registry marks pair-based, else ``class/proxy``."""
    return PAIR if LOSSES.get(loss).pair_based else CLASS


def gap_terms(estimates: Mapping[str, Estimate]) -> list[tuple[float, Estimate]] | None:
    """The contrast weights of ``mean(class/proxy) − mean(pair)`` over ``estimates`` (by loss);
    None when a family has no row."""
    fams = {f: [e for loss, e in estimates.items() if family(loss) == f] for f in (CLASS, PAIR)}
    if not fams[CLASS] or not fams[PAIR]:
        return None
    return [(1.0 / len(fams[CLASS]), e) for e in fams[CLASS]] + [
        (-1.0 / len(fams[PAIR]), e) for e in fams[PAIR]
    ]


def family_gap(estimates: Mapping[str, Estimate]) -> Difference | None:
    """The gap of one section's rows (None when a family has no row)."""
    terms = gap_terms(estimates)
    return None if terms is None else contrast(terms)


def gap_change(now: Mapping[str, Estimate], before: Mapping[str, Estimate]) -> Difference | None:
    """``gap(now) − gap(before)``: one contrast over both sections' rows (independent records)."""
    a, b = gap_terms(now), gap_terms(before)
    if a is None or b is None:
        return None
    return contrast(a + [(-c, e) for c, e in b])


def section_estimates(section: Section, mode: str) -> dict[str, Estimate]:
    """The section's trained rows' estimates of MAP@R in ``mode``, by loss."""
    return {row.loss: row.estimates[(mode, METRIC)] for row in section.trained}


@dataclass(frozen=True)
class Line:
    """One table row: a section (or a restriction of it) and its gap per mode."""

    label: str
    counts: str
    cells: tuple[str, ...]


def fmt(d: Difference | None) -> str:
    """``+5.80 ± 0.41 (df 9.3)`` in points; ``–`` without both families."""
    if d is None:
        return "– (a family has no row)"
    lo, hi = d.interval()
    if math.isnan(lo):
        return f"{signed(100 * d.diff)} (no interval)"
    return f"{signed(100 * d.diff)} ± {100 * (hi - lo) / 2:.2f} (df {d.df:.1f})"


def counts(losses: Sequence[str]) -> str:
    n_class = sum(family(x) == CLASS for x in losses)
    return f"{len(losses) - n_class} / {n_class}"


def mini_section(results_dir: Path, dataset: str) -> Section | None:
    """The ``mini`` section of the board's newest settings (None: the dataset has no record)."""
    if not (results_dir / dataset / "mlrc" / "records").is_dir():
        return None
    board = load_leaderboard(results_dir, dataset, "mlrc", budget=BUDGET, metrics=[METRIC])
    return board.sections[0] if board.sections else None


def by_mode(section: Section, only: Sequence[str] | None = None) -> dict[str, dict[str, Estimate]]:
    """Per mode, the section's estimates by loss (``only``: those losses)."""
    out = {m: section_estimates(section, m) for m, _ in MODES}
    return out if only is None else {m: {x: e[x] for x in only} for m, e in out.items()}


def line(label: str, estimates: Mapping[str, Mapping[str, Estimate]]) -> Line:
    losses = list(estimates[MODES[0][0]])
    return Line(label, counts(losses), tuple(fmt(family_gap(estimates[m])) for m, _ in MODES))


def dataset_lines(results_dir: Path, before_dir: Path, before_rev: str, dataset: str) -> list[Line]:
    """Today's ``mini`` gap, the gap of the board at ``before_rev`` (its records under
    ``before_dir``), and, while today's board lacks some of those losses, the earlier gap over
    today's losses only and the change over them."""
    today, before = mini_section(results_dir, dataset), mini_section(before_dir, dataset)
    lines = []
    if today is not None:
        lines.append(line(f"today: {today.label} (settings {today.settings_key[:6]})", by_mode(today)))
    if before is None:
        return lines
    tag = f"at {before_rev}: {before.label} (settings {before.settings_key[:6]})"
    lines.append(line(tag, by_mode(before)))
    if today is None or today.settings_key == before.settings_key:
        return lines
    now, then = by_mode(today), by_mode(before)
    shared = sorted(set(now[MODES[0][0]]) & set(then[MODES[0][0]]))
    if len(shared) < len(then[MODES[0][0]]):
        lines.append(line(f"{tag}, today's losses only", by_mode(before, shared)))
    same_now, same_before = by_mode(today, shared), by_mode(before, shared)
    lines.append(
        Line(
            f"change: today − {before_rev}, over the losses of both",
            counts(shared),
            tuple(fmt(gap_change(same_now[m], same_before[m])) for m, _ in MODES),
        )
    )
    return lines


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, check=args[0] != "cat-file")


def records_at(rev: str, datasets: Sequence[str], into: Path, repo: Path = REPO) -> Path:
    """The datasets' MLRC records as committed at ``rev`` in ``repo``, extracted under
    ``into``/results (a dataset without records at ``rev`` is left out)."""
    if _git(repo, "cat-file", "-e", f"{rev}^{{commit}}").returncode != 0:
        raise SystemExit(f"--before-rev {rev!r} is not a commit of the repository at {repo}.")
    paths = [f"results/{d}/mlrc/records" for d in datasets]
    have = [p for p in paths if _git(repo, "cat-file", "-e", f"{rev}:{p}").returncode == 0]
    if have:
        archive = _git(repo, "archive", rev, *have).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(into, filter="data")
    return into / "results"


def markdown(results_dir: Path, before_rev: str, datasets: Sequence[str]) -> str:
    """The whole report: a heading, the rule, one table per dataset."""
    with tempfile.TemporaryDirectory() as tmp:
        before_dir = records_at(before_rev, datasets, Path(tmp))
        tables = {d: dataset_lines(results_dir, before_dir, before_rev, d) for d in datasets}
    out = [
        "# Family gap of the `mini` boards (class/proxy − pair-based, test MAP@R)",
        "",
        "Generated by `python benchmarks/family_gap.py`; do not edit by hand.",
        "Each cell: mean of the class/proxy rows minus mean of the pair-based rows, in points, ± the "
        "half-width of its 95% t-interval (Welch-Satterthwaite df). Family: the loss registry's "
        "`pair_based`. The interval covers the seeds the rows cover (one-seed rows: training seeds "
        "only) and describes these losses, not a population of losses. Losses: pair / class-proxy rows.",
        "",
    ]
    for dataset in datasets:
        out += [
            f"## {dataset}",
            "",
            "| board section | losses (pair / class-proxy) | "
            + " | ".join(f"{short} MAP@R gap" for _, short in MODES)
            + " |",
            "|---|---|" + "---|" * len(MODES),
        ]
        out += [f"| {ln.label} | {ln.counts} | " + " | ".join(ln.cells) + " |" for ln in tables[dataset]]
        out.append("")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--results-dir", type=Path, default=REPO / "results")
    parser.add_argument(
        "--datasets", default="glyphs,omniglot", help="comma-separated (default: %(default)s)"
    )
    parser.add_argument(
        "--before-rev",
        default=BEFORE_REV,
        help="the commit whose committed boards are 'before' (default: %(default)s, the last one "
        "before the first record at today's mini landed)",
    )
    parser.add_argument("--out", type=Path, help="also write the Markdown here")
    args = parser.parse_args(argv)
    text = markdown(args.results_dir, args.before_rev, [d for d in args.datasets.split(",") if d])
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
