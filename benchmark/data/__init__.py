"""Datasets, class-disjoint splits, batch sampling and batched augmentation."""

from benchmark.data import glyphs as _glyphs  # noqa: F401  (registers "glyphs")
from benchmark.data.base import DATASETS, DatasetOptions, DatasetSpec, ImageDataset, load_dataset

__all__ = ["DATASETS", "DatasetOptions", "DatasetSpec", "ImageDataset", "load_dataset"]
