"""What each on-disk dataset's folder must hold, checked without torch, PIL or reading any image.

A dataset declares its layout check as :attr:`benchmark.data.DatasetSpec.check_data_dir`: a cheap
function of the ``--data-dir`` path that raises :class:`~benchmark.errors.DataError` naming what is
missing and what the folder should hold. ``dmlbench run`` calls it before importing torch, so a
wrong or empty folder is reported in a fraction of a second instead of after seconds of imports.
The loaders find their files with the same functions (:func:`find_root`, :func:`omniglot_sources`),
so the early check and the loader cannot disagree about a layout.

A check looks at names only (which files and folders exist, a zip's table of contents); it does
not open images or parse annotation files, which the loader does and reports on.
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from benchmark.errors import DataError


@dataclass(frozen=True)
class Layout:
    """How to recognise a dataset folder and what to tell a user who does not have one."""

    name: str
    title: str
    subdirs: tuple[str, ...]  # usual folder names below data_dir
    markers: tuple[tuple[str, ...], ...]  # each entry: alternative relative paths, one must exist
    source: str

    def expected(self) -> str:
        """The marker files as a sentence fragment: ``a, b or c, d``."""
        return ", ".join(" or ".join(alts) for alts in self.markers)


def find_root(data_dir: Path | None, layout: Layout) -> Path:
    """The first of ``data_dir`` and ``data_dir/<usual names>`` that holds all of ``layout``'s markers.

    A DataError names the markers, every folder searched and, for a folder holding some markers
    but not all, which are missing.
    """
    if data_dir is None:
        raise DataError(
            f"Dataset {layout.name!r} ({layout.title}) reads files from disk: pass the folder that holds "
            f"it as the data directory (expected {layout.expected()} in it or in "
            f"{'/ or '.join(layout.subdirs)}/ below it). {layout.source}"
        )
    data_dir = Path(data_dir).expanduser()
    candidates = [data_dir, *(data_dir / s for s in layout.subdirs)]
    partial: list[str] = []
    for root in candidates:
        missing = [alts for alts in layout.markers if not any((root / a).exists() for a in alts)]
        if not missing:
            return root
        if len(missing) < len(layout.markers):
            partial.append(f"{root} lacks {', '.join(' or '.join(m) for m in missing)}")
    found = f" Incomplete: {'; '.join(partial)}." if partial else ""
    absent = "" if data_dir.exists() else " (no such folder)"
    raise DataError(
        f"Dataset {layout.name!r} ({layout.title}) not found{absent}: expected {layout.expected()} "
        f"in one of {', '.join(str(c) for c in candidates)}.{found} {layout.source}"
    )


def layout_check(layout: Layout) -> Callable[[Path], None]:
    """The :attr:`DatasetSpec.check_data_dir` of a dataset recognised by ``layout``'s markers."""

    def check(data_dir: Path) -> None:
        find_root(data_dir, layout)

    return check


# --------------------------------------------------------------------------------------------------
# The standard datasets (benchmark.data.standard reads them)
# --------------------------------------------------------------------------------------------------

CUB_LAYOUT = Layout(
    "cub200",
    "CUB-200-2011",
    ("CUB_200_2011", "CUB_200_2011/CUB_200_2011", "cub200"),
    (("images.txt",), ("image_class_labels.txt",), ("images",)),
    "Get CUB_200_2011.tgz from https://www.vision.caltech.edu/datasets/cub_200_2011/ "
    "(CaltechDATA record 65de6-vp158) and extract it into the data directory.",
)
CARS_LAYOUT = Layout(
    "cars196",
    "Cars196 (Stanford Cars)",
    ("cars196", "CARS196", "stanford_cars", "cars"),
    (("cars_annos.mat",), ("car_ims",)),
    "Get car_ims.tgz and cars_annos.mat of Stanford Cars (Krause et al. 2013; originally "
    "http://ai.stanford.edu/~jkrause/cars/car_dataset.html, now on mirrors such as Kaggle) and put "
    "both, with car_ims/ extracted, into one folder.",
)
SOP_LAYOUT = Layout(
    "sop",
    "Stanford Online Products",
    ("Stanford_Online_Products", "sop", "SOP"),
    (("Ebay_train.txt",), ("Ebay_test.txt",)),
    "Get Stanford_Online_Products.zip from https://cvgl.stanford.edu/projects/lifted_struct/ and extract it "
    "into the data directory.",
)
INSHOP_LAYOUT = Layout(
    "inshop",
    "DeepFashion In-Shop Clothes Retrieval",
    ("In-shop Clothes Retrieval Benchmark", "inshop", "InShop", "In-shop"),
    (("list_eval_partition.txt", "Eval/list_eval_partition.txt"), ("img", "Img/img")),
    "Get list_eval_partition.txt (Eval/) and img.zip (Img/) of the In-shop Clothes Retrieval Benchmark from "
    "https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html and extract img.zip.",
)
CIFAR100_LAYOUT = Layout(
    "cifar100",
    "CIFAR-100 (python version)",
    ("cifar-100-python", "cifar100/cifar-100-python", "cifar100"),
    (("train",), ("test",)),
    "Get https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz (or run torchvision.datasets.CIFAR100("
    "root, download=True) on a machine with internet) and extract it into the data directory.",
)
SVHN_LAYOUT = Layout(
    "svhn",
    "SVHN (cropped digits, format 2)",
    ("svhn", "SVHN"),
    (("train_32x32.mat",), ("test_32x32.mat",)),
    "Get train_32x32.mat and test_32x32.mat from http://ufldl.stanford.edu/housenumbers/ into the data "
    "directory (torchvision.datasets.SVHN uses the same files).",
)
FOOD101_LAYOUT = Layout(
    "food101",
    "Food-101",
    ("food-101", "food101", "food-101/food-101"),
    (("meta/train.txt",), ("meta/test.txt",), ("images",)),
    "Get https://data.vision.ee.ethz.ch/cvl/food-101.tar.gz (or torchvision.datasets.Food101 on a machine "
    "with internet) and extract it into the data directory.",
)
TINYIMAGENET_LAYOUT = Layout(
    "tinyimagenet",
    "Tiny ImageNet (200 classes)",
    ("tiny-imagenet-200",),
    (("train",), ("val/val_annotations.txt",)),
    "Get http://cs231n.stanford.edu/tiny-imagenet-200.zip and extract it into the data directory.",
)

