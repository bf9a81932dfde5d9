"""Tiers of a column instead of one winner (docs/protocols.md §4.6).

Every pair of rows in a column is tested (:func:`benchmark.stats.seeds.difference`), the
p-values are Holm-adjusted over all pairs of the column, and:

- the *best tier* is the best row plus every row not significantly different from it;
- a compact letter display gives each row letters such that two rows share a letter exactly when
  they are not significantly different (Piepho's insert-and-absorb algorithm, 2004), letter
  ``a`` for the group holding the best row.

Why by hand: scipy has no compact letter display, and statsmodels' Tukey summary works on raw
samples with one variance, not on rows with their own variance and degrees of freedom.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass

from benchmark.stats.intervals import holm
from benchmark.stats.seeds import Estimate, difference


@dataclass(frozen=True)
class Tiers:
    """The outcome of one column's pairwise comparisons (rows in the given order)."""

    #: Holm-adjusted p-value of every pair (i, j), i < j (NaN: untestable, never significant).
    p_adjusted: dict[tuple[int, int], float]
    alpha: float
    #: Index of the row with the best mean (None when no row has a mean).
    best: int | None
    #: Per row: whether it is in the best tier.
    in_best_tier: tuple[bool, ...]
    #: Per row: its letters ("" for a row without a mean).
    letters: tuple[str, ...]
    #: Number of pairs tested (the Holm family).
    n_pairs: int

    def significant(self, i: int, j: int) -> bool:
        """Whether rows i and j differ at the column's alpha after Holm."""
        p = self.p_adjusted.get((min(i, j), max(i, j)), math.nan)
        return not math.isnan(p) and p <= self.alpha


def compact_letters(n: int, significant: Sequence[tuple[int, int]], order: Sequence[int]) -> list[str]:
    """Letters for n items given the significantly different pairs; ``order`` ranks the items
    (best first) and decides which group gets ``a``. Items in ``order`` only get letters."""
    items = list(order)
    columns: list[set[int]] = [set(items)] if items else []
    for i, j in significant:
        split: list[set[int]] = []
        for col in columns:
            if i in col and j in col:
                split += [col - {j}, col - {i}]
            else:
                split.append(col)
        # Absorb: a column contained in another says nothing more (and duplicates go).
        kept: list[set[int]] = []
        for k, col in enumerate(split):
            if any((col < other) or (col == other and m < k) for m, other in enumerate(split) if m != k):
                continue
            kept.append(col)
        columns = kept
    rank = {item: r for r, item in enumerate(items)}
    columns.sort(key=lambda c: sorted(rank[x] for x in c))
    alphabet = string.ascii_lowercase + string.ascii_uppercase
    letters = [""] * n
    for k, col in enumerate(columns):
        name = alphabet[k] if k < len(alphabet) else f"[{k}]"
        for item in col:
            letters[item] += name
    return letters


def column_tiers(estimates: Sequence[Estimate], higher_is_better: bool = True, alpha: float = 0.05) -> Tiers:
    """Holm over all pairs of the column, the best tier and the letters."""
    valid = [i for i, e in enumerate(estimates) if not math.isnan(e.mean)]
    sign = 1.0 if higher_is_better else -1.0
    order = sorted(valid, key=lambda i: (-sign * estimates[i].mean, i))
    pairs = [(i, j) for a, i in enumerate(valid) for j in valid[a + 1 :]]
    raw = [difference(estimates[i], estimates[j]).p for i, j in pairs]
    adjusted = holm(raw) if raw else []
    p_adj = dict(zip(pairs, adjusted, strict=True))
    sig = [(i, j) for (i, j), p in p_adj.items() if not math.isnan(p) and p <= alpha]
    best = order[0] if order else None
    in_best = tuple(
        best is not None and i in valid and (i == best or not _sig(p_adj, i, best, alpha))
        for i in range(len(estimates))
    )
    return Tiers(p_adj, alpha, best, in_best, tuple(compact_letters(len(estimates), sig, order)), len(pairs))


def _sig(p_adj: dict[tuple[int, int], float], i: int, j: int, alpha: float) -> bool:
    p = p_adj.get((min(i, j), max(i, j)), math.nan)
    return not math.isnan(p) and p <= alpha
