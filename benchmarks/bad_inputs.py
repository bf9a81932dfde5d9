"""Every bad input of issues 14 and 31 run through the real CLI (or the Python API): exit code, first
stderr line, time, and whether torch was imported.

Usage (from the repository root; ``--code`` picks which checkout's ``benchmark`` package runs)::

    python benchmarks/bad_inputs.py --code /path/to/checkout [--timeout 45] > table.md

Each case is a fresh Python process on the ``smoke`` budget with its own temporary folder, holding
the files the case points at (:func:`prepare`). A CLI case runs ``benchmark.cli.main``; an API case
runs one call of :mod:`benchmark.api` and prints a :class:`~benchmark.errors.DmlbenchError` as the
CLI does (exit 2), so any other exception is a traceback (exit 1). A case still running after
``--timeout`` seconds was *accepted* (it started a run); it is killed and reported as such. The
broken-protocol cases run on a copy of the checkout (its ``benchmark/`` and ``protocols/``) with one
invalid protocol file added, so the checkout itself is never modified.

Every case states what it must give (:class:`Case`): the exit code, fragments of the message, and
whether the error comes before torch is imported. ``tests/test_bad_inputs_matrix.py`` runs every
case of :data:`CASES` and checks exactly that, plus no traceback and no file changed, so this matrix
and the tests cannot drift apart. The time column is only meaningful on an idle machine.

Not inputs, so not rows here (each has its own test): two processes on one run directory
(tests/test_run_lock.py), a full disk (tests/test_disk_full.py), fold workers outliving a killed
parent (tests/test_worker_orphans.py), resumed timings (tests/test_timings_resume.py) and
``--jobs`` reproducibility (the leaderboard's warning, tests/test_report_leaderboard.py).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Modules whose import is the slow part of a start (seconds on a loaded machine).
HEAVY = ("torch",)


@dataclass(frozen=True)
class Case:
    """One bad input and what it must give.

    ``args`` are ``dmlbench`` arguments, or for an API case (``api``) one Python expression calling
    ``api``; ``{tmp}`` is the case's folder. ``fragments`` must all appear in stderr (or stdout), and
    ``absent`` in neither. ``torch_free``: the answer comes before torch is imported. ``broken``:
    ``(file name, text)`` of a protocol file added to a copy of the checkout.
    """

    name: str
    section: str
    args: tuple[str, ...]
    fragments: tuple[str, ...]
    exit: int = 2
    torch_free: bool = True
    api: bool = False
    broken: tuple[str, str] | None = None
    absent: tuple[str, ...] = ()


RUN = (
    "run",
    "--budget",
    "smoke",
    "--quiet",
    "--loss",
    "mfcont",
    "--out",
    "{tmp}/runs",
    "--results-dir",
    "{tmp}/res",
)
REPORT = ("report", "--results-dir", "{tmp}/records", "--dataset", "glyphs")
PRETRAINED = ("--set", "model.pretrained=true")
NOT_TOML = ("mine.toml", "[protocol\nname = 'mlrc'\n")
WEIRD_KIND = ("weird.toml", "[protocol]\nname = 'weird'\n")


def _api_run(loss: str = "'mfcont'", **arguments: str) -> tuple[str, ...]:
    """``api.run(loss, ...)`` on the smoke budget into the case's folder; ``arguments`` as Python source."""
    given = {"out": "'{tmp}/runs'", "results_dir": "'{tmp}/res'", "budget": "'smoke'", **arguments}
    return (f"api.run({', '.join([loss, *(f'{k}={v}' for k, v in given.items())])})",)


def _count(key: str, value: int, message: str) -> Case:
    return Case(f"{key}={value}", "31 (8)", (*RUN, "--set", f"{key}={value}"), (message,))


