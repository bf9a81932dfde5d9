"""benchmarks/fold_blocks.py's per-alphabet level, on made-up embeddings (no data, no torch)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import load_benchmark_script

from benchmark.metrics import evaluate


def _made_up() -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Alphabet A: 3 characters at distinct corners (perfect retrieval); B: 3 characters drawn
    from one cloud (retrieval near chance); C: 1 character (too few to draw from)."""
    rng = np.random.default_rng(0)
    names = {0: "A/c1", 1: "A/c2", 2: "A/c3", 3: "B_x/c1", 4: "B_x/c2", 5: "B_x/c3", 6: "C/c1"}
    labels = np.repeat(np.arange(7), 6)
    emb = rng.normal(size=(len(labels), 8)).astype(np.float32)
    for c in range(3):
        emb[labels == c] = np.eye(8, dtype=np.float32)[c] * 10 + 0.01 * emb[labels == c]
    return emb, labels, names


def test_each_alphabet_is_scored_on_its_own_characters_alone() -> None:
    fb = load_benchmark_script("fold_blocks")
    emb, labels, names = _made_up()
    levels = fb.alphabet_levels(emb, labels, names, "cosine", n_classes=2, n_draws=4, seed=3)
    assert sorted(levels) == ["A", "B x"]  # C has 1 character; underscores read as spaces
    assert [len(v) for v in levels.values()] == [4, 4]
    assert levels["A"] == [1.0] * 4
    assert np.mean(levels["B x"]) < 0.9
    # Each value is the MAP@R of the images of 2 of B's characters alone: the draws, replayed.
    rng = np.random.default_rng(3)
    for _ in range(4):
        rng.choice([0, 1, 2], size=2, replace=False)  # A's draws come first (name order)
    for value in levels["B x"]:
        mask = np.isin(labels, rng.choice([3, 4, 5], size=2, replace=False))
        assert value == pytest.approx(evaluate(emb[mask], labels[mask], "cosine", ["map_at_r"])["map_at_r"])
    assert fb.alphabet_levels(emb, labels, names, "cosine", 2, 4, seed=3) == levels


def test_the_table_puts_the_hardest_alphabet_first_with_its_blocks() -> None:
    fb = load_benchmark_script("fold_blocks")
    table = fb.alphabet_table({"A": [0.9, 1.0], "B": [0.1, 0.3]}, {"A": "test", "B": "val 1"})
    assert table.splitlines()[2:] == ["| B | val 1 | 20.0 | 10.0–30.0 |", "| A | test | 95.0 | 90.0–100.0 |"]
