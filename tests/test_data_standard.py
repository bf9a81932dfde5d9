"""Standard on-disk dataset layouts: tiny fixture trees in each layout, lazy decoding, errors."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
from PIL import Image

from benchmark.data.augment import PAPER_AUGMENT, eval_batch, train_batch
from benchmark.data.base import ImageDataset, validate_dataset
from benchmark.data.registry import DatasetOptions, DatasetSpec
from benchmark.data.standard import (
    PARTITIONS,
    LazyImageDataset,
    decode_image,
    load_cars196,
    load_cifar100,
    load_cub200,
    load_food101,
    load_inshop,
    load_partitions,
    load_sop,
    load_svhn,
    load_tinyimagenet,
    register_standard_datasets,
)
from benchmark.errors import DataError, DmlbenchError
from benchmark.registry import Registry

torch.set_num_threads(1)

COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (0, 255, 255)]


def _image(path: Path, colour: tuple[int, int, int] = (200, 100, 50), size: tuple[int, int] = (8, 8)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, colour).save(path)


def _options(data_dir: Path | None, image_size: int = 8) -> DatasetOptions:
    return DatasetOptions(data_dir=data_dir, image_size=image_size, cache_dir=Path("/nonexistent-cache"))


# --------------------------------------------------------------------------------------------------
# Fixture trees
# --------------------------------------------------------------------------------------------------


def _make_cub(root: Path, n_classes: int = 4, per_class: int = 2) -> Path:
    cub = root / "CUB_200_2011"
    images, labels, classes = [], [], []
    image_id = 0
    for c in range(1, n_classes + 1):
        folder = f"{c:03d}.Bird_{c}"
        classes.append(f"{c} {folder}")
        for k in range(per_class):
            image_id += 1
            rel = f"{folder}/Bird_{c}_{k}.jpg"
            _image(cub / "images" / rel, COLOURS[c % len(COLOURS)])
            images.append(f"{image_id} {rel}")
            labels.append(f"{image_id} {c}")
    (cub / "images.txt").write_text("\n".join(images) + "\n")
    (cub / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    (cub / "classes.txt").write_text("\n".join(classes) + "\n")
    return cub


def _make_cars(root: Path, n_classes: int = 3, per_class: int = 2) -> Path:
    cars = root / "cars196"
    dtype = [("relative_im_path", "O"), ("bbox_x1", "O"), ("class", "O"), ("test", "O")]
    annotations = np.zeros((1, n_classes * per_class), dtype=dtype)
    for i in range(n_classes * per_class):
        rel = f"car_ims/{i + 1:06d}.jpg"
        _image(cars / rel)
        # Interleaved classes, as in the real file where images are not grouped by class.
        annotations[0, i] = (rel, 1, i % n_classes + 1, i % 2)
    names = np.array([f"Make {c}" for c in range(1, n_classes + 1)], dtype=object)
    scipy.io.savemat(cars / "cars_annos.mat", {"annotations": annotations, "class_names": names})
    return cars


def _make_sop(root: Path) -> Path:
    sop = root / "Stanford_Online_Products"
    header = "image_id class_id super_class_id path\n"
    for part, class_ids in (("train", (1, 2)), ("test", (3, 4))):
        rows: list[str] = []
        for class_id in class_ids:
            for k in range(2):
                rel = f"bicycle_final/{1000 + class_id}_{k}.JPG"
                _image(sop / rel)
                rows.append(f"{len(rows) + 1} {class_id} 1 {rel}")
        (sop / f"Ebay_{part}.txt").write_text(header + "\n".join(rows) + "\n")
    return sop


def _make_inshop(root: Path, declared: int | None = None) -> Path:
    shop = root / "In-shop Clothes Retrieval Benchmark"
    rows = [
        ("img/WOMEN/Dresses/id_00000001/01_1_front.jpg", "id_00000001", "train"),
        ("img/WOMEN/Dresses/id_00000001/01_2_side.jpg", "id_00000001", "train"),
        ("img/MEN/Tees/id_00000002/01_1_front.jpg", "id_00000002", "query"),
        ("img/MEN/Tees/id_00000002/01_2_side.jpg", "id_00000002", "gallery"),
        ("img/MEN/Tees/id_00000007/01_1_front.jpg", "id_00000007", "query"),
        ("img/MEN/Tees/id_00000007/01_2_side.jpg", "id_00000007", "gallery"),
        ("img/MEN/Tees/id_00000007/01_3_back.jpg", "id_00000007", "gallery"),
    ]
    for rel, _, _ in rows:
        _image(shop / "Img" / rel)
    lines = [str(len(rows) if declared is None else declared), "image_name item_id evaluation_status"]
    lines += [f"{rel:<60}{item:<16}{status}" for rel, item, status in rows]
    (shop / "Eval").mkdir(parents=True)
    (shop / "Eval" / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")
    return shop


def _make_cifar(root: Path) -> tuple[Path, np.ndarray]:
    cifar = root / "cifar-100-python"
    cifar.mkdir(parents=True)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=(9, 3 * 32 * 32), dtype=np.uint8)
    splits = {"train": (data[:6], [0, 1, 2, 0, 1, 2]), "test": (data[6:], [2, 1, 0])}
    for part, (x, y) in splits.items():
        with (cifar / part).open("wb") as handle:
            pickle.dump({"data": x, "fine_labels": y, "coarse_labels": [0] * len(y)}, handle, protocol=2)
    with (cifar / "meta").open("wb") as handle:
        pickle.dump({"fine_label_names": ["apple", "aquarium_fish", "baby"]}, handle, protocol=2)
    return cifar, data


def _make_svhn(root: Path) -> tuple[Path, np.ndarray]:
    svhn = root / "svhn"
    svhn.mkdir(parents=True)
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, size=(32, 32, 3, 5), dtype=np.uint8)
    scipy.io.savemat(
        svhn / "train_32x32.mat", {"X": x[..., :3], "y": np.array([[10], [1], [9]], dtype=np.uint8)}
    )
    scipy.io.savemat(svhn / "test_32x32.mat", {"X": x[..., 3:], "y": np.array([[10], [3]], dtype=np.uint8)})
    return svhn, x


def _make_food(root: Path) -> Path:
    food = root / "food-101"
    (food / "meta").mkdir(parents=True)
    classes = ["apple_pie", "baby_back_ribs", "waffles"]
    (food / "meta" / "classes.txt").write_text("\n".join(classes) + "\n")
    train: list[str] = []
    test: list[str] = []
    for c in classes:
        for k in range(3):
            entry = f"{c}/{100 + k}"
            _image(food / "images" / f"{entry}.jpg", size=(12, 8))
            (train if k < 2 else test).append(entry)
    # Listed out of class order: ids must still follow the sorted class names.
    (food / "meta" / "train.txt").write_text("\n".join(reversed(train)) + "\n")
    (food / "meta" / "test.txt").write_text("\n".join(test) + "\n")
    return food


def _make_tiny(root: Path) -> Path:
    tiny = root / "tiny-imagenet-200"
    wnids = ["n02124075", "n01443537"]
    (tiny / "val" / "images").mkdir(parents=True)
    (tiny / "wnids.txt").write_text("\n".join(wnids) + "\n")
    (tiny / "words.txt").write_text("n01443537\tgoldfish, Carassius auratus\nn02124075\tEgyptian cat\n")
    for wnid in wnids:
        for k in range(3):
            _image(tiny / "train" / wnid / "images" / f"{wnid}_{k}.JPEG", size=(64, 64))
    annotations = []
    for k, wnid in enumerate(["n01443537", "n02124075", "n02124075"]):
        _image(tiny / "val" / "images" / f"val_{k}.JPEG", size=(64, 64))
        annotations.append(f"val_{k}.JPEG\t{wnid}\t0\t0\t63\t63")
    (tiny / "val" / "val_annotations.txt").write_text("\n".join(annotations) + "\n")
    return tiny


# --------------------------------------------------------------------------------------------------
# Deep-metric-learning layouts
# --------------------------------------------------------------------------------------------------


def test_cub200_pools_images_with_its_own_class_ids(tmp_path: Path) -> None:
    _make_cub(tmp_path)
    ds = load_cub200(_options(tmp_path))
    assert isinstance(ds, LazyImageDataset)
    assert len(ds) == 8 and ds.classes().tolist() == [1, 2, 3, 4]
    assert ds.labels.dtype == np.int64 and ds.labels.tolist() == [1, 1, 2, 2, 3, 3, 4, 4]
    assert ds.class_names[1] == "Bird_1"
    ds.validate(8)
    batch = ds.images[torch.tensor([0, 3])]
    assert batch.dtype == torch.uint8 and batch.shape == (2, 3, 8, 8)
    # Pointing data_dir at the dataset folder itself works as well.
    assert load_cub200(_options(tmp_path / "CUB_200_2011")).fingerprint() == ds.fingerprint()


def test_cub200_missing_names_files_path_and_source(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_cub200(_options(tmp_path))
    message = str(err.value)
    assert "images.txt" in message and "image_class_labels.txt" in message
    assert str(tmp_path) in message and "CUB_200_2011" in message and "caltech.edu" in message


def test_missing_data_dir_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="data directory"):
        load_sop(_options(None))


def test_cub200_incomplete_and_malformed(tmp_path: Path) -> None:
    cub = _make_cub(tmp_path)
    (cub / "images" / "002.Bird_2" / "Bird_2_1.jpg").unlink()
    with pytest.raises(
        DataError, match=r"1 of 8 listed images are missing, e\.g\. images/002\.Bird_2/Bird_2_1\.jpg"
    ):
        load_cub200(_options(tmp_path))
    (cub / "images.txt").write_text("1 001.Bird_1/Bird_1_0.jpg\n2 two fields too many\n")
    with pytest.raises(DataError, match=r"images\.txt, line 2: expected 2 fields, got 5"):
        load_cub200(_options(tmp_path))


def test_partial_layout_reports_what_is_missing(tmp_path: Path) -> None:
    cub = _make_cub(tmp_path)
    (cub / "image_class_labels.txt").unlink()
    with pytest.raises(DataError, match=r"Incomplete: .*CUB_200_2011 lacks image_class_labels\.txt"):
        load_cub200(_options(tmp_path))


def test_cars196_reads_cars_annos_mat(tmp_path: Path) -> None:
    _make_cars(tmp_path)
    ds = load_cars196(_options(tmp_path))
    assert len(ds) == 6 and ds.classes().tolist() == [1, 2, 3]
    assert ds.labels.tolist() == [1, 2, 3, 1, 2, 3]
    assert ds.paths[0] == "car_ims/000001.jpg" and ds.class_names == {1: "Make 1", 2: "Make 2", 3: "Make 3"}
    assert ds.images[-1].shape == (3, 8, 8)


def test_cars196_malformed_mat(tmp_path: Path) -> None:
    cars = tmp_path / "cars196"
    (cars / "car_ims").mkdir(parents=True)
    scipy.io.savemat(cars / "cars_annos.mat", {"something": np.zeros(3)})
    with pytest.raises(DataError, match="relative_im_path"):
        load_cars196(_options(tmp_path))
    (cars / "cars_annos.mat").write_bytes(b"not a mat file")
    with pytest.raises(DataError, match=r"Cannot read .*cars_annos\.mat"):
        load_cars196(_options(tmp_path))


def test_sop_pools_train_and_test(tmp_path: Path) -> None:
    _make_sop(tmp_path)
    ds = load_sop(_options(tmp_path))
    assert len(ds) == 8 and ds.classes().tolist() == [1, 2, 3, 4]
    assert ds.class_names[3] == "bicycle_final/1003"
    parts = load_partitions("sop", _options(tmp_path))
    assert parts["train"].classes().tolist() == [1, 2] and parts["test"].classes().tolist() == [3, 4]


def test_sop_without_header_is_rejected(tmp_path: Path) -> None:
    sop = _make_sop(tmp_path)
    (sop / "Ebay_test.txt").write_text("1 3 1 bicycle_final/1003_0.JPG\n")
    with pytest.raises(DataError, match="header"):
        load_sop(_options(tmp_path))


def test_inshop_item_ids_and_query_gallery(tmp_path: Path) -> None:
    _make_inshop(tmp_path)
    ds = load_inshop(_options(tmp_path))
    assert len(ds) == 7 and ds.classes().tolist() == [1, 2, 7]
    assert ds.class_names[7] == "id_00000007"
    assert ds.images[:2].shape == (2, 3, 8, 8)
    parts = load_partitions("inshop", _options(tmp_path))
    assert set(parts) == {"train", "query", "gallery"}
    assert [len(parts[p]) for p in ("train", "query", "gallery")] == [2, 2, 3]
    assert parts["query"].classes().tolist() == parts["gallery"].classes().tolist() == [2, 7]
    assert parts["train"].classes().tolist() == [1]
    gallery = parts["gallery"]
    assert isinstance(gallery, LazyImageDataset)
    assert gallery.paths[-1] == "img/MEN/Tees/id_00000007/01_3_back.jpg"


def test_inshop_truncated_partition_file(tmp_path: Path) -> None:
    _make_inshop(tmp_path, declared=9)
    with pytest.raises(DataError, match="declares 9 images but lists 7"):
        load_inshop(_options(tmp_path))


# --------------------------------------------------------------------------------------------------
# Closed-set retrieval layouts
# --------------------------------------------------------------------------------------------------


def test_cifar100_in_memory_with_fine_labels(tmp_path: Path) -> None:
    _, data = _make_cifar(tmp_path)
    ds = load_cifar100(_options(tmp_path, image_size=32))
    assert isinstance(ds, ImageDataset)
    validate_dataset(ds, 32)
    assert ds.labels.tolist() == [0, 1, 2, 0, 1, 2, 2, 1, 0]
    assert torch.equal(ds.images, torch.from_numpy(data.reshape(-1, 3, 32, 32)))
    assert ds.class_names[1] == "aquarium_fish"
    small = load_cifar100(_options(tmp_path, image_size=8))
    validate_dataset(small, 8)
    parts = load_partitions("cifar100", _options(tmp_path))
    assert len(parts["train"]) == 6 and len(parts["test"]) == 3
    assert parts["test"].labels.tolist() == [2, 1, 0]


def test_cifar100_malformed_pickle(tmp_path: Path) -> None:
    cifar, _ = _make_cifar(tmp_path)
    (cifar / "train").write_bytes(b"\x00garbage")
    with pytest.raises(DataError, match=r"Cannot read .*train"):
        load_cifar100(_options(tmp_path))


def test_svhn_maps_label_10_to_digit_0(tmp_path: Path) -> None:
    _, x = _make_svhn(tmp_path)
    ds = load_svhn(_options(tmp_path, image_size=32))
    validate_dataset(ds, 32)
    assert ds.labels.tolist() == [0, 1, 9, 0, 3]
    # (H, W, C, N) on disk -> (N, C, H, W).
    assert torch.equal(ds.images[4], torch.from_numpy(x[..., 4].transpose(2, 0, 1).copy()))
    parts = load_partitions("svhn", _options(tmp_path))
    assert parts["test"].labels.tolist() == [0, 3]


def test_svhn_missing_test_file(tmp_path: Path) -> None:
    svhn, _ = _make_svhn(tmp_path)
    (svhn / "test_32x32.mat").unlink()
    with pytest.raises(DataError, match=r"test_32x32\.mat.*ufldl"):
        load_svhn(_options(tmp_path))


def test_food101_ids_follow_sorted_class_names(tmp_path: Path) -> None:
    _make_food(tmp_path)
    ds = load_food101(_options(tmp_path))
    assert len(ds) == 9 and ds.classes().tolist() == [0, 1, 2]
    assert ds.class_names[2] == "waffles"
    label_of = dict(zip(ds.paths, ds.labels.tolist(), strict=True))
    assert label_of["images/apple_pie/100.jpg"] == 0 and label_of["images/waffles/101.jpg"] == 2
    parts = load_partitions("food101", _options(tmp_path))
    assert len(parts["train"]) == 6 and len(parts["test"]) == 3


def test_food101_unknown_class(tmp_path: Path) -> None:
    food = _make_food(tmp_path)
    (food / "meta" / "classes.txt").write_text("apple_pie\nwaffles\n")
    with pytest.raises(DataError, match="baby_back_ribs"):
        load_food101(_options(tmp_path))


def test_tinyimagenet_train_and_val(tmp_path: Path) -> None:
    _make_tiny(tmp_path)
    ds = load_tinyimagenet(_options(tmp_path))
    assert len(ds) == 9 and ds.classes().tolist() == [0, 1]
    assert ds.class_names[0].startswith("n01443537 (goldfish")
    parts = load_partitions("tinyimagenet", _options(tmp_path))
    assert len(parts["train"]) == 6 and parts["test"].labels.tolist() == [0, 1, 1]
    assert ds.images[0].shape == (3, 8, 8)


def test_tinyimagenet_unknown_val_class(tmp_path: Path) -> None:
    tiny = _make_tiny(tmp_path)
    (tiny / "val" / "val_annotations.txt").write_text("val_0.JPEG\tn99999999\t0\t0\t1\t1\n")
    with pytest.raises(DataError, match="n99999999"):
        load_tinyimagenet(_options(tmp_path))


# --------------------------------------------------------------------------------------------------
# Lazy dataset behaviour
# --------------------------------------------------------------------------------------------------


def test_lazy_images_index_like_a_tensor(tmp_path: Path) -> None:
    _make_cub(tmp_path)
    ds = load_cub200(_options(tmp_path))
    images = ds.images
    assert images.shape == (8, 3, 8, 8) and len(images) == 8
    everything = images[:]
    assert everything.shape == (8, 3, 8, 8)
    assert torch.equal(images[-1], everything[7])
    assert torch.equal(images[np.array([5, 1])], everything[[5, 1]])
    mask = np.zeros(8, dtype=bool)
    mask[[2, 6]] = True
    assert torch.equal(images[torch.from_numpy(mask)], everything[[2, 6]])
    assert images[[]].shape == (0, 3, 8, 8)
    with pytest.raises(IndexError):
        images[8]
    with pytest.raises(IndexError):
        images[np.array([0, 9])]
    # Classes have distinct solid colours (JPEG keeps them within a few levels).
    assert (everything[0].float().mean(dim=(1, 2)) - torch.tensor(COLOURS[1])).abs().max() < 8


def test_lazy_images_feed_the_augmentation_pipeline(tmp_path: Path) -> None:
    # The trainer indexes dataset.images with a LongTensor batch and slices it for evaluation.
    _make_cub(tmp_path)
    ds = load_cub200(_options(tmp_path)).subset([1, 2])
    batch = train_batch(ds.images[torch.tensor([0, 3])], PAPER_AUGMENT, torch.Generator().manual_seed(0))
    assert batch.shape == (2, 3, 8, 8) and batch.dtype == torch.float32
    assert eval_batch(ds.images[0 : len(ds.images)]).shape == (4, 3, 8, 8)
    assert ds.images.shape[1] == 3


def test_subset_take_and_fingerprint(tmp_path: Path) -> None:
    _make_cub(tmp_path)
    ds = load_cub200(_options(tmp_path))
    sub = ds.subset([3, 1])
    assert sub.labels.tolist() == [1, 1, 3, 3] and set(sub.class_names) == {1, 3}
    assert sub.paths[2] == ds.paths[4]
    with pytest.raises(DataError, match=r"no class\(es\) \[99\]"):
        ds.subset([99])
    assert ds.take([0, 1]).labels.tolist() == [1, 1]
    assert sub.fingerprint() != ds.fingerprint()
    assert load_cub200(_options(tmp_path, image_size=16)).fingerprint() != ds.fingerprint()
    with pytest.raises(DataError, match="16 px"):
        ds.validate(16)


def test_decode_resizes_shorter_side_and_centre_crops(tmp_path: Path) -> None:
    # 16x8 stripes: red | green (middle 8 columns) | blue; the 8x8 centre crop is all green.
    stripes = np.zeros((8, 16, 3), dtype=np.uint8)
    stripes[:, :4] = (255, 0, 0)
    stripes[:, 4:12] = (0, 255, 0)
    stripes[:, 12:] = (0, 0, 255)
    Image.fromarray(stripes).save(tmp_path / "wide.png")
    crop = decode_image(tmp_path / "wide.png", 8, resize_ratio=1.0)
    assert crop.shape == (3, 8, 8) and crop.dtype == np.uint8
    assert (crop[1] == 255).all() and (crop[0] == 0).all() and (crop[2] == 0).all()
    # MLRC margin: shorter side to round(8 * 256 / 227) = 9, then the centre 8 x 8.
    tall = decode_image(tmp_path / "wide.png", 4)
    assert tall.shape == (3, 4, 4)
    Image.new("L", (10, 20), 77).save(tmp_path / "gray.png")
    assert (decode_image(tmp_path / "gray.png", 8) == 77).all()


def test_damaged_image_fails_at_decode_naming_the_file(tmp_path: Path) -> None:
    cub = _make_cub(tmp_path)
    ds = load_cub200(_options(tmp_path))
    (cub / ds.paths[1]).write_bytes(b"not an image")
    with pytest.raises(DataError, match=r"Cannot decode image .*Bird_1_1\.jpg of dataset 'cub200'"):
        ds.images[0:2]


# --------------------------------------------------------------------------------------------------
# Registration
# --------------------------------------------------------------------------------------------------


def test_register_standard_datasets() -> None:
    registry: Registry[DatasetSpec] = Registry("dataset")
    register_standard_datasets(registry)
    names = ["cub200", "cars196", "sop", "inshop", "cifar100", "food101", "svhn", "tinyimagenet"]
    assert registry.names() == names
    assert all(registry.get(n).requires_data_dir and registry.get(n).description for n in names)
    with pytest.raises(DmlbenchError, match="Duplicate"):
        register_standard_datasets(registry)


def test_load_partitions_unknown_dataset(tmp_path: Path) -> None:
    assert "cub200" not in PARTITIONS
    with pytest.raises(DataError, match="no official per-image partitions"):
        load_partitions("cub200", _options(tmp_path))
