"""Omniglot: real handwritten characters (MIT licence), read from the official zips or folders.

Accepted layouts under ``--data-dir`` (any mix): the official zips ``images_background*.zip`` /
``images_evaluation*.zip``, the same extracted as folders, or torchvision's ``omniglot-py/``.
File names are ``<character id>_<drawer>.png``; the character id is the class id. The two
"small" background sets share alphabets (Greek, Latin): a character present in several sources
is kept once (the first source in sorted order), so each class has one image per drawer.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from benchmark.data.base import (
    ImageDataset,
    load_npz,
    save_npz_atomically,
)
from benchmark.data.registry import DatasetOptions
from benchmark.errors import DataError

_NAME = re.compile(r"(?:^|/)(\d+)_(\d+)\.png$")
_SOURCES = ("images_background", "images_evaluation")
CACHE_VERSION = "omniglot-v1"


def _sources(root: Path) -> list[Path]:
    """Zips and extracted folders holding Omniglot images, in sorted order."""
    candidates = [root, root / "omniglot-py"]
    found: dict[str, Path] = {}
    for base in candidates:
        if not base.is_dir():
            continue
        for p in sorted(base.iterdir()):
            if p.name.startswith(_SOURCES):
                key = p.name.removesuffix(".zip")
                # An extracted folder and its zip are the same source: keep one (the folder).
                if key not in found or p.is_dir():
                    found[key] = p
    return [found[k] for k in sorted(found)]


def _entries(source: Path) -> Iterator[tuple[int, int, str]]:
    """(character id, drawer, member path) for each PNG in a zip or folder."""
    names = (
        _zip_members(source)
        if source.suffix == ".zip"
        else [str(p.relative_to(source)) for p in source.rglob("*.png")]
    )
    for name in names:
        m = _NAME.search(name)
        if m:
            yield int(m.group(1)), int(m.group(2)), name


def _zip_members(source: Path) -> list[str]:
    """Member names of a zip; a corrupt or truncated zip is a DataError naming the file."""
    try:
        with zipfile.ZipFile(source) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"Cannot read the Omniglot zip {source}: {exc}. Re-download or remove it.") from exc


def _read(source: Path, member: str) -> bytes:
    if source.suffix == ".zip":
        with zipfile.ZipFile(source) as zf:
            return zf.read(member)
    return (source / member).read_bytes()


def _decode(data: bytes, size: int) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as im:
        gray = im.convert("L").resize((size, size), Image.Resampling.LANCZOS)
    # Omniglot strokes are black on white; invert so ink is bright, as in glyphs.
    return 255 - np.asarray(gray, dtype=np.uint8)


def _cache_key(sources: list[Path], size: int) -> str:
    """Hash of the image size and every source file's absolute path, size and modification time."""
    h = hashlib.sha256(f"{CACHE_VERSION}:{size}".encode())
    for s in sources:
        # A folder's own mtime misses edits deeper down, so extracted sets are keyed by their PNGs;
        # absolute paths keep two different data dirs with same-named zips apart.
        files = [s] if s.is_file() else sorted(s.rglob("*.png"))
        for f in files:
            st = f.stat()
            h.update(f"{f.resolve()}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def load_omniglot(options: DatasetOptions) -> ImageDataset:
    """Every unique character of the Omniglot sources under ``options.data_dir``."""
    root = options.data_dir
    expected = "images_background*.zip / images_evaluation*.zip, the same as folders, or omniglot-py/"
    if root is None:
        raise DataError(f"omniglot needs --data-dir pointing at a folder with {expected}.")
    sources = _sources(root)
    if not sources:
        raise DataError(
            f"No Omniglot data in {root}: expected {expected}. The official files are in the "
            "brendenlake/omniglot repository (python/*.zip)."
        )
    cache = (
        options.cache_dir
        / f"{CACHE_VERSION}-{options.image_size}-{_cache_key(sources, options.image_size)}.npz"
    )
    cached = load_npz(cache, ["images", "labels"])
    if cached is not None:
        return ImageDataset("omniglot", torch.from_numpy(cached["images"]), cached["labels"].astype(np.int64))
    chosen: dict[tuple[int, int], tuple[Path, str]] = {}
    owner: dict[int, Path] = {}
    for source in sources:
        for char, drawer, member in _entries(source):
            if owner.setdefault(char, source) == source:
                chosen.setdefault((char, drawer), (source, member))
    if not chosen:
        raise DataError(
            f"The Omniglot sources {[s.name for s in sources]} in {root} hold no <char>_<drawer>.png files."
        )
    keys = sorted(chosen)
    by_source: dict[Path, list[int]] = {}
    for i, k in enumerate(keys):
        by_source.setdefault(chosen[k][0], []).append(i)
    images = np.empty((len(keys), 1, options.image_size, options.image_size), dtype=np.uint8)
    for source, idx in by_source.items():
        if source.suffix == ".zip":
            with zipfile.ZipFile(source) as zf:
                blobs = [zf.read(chosen[keys[i]][1]) for i in idx]
        else:
            blobs = [_read(source, chosen[keys[i]][1]) for i in idx]
        with ThreadPoolExecutor(4) as pool:
            for i, arr in zip(idx, pool.map(lambda b: _decode(b, options.image_size), blobs), strict=True):
                images[i, 0] = arr
    labels = np.array([k[0] for k in keys], dtype=np.int64)
    save_npz_atomically(cache, images=images, labels=labels)
    return ImageDataset("omniglot", torch.from_numpy(images), labels)
