"""``folder``: any ``root/<class>/<image>`` tree, loaded into memory (for small datasets)."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from benchmark.data.base import ImageDataset
from benchmark.data.layouts import FOLDER_EXTENSIONS as _EXTENSIONS
from benchmark.data.layouts import check_folder_dir
from benchmark.data.registry import DatasetOptions
from benchmark.errors import DataError


def load_folder(options: DatasetOptions) -> ImageDataset:
    """Class ids 0..C-1 follow the sorted class folder names; grayscale if every image is."""
    root = options.data_dir
    if root is None:
        raise DataError("folder needs --data-dir pointing at a root/<class>/<image> tree.")
    check_folder_dir(root)  # the same check dmlbench run makes before importing torch
    class_dirs = sorted(p for p in root.iterdir() if p.is_dir())
    files = [
        (c, p)
        for c, d in enumerate(class_dirs)
        for p in sorted(d.iterdir())
        if p.suffix.lower() in _EXTENSIONS
    ]
    pil = []
    for _, path in files:
        try:
            with warnings.catch_warnings():
                # PIL only warns between its limit and twice it; both are refused here, before decoding.
                warnings.simplefilter("error", Image.DecompressionBombWarning)
                with Image.open(path) as im:
                    im.load()
                    pil.append(im.copy())
        except (Image.DecompressionBombError, Image.DecompressionBombWarning) as exc:
            raise DataError(
                f"Image {path} is too large to decode: {exc} The decode limit is "
                f"{Image.MAX_IMAGE_PIXELS:,} pixels (PIL.Image.MAX_IMAGE_PIXELS); resize the image."
            ) from None
        except (UnidentifiedImageError, OSError) as exc:
            raise DataError(f"Cannot read image {path}: {exc}") from exc
    gray = all(im.mode in ("L", "1", "I;16", "I") for im in pil)
    mode = "L" if gray else "RGB"
    size = options.image_size
    arrays = [np.asarray(_square(im.convert(mode), size), dtype=np.uint8) for im in pil]
    stacked = np.stack(arrays)
    images = stacked[:, None] if gray else stacked.transpose(0, 3, 1, 2)
    labels = np.array([c for c, _ in files], dtype=np.int64)
    names = {i: d.name for i, d in enumerate(class_dirs)}
    return ImageDataset("folder", torch.from_numpy(np.ascontiguousarray(images)), labels, names)


def _square(im: Image.Image, size: int) -> Image.Image:
    """Resize the shorter side to ``size`` and centre-crop a square."""
    w, h = im.size
    scale = size / min(w, h)
    im = im.resize((max(size, round(w * scale)), max(size, round(h * scale))), Image.Resampling.BILINEAR)
    w, h = im.size
    left, top = (w - size) // 2, (h - size) // 2
    return im.crop((left, top, left + size, top + size))
