"""Batched image augmentation on tensors, for the training loop (CPU or CUDA).

Train and eval batches share one normalisation: pixels ``x`` in [0, 255] become ``x / 127.5 - 1``
in [-1, 1]. It is dataset-independent so that cached tensors, train and eval agree; models whose
pretrained trunk expects other statistics convert from this range themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from benchmark.errors import ConfigError, DataError


@dataclass(frozen=True)
class AugmentSpec:
    """Random resized crop (area fraction ``scale``, aspect ``ratio``), rotation and horizontal flip."""

    scale: tuple[float, float]
    ratio: tuple[float, float]
    max_rotation_deg: float
    hflip: bool

    def __post_init__(self) -> None:
        lo, hi = self.scale
        if not 0 < lo <= hi <= 1:
            raise ConfigError(f"Augmentation scale must satisfy 0 < low <= high <= 1, got {self.scale}.")
        if not 0 < self.ratio[0] <= self.ratio[1]:
            raise ConfigError(f"Augmentation ratio must satisfy 0 < low <= high, got {self.ratio}.")
        if not 0 <= self.max_rotation_deg <= 180:
            raise ConfigError(f"max_rotation_deg must be in [0, 180], got {self.max_rotation_deg}.")


# The paper pipeline (protocols.md §2.2): RandomResizedCrop(scale 0.16-1, ratio 3/4-4/3) and horizontal flip.
PAPER_AUGMENT = AugmentSpec(scale=(0.16, 1.0), ratio=(3 / 4, 4 / 3), max_rotation_deg=0.0, hflip=True)

# torchvision's RandomResizedCrop defaults (scale 0.08-1, ratio 3/4-4/3) and horizontal flip: the
# training transform of the Proxy-Anchor / Mean-Field code (their traditional protocol).
IMAGENET_AUGMENT = AugmentSpec(scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3), max_rotation_deg=0.0, hflip=True)

# Characters (glyphs, omniglot) at ~28 px: crops keep at least 80% of the area (>= 89% of each side)
# because accents and dots near the border separate classes (E/É, i/ı) and a tighter crop would
# cut them off; a near-square ratio and 10 degrees of rotation mimic handwriting and font variation
# without turning one character into another; no flip, since mirroring changes identity (b/d, Я/R).
CHARACTER_AUGMENT = AugmentSpec(scale=(0.8, 1.0), ratio=(0.9, 1 / 0.9), max_rotation_deg=10.0, hflip=False)


def eval_batch(images: torch.Tensor) -> torch.Tensor:
    """uint8 (B, C, H, W) images as normalised float32, without augmentation."""
    _check_images(images)
    return _normalise(images.float())


def train_batch(images: torch.Tensor, spec: AugmentSpec, generator: torch.Generator) -> torch.Tensor:
    """uint8 (B, C, H, W) images, randomly cropped/rotated/flipped per ``spec``, as normalised float32.

    All randomness comes from ``generator`` (a CPU generator for CUDA images is fine); the output has
    the input's height, width and device.
    """
    _check_images(images)
    batch, _, height, width = images.shape
    theta = _random_affine(batch, height, width, spec, generator).to(images.device)
    grid = F.affine_grid(theta, [batch, images.shape[1], height, width], align_corners=False)
    # Zero padding in pixel space is black, the background of the character datasets and the fill
    # torchvision uses for rotations.
    warped = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return _normalise(warped)


def train_batch_from_whole(
    images: Sequence[torch.Tensor], spec: AugmentSpec, generator: torch.Generator, size: int
) -> torch.Tensor:
    """Random resized crops of ``size`` x ``size`` taken from whole images of any shape, normalised.

    ``images`` are uint8 (C, H, W) tensors that may differ in height and width (photos resized to
    a shorter side of 256 and not cropped, docs/protocols.md §2.2): each crop's area fraction and aspect ratio
    are relative to its own image, as torchvision's RandomResizedCrop on the decoded photo, so the
    crops can reach the whole image and not only its evaluation centre square. The random draws
    are those of :func:`train_batch` (same generator use), so equal-size inputs crop identically.
    """
    if not images:
        raise DataError("Augmentation got an empty batch.")
    for image in images:
        if image.dtype != torch.uint8 or image.ndim != 3 or image.shape[0] != images[0].shape[0]:
            raise DataError(
                f"Augmentation expects uint8 (C, H, W) images with equal C, got {image.dtype} "
                f"{tuple(image.shape)}."
            )
    heights = torch.tensor([float(image.shape[1]) for image in images], dtype=torch.float64)
    widths = torch.tensor([float(image.shape[2]) for image in images], dtype=torch.float64)
    theta = _random_affine(len(images), heights, widths, spec, generator)
    channels = images[0].shape[0]
    device = images[0].device
    # One batched sampling (32 separate calls were several times slower): the images go into the
    # top-left corner of a zero canvas and each crop matrix is rescaled from its image's normalised
    # coordinates to the canvas's, x_canvas = (w / W) (x_image + 1) - 1 (align_corners=False). The
    # canvas's zeros beyond an image are what zero padding would read there, so the result is the
    # same as sampling each image alone.
    canvas_h, canvas_w = int(heights.max()), int(widths.max())
    canvas = torch.zeros((len(images), channels, canvas_h, canvas_w), dtype=torch.uint8, device=device)
    for i, image in enumerate(images):
        canvas[i, :, : image.shape[1], : image.shape[2]] = image
    fx = (widths / canvas_w).to(torch.float32)
    fy = (heights / canvas_h).to(torch.float32)
    theta = theta.clone()
    theta[:, 0, :] *= fx[:, None]
    theta[:, 1, :] *= fy[:, None]
    theta[:, 0, 2] += fx - 1
    theta[:, 1, 2] += fy - 1
    grid = F.affine_grid(theta.to(device), [len(images), channels, size, size], align_corners=False)
    warped = F.grid_sample(canvas.float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    return _normalise(warped)


def _normalise(pixels: torch.Tensor) -> torch.Tensor:
    return pixels / 127.5 - 1.0


def _check_images(images: torch.Tensor) -> None:
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise DataError(
            "Augmentation expects uint8 images of shape (B, C, H, W), "
            f"got {images.dtype} {tuple(images.shape)}."
        )


def _random_affine(
    batch: int,
    height: int | torch.Tensor,
    width: int | torch.Tensor,
    spec: AugmentSpec,
    generator: torch.Generator,
) -> torch.Tensor:
    """(batch, 2, 3) float32 matrices mapping output to input coordinates (affine_grid convention).

    ``height``/``width`` are the input's sides, one for the batch or a (batch,) tensor per image.
    """
    uniform = torch.rand(batch, 6, generator=generator, device=generator.device, dtype=torch.float64).cpu()
    area = _lerp(spec.scale[0], spec.scale[1], uniform[:, 0])
    # Aspect ratio is log-uniform, as in torchvision's RandomResizedCrop.
    log_ratio = _lerp(math.log(spec.ratio[0]), math.log(spec.ratio[1]), uniform[:, 1])
    aspect = torch.exp(log_ratio)
    # Crop sides as fractions of the image sides. torchvision re-draws crops that do not fit; a
    # batched draw clamps them to the image instead, which differs only at extreme ratios.
    crop_w = torch.sqrt(area * aspect * height / width).clamp(max=1.0)
    crop_h = torch.sqrt(area / aspect * width / height).clamp(max=1.0)
    # Crop centre in normalised coordinates [-1, 1], uniform over positions inside the image.
    centre_x = _lerp(-1.0, 1.0, uniform[:, 2]) * (1 - crop_w)
    centre_y = _lerp(-1.0, 1.0, uniform[:, 3]) * (1 - crop_h)
    angle = torch.deg2rad(_lerp(-spec.max_rotation_deg, spec.max_rotation_deg, uniform[:, 4]))
    flip = torch.where((uniform[:, 5] < 0.5) & spec.hflip, -1.0, 1.0).to(torch.float64)
    cos, sin = torch.cos(angle), torch.sin(angle)
    # Rotate in pixel units (not normalised ones) so that non-square images do not shear.
    half_w, half_h = width / 2, height / 2
    sx, sy = flip * crop_w * half_w, crop_h * half_h
    theta = torch.stack(
        [
            torch.stack([cos * sx / half_w, -sin * sy / half_w, centre_x], dim=1),
            torch.stack([sin * sx / half_h, cos * sy / half_h, centre_y], dim=1),
        ],
        dim=1,
    )
    return theta.to(torch.float32)


def _lerp(low: float, high: float, t: torch.Tensor) -> torch.Tensor:
    return low + (high - low) * t
