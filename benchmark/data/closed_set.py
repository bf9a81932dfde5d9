"""Closed-set split for the ``cbir`` protocol (protocols.md §2.5): database and queries share their classes.

Each class's images are shuffled with a seeded generator and its first ``n_query(c)`` images
become queries; the rest form the database (= training images). ``n_query(c)`` is either a fixed
count per class or ``round(query_fraction * n_c)`` clipped to ``[1, n_c - 1]``, so every class
has at least one query and at least one database image. The split is a pure function of the
labels, the seed and the count rule: image content never enters it, so the same labels always
give the same indices.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from benchmark.data.base import ImageDataset
from benchmark.errors import ConfigError, DataError

#: Default share of each class's images that become queries: glyphs (32 per class) gives 8
#: queries and 24 database images, omniglot (20 per class) 5 and 15; CIFAR-100 has 1/6.
DEFAULT_QUERY_FRACTION = 0.25


# eq=False: a generated __eq__ would compare arrays element-wise and fail.
@dataclass(frozen=True, eq=False)
class ClosedSetSplit:
    """Indices (ascending, int64) of the database and query images of one dataset."""

    database: np.ndarray
    queries: np.ndarray

    def fingerprint(self) -> str:
        """Short SHA-256 of both index lists, for run records."""
        digest = hashlib.sha256()
        for part in (self.database, self.queries):
            digest.update(np.ascontiguousarray(part, dtype="<i8").tobytes())
            digest.update(b"|")
        return digest.hexdigest()[:16]


def queries_per_class(
    class_sizes: np.ndarray, query_fraction: float | None, n_queries: int | None
) -> np.ndarray:
    """How many images of each class become queries (int64, same shape as ``class_sizes``).

    Exactly one of ``query_fraction`` (in (0, 1)) and ``n_queries`` (>= 1) must be given. A
    class with fewer than two images, or with no image left for the database, is a DataError.
    """
    sizes = np.asarray(class_sizes, dtype=np.int64)
    if n_queries is not None and query_fraction is None:
        if isinstance(n_queries, bool) or not isinstance(n_queries, int) or n_queries < 1:
            raise ConfigError(f"n_queries must be an integer >= 1, got {n_queries!r}.")
        return np.full(sizes.shape, n_queries, dtype=np.int64)
    if query_fraction is not None and n_queries is None:
        if isinstance(query_fraction, bool) or not 0.0 < float(query_fraction) < 1.0:
            raise ConfigError(f"query_fraction must lie in (0, 1), got {query_fraction!r}.")
        # np.rint rounds halves to even; floor(x + 0.5) is the rule a reader expects.
        counts = np.floor(sizes * float(query_fraction) + 0.5).astype(np.int64)
        return np.asarray(np.clip(counts, 1, np.maximum(sizes - 1, 1)), dtype=np.int64)
    raise ConfigError(
        f"Give exactly one of query_fraction and n_queries; got query_fraction={query_fraction}, "
        f"n_queries={n_queries}."
    )


def closed_set_split(
    labels: np.ndarray,
    *,
    seed: int,
    query_fraction: float | None = DEFAULT_QUERY_FRACTION,
    n_queries: int | None = None,
) -> ClosedSetSplit:
    """Split image indices into database and queries with the same classes (see module docstring).

    Pass ``n_queries`` (and ``query_fraction=None``) for a fixed number of queries per class.
    Raises DataError naming the classes that cannot give both a query and a database image.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.size == 0:
        raise DataError(f"labels must be a non-empty 1-D array, got shape {labels.shape}.")
    if not np.issubdtype(labels.dtype, np.integer):
        raise DataError(f"labels must be integers, got dtype {labels.dtype}.")
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ConfigError(f"seed must be an integer, got {seed!r}.")
    classes, class_of, sizes = np.unique(labels, return_inverse=True, return_counts=True)
    counts = queries_per_class(sizes, query_fraction, n_queries)
    too_small = np.flatnonzero(sizes - counts < 1)
    if too_small.size:
        shown = ", ".join(f"{int(classes[i])} ({int(sizes[i])} images)" for i in too_small[:10])
        more = f" and {too_small.size - 10} more" if too_small.size > 10 else ""
        raise DataError(
            f"A closed-set split needs at least {int(counts[too_small].max()) + 1} images in a class "
            f"(queries plus one database image); class(es) {shown}{more} have fewer."
        )

    # One seeded key per image, then a stable sort by (class, key): the position of an image
    # within its class in that order is its rank in the class's shuffle.
    rng = np.random.default_rng(int(seed))
    keys = rng.permutation(labels.size)
    class_of = class_of.reshape(-1)
    order = np.lexsort((keys, class_of))
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    rank = np.empty(labels.size, dtype=np.int64)
    rank[order] = np.arange(labels.size) - np.repeat(starts, sizes)
    is_query = rank < counts[class_of]
    return ClosedSetSplit(
        database=np.flatnonzero(~is_query).astype(np.int64),
        queries=np.flatnonzero(is_query).astype(np.int64),
    )


def closed_set_datasets(
    dataset: ImageDataset,
    *,
    seed: int,
    query_fraction: float | None = DEFAULT_QUERY_FRACTION,
    n_queries: int | None = None,
) -> tuple[ImageDataset, ImageDataset]:
    """The (database, queries) datasets of :func:`closed_set_split` applied to ``dataset``."""
    split = closed_set_split(dataset.labels, seed=seed, query_fraction=query_fraction, n_queries=n_queries)
    return dataset.take(split.database), dataset.take(split.queries)
