"""The embedded ``glyphs`` dataset (protocols.md §5): letters and digits rendered from matplotlib's fonts.

Classes are the Latin, Greek and Cyrillic letters and digits present in all 16 DejaVu/STIX faces
that ship with matplotlib, minus characters that look like an earlier one (Latin A, Greek Α and
Cyrillic А share a glyph). Each class has 2 jittered renderings per face (32 images), bright ink on
black. Building is deterministic and the result is cached per image size.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont, features

from benchmark.data.base import (
    ImageDataset,
    load_npz,
    save_npz_atomically,
)
from benchmark.data.fonts import DEJAVU_FACES, STIX_FACES
from benchmark.data.registry import DatasetOptions
from benchmark.errors import DataError

# Regular, bold, italic/oblique and bold-italic of four families: 16 faces.
FONT_FACES: tuple[str, ...] = DEJAVU_FACES + STIX_FACES
# Two jittered renderings per face (SPEC §5: one rendering per face plus seeded jitter). One per
# face (16 images per class) was measured and not taken (README command, glyphs mfcont, mini, the
# same afternoon as a 2-per-face run): validation epochs are cheaper (1.00 against 1.12 s per fold
# epoch) but the run trains 1557 fold epochs instead of 1361, so it took as long (872 s against
# 866 s); its separated MAP@R was 51.60 ± 2.33 against 54.60 ± 1.96 (on its own half-size test
# set with R = 15 instead of 31, so only roughly comparable).
RENDERINGS_PER_FACE = 2
# Bump when rendering changes, so that old caches are not reused.
CACHE_VERSION = "glyphs-v1"

# Unicode blocks the classes come from: Basic Latin, Latin-1 Supplement, Latin Extended-A, Greek
# and Coptic, Cyrillic.
_SCRIPT_RANGES: tuple[tuple[int, int], ...] = ((0x30, 0x7A), (0xC0, 0x17F), (0x370, 0x3FF), (0x400, 0x4FF))

# Images are rendered SUPERSAMPLE times larger and box-averaged down, which antialiases them.
SUPERSAMPLE = 4
# The union of all glyph boxes of all faces fills this fraction of the canvas; the rest is room
# for the jitter, so that jittered glyphs are rarely clipped.
_FILL = 0.84
# Font size used to measure glyph extents (font units per em are irrelevant at this size).
_MEASURE_EM = 1000

# Near-duplicate detection: glyphs are compared at this reference size whatever size is built, so
# the class list does not depend on image_size. Two renderings are "the same" when their mean
# absolute difference is below _SAME_MAD (a dot accent at 32 px differs by >= 0.004), and a
# character is dropped when it is the same as an earlier one in at least half of the faces: such a
# class would be indistinguishable from the other for most of its images.
_REFERENCE_SIZE = 32
_SAME_MAD = 0.0015
_SAME_FACE_FRACTION = 0.5

# Jitter ranges, relative to the canvas so that every image size gets the same jitter.
_SEED = 20200828  # fixed: the dataset must be byte-identical on every build
_SCALE_RANGE = (0.9, 1.1)
_SHIFT_FRACTION = 0.04
_ROTATION_DEG = 8.0
_STROKE_FRACTION = 0.015


@dataclass(frozen=True)
class _Layout:
    """Where a glyph goes on a square canvas: em size and the anchor point, as canvas fractions."""

    em: float
    x: float
    baseline: float


@dataclass(frozen=True)
class _Jitter:
    """One rendering's perturbation: scale, shift (canvas fractions), rotation (deg), stroke (fraction)."""

    scale: float
    dx: float
    dy: float
    rotation: float
    stroke: float


def font_paths() -> list[Path]:
    """Paths of the 16 font faces inside the installed matplotlib."""
    import matplotlib

    folder = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    paths = [folder / name for name in FONT_FACES]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise DataError(
            f"The glyphs dataset needs matplotlib's fonts; missing in {folder}: {', '.join(missing)}."
        )
    return paths


def is_class_candidate(codepoint: int) -> bool:
    """Whether a character is a letter or digit of the Latin, Greek or Cyrillic blocks we use."""
    if not any(lo <= codepoint <= hi for lo, hi in _SCRIPT_RANGES):
        return False
    category = unicodedata.category(chr(codepoint))
    return category.startswith("L") or category == "Nd"


def candidate_characters(paths: Sequence[Path]) -> list[int]:
    """Sorted code points of the candidate characters mapped in every face."""
    from matplotlib.ft2font import FT2Font

    common: set[int] | None = None
    for path in paths:
        mapped = set(FT2Font(str(path)).get_charmap())
        common = mapped if common is None else common & mapped
    return sorted(c for c in common or () if is_class_candidate(c))