#: Dataset name -> layout, for every standard dataset (benchmark.data.registry registers their checks).
STANDARD_LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        CUB_LAYOUT,
        CARS_LAYOUT,
        SOP_LAYOUT,
        INSHOP_LAYOUT,
        CIFAR100_LAYOUT,
        SVHN_LAYOUT,
        FOOD101_LAYOUT,
        TINYIMAGENET_LAYOUT,
    )
}


# --------------------------------------------------------------------------------------------------
# Omniglot and folder
# --------------------------------------------------------------------------------------------------

OMNIGLOT_SOURCES = ("images_background", "images_evaluation")
OMNIGLOT_EXPECTED = "images_background*.zip / images_evaluation*.zip, the same as folders, or omniglot-py/"


def omniglot_sources(root: Path) -> list[Path]:
    """Zips and extracted folders holding Omniglot images under ``root``, in sorted order."""
    candidates = [root, root / "omniglot-py"]
    found: dict[str, Path] = {}
    for base in candidates:
        if not base.is_dir():
            continue
        for p in sorted(base.iterdir()):
            if p.name.startswith(OMNIGLOT_SOURCES):
                key = p.name.removesuffix(".zip")
                # An extracted folder and its zip are the same source: keep one (the folder).
                if key not in found or p.is_dir():
                    found[key] = p
    return [found[k] for k in sorted(found)]


def zip_members(source: Path) -> list[str]:
    """Member names of an Omniglot zip; a corrupt or truncated zip is a DataError naming the file."""
    try:
        with zipfile.ZipFile(source) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError(f"Cannot read the Omniglot zip {source}: {exc}. Re-download or remove it.") from exc


def check_omniglot_dir(data_dir: Path) -> None:
    """DataError unless ``data_dir`` holds Omniglot sources, each zip among them readable.

    Reads each zip's table of contents (its end, a few KiB), never an image.
    """
    sources = omniglot_sources(data_dir)
    if not sources:
        absent = "" if data_dir.exists() else " (no such folder)"
        raise DataError(
            f"No Omniglot data in {data_dir}{absent}: expected {OMNIGLOT_EXPECTED}. The official files "
            "are in the brendenlake/omniglot repository (python/*.zip)."
        )
    for source in sources:
        if source.suffix == ".zip":
            zip_members(source)


#: Image file extensions the folder dataset reads.
FOLDER_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})


def check_folder_dir(data_dir: Path) -> None:
    """DataError unless ``data_dir`` is a root/<class>/<image> tree with at least one image.

    Lists the class folders (names only; images are opened by the loader).
    """
    if not data_dir.is_dir():
        what = "is not a directory" if data_dir.exists() else "does not exist"
        raise DataError(
            f"folder needs --data-dir pointing at a root/<class>/<image> tree; {data_dir} {what}."
        )
    for class_dir in sorted(p for p in data_dir.iterdir() if p.is_dir()):
        if any(p.suffix.lower() in FOLDER_EXTENSIONS for p in class_dir.iterdir()):
            return
    raise DataError(
        f"No images found in {data_dir}: expected root/<class>/<image> with extensions "
        f"{sorted(FOLDER_EXTENSIONS)}."
    )
