"""Loaders for the standard on-disk dataset layouts (docs/protocols.md §5).

Deep-metric-learning sets (``cub200``, ``cars196``, ``sop``, ``inshop``) and closed-set retrieval
sets for the ``cbir`` protocol (``cifar100``, ``food101``, ``svhn``, ``tinyimagenet``). Nothing is
downloaded: ``options.data_dir`` must hold the extracted dataset, either as the dataset folder
itself or as its parent (e.g. ``data_dir/CUB_200_2011/images.txt``); a missing or malformed
dataset is a :class:`DataError` naming the expected files, the folders searched and where to get it.

Photo datasets are lazy (:class:`LazyImageDataset`): paths and labels are read at load time,
pixels are decoded only when a batch is indexed (SOP alone would need 23 GB as 227 px tensors). The
two small array datasets (CIFAR-100, SVHN) are ordinary in-memory :class:`ImageDataset` objects.

Class ids are the dataset's own integer ids where it has them (CUB and Cars 1-based class ids,
SOP ``class_id``, In-Shop item number, CIFAR fine label, SVHN digit) and otherwise the position in
the sorted class-name list (Food-101, Tiny ImageNet). All datasets pool their official train and
test files, as MLRC does; :func:`load_partitions` gives the official per-image partitions
(In-Shop train/query/gallery, train/test elsewhere) for protocols that need them.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, UnidentifiedImageError

from benchmark.data.augment import AugmentSpec, train_batch_from_whole
from benchmark.data.base import ImageDataset, rows_of_classes
from benchmark.data.layouts import (  # torch-free: dmlbench run checks a layout before importing torch
    CARS_LAYOUT,
    CIFAR100_LAYOUT,
    CUB_LAYOUT,
    FOOD101_LAYOUT,
    INSHOP_LAYOUT,
    SOP_LAYOUT,
    SVHN_LAYOUT,
    TINYIMAGENET_LAYOUT,
    find_root,
)
from benchmark.data.layouts import Layout as _Layout
from benchmark.data.registry import DatasetOptions
from benchmark.data.registry import register_standard_datasets as register_standard_datasets  # moved there
from benchmark.errors import DataError

# MLRC evaluation resizes the shorter side to 256 and centre-crops 227 (docs/protocols.md §2.2); at any other
# image size the same margin is kept, so the crop sees the same part of the photo.
MLRC_RESIZE_RATIO = 256 / 227
# Decoding threads per batch: PIL releases the GIL while decoding and resizing.
DEFAULT_DECODE_THREADS = min(8, os.cpu_count() or 1)
# Rows of a batch resized together in memory (bounds the float32 working copy).
_RESIZE_CHUNK = 1024


# --------------------------------------------------------------------------------------------------
# Lazy, path-based datasets
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LazyImageDataset:
    """A labelled set of image files, decoded on demand to uint8 RGB ``(3, S, S)``.

    ``paths`` are relative to ``root`` (POSIX separators); ``labels`` is int64 ``(N,)`` with stable
    class ids; ``file_sizes`` (bytes) enter the fingerprint so that a re-extracted, different copy
    is noticed without hashing every image. Decoding resizes the shorter side to
    ``round(S * resize_ratio)`` and centre-crops ``S x S`` (:func:`decode_image`): the evaluation
    input. Training batches crop from the whole resized image instead
    (:meth:`LazyImages.train_crops`, docs/protocols.md §2.2).

    It duck-types :class:`ImageDataset` for the trainer: ``images`` is a :class:`LazyImages` view
    with ``shape == (N, 3, S, S)``, ``len()`` and indexing by int, slice, index array/tensor or
    boolean mask returning uint8 tensors; ``labels``, ``class_names``, ``classes()``, ``subset()``,
    ``fingerprint()`` and ``len()`` behave as there.
    """

    name: str
    root: Path
    paths: tuple[str, ...]
    labels: np.ndarray
    file_sizes: np.ndarray
    image_size: int
    class_names: Mapping[int, str] = field(default_factory=dict)
    resize_ratio: float = MLRC_RESIZE_RATIO
    decode_threads: int = DEFAULT_DECODE_THREADS

    @property
    def images(self) -> LazyImages:
        """An (N, 3, S, S) uint8 view whose items are decoded when indexed."""
        return LazyImages(self)

    def load_images(self, indices: Iterable[int], size: int | None = None) -> torch.Tensor:
        """Decode the images at ``indices`` to a uint8 tensor (B, 3, size, size); size defaults to S."""
        side = self.image_size if size is None else size
        files = [self.root / self.paths[int(i)] for i in indices]
        if not files:
            return torch.empty((0, 3, side, side), dtype=torch.uint8)

        def decode(path: Path) -> np.ndarray:
            return decode_image(path, side, self.resize_ratio, dataset=self.name)

        if self.decode_threads > 1 and len(files) > 1:
            with ThreadPoolExecutor(min(self.decode_threads, len(files))) as pool:
                arrays = list(pool.map(decode, files))
        else:
            arrays = [decode(f) for f in files]
        return torch.from_numpy(np.stack(arrays))

    @property
    def train_short_side(self) -> int:
        """Shorter side of the whole images training crops are taken from (256 for 227 px)."""
        return max(self.image_size, round(self.image_size * self.resize_ratio))

    def load_whole_images(self, indices: Iterable[int]) -> list[torch.Tensor]:
        """The images at ``indices`` uncropped, shorter side :attr:`train_short_side`: uint8 (3, H, W)."""
        files = [self.root / self.paths[int(i)] for i in indices]
        short = self.train_short_side

        def decode(path: Path) -> np.ndarray:
            return decode_whole_image(path, short, dataset=self.name)

        if self.decode_threads > 1 and len(files) > 1:
            with ThreadPoolExecutor(min(self.decode_threads, len(files))) as pool:
                arrays = list(pool.map(decode, files))
        else:
            arrays = [decode(f) for f in files]
        return [torch.from_numpy(a) for a in arrays]

    def classes(self) -> np.ndarray:
        """Sorted unique class ids."""
        return np.unique(self.labels)

    def take(self, indices: Sequence[int] | np.ndarray) -> LazyImageDataset:
        """The images at the given positions, in that order (a partition, a debugging subset)."""
        index = np.asarray(indices, dtype=np.int64).reshape(-1)
        kept = set(np.unique(self.labels[index]).tolist())
        return LazyImageDataset(
            name=self.name,
            root=self.root,
            paths=tuple(self.paths[i] for i in index.tolist()),
            labels=self.labels[index].copy(),
            file_sizes=self.file_sizes[index].copy(),
            image_size=self.image_size,
            class_names={c: n for c, n in self.class_names.items() if c in kept},
            resize_ratio=self.resize_ratio,
            decode_threads=self.decode_threads,
        )

    def subset(self, class_ids: Sequence[int]) -> LazyImageDataset:
        """The images of the given classes only, in their original order."""
        return self.take(rows_of_classes(self.labels, class_ids, f"Dataset {self.name!r}"))

    def fingerprint(self) -> str:
        """Short hash of image size, crop ratio, relative paths, file sizes and labels.

        Stable across processes and machines (paths are relative to ``root``); hashing the pixels of
        100k files would take minutes, and a different copy almost surely differs in some file size.
        """
        digest = hashlib.sha256()
        digest.update(repr((self.image_size, round(self.resize_ratio, 9), len(self.paths))).encode())
        digest.update("\n".join(self.paths).encode())
        digest.update(np.ascontiguousarray(self.file_sizes, dtype="<i8").tobytes())
        digest.update(np.ascontiguousarray(self.labels, dtype="<i8").tobytes())
        return digest.hexdigest()[:16]

    def validate(self, image_size: int) -> None:
        """Raise DataError unless labels, paths and sizes agree and images decode to ``image_size``."""
        where = f"Dataset {self.name!r}"
        labels = self.labels
        if not isinstance(labels, np.ndarray) or labels.dtype != np.int64 or labels.ndim != 1:
            raise DataError(f"{where}: labels must be an int64 numpy array of shape (N,).")
        if not len(self.paths) == labels.shape[0] == self.file_sizes.shape[0]:
            raise DataError(
                f"{where}: {len(self.paths)} paths, {labels.shape[0]} labels, "
                f"{self.file_sizes.shape[0]} file sizes."
            )
        if labels.shape[0] == 0:
            raise DataError(f"{where} is empty.")
        if self.image_size != image_size:
            raise DataError(f"{where} decodes {self.image_size} px images, expected {image_size} px.")

    def __len__(self) -> int:
        return len(self.paths)


IndexLike = int | np.integer[Any] | slice | Sequence[int] | np.ndarray | torch.Tensor


class LazyImages:
    """The ``images`` of a :class:`LazyImageDataset`: indexing decodes, like a uint8 (N, 3, S, S) tensor."""

    dtype = torch.uint8
    ndim = 4

    def __init__(self, dataset: LazyImageDataset) -> None:
        self.dataset = dataset

    @property
    def shape(self) -> torch.Size:
        return torch.Size((len(self.dataset), 3, self.dataset.image_size, self.dataset.image_size))

    def __len__(self) -> int:
        return len(self.dataset)

    def train_crops(
        self, index: torch.Tensor | np.ndarray | Sequence[int], spec: AugmentSpec, generator: torch.Generator
    ) -> torch.Tensor:
        """Augmented training batch (B, 3, S, S) float32 of the rows ``index``: random resized crops
        from the whole images (shorter side 256 at S = 227), not from the S x S evaluation crop."""
        if isinstance(index, torch.Tensor):
            index = index.detach().cpu().numpy()
        positions = np.asarray(index, dtype=np.int64).reshape(-1)
        whole = self.dataset.load_whole_images(positions.tolist())
        return train_batch_from_whole(whole, spec, generator, self.dataset.image_size)

    def __getitem__(self, index: IndexLike) -> torch.Tensor:
        """Decoded images: (3, S, S) for an int, (B, 3, S, S) for a slice, index array or mask."""
        n = len(self.dataset)
        if isinstance(index, torch.Tensor):
            index = index.detach().cpu().numpy()
        if isinstance(index, (int, np.integer)) or (isinstance(index, np.ndarray) and index.ndim == 0):
            position = int(index)
            if not -n <= position < n:
                raise IndexError(f"index {position} is out of range for {n} images")
            return self.dataset.load_images([position % n])[0]
        if isinstance(index, slice):
            return self.dataset.load_images(range(n)[index])
        array = np.asarray(index)
        if array.dtype == np.bool_:
            if array.shape != (n,):
                raise IndexError(f"boolean mask of shape {array.shape} does not fit {n} images")
            array = np.flatnonzero(array)
        if array.size == 0:
            array = array.astype(np.int64)
        if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
            raise IndexError(
                f"images can be indexed by int, slice, 1-D int array or mask, got {array.dtype} {array.shape}"
            )
        if array.size and (array.min() < -n or array.max() >= n):
            raise IndexError(f"index out of range for {n} images")
        return self.dataset.load_images(np.where(array < 0, array + n, array).tolist())


def decode_image(
    path: Path, size: int, resize_ratio: float = MLRC_RESIZE_RATIO, *, dataset: str = ""
) -> np.ndarray:
    """uint8 RGB (3, size, size): shorter side resized to ``round(size * resize_ratio)``, centre crop.

    Bilinear (antialiased) resizing, as torchvision's ``Resize`` on PIL images; grayscale and CMYK
    files (a few in CUB) are converted to RGB.
    """
    rgb = _decode_resized(path, max(size, round(size * resize_ratio)), dataset)
    new_w, new_h = rgb.size
    # Centre offsets rounded like torchvision's CenterCrop.
    left, top = round((new_w - size) / 2), round((new_h - size) / 2)
    rgb = rgb.crop((left, top, left + size, top + size))
    return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1).copy()


def decode_whole_image(path: Path, short: int, *, dataset: str = "") -> np.ndarray:
    """uint8 RGB (3, H, W): the whole image with its shorter side resized to ``short``, uncropped.

    The training input of photo datasets (docs/protocols.md §2.2: resize the shorter side to 256, then a
    random resized crop from all of it); the decoding cost is that of :func:`decode_image`.
    """
    rgb = _decode_resized(path, short, dataset)
    return np.asarray(rgb, dtype=np.uint8).transpose(2, 0, 1).copy()


def _decode_resized(path: Path, short: int, dataset: str) -> Image.Image:
    """The RGB image at ``path`` with its shorter side resized to ``short`` (aspect ratio kept)."""
    try:
        with Image.open(path) as img:
            # JPEGs decode directly at 1/2, 1/4 or 1/8 scale when that still covers `short`: a large
            # speed-up for big photos, and the bilinear resize below does the rest.
            img.draft("RGB", (short, short))
            rgb = img.convert("RGB")
    except (OSError, UnidentifiedImageError, ValueError) as exc:
        raise DataError(
            f"Cannot decode image {path}{f' of dataset {dataset!r}' if dataset else ''}: {exc}. "
            "The file is missing or damaged; re-extract the dataset archive."
        ) from exc
    width, height = rgb.size
    scale = short / min(width, height)
    new_w, new_h = max(short, round(width * scale)), max(short, round(height * scale))
    if (new_w, new_h) != (width, height):
        rgb = rgb.resize((new_w, new_h), Image.Resampling.BILINEAR)
    return rgb


AnyImageDataset = ImageDataset | LazyImageDataset


# --------------------------------------------------------------------------------------------------
# Finding and checking a layout
# --------------------------------------------------------------------------------------------------


def _find_root(options: DatasetOptions, layout: _Layout) -> Path:
    """The folder holding ``layout``'s markers (:func:`benchmark.data.layouts.find_root`)."""
    return find_root(options.data_dir, layout)