CASES: tuple[Case, ...] = (
    # -- issue 14 §1: inputs that ended in a traceback ---------------------------------------------
    Case("train.lr=-1", "14 §1", (*RUN, "--set", "train.lr=-1"), ("train.lr must be > 0, got -1.0",)),
    Case("train.lr=nan", "14 §1", (*RUN, "--set", "train.lr=nan"), ("'train.lr' must be a finite number",)),
    Case("train.lr=1e400", "14 §1", (*RUN, "--set", "train.lr=1e400"), ("overflows to inf",)),
    Case(
        "train.weight_decay=-5",
        "14 §1",
        (*RUN, "--set", "train.weight_decay=-5"),
        ("train.weight_decay must be >= 0, got -5.0",),
    ),
    Case("--seed -1", "14 §1", (*RUN, "--seed", "-1"), ("--seed must be >= 0", "got -1")),
    Case("--device bogus", "14 §1", (*RUN, "--device", "bogus"), ("Unknown --device 'bogus'",)),
    Case(
        "--trunk-weights TEXTFILE (pretrained=true)",
        "14 §1",
        (*RUN, "--trunk-weights", "{tmp}/notes.pth", *PRETRAINED),
        ("{tmp}/notes.pth is not a PyTorch checkpoint", "torch.save"),
    ),
    Case(
        "--out on a read-only folder (/sys)",
        "14 §1",
        (*RUN, "--out", "/sys/dmlbench-runs"),
        ("--out /sys/dmlbench-runs cannot be created: /sys is not writable",),
    ),
    Case(
        "--results-dir on a read-only folder (/sys)",
        "14 §1",
        (*RUN, "--results-dir", "/sys/dmlbench-res"),
        ("--results-dir /sys/dmlbench-res", "not writable"),
    ),
    Case(
        "report with a truncated record (skipped, the other shown)",
        "14 §1",
        REPORT,
        ("skipping unreadable record {tmp}/records/glyphs/mlrc/records/",),
        exit=0,
    ),
    # -- issue 14 §2: inputs that were accepted although no result can come out ---------------------
    Case("train.lr=0", "14 §2", (*RUN, "--set", "train.lr=0"), ("train.lr must be > 0, got 0.0",)),
    Case("--jobs -1", "14 §2", (*RUN, "--jobs", "-1"), ("--jobs must be >= 1, or 0", "got -1")),
    Case(
        "data.max_per_class=1",
        "14 §2",
        (*RUN, "--set", "data.max_per_class=1"),
        ("data.max_per_class = 1", "no query would have a positive"),
    ),
    Case(
        "folder dataset, 16 classes x 1 image",
        "14 §2",
        (*RUN, "--dataset", "folder", "--data-dir", "{tmp}/singletons"),
        ("no class with at least 2 images", "0 of the dataset's 16 classes have 2 or more"),
        torch_free=False,  # counting images per class needs the loaded labels
    ),
    Case(
        "data.max_classes=-3",
        "14 §2",
        (*RUN, "--set", "data.max_classes=-3"),
        ("data.max_classes must be >= 0 (0 = no limit), got -3",),
    ),
    Case(
        "--trunk-weights FILE with model.pretrained=false",
        "14 §2",
        (*RUN, "--trunk-weights", "{tmp}/notes.pth"),
        ("model.pretrained = false", "leave out --trunk-weights"),
    ),
    Case(
        "search.n_trials=10**21",
        "14 §2",
        (*RUN, "--set", "search.n_trials=1000000000000000000000"),
        ("search.n_trials = 1000000000000000000000", "at most 1,000,000"),
    ),
    Case("test.reps=10**7", "14 §2", (*RUN, "--set", "test.reps=10000000"), ("test.reps = 10000000",)),
    Case(
        "broken protocols/mine.toml: list protocols (still lists the others)",
        "14 §2",
        ("list", "protocols"),
        ("mine         BROKEN: Protocol file", "mlrc "),
        exit=0,
        broken=NOT_TOML,
    ),
    Case(
        "broken protocols/mine.toml: run --protocol mine",
        "14 §2",
        (*RUN, "--protocol", "mine"),
        ("protocols/mine.toml is not valid TOML",),
        broken=NOT_TOML,
    ),
    Case(
        "broken protocols/mine.toml: run --protocol mlcr (typo)",
        "14 §2",
        (*RUN, "--protocol", "mlcr"),
        ("Unknown protocol 'mlcr'. Did you mean 'mlrc'?",),
        broken=NOT_TOML,
    ),
    # -- issue 31: tracebacks ---------------------------------------------------------------------
    Case(
        "folder dataset with a 20000x20000 PNG (decompression bomb)",
        "31 (4)",
        (*RUN, "--dataset", "folder", "--data-dir", "{tmp}/bomb"),
        ("{tmp}/bomb/class00/huge.png is too large to decode", "decode limit"),
        torch_free=False,  # the image is opened by the loader
    ),
    Case(
        "report with a record nested 200,000 deep (skipped, the other shown)",
        "31 (4)",
        ("report", "--results-dir", "{tmp}/nested", "--dataset", "glyphs"),
        ("skipping unreadable record {tmp}/nested/glyphs/mlrc/records/bomb.json", "nested deeper than"),
        exit=0,
    ),
    Case(
        "--loss plugin calling sys.exit(3) at import",
        "31 (4)",
        (*RUN[:4], "--loss", "{tmp}/quitter.py:X", *RUN[6:]),
        ("Plugin '{tmp}/quitter.py:X' called sys.exit(3) while being imported",),
    ),
    # -- issue 31: the Python API -----------------------------------------------------------------
    Case(
        "api.run(123)",
        "31 (5)",
        _api_run("123"),
        ("--loss must be a non-empty string", "(int)"),
        api=True,
    ),
    Case("api.run(None)", "31 (5)", _api_run("None"), ("--loss must be a non-empty string",), api=True),
    Case(
        "api.run(seed='0')",
        "31 (5)",
        _api_run(seed="'0'"),
        ("--seed must be an integer, got '0'",),
        api=True,
    ),
    Case(
        "api.run(seed=1.5)",
        "31 (5)",
        _api_run(seed="1.5"),
        ("--seed must be an integer, got 1.5",),
        api=True,
    ),
    Case(
        "api.run(seed=True)",
        "31 (5)",
        _api_run(seed="True"),
        ("--seed must be an integer, got True",),
        api=True,
    ),
    Case(
        "api.run(budget=None)",
        "31 (5)",
        _api_run(budget="None"),
        ("--budget must be a non-empty",),
        api=True,
    ),
    Case(
        "api.run(jobs='2')",
        "31 (5)",
        _api_run(jobs="'2'"),
        ("--jobs must be an integer, got '2'",),
        api=True,
    ),
    Case(
        "api.run(device=5)",
        "31 (5)",
        _api_run(device="5"),
        ("--device must be a non-empty string",),
        api=True,
    ),
    Case(
        "api.run(out=None)",
        "31 (5)",
        ("api.run('mfcont', out=None, results_dir='{tmp}/res')",),
        ("--out must be a path",),
        api=True,
    ),
    Case(
        "api.run(overrides=[pairs])",
        "31 (5)",
        _api_run(overrides="[('train.lr', 1e-4)]"),
        ("overrides must be a mapping of --set keys to values",),
        api=True,
    ),
    Case(
        "api.report(None)", "31 (5)", ("api.report(None)",), ("The dataset name must be a string",), api=True
    ),
    Case(
        "api.report(123)",
        "31 (5)",
        ("api.report(123)",),
        ("The dataset name must be a string, got 123",),
        api=True,
    ),
    Case(
        "api.report(metrics='map_at_r') is a list of one",
        "31 (5)",
        ("print(api.report('glyphs', results_dir='{tmp}/good', metrics='map_at_r'))",),
        ("MAP@R",),
        exit=0,
        api=True,
        absent=("Unknown metric 'm'",),
    ),
    # -- issue 31: records accepted with nonsense values ------------------------------------------
    Case(
        "report with a record whose MAP@R mean is 1e999",
        "31 (6)",
        ("report", "--results-dir", "{tmp}/inf", "--dataset", "glyphs"),
        ("map_at_r.mean",),
    ),
    Case(
        "report with a record whose MAP@R mean is NaN",
        "31 (6)",
        ("report", "--results-dir", "{tmp}/nan", "--dataset", "glyphs"),
        ("map_at_r.mean",),
    ),
    Case(
        "report with a record whose per-rep lists are empty",
        "31 (6)",
        ("report", "--results-dir", "{tmp}/norep", "--dataset", "glyphs"),
        ("test.per_rep.separated.map_at_r",),
    ),
    # -- issue 31: names and protocol files -------------------------------------------------------
    Case(
        "protocols/weird.toml of unknown kind: run --protocol weird",
        "31 (7)",
        (*RUN, "--protocol", "weird"),
        ("protocols/weird.toml: [protocol] name = 'weird' is not a protocol kind",),
        broken=WEIRD_KIND,
    ),
    Case(
        "protocols/weird.toml of unknown kind: run --protocol mlrc stops at its own mistake",
        "31 (7)",
        (*RUN, "--set", "train.batch_size=0"),
        ("train.batch_size must be >= 1, got 0",),
        broken=WEIRD_KIND,
    ),
    Case(
        "--protocol ../../x", "31 (7)", (*RUN, "--protocol", "../../x"), ("Invalid protocol name '../../x'",)
    ),
    Case(
        "api.run(protocol='../../x')",
        "31 (7)",
        _api_run(protocol="'../../x'"),
        ("Invalid protocol name '../../x'",),
        api=True,
    ),
    Case(
        "report --protocol ../../x",
        "31 (7)",
        (*REPORT, "--protocol", "../../x"),
        ("Invalid protocol name '../../x'",),
    ),
    Case(
        "report --dataset ../omniglot",
        "31 (7)",
        ("report", "--results-dir", "{tmp}/records", "--dataset", "../omniglot"),
        ("Invalid dataset name '../omniglot'",),
    ),
    Case(
        "--loss plugin whose name is ../../evil",
        "31 (7)",
        (*RUN[:4], "--loss", "{tmp}/evil.py:X", *RUN[6:]),
        ("'../../evil' is not a valid name",),
        torch_free=False,  # the plugin module itself imports torch (a loss is an nn.Module)
    ),
    # -- issue 31 (8): counts, checked before torch -----------------------------------------------
    _count("train.batch_size", 0, "train.batch_size must be >= 1, got 0"),
    _count("train.max_epochs", 0, "train.max_epochs must be >= 1, got 0"),
    _count("data.image_size", 0, "data.image_size must be >= 1, got 0"),
    _count("model.embedding_dim", 0, "model.embedding_dim must be >= 1, got 0"),
    _count("test.reps", 0, "test.reps must be >= 1, got 0"),
    _count("train.patience", -1, "train.patience must be >= 1, got -1"),
    # -- issue 31 (8): each protocol's own checks, its declaration's check_config (torch-free) ------
    _count("search.n_trials", 0, "search.n_trials must be >= 1, got 0"),
    _count("train.iters_per_epoch", 0, "train.iters_per_epoch must be >= 1, got 0"),
    Case(
        "search.n_startup_trials=-1",
        "31 (8)",
        (*RUN, "--set", "search.n_startup_trials=-1"),
        ("search.n_startup_trials must be in [0, search.n_trials=3], got -1",),
    ),
    Case(
        "protocol.n_folds=3",
        "31 (8)",
        (*RUN, "--set", "protocol.n_folds=3"),
        ("protocol.n_folds must be 4 for MLRC (got 3)",),
    ),
    Case(
        "traditional with --jobs 2",
        "31 (8)",
        (*RUN, "--protocol", "traditional", "--jobs", "2"),
        ("protocol 'traditional' trains its repetitions one after another", "got --jobs 2"),
    ),
    Case(
        "traditional with search.n_trials=5 (it has no search)",
        "31 (8)",
        (*RUN, "--protocol", "traditional", "--set", "search.n_trials=5"),
        ("Config key 'search.n_trials' is not used by protocol 'traditional'",),
    ),
    Case(
        "cbir with settings.query_fraction=1.5",
        "31 (8)",
        (*RUN, "--protocol", "cbir", "--set", "settings.query_fraction=1.5"),
        ("settings.query_fraction must lie in (0, 1), got 1.5",),
    ),
    Case(
        "mlrc with protocol.query_fraction=0.5 (a cbir setting, moved)",
        "29",
        (*RUN, "--set", "protocol.query_fraction=0.5"),
        ("'protocol.query_fraction' is now 'settings.query_fraction' of the 'cbir' protocol",),
    ),
    Case(
        "cbir with train.eval_every=1 (selection on the queries)",
        "31 (8)",
        (*RUN, "--protocol", "cbir", "--set", "train.eval_every=1"),
        ("train.eval_every (1) must be >= train.max_epochs (2) in the cbir protocol",),
    ),
    # The size floor: benchmark.data.registry.check_image_size, also made before a dataset is loaded.
    Case(
        "data.image_size=4",
        "31 (8)",
        (*RUN, "--set", "data.image_size=4"),
        ("data.image_size must be at least 8 px, got 4",),
    ),
    # -- issue 31 (8): data directories, checked by the dataset's declared layout ------------------
    Case(
        "omniglot without --data-dir",
        "31 (8)",
        (*RUN, "--dataset", "omniglot"),
        ("Dataset 'omniglot' reads files from disk", "--data-dir PATH"),
    ),
    Case(
        "omniglot --data-dir that does not exist",
        "31 (8)",
        (*RUN, "--dataset", "omniglot", "--data-dir", "{tmp}/nowhere"),
        ("No Omniglot data in {tmp}/nowhere (no such folder)", "images_background"),
    ),
    Case(
        "omniglot --data-dir that is empty",
        "31 (8)",
        (*RUN, "--dataset", "omniglot", "--data-dir", "{tmp}/empty"),
        ("No Omniglot data in {tmp}/empty: expected images_background",),
    ),
    Case(
        "omniglot --data-dir with a corrupt zip",
        "31 (8)",
        (*RUN, "--dataset", "omniglot", "--data-dir", "{tmp}/badzip"),
        ("Cannot read the Omniglot zip {tmp}/badzip/images_background.zip",),
    ),
    Case(
        "cub200 --data-dir missing image_class_labels.txt and images/",
        "31 (8)",
        (*RUN, "--dataset", "cub200", "--data-dir", "{tmp}/cub"),
        ("Dataset 'cub200' (CUB-200-2011) not found", "{tmp}/cub lacks image_class_labels.txt, images"),
    ),
    Case(
        "sop --data-dir that is empty",
        "31 (8)",
        (*RUN, "--dataset", "sop", "--data-dir", "{tmp}/empty"),
        ("Dataset 'sop' (Stanford Online Products) not found", "Ebay_train.txt"),
    ),
    Case(
        "folder --data-dir without images",
        "31 (8)",
        (*RUN, "--dataset", "folder", "--data-dir", "{tmp}/empty"),
        ("No images found in {tmp}/empty",),
    ),
    Case(
        "folder --data-dir that is a file",
        "31 (8)",
        (*RUN, "--dataset", "folder", "--data-dir", "{tmp}/notes.pth"),
        ("{tmp}/notes.pth is not a directory",),
    ),
    # -- issue 31 (8): --storage ------------------------------------------------------------------
    Case(
        "--storage that is not a URL",
        "31 (8)",
        (*RUN, "--storage", "runs/study.journal"),
        ("--storage expects a database URL", "'runs/study.journal'"),
    ),
    Case(
        "--storage of an unknown dialect",
        "31 (8)",
        (*RUN, "--storage", "foo://me:s3cret@host/db"),
        ("--storage foo://me@host/db is not a database URL SQLAlchemy understands",),
        absent=("s3cret",),
    ),
    Case(
        "--storage of an unknown driver",
        "31 (8)",
        (*RUN, "--storage", "postgresql+nodriver://me@host/db"),
        ("is not a database URL SQLAlchemy understands", "postgresql.nodriver"),
    ),
    # -- issue 31 (8): --trunk-weights contents ---------------------------------------------------
    Case(
        "--trunk-weights EMPTY FILE",
        "31 (8)",
        (*RUN, "--trunk-weights", "{tmp}/empty.pth", *PRETRAINED),
        ("{tmp}/empty.pth is empty (0 bytes)",),
    ),
    Case(
        "--trunk-weights PLAIN PICKLE",
        "31 (8)",
        (*RUN, "--trunk-weights", "{tmp}/plain.pkl", *PRETRAINED),
        ("{tmp}/plain.pkl is not a PyTorch checkpoint (a plain pickle",),
    ),
    Case(
        "--trunk-weights ZIP that torch.save did not write",
        "31 (8)",
        (*RUN, "--trunk-weights", "{tmp}/other.zip", *PRETRAINED),
        ("{tmp}/other.zip is a zip archive but not a PyTorch checkpoint",),
    ),
    Case(
        "--trunk-weights BROKEN .safetensors",
        "31 (8)",
        (*RUN, "--trunk-weights", "{tmp}/broken.safetensors", *PRETRAINED),
        ("{tmp}/broken.safetensors is not a readable safetensors file",),
    ),
    Case(
        "--trunk-weights torch.save of a list",
        "31 (8)",
        (*RUN, "--trunk-weights", "{tmp}/list.pth", *PRETRAINED),
        ("{tmp}/list.pth holds a list, not a state dict",),
        torch_free=False,  # only unpickling tells what the file holds
    ),
    Case(
        "--trunk-weights state dict of another network",
        "31 (8)",
        (*RUN, "--trunk-weights", "{tmp}/other_net.pth", *PRETRAINED),
        ("Weights in {tmp}/other_net.pth do not fit the trunk", "missing ['features.0.weight'"),
        torch_free=False,  # the trunk's keys come from building it (on the meta device)
    ),
)


