"""Appearance filter for the pretraining source: which rendered symbols look like a dataset's characters.

The built-in trunk's source classes (``benchmark.models.pretrained``) are symbols, disjoint from
every character dataset by Unicode identity. This module checks them by *appearance* against
character classes that are only available as images (Omniglot's handwritten characters: no
installed font covers Hangul, Devanagari, Tagalog...), so that e.g. ○ is not a source class while
the Korean ㅇ is a benchmark class.

Both sides are brought to one frame: the ink's bounding box is scaled so that it fills
``NORMAL_FILL`` of a ``NORMAL_SIZE`` square (its shorter side stretched at most ``MAX_STRETCH``
times more than its longer side), centred, and binarised. Two such ink masks are compared by the
modified Hausdorff distance (Dubuisson and Jain 1994; the shape-matching baseline Lake et al.
report on Omniglot): the larger of the two mean
distances from one mask's ink pixels to the other's nearest ink pixel, in frame pixels. It
tolerates a stroke drawn a pixel or two away, and it penalises ink where the other has none (a
filled ■ is far from an outlined ㅁ). A symbol's distance to a character class is the median over
the class's images (its drawers), and a symbol is flagged when that is at most
``LOOKALIKE_DISTANCE`` in at least half of its rendered faces (glyphs' own look-alike rule counts
faces the same way).

The threshold is calibrated on pairs known to be the same character: the 26 lowercase Latin
letters rendered from the same faces against Omniglot's handwritten Latin classes (character01-26
are a-z). Their distances to their own class are computed by ``calibrate`` in
``benchmarks/pretrain_trunk.py`` and recorded in the weights' provenance; on the shipped small
background sets they ranged 0.81-2.50 with median 1.31. ``LOOKALIKE_DISTANCE`` is that median,
rounded: a symbol is flagged when it is as close to a handwritten class as the median rendered
letter is to its own handwritten letter. ○ against the Korean ㅇ (Korean/character33) is 0.87-0.96
in every DejaVu face.

The filter errs on the side of removing: typeset and handwritten shapes are far apart by any such
measure, so a threshold that admits real same-character pairs also admits many chance matches
(dense drawings such as Early_Aramaic/character09, a circled cross, are near most symbols). A
symbol removed by mistake costs the source some variety; one kept by mistake would be a benchmark
class seen in pretraining. The lower quartile (1.07) would keep about 230 of the 547 symbols, but
also the heavy ━, which issue 30 names among the symbols drawn like a jamo (ㅡ).

Pure numpy and scipy: no torch, no file access.
"""

from __future__ import annotations

import numpy as np
from PIL import Image
from scipy import ndimage

# Side of the common frame and the fraction of it the ink's longer side fills.
NORMAL_SIZE = 32
NORMAL_FILL = 0.8
MAX_STRETCH = 2.0
# Pixels at or below this fraction of an image's brightest pixel are background (antialiasing
# fringes), before and after scaling into the frame.
INK_FRACTION = 0.25
LOOKALIKE_DISTANCE = 1.3
FACE_FRACTION = 0.5


