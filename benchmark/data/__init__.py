"""Datasets, class-disjoint splits, batch sampling and batched augmentation.

Importing this package registers every dataset (:mod:`benchmark.data.registry`) without importing
torch; the dataset classes and loaders below are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from benchmark.data.registry import DATASETS, DatasetOptions, DatasetSpec, load_dataset

if TYPE_CHECKING:
    from benchmark.data.base import ImageDataset
    from benchmark.data.standard import LazyImageDataset, load_partitions

# Names re-exported here whose modules import torch: loaded when first used (PEP 562).
_LAZY = {
    "ImageDataset": "benchmark.data.base",
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