def _png(width: int, height: int) -> bytes:
    """A grayscale PNG claiming ``width`` x ``height`` pixels with one row of data (PIL refuses it
    by its header, before decoding, when it is over the decompression-bomb limit)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\x00" * (width + 1)))
        + chunk(b"IEND", b"")
    )


def _record_variant(repo: Path, folder: Path, change: Any) -> None:
    """A committed glyphs record, changed by ``change`` (record dict -> JSON text), under ``folder``."""
    committed = sorted((repo / "results" / "glyphs" / "mlrc" / "records").glob("*.json"))[0]
    records = folder / "glyphs" / "mlrc" / "records"
    records.mkdir(parents=True)
    (records / committed.name).write_text(change(json.loads(committed.read_text(encoding="utf-8"))))


def _with_mean(value: str) -> Any:
    def change(record: dict[str, Any]) -> str:
        record["test"]["summary"]["separated"]["map_at_r"]["mean"] = "MEAN"
        return json.dumps(record).replace('"MEAN"', value)

    return change


def _without_reps(record: dict[str, Any]) -> str:
    record["test"]["per_rep"]["separated"]["map_at_r"] = []
    return json.dumps(record)


PLUGIN_LOSS = """
from torch import nn


class X(nn.Module):
    name = "../../evil"
    defaults = {}
    search_space = {}
    pair_based = True
    embedding_space = "cosine"

    def __init__(self, ctx, params):
        super().__init__()

    def forward(self, embeddings, labels):
        return embeddings.sum() * 0
