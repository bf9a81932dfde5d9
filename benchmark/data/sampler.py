"""m-per-class batch sampling (docs/protocols.md §2.2).

We use our own sampler rather than pytorch-metric-learning's ``MPerClassSampler`` because PML's
draws from NumPy's global random state, while every run, fold and repetition here needs its own
seeded generator so that results are reproducible and independent of what ran before.
"""

from __future__ import annotations

import numpy as np

from benchmark.errors import ConfigError, DataError


class MPerClassSampler:
    """Batches of ``batch_size // m`` distinct classes with ``m`` images each."""

    def __init__(self, labels: np.ndarray, m: int, batch_size: int, rng: np.random.Generator) -> None:
        labels = np.asarray(labels)
        if labels.ndim != 1 or labels.size == 0:
            raise DataError(f"The sampler needs a non-empty 1-D label array, got shape {labels.shape}.")
        if m < 1 or batch_size < 1:
            raise ConfigError(f"m and batch_size must be positive, got m={m}, batch_size={batch_size}.")
        if batch_size % m:
            raise ConfigError(f"batch_size ({batch_size}) must be divisible by m ({m}).")
        classes, counts = np.unique(labels, return_counts=True)
        self.classes_per_batch = batch_size // m
        if classes.size < self.classes_per_batch:
            raise DataError(
                f"A batch of {batch_size} with m={m} needs {self.classes_per_batch} distinct classes, "
                f"but the data has only {classes.size}."
            )
        self.m = m
        self.batch_size = batch_size
        self.rng = rng
        # Dataset indices grouped by class: class k owns by_class[starts[k] : starts[k] + counts[k]].
        self._by_class = np.argsort(labels, kind="stable").astype(np.int64)
        self._counts = counts.astype(np.int64)
        self._starts = np.concatenate(([0], np.cumsum(self._counts)[:-1])).astype(np.int64)

    def sample(self, n_batches: int) -> np.ndarray:
        """``n_batches`` batches of dataset indices, int64 of shape (n_batches, batch_size)."""
        if n_batches < 0:
            raise ConfigError(f"n_batches must be non-negative, got {n_batches}.")
        n_classes = self._counts.size
        # (n_batches, classes_per_batch) class positions, distinct within each batch.
        chosen = _distinct_uniform(self.rng, np.full(n_batches, n_classes), self.classes_per_batch)
        counts = self._counts[chosen].ravel()
        # (n_batches * classes_per_batch, m) offsets inside each chosen class.
        offsets = np.empty((counts.size, self.m), dtype=np.int64)
        large = counts >= self.m
        offsets[large] = _distinct_uniform(self.rng, counts[large], self.m)
        small = ~large
        # Classes with fewer than m images are drawn with replacement (docs/protocols.md §2.2).
        offsets[small] = self.rng.integers(0, counts[small, None], size=(int(small.sum()), self.m))
        positions = self._starts[chosen].reshape(-1, 1) + offsets
        batches: np.ndarray = self._by_class[positions].reshape(n_batches, self.batch_size)
        return batches


def _distinct_uniform(rng: np.random.Generator, population: np.ndarray, k: int) -> np.ndarray:
    """For each row r, k distinct integers drawn uniformly from range(population[r]).

    Floyd's algorithm, vectorised over rows: k steps, each O(rows * k), so the cost does not grow
    with the population size. Returns int64 of shape (rows, k).
    """
    rows = population.size
    out = np.empty((rows, k), dtype=np.int64)
    for step in range(k):
        top = population - k + step  # Floyd: draw from [0, top], keep top itself on a collision.
        draw = rng.integers(0, top + 1, dtype=np.int64) if rows else np.empty(0, dtype=np.int64)
        collided = (out[:, :step] == draw[:, None]).any(axis=1)
        out[:, step] = np.where(collided, top, draw)
    return out


class PassSampler:
    """Batches of ``batch_size`` images taken in order from successive seeded shuffles of all images.

    Each pass over the data is a fresh permutation; a batch may straddle two passes, so every
    image is drawn once per pass and no batch is short. This is the plain random batching of
    the Proxy-Anchor and Class-Anchor-Margin code bases (class-based losses need no positives).
    """

    def __init__(self, n_items: int, batch_size: int, rng: np.random.Generator) -> None:
        if n_items < 2:
            raise DataError(f"Random batches need at least 2 training images, got {n_items}.")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be positive, got {batch_size}.")
        self.n_items = n_items
        # A batch larger than the data would repeat images inside one batch; cap it instead.
        self.batch_size = min(batch_size, n_items)
        self.rng = rng
        self._pending = np.empty(0, dtype=np.int64)

    def sample(self, n_batches: int) -> np.ndarray:
        """``n_batches`` batches of dataset indices, int64 of shape (n_batches, batch_size)."""
        if n_batches < 0:
            raise ConfigError(f"n_batches must be non-negative, got {n_batches}.")
        need = n_batches * self.batch_size
        parts = [self._pending]
        have = len(self._pending)
        while have < need:
            perm = self.rng.permutation(self.n_items).astype(np.int64)
            parts.append(perm)
            have += len(perm)
        stream = np.concatenate(parts)
        self._pending = stream[need:]
        return stream[:need].reshape(n_batches, self.batch_size)