def _file_sizes(root: Path, paths: Sequence[str], layout: _Layout) -> np.ndarray:
    """Byte sizes of all images; a missing image is an error now rather than mid-training."""
    sizes = np.empty(len(paths), dtype=np.int64)
    missing: list[str] = []
    for i, rel in enumerate(paths):
        try:
            sizes[i] = os.stat(root / rel).st_size
        except OSError:
            missing.append(rel)
            sizes[i] = -1
    if missing:
        raise DataError(
            f"Dataset {layout.name!r} at {root} is incomplete: {len(missing)} of {len(paths)} listed images "
            f"are missing, e.g. {', '.join(missing[:5])}. Re-extract the image archive there. {layout.source}"
        )
    if not paths:
        raise DataError(f"Dataset {layout.name!r} at {root} lists no images. {layout.source}")
    return sizes


def _read_rows(
    path: Path, n_cols: int, layout: _Layout, *, skip: int = 0, sep: str | None = None
) -> list[list[str]]:
    """Non-empty lines of a text index split into exactly ``n_cols`` fields (after ``skip`` lines)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"Cannot read {path} of dataset {layout.name!r}: {exc}. {layout.source}") from exc
    rows: list[list[str]] = []
    for lineno, line in enumerate(lines[skip:], start=skip + 1):
        if not line.strip():
            continue
        fields = line.strip().split(sep)
        if len(fields) != n_cols:
            raise DataError(
                f"{path}, line {lineno}: expected {n_cols} fields, got {len(fields)} "
                f"({line.strip()[:80]!r}). "
                f"The file is not in the {layout.title} format; re-extract it. {layout.source}"
            )
        rows.append(fields)
    return rows


def _to_int(token: str, path: Path, layout: _Layout, what: str) -> int:
    try:
        return int(token)
    except ValueError:
        raise DataError(
            f"{path}: {what} {token!r} is not an integer; the file is not in the {layout.title} format. "
            f"{layout.source}"
        ) from None


def _lazy(
    layout: _Layout,
    root: Path,
    paths: Sequence[str],
    labels: Sequence[int],
    class_names: Mapping[int, str],
    options: DatasetOptions,
    resize_ratio: float = MLRC_RESIZE_RATIO,
) -> LazyImageDataset:
    return LazyImageDataset(
        name=layout.name,
        root=root,
        paths=tuple(paths),
        labels=np.asarray(labels, dtype=np.int64),
        file_sizes=_file_sizes(root, paths, layout),
        image_size=options.image_size,
        class_names=dict(class_names),
        resize_ratio=resize_ratio,
    )


@dataclass(frozen=True)
class _Loaded:
    """A pooled dataset and, per image, the official partition it comes from (or None)."""

    dataset: AnyImageDataset
    partition: np.ndarray | None = None


# --------------------------------------------------------------------------------------------------
# Deep-metric-learning datasets
# --------------------------------------------------------------------------------------------------


def _cub(options: DatasetOptions) -> _Loaded:
    layout = CUB_LAYOUT
    root = _find_root(options, layout)
    images = _read_rows(root / "images.txt", 2, layout)
    labels_file = root / "image_class_labels.txt"
    label_of = {
        _to_int(i, labels_file, layout, "image id"): _to_int(c, labels_file, layout, "class id")
        for i, c in _read_rows(labels_file, 2, layout)
    }
    paths, labels = [], []
    for image_id, rel in images:
        key = _to_int(image_id, root / "images.txt", layout, "image id")
        if key not in label_of:
            raise DataError(f"{labels_file} has no class for image id {key} of images.txt. {layout.source}")
        paths.append(f"images/{rel}")
        labels.append(label_of[key])
    names: dict[int, str] = {}
    if (root / "classes.txt").is_file():
        # "1 001.Black_footed_Albatross": the name is optional; ids come from image_class_labels.txt.
        for row in _read_rows(root / "classes.txt", 2, layout):
            names[_to_int(row[0], root / "classes.txt", layout, "class id")] = row[1].split(".", 1)[-1]
    return _Loaded(_lazy(layout, root, paths, labels, names, options))


def _mat_field(record: np.ndarray, name: str) -> list[Any]:
    """One field of a loadmat struct array as a flat list of Python scalars/strings."""
    return [np.asarray(v).item() if np.asarray(v).size == 1 else v for v in np.atleast_1d(record[name])]


def _load_mat(path: Path, layout: _Layout) -> dict[str, Any]:
    import scipy.io
    from scipy.io.matlab import MatReadError

    try:
        mat: dict[str, Any] = scipy.io.loadmat(path, squeeze_me=True)
    # NotImplementedError: MATLAB v7.3 (HDF5) files, which scipy cannot read.
    except (OSError, ValueError, NotImplementedError, TypeError, MatReadError) as exc:
        raise DataError(f"Cannot read {path} of dataset {layout.name!r}: {exc}. {layout.source}") from exc
    return mat


def _cars(options: DatasetOptions) -> _Loaded:
    layout = CARS_LAYOUT
    root = _find_root(options, layout)
    mat_path = root / "cars_annos.mat"
    mat = _load_mat(mat_path, layout)
    annotations = mat.get("annotations")
    fields = getattr(getattr(annotations, "dtype", None), "names", None) or ()
    if "relative_im_path" not in fields or "class" not in fields:
        raise DataError(
            f"{mat_path} has no 'annotations' struct with fields relative_im_path and class; it is not the "
            f"cars_annos.mat of the full dataset (the devkit's cars_train_annos.mat is not supported). "
            f"{layout.source}"
        )
    assert isinstance(annotations, np.ndarray)
    paths = [str(p) for p in _mat_field(annotations, "relative_im_path")]
    labels = [int(c) for c in _mat_field(annotations, "class")]
    names: dict[int, str] = {}
    if "class_names" in mat:
        names = {i + 1: str(n) for i, n in enumerate(np.atleast_1d(mat["class_names"]))}
    return _Loaded(_lazy(layout, root, paths, labels, names, options))


def _sop(options: DatasetOptions) -> _Loaded:
    layout = SOP_LAYOUT
    root = _find_root(options, layout)
    paths: list[str] = []
    labels: list[int] = []
    parts: list[str] = []
    names: dict[int, str] = {}
    for part in ("train", "test"):
        index = root / f"Ebay_{part}.txt"
        rows = _read_rows(index, 4, layout)
        if not rows or rows[0][0] != "image_id":
            raise DataError(
                f"{index} does not start with the header 'image_id class_id super_class_id path'. "
                f"{layout.source}"
            )
        for _, class_id, _, rel in rows[1:]:
            label = _to_int(class_id, index, layout, "class_id")
            paths.append(rel)
            labels.append(label)
            parts.append(part)
            # "bicycle_final/111085122871_0.JPG" -> "bicycle_final/111085122871": category and product.
            folder, _, file = rel.rpartition("/")
            names.setdefault(label, f"{folder}/{file.rsplit('_', 1)[0]}")
    return _Loaded(_lazy(layout, root, paths, labels, names, options), np.asarray(parts))


INSHOP_PARTITIONS = ("train", "query", "gallery")


def _inshop(options: DatasetOptions) -> _Loaded:
    layout = INSHOP_LAYOUT
    root = _find_root(options, layout)
    index = root / "list_eval_partition.txt"
    if not index.is_file():
        index = root / "Eval" / "list_eval_partition.txt"
    # Paths in the index start with "img/"; the archive puts that folder at the root or in Img/.
    image_root = root if (root / "img").exists() else root / "Img"
    head = index.read_text(encoding="utf-8", errors="replace").splitlines()[:2]
    declared = head[0].strip() if head else ""
    if not declared.isdigit() or len(head) < 2 or "evaluation_status" not in head[1]:
        raise DataError(
            f"{index} must start with the image count and the header 'image_name item_id evaluation_status'. "
            f"{layout.source}"
        )
    rows = _read_rows(index, 3, layout, skip=2)
    if int(declared) != len(rows):
        raise DataError(f"{index} declares {declared} images but lists {len(rows)}; the file is truncated.")
    paths, labels, parts = [], [], []
    names: dict[int, str] = {}
    for rel, item, status in rows:
        if not item.startswith("id_") or status not in INSHOP_PARTITIONS:
            raise DataError(
                f"{index}: row {rel!r} {item!r} {status!r} is not '<path> id_<number> train|query|gallery'. "
                f"{layout.source}"
            )
        label = _to_int(item[3:], index, layout, "item id")
        paths.append(rel)
        labels.append(label)
        parts.append(status)
        names[label] = item
    return _Loaded(_lazy(layout, image_root, paths, labels, names, options), np.asarray(parts))


# --------------------------------------------------------------------------------------------------
# Closed-set retrieval datasets (cbir protocol)
# --------------------------------------------------------------------------------------------------


def _resize_square(images: np.ndarray, size: int) -> torch.Tensor:
    """uint8 (N, C, s, s) resized to (N, C, size, size), bilinear with antialiasing."""
    tensor = torch.from_numpy(np.ascontiguousarray(images))
    if tensor.shape[-1] == size and tensor.shape[-2] == size:
        return tensor.clone()
    out = torch.empty((tensor.shape[0], tensor.shape[1], size, size), dtype=torch.uint8)
    for start in range(0, tensor.shape[0], _RESIZE_CHUNK):
        chunk = tensor[start : start + _RESIZE_CHUNK].float()
        resized = F.interpolate(
            chunk, size=(size, size), mode="bilinear", antialias=True, align_corners=False
        )
        out[start : start + _RESIZE_CHUNK] = resized.round_().clamp_(0, 255).to(torch.uint8)
    return out


def _unpickle(path: Path, layout: _Layout) -> dict[str, Any]:
    # The official files are Python 2 pickles with byte-string keys: latin1 decodes them as str, as
    # torchvision does. Like torchvision, this trusts the files in the user's data directory.
    try:
        with path.open("rb") as handle:
            content = pickle.load(handle, encoding="latin1")
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, AttributeError) as exc:
        raise DataError(f"Cannot read {path} of dataset {layout.name!r}: {exc}. {layout.source}") from exc
    if not isinstance(content, dict):
        raise DataError(f"{path} is not a CIFAR pickle (a dict). {layout.source}")
    return content


def _cifar100(options: DatasetOptions) -> _Loaded:
    layout = CIFAR100_LAYOUT
    root = _find_root(options, layout)
    arrays, labels, parts = [], [], []
    for part in ("train", "test"):
        batch = _unpickle(root / part, layout)
        if "data" not in batch or "fine_labels" not in batch:
            raise DataError(f"{root / part} has no 'data' and 'fine_labels' entries. {layout.source}")
        data = np.asarray(batch["data"], dtype=np.uint8)
        fine = np.asarray(batch["fine_labels"], dtype=np.int64)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.shape[0] != fine.shape[0]:
            raise DataError(
                f"{root / part}: expected data (N, 3072) and N fine labels, "
                f"got {data.shape} and {fine.shape}."
            )
        arrays.append(data.reshape(-1, 3, 32, 32))
        labels.append(fine)
        parts += [part] * fine.shape[0]
    names: dict[int, str] = {}
    if (root / "meta").is_file():
        meta = _unpickle(root / "meta", layout)
        names = dict(enumerate(str(n) for n in meta.get("fine_label_names", [])))
    dataset = ImageDataset(
        name=layout.name,
        images=_resize_square(np.concatenate(arrays), options.image_size),
        labels=np.concatenate(labels),
        class_names=names,
    )
    return _Loaded(dataset, np.asarray(parts))


def _svhn(options: DatasetOptions) -> _Loaded:
    layout = SVHN_LAYOUT
    root = _find_root(options, layout)
    arrays, labels, parts = [], [], []
    for part in ("train", "test"):
        path = root / f"{part}_32x32.mat"
        mat = _load_mat(path, layout)
        x, y = mat.get("X"), mat.get("y")
        if (
            not isinstance(x, np.ndarray)
            or not isinstance(y, np.ndarray)
            or x.ndim != 4
            or x.shape[:3] != (32, 32, 3)
        ):
            raise DataError(
                f"{path} has no X of shape (32, 32, 3, N) and y; it is not an SVHN format-2 file."
            )
        digits = np.atleast_1d(y).astype(np.int64).reshape(-1)
        if digits.shape[0] != x.shape[3] or digits.min() < 1 or digits.max() > 10:
            raise DataError(f"{path}: expected {x.shape[3]} labels in 1..10, got {digits.shape[0]}.")
        arrays.append(x.transpose(3, 2, 0, 1))
        # SVHN stores the digit 0 as label 10; the class id is the digit itself.
        labels.append(digits % 10)
        parts += [part] * digits.shape[0]
    dataset = ImageDataset(
        name=layout.name,
        images=_resize_square(np.concatenate(arrays), options.image_size),
        labels=np.concatenate(labels),
        class_names={d: str(d) for d in range(10)},
    )
    return _Loaded(dataset, np.asarray(parts))


def _food101(options: DatasetOptions) -> _Loaded:
    layout = FOOD101_LAYOUT
    root = _find_root(options, layout)
    listed: list[tuple[str, str]] = []  # (class name, image stem path)
    parts: list[str] = []
    for part in ("train", "test"):
        index = root / "meta" / f"{part}.txt"
        for (entry,) in _read_rows(index, 1, layout):
            class_name, _, _ = entry.partition("/")
            if not class_name or "/" not in entry:
                raise DataError(f"{index}: entry {entry!r} is not '<class>/<image id>'. {layout.source}")
            listed.append((class_name, entry))
            parts.append(part)
    # Class ids are positions in the sorted class names (meta/classes.txt is that list).
    class_list = sorted({c for c, _ in listed})
    if (root / "meta" / "classes.txt").is_file():
        declared = sorted(r[0] for r in _read_rows(root / "meta" / "classes.txt", 1, layout))
        unknown = set(class_list) - set(declared)
        if unknown:
            raise DataError(
                f"meta/train.txt or test.txt lists classes {sorted(unknown)[:5]} absent from classes.txt."
            )
        class_list = declared
    class_id = {name: i for i, name in enumerate(class_list)}
    paths = [f"images/{entry}.jpg" for _, entry in listed]
    labels = [class_id[c] for c, _ in listed]
    dataset = _lazy(layout, root, paths, labels, dict(enumerate(class_list)), options)
    return _Loaded(dataset, np.asarray(parts))


_IMAGE_SUFFIXES = (".jpeg", ".jpg", ".png")


def _tinyimagenet(options: DatasetOptions) -> _Loaded:
    layout = TINYIMAGENET_LAYOUT
    root = _find_root(options, layout)
    if (root / "wnids.txt").is_file():
        wnids = sorted(r[0] for r in _read_rows(root / "wnids.txt", 1, layout))
    else:
        wnids = sorted(p.name for p in (root / "train").iterdir() if p.is_dir())
    class_id = {w: i for i, w in enumerate(wnids)}
    paths: list[str] = []
    labels: list[int] = []
    parts: list[str] = []
    for wnid in wnids:
        folder = root / "train" / wnid / "images"
        if not folder.is_dir():
            raise DataError(f"Dataset 'tinyimagenet': class folder {folder} is missing. {layout.source}")
        files = sorted(p.name for p in folder.iterdir() if p.suffix.lower() in _IMAGE_SUFFIXES)
        paths += [f"train/{wnid}/images/{f}" for f in files]
        labels += [class_id[wnid]] * len(files)
        parts += ["train"] * len(files)
    # The official test split has no public labels; the labelled val/ split serves as "test".
    annotations = root / "val" / "val_annotations.txt"
    for row in _read_rows(annotations, 6, layout, sep="\t"):
        file, wnid = row[0], row[1]
        if wnid not in class_id:
            raise DataError(f"{annotations}: image {file} has class {wnid!r}, which train/ does not have.")
        paths.append(f"val/images/{file}")
        labels.append(class_id[wnid])
        parts.append("test")
    names = dict(enumerate(wnids))
    if (root / "words.txt").is_file():
        # Names are a convenience: an odd line in this 82k-line WordNet file is skipped, not fatal.
        lines = (root / "words.txt").read_text(encoding="utf-8", errors="replace").splitlines()
        pairs = (line.split("\t", 1) for line in lines)
        words = {p[0]: p[1].strip() for p in pairs if len(p) == 2 and p[0] in class_id}
        names = {i: f"{w} ({words[w]})" if w in words else w for i, w in enumerate(wnids)}
    # Native 64 px: resize the shorter side to S and centre-crop S (no MLRC margin for thumbnails).
    dataset = _lazy(layout, root, paths, labels, names, options, resize_ratio=1.0)
    return _Loaded(dataset, np.asarray(parts))


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------


def _as_lazy(loaded: _Loaded) -> LazyImageDataset:
    assert isinstance(loaded.dataset, LazyImageDataset)
    return loaded.dataset


def _as_in_memory(loaded: _Loaded) -> ImageDataset:
    assert isinstance(loaded.dataset, ImageDataset)
    return loaded.dataset


def load_cub200(options: DatasetOptions) -> LazyImageDataset:
    """CUB-200-2011: 11,788 images, 200 bird species, class ids 1..200 (image_class_labels.txt)."""
    return _as_lazy(_cub(options))


def load_cars196(options: DatasetOptions) -> LazyImageDataset:
    """Cars196: 16,185 images (train and test pooled), 196 models, class ids 1..196 (cars_annos.mat)."""
    return _as_lazy(_cars(options))


def load_sop(options: DatasetOptions) -> LazyImageDataset:
    """Stanford Online Products: Ebay_train.txt and Ebay_test.txt pooled (120,053 images, 22,634 ids)."""
    return _as_lazy(_sop(options))


def load_inshop(options: DatasetOptions) -> LazyImageDataset:
    """In-Shop: all 52,712 images pooled, class id = item number; see :func:`load_partitions`."""
    return _as_lazy(_inshop(options))


def load_cifar100(options: DatasetOptions) -> ImageDataset:
    """CIFAR-100 in memory: 60,000 images (train then test), fine labels 0..99, resized to image_size."""
    return _as_in_memory(_cifar100(options))


def load_svhn(options: DatasetOptions) -> ImageDataset:
    """SVHN in memory: train then test (99,289 images), class id = the digit 0..9."""
    return _as_in_memory(_svhn(options))


def load_food101(options: DatasetOptions) -> LazyImageDataset:
    """Food-101: 101,000 images (train then test), class id = position in the sorted class names."""
    return _as_lazy(_food101(options))


def load_tinyimagenet(options: DatasetOptions) -> LazyImageDataset:
    """Tiny ImageNet: train (100,000) then val (10,000) images, class id = position in sorted wnids."""
    return _as_lazy(_tinyimagenet(options))


# Names, descriptions and registration: benchmark.data.registry (importable without torch).
_LOADERS: dict[str, Callable[[DatasetOptions], _Loaded]] = {
    "cub200": _cub,
    "cars196": _cars,
    "sop": _sop,
    "inshop": _inshop,
    "cifar100": _cifar100,
    "food101": _food101,
    "svhn": _svhn,
    "tinyimagenet": _tinyimagenet,
}

# The official per-image partitions each dataset offers through load_partitions().
PARTITIONS: Mapping[str, tuple[str, ...]] = {
    "sop": ("train", "test"),
    "inshop": INSHOP_PARTITIONS,
    "cifar100": ("train", "test"),
    "food101": ("train", "test"),
    "svhn": ("train", "test"),
    "tinyimagenet": ("train", "test"),
}


def load_partitions(name: str, options: DatasetOptions) -> dict[str, AnyImageDataset]:
    """The official partitions of a standard dataset, e.g. In-Shop ``train``/``query``/``gallery``.

    Each value holds that partition's images in file order, with the pooled dataset's class ids
    (query and gallery of In-Shop share items; train items are disjoint from both). For Tiny
    ImageNet ``test`` is the labelled official ``val/`` split.
    """
    if name not in PARTITIONS:
        raise DataError(
            f"Dataset {name!r} has no official per-image partitions; "
            f"datasets with them: {', '.join(PARTITIONS)}."
        )
    loaded = _LOADERS[name](options)
    assert loaded.partition is not None
    return {
        part: _take(loaded.dataset, np.flatnonzero(loaded.partition == part)) for part in PARTITIONS[name]
    }


def _take(dataset: AnyImageDataset, index: np.ndarray) -> AnyImageDataset:
    if isinstance(dataset, LazyImageDataset):
        return dataset.take(index)
    labels = dataset.labels[index].copy()
    kept = set(np.unique(labels).tolist())
    return ImageDataset(
        name=dataset.name,
        images=dataset.images[torch.from_numpy(index)],
        labels=labels,
        class_names={c: n for c, n in dataset.class_names.items() if c in kept},
    )