"""


def prepare(tmp: Path, repo: Path) -> None:
    """The files the cases point at, under ``tmp`` (``repo``: the checkout whose records are copied)."""
    from PIL import Image

    (tmp / "notes.pth").write_text("these are not weights\n")
    (tmp / "empty.pth").write_bytes(b"")
    (tmp / "plain.pkl").write_bytes(pickle.dumps({"conv.weight": [1.0, 2.0]}, protocol=4))
    with zipfile.ZipFile(tmp / "other.zip", "w") as zf:
        zf.writestr("readme.txt", "not a checkpoint")
    (tmp / "broken.safetensors").write_bytes(b"not a safetensors file")
    _torch_files(tmp)
    (tmp / "empty").mkdir()
    (tmp / "badzip").mkdir()
    (tmp / "badzip" / "images_background.zip").write_bytes(b"PK\x03\x04 truncated download")
    (tmp / "cub").mkdir()
    (tmp / "cub" / "images.txt").write_text("1 001.Black_footed_Albatross/a.jpg\n")
    for c in range(16):
        folder = tmp / "singletons" / f"class{c:02d}"
        folder.mkdir(parents=True)
        Image.new("L", (28, 28), color=c * 10).save(folder / "only.png")
    for c in range(16):
        folder = tmp / "bomb" / f"class{c:02d}"
        folder.mkdir(parents=True)
        for i in range(2):
            Image.new("L", (28, 28), color=c * 10 + i).save(folder / f"img{i}.png")
    (tmp / "bomb" / "class00" / "huge.png").write_bytes(_png(20_000, 20_000))
    (tmp / "quitter.py").write_text("import sys\nsys.exit(3)\n")
    (tmp / "evil.py").write_text(PLUGIN_LOSS)
    records = tmp / "records" / "glyphs" / "mlrc" / "records"
    records.mkdir(parents=True)
    committed = sorted((repo / "results" / "glyphs" / "mlrc" / "records").glob("*.json"))
    shutil.copy(committed[0], records / committed[0].name)
    text = committed[1].read_text(encoding="utf-8")
    (records / committed[1].name).write_text(text[: len(text) // 2], encoding="utf-8")
    good = tmp / "good" / "glyphs" / "mlrc" / "records"
    good.mkdir(parents=True)
    shutil.copy(committed[0], good / committed[0].name)
    nested = tmp / "nested" / "glyphs" / "mlrc" / "records"
    nested.mkdir(parents=True)
    shutil.copy(committed[0], nested / committed[0].name)
    (nested / "bomb.json").write_text("[" * 200_000 + "]" * 200_000)
    _record_variant(repo, tmp / "inf", _with_mean("1e999"))
    _record_variant(repo, tmp / "nan", _with_mean("NaN"))
    _record_variant(repo, tmp / "norep", _without_reps)


def _torch_files(tmp: Path) -> None:
    """Files only torch can write: a pickled list and another network's state dict."""
    import torch

    torch.save([1, 2, 3], tmp / "list.pth")
    torch.save({"fc.weight": torch.zeros(2, 2), "fc.bias": torch.zeros(2)}, tmp / "other_net.pth")


