"""In-memory image datasets and their checks (the dataset registry is :mod:`benchmark.data.registry`)."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from benchmark.errors import DataError
from benchmark.io import atomic_write

# The registry, its spec types and load_dataset live in benchmark.data.registry (torch-free), which
# imports this module only where it loads a dataset: this one does not import the registry.
__all__ = ["ImageDataset", "validate_dataset"]


# eq=False: the generated __eq__/__hash__ would compare arrays element-wise and fail; a dataset's
# identity for records is its fingerprint().
def rows_of_classes(labels: np.ndarray, class_ids: Sequence[int], what: str) -> np.ndarray:
    """Indices (ascending) of the rows of ``labels`` in ``class_ids``; an absent class is a DataError
    naming ``what`` (e.g. "Dataset 'cub200'")."""
    wanted = np.asarray(list(class_ids), dtype=np.int64)
    unknown = np.setdiff1d(wanted, labels)
    if unknown.size:
        raise DataError(
            f"{what} has no class(es) {unknown[:10].tolist()}{' ...' if unknown.size > 10 else ''}; "
            f"it has {np.unique(labels).size} classes."
        )
    return np.flatnonzero(np.isin(labels, wanted))


@dataclass(frozen=True, eq=False)
class ImageDataset:
    """A labelled image set held in memory.

    ``images`` is uint8 ``(N, C, H, W)`` (C = 1 for grayscale); ``labels`` is int64 ``(N,)`` with
    stable class ids that need not be contiguous; ``class_names`` maps class ids to readable names
    where the dataset has them.
    """

    name: str
    images: torch.Tensor
    labels: np.ndarray
    class_names: Mapping[int, str] = field(default_factory=dict)

    def classes(self) -> np.ndarray:
        """Sorted unique class ids."""
        return np.unique(self.labels)

    def subset(self, class_ids: Sequence[int]) -> ImageDataset:
        """The images of the given classes only, in their original order."""
        rows = rows_of_classes(self.labels, class_ids, f"Dataset {self.name!r}")
        kept = set(int(c) for c in class_ids)
        return ImageDataset(
            name=self.name,
            images=self.images[torch.from_numpy(rows)],
            labels=self.labels[rows].copy(),
            class_names={c: n for c, n in self.class_names.items() if c in kept},
        )

    def take(self, indices: Sequence[int] | np.ndarray) -> ImageDataset:
        """The images at ``indices`` (in that order)."""
        index = np.asarray(indices, dtype=np.int64)
        return ImageDataset(
            self.name, self.images[torch.from_numpy(index)], self.labels[index].copy(), self.class_names
        )

    def fingerprint(self) -> str:
        """Short content hash of labels and image bytes, stable across processes and machines."""
        digest = hashlib.sha256()
        digest.update(repr((tuple(self.images.shape), self.labels.shape)).encode())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        digest.update(self.images.detach().cpu().contiguous().numpy().tobytes())
        return digest.hexdigest()[:16]

    def __len__(self) -> int:
        return int(self.labels.shape[0])


def validate_dataset(dataset: ImageDataset, image_size: int) -> None:
    """Raise DataError unless ``dataset`` holds uint8 (N, C, S, S) images and N int64 labels."""
    if not isinstance(dataset, ImageDataset):
        # Lazily decoded photo datasets (benchmark.data.standard) check their own file lists.
        dataset.validate(image_size)
        return
    images, labels = dataset.images, dataset.labels
    where = f"Dataset {dataset.name!r}"
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4:
        raise DataError(
            f"{where}: images must be a uint8 tensor of shape (N, C, H, W), got {_describe(images)}."
        )
    if images.shape[1] not in (1, 3):
        raise DataError(f"{where}: images must have 1 or 3 channels, got {images.shape[1]}.")
    if tuple(images.shape[2:]) != (image_size, image_size):
        raise DataError(
            f"{where}: images are {tuple(images.shape[2:])}, expected ({image_size}, {image_size})."
        )
    if not isinstance(labels, np.ndarray) or labels.dtype != np.int64 or labels.ndim != 1:
        raise DataError(
            f"{where}: labels must be an int64 numpy array of shape (N,), got {_describe(labels)}."
        )
    if labels.shape[0] != images.shape[0]:
        raise DataError(f"{where}: {images.shape[0]} images but {labels.shape[0]} labels.")
    if labels.shape[0] == 0:
        raise DataError(f"{where} is empty.")


def _describe(value: object) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{type(value).__name__} {value.dtype} {tuple(value.shape)}"
    return type(value).__name__


def save_npz_atomically(path: Path, **arrays: np.ndarray) -> None:
    """Write ``arrays`` to ``path`` so that concurrent readers never see a half-written file."""
    # Several processes (parallel tests, concurrent runs) may build the same cache entry at once.
    with atomic_write(path) as handle:
        np.savez(handle, **arrays)  # type: ignore[arg-type]


def load_npz(path: Path, keys: Sequence[str]) -> dict[str, np.ndarray] | None:
    """The arrays ``keys`` from the cache file ``path``, or None when it is missing or unreadable."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {key: archive[key] for key in keys}
    except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile):
        # A missing, truncated or older-format cache is rebuilt rather than reported.
        return None
