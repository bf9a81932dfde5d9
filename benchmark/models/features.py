"""Frozen-trunk mode: trunk features computed once and cached on disk (``model.frozen_trunk``).

With a frozen trunk a fold model is only the embedder, so every fold, trial and test repetition
of a run shares one feature matrix: the trunk's pooled output for every (un-augmented) image of
the run's dataset. That matrix is computed once per

    (dataset content, trunk, trunk weights, image size, eval transform, cache format)

and stored as ``<cache>/features/<key>.npz`` (features and labels), written atomically, so
fold-parallel worker processes load it from disk instead of receiving it pickled.

Meaning: the mode is meant for pretrained trunks. A randomly initialised trunk (the CPU
budgets' ``smallcnn``) frozen at its init gives random-projection features, a weak baseline.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from benchmark.config import RunConfig
from benchmark.data.augment import eval_batch
from benchmark.data.base import ImageDataset, rows_of_classes
from benchmark.errors import ConfigError, DataError
from benchmark.io import atomic_write
from benchmark.models.trunks import build_model, trunk_spec

# Bump when the stored layout or the way features are computed changes: old entries then miss.
FEATURE_CACHE_VERSION = 1

# The transform applied before the trunk; part of the key so that a change of the eval
# normalisation (benchmark.data.augment) can be made to invalidate cached features.
EVAL_TRANSFORM = "eval_batch:x/127.5-1"


@dataclass(frozen=True, eq=False)
class FeatureDataset:
    """Cached trunk features ``(N, F)`` float32 with int64 class ids ``(N,)`` (the frozen-mode data)."""

    name: str
    features: torch.Tensor
    labels: np.ndarray

    def classes(self) -> np.ndarray:
        """Sorted unique class ids."""
        return np.unique(self.labels)

    def subset(self, class_ids: Sequence[int]) -> FeatureDataset:
        """The rows of the given classes only, in their original order."""
        rows = rows_of_classes(self.labels, class_ids, f"Feature set {self.name!r}")
        return FeatureDataset(self.name, self.features[torch.from_numpy(rows)], self.labels[rows].copy())

    def __len__(self) -> int:
        return int(self.labels.shape[0])


# What a fold trains and is evaluated on: images (the trunk trains) or cached features (it does not).
Samples = ImageDataset | FeatureDataset


def weights_identity(config: RunConfig, trunk_seed: int) -> str:
    """What determines the trunk's weights: the weights file's sha256, or the random-init seed."""
    m = config.model
    if m.pretrained:
        if not m.trunk_weights:
            raise ConfigError(
                f"model.pretrained = true for trunk {m.trunk!r} but no model.trunk_weights file was given; "
                "weights are never downloaded. Pass --set model.trunk_weights=PATH or model.pretrained=false."
            )
        from benchmark.models.pretrained import resolve_weights

        return f"sha256:{file_sha256(resolve_weights(m.trunk_weights))}"
    return f"random-init:seed={trunk_seed}"


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes (read in chunks: weights files can be hundreds of MB)."""
    if not path.is_file():
        raise ConfigError(f"Trunk weights file {path} does not exist (model.trunk_weights).")
    from benchmark.models.pretrained import sha256_of

    return sha256_of(path)


def feature_key(
    *,
    dataset_fingerprint: str,
    trunk: str,
    weights: str,
    image_size: int,
    transform: str = EVAL_TRANSFORM,
    version: int = FEATURE_CACHE_VERSION,
) -> str:
    """Cache key of a feature matrix: a hash of everything the features depend on."""
    identity = {
        "dataset": dataset_fingerprint,
        "trunk": trunk,
        "weights": weights,
        "image_size": image_size,
        "transform": transform,
        "version": version,
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def feature_path(cache: Path, key: str) -> Path:
    """Where the feature matrix with ``key`` is stored under the cache directory."""
    return cache / "features" / f"{key}.npz"


def build_frozen_trunk(config: RunConfig, in_channels: int, trunk_seed: int) -> nn.Module:
    """The run's trunk: weights from the configured file, or drawn from ``trunk_seed``."""
    m = config.model
    model = build_model(
        m.trunk,
        in_channels,
        m.embedding_dim,
        pretrained=m.pretrained,
        weights_path=m.trunk_weights,
        seed=trunk_seed,
    )
    return model.trunk


@torch.no_grad()
def trunk_features(
    trunk: nn.Module,
    images: torch.Tensor,
    device: torch.device,
    batch_size: int = 256,
    on_batch: Callable[[int, int], None] | None = None,
) -> np.ndarray:
    """Pooled trunk output ``(N, F)`` float32 of uint8 images, eval transform, eval mode.

    ``on_batch(done, total)`` is called after each batch (progress)."""
    trunk.eval()
    out = []
    for start in range(0, len(images), batch_size):
        out.append(trunk(eval_batch(images[start : start + batch_size].to(device))).float().cpu())
        if on_batch is not None:
            on_batch(min(start + batch_size, len(images)), len(images))
    features: np.ndarray = torch.cat(out).numpy()
    return features


def load_or_compute_features(
    dataset: ImageDataset,
    config: RunConfig,
    cache: Path,
    trunk_seed: int,
    device: torch.device,
    on_batch: Callable[[int, int], None] | None = None,
) -> tuple[FeatureDataset, Path, bool]:
    """The run's feature set, from the cache or computed and stored; also its path and whether it hit.

    ``on_batch(done, total)`` reports the extraction's progress (not called on a cache hit)."""
    key = feature_key(
        dataset_fingerprint=dataset.fingerprint(),
        trunk=trunk_spec(config.model.trunk).name,
        weights=weights_identity(config, trunk_seed),
        image_size=config.data.image_size,
    )
    path = feature_path(cache, key)
    if path.is_file():
        features = load_features(path, dataset.name)
        if not np.array_equal(features.labels, dataset.labels):
            raise DataError(f"Cached features {path} do not match the dataset's labels; delete the file.")
        return features, path, True
    trunk = build_frozen_trunk(config, dataset.images.shape[1], trunk_seed).to(device)
    array = trunk_features(trunk, dataset.images, device, on_batch=on_batch)
    if not np.isfinite(array).all():
        raise DataError(f"Trunk {config.model.trunk!r} produced non-finite features; nothing was cached.")
    save_features_atomic(path, array, dataset.labels)
    return FeatureDataset(dataset.name, torch.from_numpy(array), dataset.labels.copy()), path, False


def load_features(path: Path, name: str) -> FeatureDataset:
    """A stored feature set (see :func:`save_features_atomic`)."""
    with np.load(path) as data:
        features, labels = data["features"], data["labels"]
    if features.ndim != 2 or features.shape[0] != labels.shape[0]:
        raise DataError(
            f"Cached features {path} are malformed ({features.shape}, {labels.shape}); delete the file."
        )
    return FeatureDataset(name, torch.from_numpy(np.ascontiguousarray(features, dtype=np.float32)), labels)


def save_features_atomic(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    """Write features and labels to ``path`` via a temporary file and a rename (no partial entries)."""
    with atomic_write(path) as fh:
        np.savez(fh, features=features.astype(np.float32), labels=labels.astype(np.int64))
