"""Datasets, class-disjoint splits, batch sampling and batched augmentation.

Importing this package registers every dataset.
"""

from benchmark.data import folder as _folder  # noqa: F401  (registers "folder")
from benchmark.data import glyphs as _glyphs  # noqa: F401  (registers "glyphs")
from benchmark.data import omniglot as _omniglot  # noqa: F401  (registers "omniglot")
from benchmark.data.base import DATASETS, DatasetOptions, DatasetSpec, ImageDataset, load_dataset
from benchmark.data.standard import LazyImageDataset, load_partitions, register_standard_datasets

register_standard_datasets(DATASETS)

__all__ = [
    "DATASETS",
    "DatasetOptions",
    "DatasetSpec",
    "ImageDataset",
    "LazyImageDataset",
    "load_dataset",
    "load_partitions",
]
