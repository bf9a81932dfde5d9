"""Training crops come from the whole photo, evaluation from its centre square (docs/protocols.md §2.2).

A generated CUB-layout tree of wide images whose left and right borders carry a pure red marker
(the rest mid-grey): the evaluation crop (shorter side resized, centre square) never contains
it, the random resized crops of training must. Before issue 13 the training crops were taken
inside the evaluation square, so the marker was never seen in training.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import benchmark.engine.train as train_module
from benchmark.config import load_protocol_file, resolve_config
from benchmark.data.augment import PAPER_AUGMENT, eval_batch, train_batch_from_whole
from benchmark.data.standard import LazyImageDataset
from benchmark.errors import DataError
from benchmark.protocol.registry import budget_overrides
from benchmark.protocol.request import dataset_paper_settings
from benchmark.protocol.run_data import AUGMENTS, load_run_dataset


def make_marker_cub(root: Path, n_classes: int = 8, per_class: int = 4) -> Path:
    """CUB_200_2011 of 96 x 48 PNGs: grey with a class-dependent tint, red 15-px side borders."""
    cub = root / "CUB_200_2011"
    images, labels, classes = [], [], []
    i = 1
    for c in range(1, n_classes + 1):
        name = f"{c:03d}.Bird_{c}"
        classes.append(f"{c} {name}")
        for k in range(per_class):
            pixels = np.full((48, 96, 3), 128, dtype=np.uint8)
            pixels[:, :, 2] = 100 + 10 * c + k  # distinct images; blue stays far from the marker
            pixels[:, :15] = (255, 0, 0)
            pixels[:, -15:] = (255, 0, 0)
            rel = f"{name}/img_{k}.png"
            (cub / "images" / rel).parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(pixels).save(cub / "images" / rel)
            images.append(f"{i} {rel}")
            labels.append(f"{i} {c}")
            i += 1
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    return cub


def _red_pixels(x: torch.Tensor) -> int:
    """Pixels of the marker in normalised inputs (red 255 -> 1, green and blue 0 -> -1)."""
    return int(((x[:, 0] > 0.6) & (x[:, 1] < -0.6) & (x[:, 2] < -0.6)).sum())


def test_training_batches_see_the_border_evaluation_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cub = make_marker_cub(tmp_path / "data")
    protocol = load_protocol_file("mlrc")
    user = {"data.dataset": "cub200", "data.data_dir": str(cub), "train.batch_size": 8}
    config, _ = resolve_config(protocol, budget_overrides("smoke", "mlrc"), user, dataset_paper_settings)
    dataset = load_run_dataset(config, tmp_path / "cache")
    seen: dict[bool, list[torch.Tensor]] = {True: [], False: []}
    build = train_module.build_fold_model

    def spy(*args: object, **kwargs: object) -> torch.nn.Module:
        model = build(*args, **kwargs)  # type: ignore[arg-type]
        model.register_forward_pre_hook(lambda mod, inp: seen[mod.training].append(inp[0].detach().clone()))
        return model

    monkeypatch.setattr(train_module, "build_fold_model", spy)
    train_module.train_with_loss(
        config=config,
        loss_name="contrastive",
        loss_params={},
        train=dataset,
        val=dataset,
        augment=AUGMENTS[config.data.augment],
        seed=0,
        device=torch.device("cpu"),
        prefetch_depth=0,
    )
    training, evaluation = torch.cat(seen[True]), torch.cat(seen[False])
    size = config.data.image_size
    assert training.shape[1:] == evaluation.shape[1:] == (3, size, size)
    assert _red_pixels(evaluation) == 0  # evaluation: the centre square only, as before
    assert _red_pixels(training) > 0  # training: crops reach the border of the whole image
    # The decoded whole image is the shorter side resized (round(28 * 256 / 227) = 32) and uncropped.
    assert isinstance(dataset, LazyImageDataset)  # a standard layout loads lazily, whole images included
    (whole,) = dataset.load_whole_images([0])
    assert tuple(whole.shape) == (3, 32, 64)
    assert _red_pixels(eval_batch(dataset.images[0:1])) == 0


def test_whole_image_crops_cover_the_full_width() -> None:
    # Full-area crops (scale 1, aspect of the image) of a 2:1 image keep both borders.
    image = torch.full((3, 20, 40), 128, dtype=torch.uint8)
    image[:, :, :3] = torch.tensor([255, 0, 0], dtype=torch.uint8)[:, None, None]
    image[:, :, -3:] = torch.tensor([255, 0, 0], dtype=torch.uint8)[:, None, None]
    spec = PAPER_AUGMENT.__class__(scale=(1.0, 1.0), ratio=(2.0, 2.0), max_rotation_deg=0.0, hflip=False)
    out = train_batch_from_whole([image, image[:, :, :20]], spec, torch.Generator().manual_seed(0), 16)
    assert out.shape == (2, 3, 16, 16)
    red = (out[:, 0] > 0.6) & (out[:, 1] < -0.6)
    assert red[0, :, 0].all() and red[0, :, -1].all()  # both borders of the wide image
    assert red[1, :, 0].all() and not red[1, :, -1].any()  # the narrower image has only the left one
    with pytest.raises(DataError):
        train_batch_from_whole([image.float()], spec, torch.Generator(), 16)


def test_batched_whole_image_crops_equal_cropping_each_image_alone() -> None:
    # The batch shares one zero canvas; each crop must equal sampling its own image alone.
    import torch.nn.functional as F

    from benchmark.data.augment import _random_affine

    gen = torch.Generator().manual_seed(3)
    images = [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen) for h, w in ((20, 37), (31, 20))
    ]
    batch = train_batch_from_whole(images, PAPER_AUGMENT, torch.Generator().manual_seed(7), 12)
    heights = torch.tensor([20.0, 31.0], dtype=torch.float64)
    widths = torch.tensor([37.0, 20.0], dtype=torch.float64)
    theta = _random_affine(2, heights, widths, PAPER_AUGMENT, torch.Generator().manual_seed(7))
    for i, image in enumerate(images):
        grid = F.affine_grid(theta[i : i + 1], [1, 3, 12, 12], align_corners=False)
        alone = F.grid_sample(
            image[None].float(), grid, mode="bilinear", padding_mode="zeros", align_corners=False
        )
        assert torch.allclose(batch[i], alone[0] / 127.5 - 1, atol=1e-4)
