"""Do the board's claims survive another search seed? (claims of docs/protocols.md §4.5-4.6)

From the committed records of one dataset/protocol/budget, within each board-settings group (a
leaderboard section: seeds run under other settings are no fresh seeds of one experiment), for the
losses that have records of several search seeds:

- single-seed board: seed A's records alone (intervals over training seeds only), pairs called
  significantly different (Holm over all pairs of the column, alpha 0.05); at a fresh seed B,
  how many keep their order, and how many are still significant on seed B's own board;
- multi-seed board: seeds A1..Ak folded (two-level model), its significant pairs; at a fresh
  seed B, how many keep their order (B's means), and how many are significant on B's board.

Every split of the available seeds into (board seeds, fresh seed) is evaluated and summed, except
a split whose seeds share fewer than two losses (no pair to test): those are listed as not
evaluated. A seed only one loss has records at is left out before splitting (and named), so that
it does not block the folded boards of the seeds the others share.
Prints a Markdown table; ``--out`` also writes it (docs/replication.md is generated this way).

    python benchmarks/replication.py --dataset omniglot --out docs/replication.md
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmark.records import RunRecord
from benchmark.report.leaderboard import UNTRAINED, build_leaderboard, select_records

COLUMNS = (("separated", "map_at_r"), ("concatenated", "map_at_r"))


def _board(
    records: Sequence[RunRecord],
) -> tuple[list[str], dict[tuple[str, str], dict[tuple[str, str], tuple[bool, float]]]]:
    """Losses of the board and, per column, per loss pair: (significant, mean difference)."""
    lb = build_leaderboard("", "", {"b": list(records)}, ["map_at_r"])
    (section,) = lb.sections
    rows = [r for r in section.rows if r.loss != UNTRAINED]
    out: dict[tuple[str, str], dict[tuple[str, str], tuple[bool, float]]] = {}
    for col in COLUMNS:
        tiers = section.tiers[col]
        pairs: dict[tuple[str, str], tuple[bool, float]] = {}
        for i, j in itertools.combinations(range(len(rows)), 2):
            a, b = rows[i], rows[j]
            first, second = sorted((a.loss, b.loss))
            key = (first, second)
            diff = a.cells[col][0] - b.cells[col][0]
            if key != (a.loss, b.loss):
                diff = -diff
            pairs[key] = (tiers.significant(i, j), diff)
        out[col] = pairs
    return [r.loss for r in rows], out


def shared_losses(by_seed: dict[int, list[RunRecord]], board_seeds: Sequence[int], fresh: int) -> set[str]:
    """The losses with records at every board seed and at the fresh seed."""
    common = {r.loss for r in by_seed[fresh]}
    for s in board_seeds:
        common &= {r.loss for r in by_seed[s]}
    return common


def evaluate(
    by_seed: dict[int, list[RunRecord]], board_seeds: Sequence[int], fresh: int
) -> tuple[set[str], dict[tuple[str, str], list[int]] | None]:
    """The losses at every one of the seeds (:func:`shared_losses`) and, per column over their
    pairs: [significant on the board, order kept at fresh, still significant at fresh, flipped and
    significant at fresh]; None in place of the counts where fewer than two losses are shared."""
    common = shared_losses(by_seed, board_seeds, fresh)
    if len(common) < 2:
        return common, None
    board_records = [r for s in board_seeds for r in by_seed[s]]
    _, board = _board([r for r in board_records if r.loss in common])
    _, again = _board([r for r in by_seed[fresh] if r.loss in common])
    out = {}
    for col in COLUMNS:
        counts = [0, 0, 0, 0]
        for key, (sig, diff) in board[col].items():
            if not sig:
                continue
            sig2, diff2 = again[col][key]
            counts[0] += 1
            counts[1] += (diff > 0) == (diff2 > 0)
            counts[2] += sig2 and (diff > 0) == (diff2 > 0)
            counts[3] += sig2 and (diff > 0) != (diff2 > 0)
        out[col] = counts
    return common, out


def _seeds(records: Sequence[RunRecord], loss: str) -> list[int]:
    """The search seeds of ``loss``'s records, sorted (records without a seed are left out, as
    they are from the boards)."""
    return sorted(r.seed for r in records if r.loss == loss and r.seed is not None)


def group_summary(records: Sequence[RunRecord]) -> str:
    """Which losses of one settings group have several search seeds, and their seeds."""
    multi = sorted(_several(records))
    if not multi:
        seeds = sorted({r.seed for r in records if r.seed is not None})
        return f"No loss has several search seeds here (seeds {seeds})."
    return (
        f"Losses with several search seeds: {', '.join(multi)}; seeds per loss: "
        + ", ".join(f"{loss} {_seeds(records, loss)}" for loss in multi)
        + "."
    )


def _several(records: Sequence[RunRecord]) -> set[str]:
    """The losses with records of at least two search seeds."""
    return {loss for loss in {r.loss for r in records} if len(set(_seeds(records, loss))) >= 2}


def group_lines(records: Sequence[RunRecord]) -> list[str] | None:
    """The tables of one board-settings group (None: no two losses share two seeds)."""
    multi = _several(records)
    by_seed: dict[int, list[RunRecord]] = {}
    for r in records:
        if r.seed is not None and r.loss in multi:
            by_seed.setdefault(r.seed, []).append(r)
    # A seed that one of these losses alone holds is in no pair: every split that uses it, as a
    # board seed or as the fresh one, shares one loss at most. Left out, it no longer blocks the
    # folded boards of the seeds the losses do share (omniglot: margin's fourth seed had left
    # every folded board of CosFace's three seeds with margin alone).
    lone = {s: recs[0].loss for s, recs in by_seed.items() if len({r.loss for r in recs}) < 2}
    for s in lone:
        del by_seed[s]
    seeds = sorted(by_seed)
    if len(seeds) < 2 or len(multi) < 2:  # a pair needs two losses, each at two seeds or more
        return None
    lines = [group_summary(records), ""]
    if lone:
        lines += [
            "Left out, as one loss alone has records there: "
            + "; ".join(f"seed {s} ({loss})" for s, loss in sorted(lone.items()))
            + ".",
            "",
        ]
    lines += [
        "| Board | Fresh seed | Column | Called different | Order kept | Still significant | Reversed |",
        "|---|---|---|---|---|---|---|",
    ]
    totals: dict[tuple[str, tuple[str, str]], list[int]] = {}
    designs: list[tuple[str, list[int], int]] = []
    for fresh in seeds:
        others = [s for s in seeds if s != fresh]
        for a in others:
            designs.append(("single seed", [a], fresh))
        if len(others) >= 2:
            designs.append((f"{len(others)} seeds folded", others, fresh))
    no_pair: list[str] = []
    for kind, board_seeds, fresh in designs:
        label = f"{kind} ({','.join(map(str, board_seeds))})"
        common, result = evaluate(by_seed, board_seeds, fresh)
        if result is None:
            # Seeds of one group can hold different losses while a board is being regenerated
            # (a loss's seed 0 moved to today's settings, its seeds 1 and 2 not yet): such a
            # design has no pair to test, which is not the same as no pair called different.
            shared = ", ".join(sorted(common)) or "none"
            no_pair.append(f"{label} at fresh seed {fresh} (shared: {shared})")
            continue
        for col, c in result.items():
            lines.append(f"| {label} | {fresh} | {col[0]} {col[1]} | {c[0]} | {c[1]} | {c[2]} | {c[3]} |")
            t = totals.setdefault(("multi-seed" if "folded" in kind else kind, col), [0, 0, 0, 0])
            for k in range(4):
                t[k] += c[k]
    if not totals:
        return None
    if no_pair:
        lines += [
            "",
            "Not evaluated (fewer than two losses have records at the board seeds and the fresh "
            "seed, so there is no pair to test): " + "; ".join(no_pair) + ".",
        ]
    lines += [
        "",
        "| Board kind | Column | Called different | Order kept | Still significant | Reversed |",
        "|---|---|---|---|---|---|",
    ]
    for (kind, col), c in totals.items():
        kept = f"{c[1]} ({100 * c[1] / c[0]:.0f}%)" if c[0] else "0"
        lines.append(f"| {kind} | {col[0]} {col[1]} | {c[0]} | {kept} | {c[2]} | {c[3]} |")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dataset", default="omniglot")
    parser.add_argument("--protocol", default="mlrc")
    parser.add_argument("--budget", default="mini")
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    records = select_records(args.results_dir, args.dataset, args.protocol, args.budget)[args.budget]
    lines = [
        f"# Replication at a fresh search seed: `{args.dataset}`, `{args.protocol}`, budget `{args.budget}`",
        "",
        "Generated by `python benchmarks/replication.py` from the committed records; do not edit by hand.",
        "A pair is 'called different' when its Holm-adjusted test (all pairs of the column) rejects at "
        "α = 0.05; 'order kept' counts those whose means are in the same order at the fresh seed, "
        "'still significant' those significant in the same direction on the fresh seed's own board, "
        "'reversed' those significant in the opposite direction there. Seeds are compared only within "
        "one board-settings group (a leaderboard section): a seed run under other settings is not a "
        "fresh seed of the same experiment.",
    ]
    replicated = False
    # The leaderboard's own sections (one per board-settings group, labelled as on the board), so
    # this page groups and names seeds exactly as the board it checks.
    board = build_leaderboard(args.dataset, args.protocol, {args.budget: records})
    for section in board.sections:
        group = list(section.records)
        body = group_lines(group)
        replicated |= body is not None
        lines += ["", f"## `{section.label}`", ""]
        lines += (
            body
            if body is not None
            else [
                group_summary(group) + " Nothing to replicate yet: that needs two losses with "
                "records at the same two seeds or more."
            ]
        )
    if not replicated:
        print(
            "replication: no settings group has two losses with records at the same two search seeds "
            "or more.",
            file=sys.stderr,
        )
        return 2
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.out is not None:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