def broken_copy(code: Path, tmp: Path, broken: tuple[str, str]) -> Path:
    """A copy of the checkout's package and protocols with the protocol file ``broken`` added."""
    copy = tmp / "checkout"
    shutil.copytree(code / "benchmark", copy / "benchmark", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(code / "protocols", copy / "protocols")
    # benchmark.config reads protocols/ next to pyproject.toml (a checkout), else the installed copy.
    shutil.copy(code / "pyproject.toml", copy / "pyproject.toml")
    name, text = broken
    (copy / "protocols" / name).write_text(text)
    return copy


# The child process: runs the case, prints a DmlbenchError the API raised as the CLI prints one, and
# reports last which of HEAVY it imported (a traceback, if any, still reaches stderr).
_DRIVER = """
import sys
from benchmark.errors import DmlbenchError
code = 1
try:
    try:
        if {api!r}:
            from benchmark import api
            exec(sys.argv[1])
            code = 0
        else:
            from benchmark.cli.main import main
            code = main(sys.argv[1:])
    except DmlbenchError as exc:
        print(f"\\ndmlbench: error: {{exc}}", file=sys.stderr)
        code = 2
    except SystemExit as exc:
        code = exc.code
finally:
    print("IMPORTED=" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def run_case(case: Case, code: Path, tmp: Path, timeout: float, cache: Path) -> dict[str, Any]:
    """Run ``case`` in a fresh process; its exit code, output, first stderr line, time and imports."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "DMLBENCH_PLUGINS"},
        "PYTHONPATH": str(code),
        "DMLBENCH_CACHE": str(cache),
    }
    args = [a.replace("{tmp}", str(tmp)) for a in case.args]
    argv = [sys.executable, "-c", _DRIVER.format(api=case.api, heavy=HEAVY), *args]
    start = time.perf_counter()
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp)
    except subprocess.TimeoutExpired:
        return {
            "exit": f"running at {timeout:.0f} s (accepted)",
            "first": "",
            "seconds": timeout,
            "stderr": "",
            "stdout": "",
            "imported": "?",
        }
    seconds = time.perf_counter() - start
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    imported = next((line for line in lines if line.startswith("IMPORTED=")), "IMPORTED=?")
    lines = [line for line in lines if not line.startswith("IMPORTED=")]
    first = lines[0] if lines else "(no stderr)"
    traceback = any(
        line.startswith(("Traceback", "concurrent.futures.process._RemoteTraceback")) for line in lines
    )
    if traceback:
        first = f"Traceback ... {lines[-1]}"  # the exception line is the informative one
    return {
        "exit": proc.returncode,
        "first": first,
        "seconds": seconds,
        "stderr": proc.stderr,
        "stdout": proc.stdout,
        "imported": imported.removeprefix("IMPORTED=") or "-",
        "traceback": traceback,
    }