def ink_mask(image: np.ndarray) -> np.ndarray:
    """A bright-ink-on-black uint8 image (h, w) in the common frame: bool (NORMAL_SIZE, NORMAL_SIZE).

    An image with no ink gives an empty mask.
    """
    if image.ndim != 2:
        raise ValueError(f"ink_mask takes one 2-d image, got shape {image.shape}")
    out = np.zeros((NORMAL_SIZE, NORMAL_SIZE), dtype=bool)
    peak = int(image.max())
    if peak == 0:
        return out
    ink = image > INK_FRACTION * peak
    rows, cols = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
    crop = image[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    h, w = crop.shape
    # The longer side fills NORMAL_FILL of the frame; the shorter is stretched to fill it too, but
    # by at most MAX_STRETCH times the longer side's scale: a box drawn wider than tall (most
    # drawers' ㅁ) still meets a square □, while a horizontal bar stays a bar instead of being
    # stretched into a square blob.
    long_scale = NORMAL_FILL * NORMAL_SIZE / max(h, w)
    short_scale = min(NORMAL_FILL * NORMAL_SIZE / min(h, w), MAX_STRETCH * long_scale)
    y_scale, x_scale = (long_scale, short_scale) if h >= w else (short_scale, long_scale)
    new_w, new_h = max(1, round(w * x_scale)), max(1, round(h * y_scale))
    small = np.asarray(
        Image.fromarray(np.ascontiguousarray(crop)).resize((new_w, new_h), Image.Resampling.BOX)
    )
    top, left = (NORMAL_SIZE - new_h) // 2, (NORMAL_SIZE - new_w) // 2
    # A thin stroke box-averaged down is faint: measured against the scaled image's own peak.
    out[top : top + new_h, left : left + new_w] = small > INK_FRACTION * int(small.max())
    return out


def ink_masks(images: np.ndarray) -> np.ndarray:
    """ink_mask over the last two axes: (..., h, w) uint8 -> (..., NORMAL_SIZE, NORMAL_SIZE) bool."""
    flat = images.reshape(-1, *images.shape[-2:])
    return np.stack([ink_mask(im) for im in flat]).reshape(*images.shape[:-2], NORMAL_SIZE, NORMAL_SIZE)


def _distance_maps(masks: np.ndarray) -> np.ndarray:
    """(n, S*S) float32: each pixel's distance to the mask's nearest ink pixel (empty mask: far)."""
    far = float(2 * NORMAL_SIZE)
    maps = [ndimage.distance_transform_edt(~m) if m.any() else np.full(m.shape, far) for m in masks]
    return np.stack(maps).reshape(len(masks), -1).astype(np.float32)


def class_distance(symbols: np.ndarray, references: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Median-over-images modified Hausdorff distance of each symbol rendering to each reference class.

    ``symbols``: (n_symbols, n_faces, S, S) ink masks; ``references``: (n_images, S, S) ink masks
    of the reference classes' images; ``labels``: (n_images,) their class ids. Returns float32
    (n_symbols, n_faces, n_classes), classes in ``np.unique(labels)`` order.
    """
    n_sym, n_faces = symbols.shape[:2]
    sym = symbols.reshape(n_sym * n_faces, -1).astype(np.float32)
    ref = references.reshape(len(references), -1).astype(np.float32)
    # Mean distance from A's ink to B = (A's mask . B's distance map) / |A|: one matrix product
    # per direction instead of a loop over pairs.
    sym_count = np.maximum(sym.sum(axis=1, keepdims=True), 1)
    ref_count = np.maximum(ref.sum(axis=1, keepdims=True), 1)
    forward = (sym @ _distance_maps(references).T) / sym_count
    backward = ((ref @ _distance_maps(symbols.reshape(-1, *symbols.shape[-2:])).T) / ref_count).T
    mhd = np.maximum(forward, backward)
    classes = np.unique(labels)
    out = np.empty((n_sym * n_faces, len(classes)), dtype=np.float32)
    for j, c in enumerate(classes):
        # The median drawer: a class is matched when most of its drawers' images match, not when
        # one drawer's scrawl happens to.
        out[:, j] = np.median(mhd[:, labels == c], axis=1)
    return out.reshape(n_sym, n_faces, len(classes))


def flag_lookalikes(
    distance: np.ndarray, threshold: float = LOOKALIKE_DISTANCE, face_fraction: float = FACE_FRACTION
) -> np.ndarray:
    """bool (n_symbols, n_classes): within ``threshold`` of a class in ``face_fraction`` of the faces or more.

    ``distance`` is class_distance's (n_symbols, n_faces, n_classes) array.
    """
    n_faces = distance.shape[1]
    return np.asarray((distance <= threshold).sum(axis=1) >= face_fraction * n_faces)