def measure_layout(fonts: Sequence[ImageFont.FreeTypeFont], codepoints: Sequence[int]) -> _Layout:
    """A common layout that fits every glyph of every face, keeping relative sizes and baselines.

    Glyphs share the baseline and em size rather than being scaled to fill the image, so that
    case (o/O) and accent position (é/e) remain visible.
    """
    boxes = np.array(
        [font.getbbox(chr(c), anchor="ms") for font in fonts for c in codepoints], dtype=np.float64
    )
    left, top = boxes[:, 0].min(), boxes[:, 1].min()
    right, bottom = boxes[:, 2].max(), boxes[:, 3].max()
    span = max(right - left, bottom - top) / _MEASURE_EM
    em = _FILL / span
    # Anchor = (horizontal middle of the advance, baseline); centre the union box on the canvas.
    return _Layout(
        em=em,
        x=0.5 - (left + right) / 2 / _MEASURE_EM * em,
        baseline=0.5 - (top + bottom) / 2 / _MEASURE_EM * em,
    )


def render_glyph(
    font: ImageFont.FreeTypeFont, char: str, canvas: int, layout: _Layout, jitter: _Jitter | None
) -> Image.Image:
    """``char`` drawn white on black on a ``canvas``-px square, optionally jittered."""
    image = Image.new("L", (canvas, canvas), 0)
    stroke = round(jitter.stroke * canvas) if jitter else 0
    ImageDraw.Draw(image).text(
        (layout.x * canvas, layout.baseline * canvas),
        char,
        fill=255,
        font=font,
        anchor="ms",
        stroke_width=stroke,
        stroke_fill=255,
    )
    if jitter is None:
        return image
    return image.transform(
        (canvas, canvas), Image.Transform.AFFINE, _inverse_affine(jitter, canvas), Image.Resampling.BILINEAR
    )


def _inverse_affine(jitter: _Jitter, canvas: int) -> tuple[float, ...]:
    """PIL AFFINE data (output -> input pixel map) for scale and rotation about the centre, then shift."""
    angle = np.deg2rad(jitter.rotation)
    cos, sin = np.cos(angle) / jitter.scale, np.sin(angle) / jitter.scale
    centre = canvas / 2
    out_x, out_y = centre + jitter.dx * canvas, centre + jitter.dy * canvas
    # input = R(-angle) / scale @ (output - shifted centre) + centre
    return (
        float(cos),
        float(sin),
        float(centre - cos * out_x - sin * out_y),
        float(-sin),
        float(cos),
        float(centre + sin * out_x - cos * out_y),
    )


def _load_fonts(paths: Sequence[Path], size: int) -> list[ImageFont.FreeTypeFont]:
    # The basic layout engine renders the same with or without libraqm installed.
    return [ImageFont.truetype(str(p), size, layout_engine=ImageFont.Layout.BASIC) for p in paths]


def render_faces(
    paths: Sequence[Path],
    codepoints: Sequence[int],
    layout: _Layout,
    image_size: int,
    jitters: np.ndarray | None,
) -> np.ndarray:
    """uint8 renderings of shape (classes, faces, renderings, size, size).

    ``jitters`` is a (classes, faces, renderings, 5) array of jitter parameters, or None for one
    plain rendering per face.
    """
    canvas = image_size * SUPERSAMPLE
    fonts = _load_fonts(paths, round(layout.em * canvas))
    reps = 1 if jitters is None else jitters.shape[2]
    out = np.zeros((len(codepoints), len(fonts), reps, image_size, image_size), dtype=np.uint8)
    for ci, codepoint in enumerate(codepoints):
        for fi, font in enumerate(fonts):
            for ri in range(reps):
                jitter = None if jitters is None else _Jitter(*map(float, jitters[ci, fi, ri]))
                big = render_glyph(font, chr(codepoint), canvas, layout, jitter)
                out[ci, fi, ri] = np.asarray(big.reduce(SUPERSAMPLE))
    return out


def drop_lookalikes(renderings: np.ndarray) -> list[int]:
    """Indices of the characters to keep, given plain renderings (classes, faces, size, size).

    A character is dropped when it is empty in some face, or when it matches an earlier kept
    character (lower code point: Latin before Greek before Cyrillic) in at least half the faces.
    """
    n_chars, n_faces = renderings.shape[:2]
    flat = torch.from_numpy(renderings.reshape(n_chars, n_faces, -1)).to(torch.float32) / 255
    nonempty = (flat.amax(dim=2) > 0).all(dim=1)
    same_faces = _same_face_counts(flat.transpose(0, 1).contiguous())
    same = same_faces >= _SAME_FACE_FRACTION * n_faces
    keep: list[int] = []
    for i in range(n_chars):
        if nonempty[i] and not bool(same[i, keep].any()):
            keep.append(i)
    return keep


