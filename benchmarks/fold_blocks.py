"""Which alphabets each block of Omniglot's MLRC split holds, and each fold's validation level.

The MLRC split (docs/protocols.md §2.1) cuts the sorted class ids into contiguous blocks.
Omniglot's character ids run alphabet by alphabet, so each block is one to four alphabets, not a
sample of all of them. This script prints, for the data at ``--data-dir``:

1. per block (test, and each fold's validation classes): its classes per alphabet;
2. per fold, over the test-stage fold trainings of the board's current ``--budget`` section
   (every record of its board settings: each seed of each loss, every test repetition): the
   validation MAP@R of the untrained model (epoch 0) and the best one, as min–max over them.

With ``--alphabets``, also:

3. per alphabet, how hard its characters are to tell apart before training: MAP@R of the untrained
   model (the budget's pretrained trunk and a random embedder, initialised as the run's untrained
   row of fold 0, search seed 0) on that alphabet's images alone, over ``--draws`` random subsets
   of ``--classes`` of its characters (seeded), so that alphabets of different sizes are scored
   on galleries of one size. Needs torch; a few seconds of CPU.

A fold whose validation alphabets are hard (look-alike characters) scores lower for every loss,
trained or not; the search objective is the mean over folds, so such a fold lowers every trial's
objective and, its values spanning less, weighs less in which trial wins. The split is
recomputed from the data and checked against the records' split fingerprint (a mismatch is an
error: the records were made on other data).

    python benchmarks/fold_blocks.py [--data-dir ../shared/data/omniglot] [--results-dir results]
                                     [--budget mini] [--exclude margin]
                                     [--alphabets [--classes 15] [--draws 20] [--loss contrastive]]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from benchmark.data.omniglot import read_characters
from benchmark.data.splits import MLRCSplit, mlrc_split
from benchmark.metrics import evaluate
from benchmark.metrics.knn import Space
from benchmark.records import RunRecord
from benchmark.report.leaderboard import load_leaderboard


def alphabet(name: str) -> str:
    """``<alphabet>/<characterNN>`` -> the alphabet, underscores as spaces."""
    return name.split("/")[0].replace("_", " ")


def block_table(split: MLRCSplit, names: Mapping[int, str]) -> str:
    """A markdown table: each block's class count and its classes per alphabet (most first)."""
    blocks = [("test", split.test)] + [(f"fold {i} validation", f.val) for i, f in enumerate(split.folds)]
    lines = ["| block | classes | alphabets (classes) |", "|---|---|---|"]
    for label, classes in blocks:
        counts = Counter(alphabet(names[c]) for c in classes)
        parts = ", ".join(f"{a} ({n})" for a, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append(f"| {label} | {len(classes)} | {parts} |")
    return "\n".join(lines)


def fold_levels(records: Sequence[RunRecord], n_folds: int) -> list[tuple[list[float], list[float]]]:
    """Per fold: (epoch-0 validation MAP@R, best validation MAP@R) of every test-stage fold training
    of ``records`` (a training without an epoch-0 point adds to the best list only)."""
    out: list[tuple[list[float], list[float]]] = [([], []) for _ in range(n_folds)]
    for record in records:
        for rep in record.test["rep_details"]:
            for i, fold in enumerate(rep["folds"]):
                untrained, best = out[i]
                best.append(float(fold["best_val_map_at_r"]))
                untrained.extend(float(v) for epoch, v in fold.get("curve") or [] if epoch == 0)
    return out


def _span(values: Sequence[float]) -> str:
    return f"{100 * min(values):.1f}–{100 * max(values):.1f}" if values else "–"


def level_table(levels: Sequence[tuple[Sequence[float], Sequence[float]]]) -> str:
    """A markdown table of :func:`fold_levels`: per fold, the count and the min–max (percent)."""
    lines = [
        "| fold | fold trainings | untrained val MAP@R (epoch 0) | best val MAP@R |",
        "|---|---|---|---|",
    ]
    for i, (untrained, best) in enumerate(levels):
        lines.append(f"| {i} | {len(best)} | {_span(untrained)} | {_span(best)} |")
    return "\n".join(lines)


def alphabet_levels(
    embeddings: np.ndarray,
    labels: np.ndarray,
    names: Mapping[int, str],
    space: Space,
    n_classes: int,
    n_draws: int,
    seed: int,
) -> dict[str, list[float]]:
    """Per alphabet of at least ``n_classes`` characters: the MAP@R of ``embeddings`` restricted
    to ``n_classes`` of its characters, for each of ``n_draws`` subsets drawn without replacement
    (one generator seeded by ``seed``, alphabets in name order); smaller alphabets are left out."""
    by_alphabet: dict[str, list[int]] = {}
    for c in np.unique(labels).tolist():
        by_alphabet.setdefault(alphabet(names[c]), []).append(c)
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {}
    for name, classes in sorted(by_alphabet.items()):
        if len(classes) < n_classes:
            continue
        values = []
        for _ in range(n_draws):
            mask = np.isin(labels, rng.choice(classes, size=n_classes, replace=False))
            values.append(evaluate(embeddings[mask], labels[mask], space, ["map_at_r"])["map_at_r"])
        out[name] = values
    return out


def alphabet_table(levels: Mapping[str, Sequence[float]], folds: Mapping[str, str]) -> str:
    """A markdown table of :func:`alphabet_levels`, lowest mean first: per alphabet, where the
    split puts it (``folds``), the mean and min–max over the draws (percent)."""
    lines = ["| alphabet | in blocks | untrained MAP@R, mean | min–max |", "|---|---|---|---|"]
    for name, values in sorted(levels.items(), key=lambda kv: float(np.mean(kv[1]))):
        lines.append(
            f"| {name} | {folds.get(name, '–')} | {100 * float(np.mean(values)):.1f} | {_span(values)} |"
        )
    return "\n".join(lines)


def block_names(split: MLRCSplit, names: Mapping[int, str]) -> dict[str, str]:
    """Alphabet -> the blocks holding its characters (``test``, ``val 1``, ...), in block order."""
    blocks = [("test", split.test)] + [(f"val {i}", f.val) for i, f in enumerate(split.folds)]
    out: dict[str, list[str]] = {}
    for label, classes in blocks:
        for a in dict.fromkeys(alphabet(names[c]) for c in classes):
            out.setdefault(a, []).append(label)
    return {a: ", ".join(labels) for a, labels in out.items()}


def untrained_embeddings(data_dir: Path, budget: str, loss: str) -> tuple[np.ndarray, np.ndarray, Space]:
    """Embeddings of every image of the run's Omniglot data (as ``--budget`` loads it) by the
    untrained model of fold 0 of an MLRC run of ``loss`` at search seed 0, its labels, and the
    loss's embedding space."""
    import torch  # only here: the block and level tables need no torch

    from benchmark.engine.seeds import derive_seed
    from benchmark.engine.train import build_fold_model, embed_samples
    from benchmark.losses import LOSSES
    from benchmark.protocol.request import RunRequest, preflight
    from benchmark.protocol.run_data import cache_dir, load_run_dataset

    request = RunRequest(loss=loss, dataset="omniglot", budget=budget, data_dir=str(data_dir))
    config = preflight(request)
    data = load_run_dataset(config, cache_dir())
    model = build_fold_model(config, data, derive_seed(0, "untrained", 0))
    cpu = torch.device("cpu")
    return embed_samples(model.to(cpu), data, cpu), data.labels, LOSSES.get(loss).embedding_space


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=Path("../shared/data/omniglot"))
    ap.add_argument("--results-dir", type=Path, default=Path("results"))
    ap.add_argument("--budget", default="mini")
    ap.add_argument("--exclude", default="", help="comma-separated losses left out of the fold levels")
    ap.add_argument("--alphabets", action="store_true", help="also each alphabet's untrained MAP@R")
    ap.add_argument("--classes", type=int, default=15, help="characters per drawn subset (--alphabets)")
    ap.add_argument("--draws", type=int, default=20, help="subsets drawn per alphabet (--alphabets)")
    ap.add_argument("--loss", default="contrastive", help="whose run's untrained model (--alphabets)")
    args = ap.parse_args(argv)
    if args.alphabets and (args.classes < 2 or args.draws < 1):
        ap.error(f"--classes must be >= 2 and --draws >= 1, got {args.classes} and {args.draws}")

    _, labels, names = read_characters(args.data_dir)
    split = mlrc_split(labels.tolist())
    board = load_leaderboard(args.results_dir, "omniglot", "mlrc", budget=args.budget, require_metric=False)
    current = [s for s in board.sections if s.budget == args.budget and not s.earlier]
    if not current:
        print(f"No {args.budget!r} records for omniglot/mlrc under {args.results_dir}.", file=sys.stderr)
        return 2
    excluded = {x for x in args.exclude.split(",") if x}
    records = [r for r in current[0].records if r.loss not in excluded]
    stored = {r.document.get("data", {}).get("split_fingerprint") for r in records}
    if stored != {split.fingerprint()}:
        print(
            f"The records' split fingerprints {sorted(map(str, stored))} differ from the split of the data "
            f"at {args.data_dir} ({split.fingerprint()}): they were made on other data.",
            file=sys.stderr,
        )
        return 2
    print(f"Omniglot at {args.data_dir}: {len(names)} classes, {len(labels)} images.\n")
    print(block_table(split, names))
    losses = ", ".join(sorted({r.loss for r in records}))
    print(
        f"\nTest-stage fold trainings of `{current[0].label}`, {len(records)} records ({losses}); "
        "min–max, percent:\n"
    )
    print(level_table(fold_levels(records, len(split.folds))))
    if args.alphabets:
        embeddings, labels, space = untrained_embeddings(args.data_dir, args.budget, args.loss)
        levels = alphabet_levels(embeddings, labels, names, space, args.classes, args.draws, seed=0)
        print(
            f"\nPer alphabet, before training (untrained model of fold 0 of an MLRC {args.loss} run, "
            f"search seed 0, {space} space): MAP@R over {args.draws} subsets of {args.classes} "
            f"characters each (alphabets of fewer left out), percent:\n"
        )
        print(alphabet_table(levels, block_names(split, names)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
