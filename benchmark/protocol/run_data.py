"""A run's data: the configured dataset (subsampled), its fold sets, and the augmentation by name.

Shared by the protocols, the fold worker processes, ``dmlbench regress`` and the benchmark
scripts: each loads its data with these functions, so a subset or split is the same everywhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from benchmark.config import RunConfig
from benchmark.data import DatasetOptions, load_dataset
from benchmark.data.augment import CHARACTER_AUGMENT, IMAGENET_AUGMENT, PAPER_AUGMENT, AugmentSpec
from benchmark.data.base import ImageDataset
from benchmark.data.splits import MLRCSplit, check_queries_have_positives, mlrc_split
from benchmark.engine.parallel import FoldData
from benchmark.models.features import Samples, load_features
from benchmark.protocol.request import AUGMENT_NAMES

# The names are declared (and validated) in benchmark.protocol.request, without torch.
AUGMENTS: dict[str, AugmentSpec | None] = dict(
    zip(AUGMENT_NAMES, (PAPER_AUGMENT, IMAGENET_AUGMENT, CHARACTER_AUGMENT, None), strict=True)
)


def cache_dir() -> Path:
    """Where derived data (rendered glyphs, decoded images) is cached between runs."""
    return Path(os.environ.get("DMLBENCH_CACHE", Path.home() / ".cache" / "dmlbench"))


def load_run_dataset(config: RunConfig, cache: Path) -> ImageDataset:
    """The configured dataset, subsampled as configured."""
    c = config.data
    options = DatasetOptions(
        data_dir=Path(c.data_dir) if c.data_dir else None, image_size=c.image_size, cache_dir=cache
    )
    dataset = subsample(load_dataset(c.dataset, options), c.max_classes, c.max_per_class)
    check_queries_have_positives(dataset.labels, {"whole": dataset.classes().tolist()}, c.dataset)
    return dataset


def subsample(dataset: ImageDataset, max_classes: int, max_per_class: int) -> ImageDataset:
    """The first ``max_classes`` classes (sorted ids) and first ``max_per_class`` images of each (0 = all)."""
    if max_classes > 0:
        dataset = dataset.subset(dataset.classes()[:max_classes].tolist())
    if max_per_class > 0:
        order = np.argsort(dataset.labels, kind="stable")
        labels = dataset.labels[order]
        starts = np.searchsorted(labels, labels, side="left")
        keep = np.sort(order[(np.arange(len(labels)) - starts) < max_per_class])
        dataset = dataset.take(keep)
    return dataset


def fold_data(dataset: Samples, splits: MLRCSplit) -> FoldData:
    """The per-fold train/val sets and the test set of a split (of images or of cached features)."""
    return FoldData(
        [(dataset.subset(f.train), dataset.subset(f.val)) for f in splits.folds], dataset.subset(splits.test)
    )


def load_fold_data(config: RunConfig, cache: Path, features_path: Path | None = None) -> FoldData:
    """The MLRC fold sets of ``config`` read from the on-disk caches (in a fold worker process).

    The dataset (or, frozen trunk, the feature file the parent wrote) comes from the cache and the
    split is recomputed (a pure function of the labels), so nothing large is pickled across processes.
    """
    data: Samples
    if features_path is not None:
        data = load_features(features_path, config.data.dataset)
    else:
        data = load_run_dataset(config, cache)
    return fold_data(data, mlrc_split(data.classes().tolist(), config.protocol.n_folds))
