"""Whether a search's best setting lies at a bound of its searched range.

A best value at the edge of the range says the search may have missed a better setting outside it
(the range, not the loss, decided that hyperparameter), or that the bound is the loss's natural
limit (a weight of 0 turns a term off). Readers of a leaderboard cannot see the ranges, so the
leaderboard footer names such values (:func:`bound_hits`). Pure Python (no torch, no Optuna).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: A value within this share of the range's width from a bound counts as at the bound, measured on
#: the scale searched (log ranges in log space). Why not exact equality: a quasi-random start
#: point never lands on a bound exactly, and a sampler's point may differ from it in the last bits.
BOUND_TOLERANCE = 0.01


@dataclass(frozen=True)
class BoundHit:
    """A best hyperparameter value at the ``side`` ("low" or "high") bound of its range."""

    name: str
    value: float
    bound: float
    side: str

    def describe(self) -> str:
        return f"{self.name} = {self.value:.4g} ({self.side} bound {self.bound:g})"


def position(value: float, low: float, high: float, log: bool) -> float:
    """Where ``value`` lies in [low, high] as a share of the width (0: low, 1: high), on the
    searched scale."""
    if log:
        value, low, high = math.log(value), math.log(low), math.log(high)
    return (value - low) / (high - low)


def bound_hits(
    space: Mapping[str, Mapping[str, Any]],
    best_params: Mapping[str, float],
    tolerance: float = BOUND_TOLERANCE,
) -> list[BoundHit]:
    """The searched hyperparameters whose best value is within ``tolerance`` of a bound, in the
    order of ``space``. Fixed (unsearched) values and degenerate ranges are never hits."""
    hits = []
    for name, rng in space.items():
        value = best_params.get(name)
        low, high, log = float(rng["low"]), float(rng["high"]), bool(rng.get("log", False))
        if value is None or not high > low or (log and value <= 0):
            continue
        where = position(float(value), low, high, log)
        if where <= tolerance:
            hits.append(BoundHit(name, float(value), low, "low"))
        elif where >= 1 - tolerance:
            hits.append(BoundHit(name, float(value), high, "high"))
    return hits
