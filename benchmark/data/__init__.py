"""Datasets, class-disjoint splits, batch sampling and batched augmentation.

Importing this package registers every dataset (:mod:`benchmark.data.specs`) without importing
torch; the dataset classes and loaders below are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from benchmark.data.specs import DATASETS, DatasetOptions, DatasetSpec

if TYPE_CHECKING:
    from benchmark.data.base import ImageDataset, load_dataset
    from benchmark.data.standard import LazyImageDataset, load_partitions

# Names re-exported here whose modules import torch: loaded when first used (PEP 562).
_LAZY = {
    "ImageDataset": "benchmark.data.base",
    "load_dataset": "benchmark.data.base",
    "LazyImageDataset": "benchmark.data.standard",
    "load_partitions": "benchmark.data.standard",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DATASETS",
    "DatasetOptions",
    "DatasetSpec",
    "ImageDataset",
    "LazyImageDataset",
    "load_dataset",
    "load_partitions",
]