def run_in_fresh_folder(case: Case, code: Path, repo: Path, timeout: float, cache: Path) -> dict[str, Any]:
    """:func:`prepare` a temporary folder, run ``case`` there, remove the folder."""
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        prepare(tmp, repo)
        checkout = broken_copy(code, tmp, case.broken) if case.broken else code
        result = run_case(case, checkout, tmp, timeout, cache)
        # Fragments name the case's folder; shown with a placeholder so that rows compare across runs.
        result["first"] = str(result["first"]).replace(str(tmp), "{tmp}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--code", type=Path, required=True, help="checkout whose benchmark package runs")
    parser.add_argument(
        "--timeout", type=float, default=45.0, help="seconds before a case counts as accepted"
    )
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "dmlbench-bad-inputs-cache"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    parser.add_argument("--only", default=None, help="run only the cases whose name contains this text")
    args = parser.parse_args()
    repo = Path(__file__).resolve().parent.parent
    results = []
    for case in CASES:
        if args.only is not None and args.only not in case.name:
            continue
        result = run_in_fresh_folder(case, args.code.resolve(), repo, args.timeout, args.cache)
        row = {
            "case": case.name,
            "section": case.section,
            "expected_exit": case.exit,
            **{k: result[k] for k in ("exit", "first", "seconds", "imported")},
        }
        results.append(row)
        print(
            f"{case.name}: {row['exit']} ({row['seconds']:.1f} s, imported {row['imported']}) {row['first']}",
            file=sys.stderr,
        )
    print("| issue | input | exit | torch imported | first line of stderr | s |")
    print("|---|---|---|---|---|---|")
    for r in results:
        first = str(r["first"]).replace("|", "\\|")[:220]
        print(
            f"| {r['section']} | {r['case']} | {r['exit']} | {r['imported']} | {first} | {r['seconds']:.1f} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