def _same_face_counts(per_face: torch.Tensor) -> torch.Tensor:
    """(chars, chars) number of faces in which two renderings' mean absolute difference < _SAME_MAD.

    ``per_face`` is (faces, chars, pixels) in [0, 1].
    """
    n_pixels = per_face.shape[2]
    # For differences in [-1, 1], d**2 <= |d|, so only pairs whose mean squared difference (cheap,
    # via a matrix product) is below the threshold can qualify; the exact L1 is computed for those.
    squared = (per_face**2).sum(dim=2)
    msd = (squared[:, :, None] + squared[:, None, :] - 2 * per_face @ per_face.transpose(1, 2)) / n_pixels
    # The margin absorbs float32 rounding in the matrix-product form; the exact test follows.
    faces, rows, cols = torch.nonzero(msd < _SAME_MAD + 1e-4, as_tuple=True)
    mad = (per_face[faces, rows] - per_face[faces, cols]).abs().mean(dim=1)
    counts = torch.zeros(msd.shape[1:], dtype=torch.int64)
    hits = mad < _SAME_MAD
    counts.index_put_((rows[hits], cols[hits]), torch.ones_like(rows[hits]), accumulate=True)
    return counts


def _jitter_parameters(n_classes: int, n_faces: int) -> np.ndarray:
    """Seeded (classes, faces, renderings, 5) jitter parameters; see _Jitter for the columns."""
    rng = np.random.default_rng(_SEED)
    shape = (n_classes, n_faces, RENDERINGS_PER_FACE)
    return np.stack(
        [
            rng.uniform(*_SCALE_RANGE, size=shape),
            rng.uniform(-_SHIFT_FRACTION, _SHIFT_FRACTION, size=shape),
            rng.uniform(-_SHIFT_FRACTION, _SHIFT_FRACTION, size=shape),
            rng.uniform(-_ROTATION_DEG, _ROTATION_DEG, size=shape),
            rng.uniform(0, _STROKE_FRACTION, size=shape),
        ],
        axis=-1,
    )


def select_classes(paths: Sequence[Path]) -> tuple[list[int], _Layout]:
    """The class code points and the common glyph layout."""
    candidates = candidate_characters(paths)
    layout = measure_layout(_load_fonts(paths, _MEASURE_EM), candidates)
    plain = render_faces(paths, candidates, layout, _REFERENCE_SIZE, jitters=None)[:, :, 0]
    return [candidates[i] for i in drop_lookalikes(plain)], layout


def build_glyphs(image_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Render the dataset: uint8 images (N, 1, size, size) and int64 labels (code points)."""
    paths = font_paths()
    classes, layout = select_classes(paths)
    jitters = _jitter_parameters(len(classes), len(paths))
    images = render_faces(paths, classes, layout, image_size, jitters)
    per_class = len(paths) * RENDERINGS_PER_FACE
    labels = np.repeat(np.asarray(classes, dtype=np.int64), per_class)
    return images.reshape(-1, 1, image_size, image_size), labels


def source_key() -> str:
    """Identifies what the rendering depends on, so a cache built from other fonts is rebuilt."""
    parts = [CACHE_VERSION, importlib.metadata.version("pillow"), str(features.version("freetype2"))]
    parts.append(importlib.metadata.version("matplotlib"))
    parts += [f"{p.name}:{p.stat().st_size}" for p in font_paths()]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def cache_path(cache_dir: Path, image_size: int) -> Path:
    """Where the glyphs of one image size are cached."""
    return cache_dir / f"{CACHE_VERSION}-{image_size}.npz"


def load_glyphs(options: DatasetOptions) -> ImageDataset:
    """The glyphs dataset at ``options.image_size``, from the cache or freshly rendered (then cached)."""
    path = cache_path(options.cache_dir, options.image_size)
    key = source_key()
    cached = load_npz(path, ["images", "labels", "source"])
    if cached is not None and str(cached["source"]) == key:
        images, labels = cached["images"], cached["labels"]
    else:
        images, labels = build_glyphs(options.image_size)
        save_npz_atomically(path, images=images, labels=labels, source=np.array(key))
    return ImageDataset(
        name="glyphs",
        images=torch.from_numpy(images),
        labels=labels.astype(np.int64, copy=False),
        class_names={int(c): chr(int(c)) for c in np.unique(labels)},
    )
