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
from benchmark.data.layouts import OMNIGLOT_EXPECTED, check_omniglot_dir, omniglot_sources
from benchmark.data.layouts import zip_members as _zip_members
from benchmark.data.registry import DatasetOptions
from benchmark.errors import DataError

_NAME = re.compile(r"(?:^|/)(\d+)_(\d+)\.png$")
CACHE_VERSION = "omniglot-v1"


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
    if root is None:
        raise DataError(f"omniglot needs --data-dir pointing at a folder with {OMNIGLOT_EXPECTED}.")
    check_omniglot_dir(root)  # the same check dmlbench run makes before importing torch
    sources = omniglot_sources(root)
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


def read_characters(root: Path) -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    """Every unique character's images at their native size, bright ink on black, with names.

    Returns uint8 images (N, h, w), int64 labels (character ids, as load_omniglot gives them) and
    each character id's ``<alphabet>/<characterNN>`` folder name. The same sources and
    deduplication as load_omniglot; nothing is resized or cached (the pretraining source's
    look-alike filter compares against the drawings themselves).
    """
    check_omniglot_dir(root)
    owner: dict[int, Path] = {}
    chosen: dict[tuple[int, int], tuple[Path, str]] = {}
    for source in omniglot_sources(root):
        for char, drawer, member in _entries(source):
            if owner.setdefault(char, source) == source:
                chosen.setdefault((char, drawer), (source, member))
    keys = sorted(chosen)
    names = {char: "/".join(Path(chosen[(char, drawer)][1]).parts[-3:-1]) for char, drawer in keys}
    images = []
    zips = {s: zipfile.ZipFile(s) for s in {chosen[k][0] for k in keys} if s.suffix == ".zip"}
    try:
        for key in keys:
            source, member = chosen[key]
            blob = zips[source].read(member) if source in zips else _read(source, member)
            with Image.open(io.BytesIO(blob)) as im:
                images.append(255 - np.asarray(im.convert("L"), dtype=np.uint8))
    finally:
        for zf in zips.values():
            zf.close()
    return np.stack(images), np.array([k[0] for k in keys], dtype=np.int64), names
