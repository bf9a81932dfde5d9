"""Class-disjoint MLRC splits (docs/protocols.md §2.1).

The block arithmetic reproduces powerful-benchmarker's ``MLRCSplitManager`` expression for
expression (including its float arithmetic and ``int()`` truncation), because the split decides
whether numbers are comparable with published MLRC results.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from benchmark.errors import ConfigError, DataError


@dataclass(frozen=True)
class FoldSplit:
    """The train and validation class ids of one fold."""

    train: tuple[int, ...]
    val: tuple[int, ...]


@dataclass(frozen=True)
class MLRCSplit:
    """Test classes, train/val folds over the remaining classes, and train+val classes never validated."""

    test: tuple[int, ...]
    folds: tuple[FoldSplit, ...]
    never_validated: tuple[int, ...]

    def fingerprint(self) -> str:
        """SHA-256 hex digest of a canonical JSON form of the split."""
        canonical = {
            "test": list(self.test),
            "folds": [{"train": list(f.train), "val": list(f.val)} for f in self.folds],
            "never_validated": list(self.never_validated),
        }
        text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class BlockSizes:
    """Number of classes in the test block and in each fold's train and val blocks."""

    n_test: int
    n_train: int
    n_val: int


def block_sizes(n_classes: int, n_folds: int) -> BlockSizes:
    """Block sizes for ``n_classes`` classes and ``n_folds`` folds, as MLRCSplitManager computes them."""
    n, p = n_classes, n_folds
    n_test = int(0.5 * n)
    n_val = int(n * (1 / p) * 0.5)
    n_train = int(n * (1 - (1 / p) * 0.5) * 0.5)
    # The rounding remainder goes to the train block, so train + val + test == N.
    n_train += n - (n_train + n_val + n_test)
    return BlockSizes(n_test=n_test, n_train=n_train, n_val=n_val)


def min_classes(n_folds: int) -> int:
    """The fewest classes for which every block of an ``n_folds``-fold MLRC split is non-empty."""
    n = 2
    while not _all_blocks_nonempty(block_sizes(n, n_folds)):
        n += 1
    return n


def _all_blocks_nonempty(sizes: BlockSizes) -> bool:
    return min(sizes.n_test, sizes.n_train, sizes.n_val) >= 1


def mlrc_split(class_ids: Sequence[int], n_folds: int = 4) -> MLRCSplit:
    """The MLRC class-disjoint split of ``class_ids`` (duplicates ignored, order irrelevant)."""
    if n_folds < 1:
        raise ConfigError(f"The MLRC split needs at least 1 fold, got n_folds={n_folds}.")
    classes = sorted({int(c) for c in class_ids})
    n = len(classes)
    sizes = block_sizes(n, n_folds)
    if not _all_blocks_nonempty(sizes):
        raise DataError(
            f"The dataset has {n} classes, but a class-disjoint MLRC split into {n_folds} folds needs at "
            f"least {min_classes(n_folds)} (test = half the classes, each validation block "
            f"{1 / (2 * n_folds):.3g} of them)."
        )
    start = int(0.5 * n)
    test_positions = [(start + i) % n for i in range(sizes.n_test)]
    test_set = set(test_positions)
    train_val = [classes[i] for i in range(n) if i not in test_set]
    m = len(train_val)
    folds = tuple(_fold(train_val, int(p / n_folds * m), sizes) for p in range(n_folds))
    validated = {c for fold in folds for c in fold.val}
    return MLRCSplit(
        test=tuple(classes[i] for i in test_positions),
        folds=folds,
        never_validated=tuple(c for c in train_val if c not in validated),
    )


def _fold(train_val: list[int], offset: int, sizes: BlockSizes) -> FoldSplit:
    """One fold: contiguous train then val blocks of ``train_val`` starting at ``offset``, wrapping."""
    m = len(train_val)
    train = tuple(train_val[(offset + i) % m] for i in range(sizes.n_train))
    val = tuple(train_val[(offset + sizes.n_train + i) % m] for i in range(sizes.n_val))
    return FoldSplit(train=train, val=val)


def check_queries_have_positives(
    labels: Iterable[int], eval_sets: Mapping[str, Sequence[int]], dataset: str
) -> None:
    """Raise DataError when an evaluation set has no class with at least 2 images.

    ``eval_sets`` maps a set's name (e.g. "test", "fold 0 validation") to its class ids. A query
    needs another image of its class in the gallery; without one, MAP@R, P@1 and R-precision are
    undefined for it, and a set where no class has 2 images scores nothing at all.
    """
    counts = Counter(int(c) for c in labels)
    n_multi = sum(1 for n in counts.values() if n >= 2)
    for name, class_ids in eval_sets.items():
        usable = sum(1 for c in class_ids if counts.get(int(c), 0) >= 2)
        if usable == 0:
            raise DataError(
                f"Dataset {dataset!r}: the {name} set has no class with at least 2 images (0 of its "
                f"{len(class_ids)} classes; {n_multi} of the dataset's {len(counts)} classes have 2 or "
                "more): no query would have a positive, so retrieval metrics are undefined. Use "
                "classes with at least 2 images each (data.max_per_class = 0 or >= 2)."
            )
