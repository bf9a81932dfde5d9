"""The dataset contract: declaration, what a load returns, and that a load is reproducible.

Every check takes the :class:`~benchmark.data.registry.DatasetSpec` and the
:class:`~benchmark.data.registry.DatasetOptions` to load it with, and raises ``AssertionError``
(or the :class:`~benchmark.errors.DataError` that ``dmlbench run`` would report) naming the
dataset and what failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import ClassVar

import numpy as np

from benchmark.checks import SAFE_NAME
from benchmark.config import RunConfig, config_to_dict, flatten
from benchmark.data.base import ImageDataset, validate_dataset
from benchmark.data.registry import DatasetOptions, DatasetSpec, adopt_dataset
from benchmark.protocol.registry import PROTOCOLS, setting_names

__all__ = [
    "DATASET_CHECKS",
    "DatasetContract",
    "check_declaration",
    "check_load",
    "check_reproducible",
]


def check_declaration(spec: DatasetSpec, options: DatasetOptions | None = None) -> None:
    """A usable name and description, and paper settings that name real config keys."""
    adopt_dataset(spec, spec.name)  # what dmlbench checks of a dataset plugin
    assert SAFE_NAME.fullmatch(spec.name) and ".." not in spec.name, (
        f"{spec.name!r} cannot be a path component"
    )
    assert spec.description, f"{spec.name}: empty description"
    keys = set(flatten(config_to_dict(RunConfig())))
    for protocol, settings in spec.protocol_settings.items():
        assert isinstance(settings, Mapping), f"{spec.name}: protocol_settings[{protocol!r}] is not a mapping"
        # A protocol's own keys (``settings.KEY``) are those its declaration's [settings] block names.
        own = {f"settings.{k}" for k in setting_names(PROTOCOLS.get(protocol))}
        unknown = [
            k for k in settings if k not in keys and k not in own and not k.startswith(("space.", "loss."))
        ]
        assert not unknown, f"{spec.name}: protocol_settings[{protocol!r}] sets unknown keys {unknown}"


def _load(spec: DatasetSpec, options: DatasetOptions) -> ImageDataset:
    if spec.requires_data_dir:
        assert options.data_dir is not None, f"{spec.name} requires a data_dir: give one in the options"
    dataset = spec.load(options)
    validate_dataset(dataset, options.image_size)  # uint8 (N, C, S, S) images, int64 (N,) labels
    return dataset


def check_load(spec: DatasetSpec, options: DatasetOptions) -> None:
    """A load passes dmlbench's checks, and every class has two images at least (a query needs a
    positive): a retrieval benchmark can split it."""
    dataset = _load(spec, options)
    assert dataset.name == spec.name, f"{spec.name}: the loaded dataset is named {dataset.name!r}"
    classes, counts = np.unique(dataset.labels, return_counts=True)
    assert len(classes) >= 2, f"{spec.name}: {len(classes)} class(es); retrieval needs two at least"
    single = classes[counts < 2]
    assert not single.size, f"{spec.name}: classes {single[:10].tolist()} have a single image"


def check_reproducible(spec: DatasetSpec, options: DatasetOptions) -> None:
    """Two loads give the same images and labels (the record's fingerprint): runs are comparable."""
    first, second = _load(spec, options), _load(spec, options)
    assert first.fingerprint() == second.fingerprint(), f"{spec.name}: two loads differ"


#: Every check of the contract that loads the dataset, in the order a failure is most telling.
DATASET_CHECKS: tuple[Callable[[DatasetSpec, DatasetOptions], None], ...] = (
    check_declaration,
    check_load,
    check_reproducible,
)


class DatasetContract:
    """Subclass as ``class TestMyData(DatasetContract): dataset = SPEC`` for one pytest test per check."""

    #: The dataset under test.
    dataset: ClassVar[DatasetSpec]
    #: Where it reads its files (None: it reads none).
    data_dir: ClassVar[Path | None] = None
    #: The square side its images are loaded at.
    image_size: ClassVar[int] = 28

    def options(self, cache_dir: Path) -> DatasetOptions:
        return DatasetOptions(self.data_dir, self.image_size, cache_dir)

    def test_declaration(self) -> None:
        check_declaration(self.dataset)

    def test_load(self, tmp_path: Path) -> None:
        check_load(self.dataset, self.options(tmp_path))

    def test_reproducible(self, tmp_path: Path) -> None:
        check_reproducible(self.dataset, self.options(tmp_path))
