"""Smoke runs of the measurement scripts of benchmarks/ with tiny counts: each runs to its end and
prints the tables and ratios it promises. Nothing here checks a timing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import OMNIGLOT

REPO = Path(__file__).resolve().parent.parent
BENCHMARKS = REPO / "benchmarks"


def script_process(name: str, args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    """``benchmarks/<name>`` run with ``args`` to its end, output captured."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "DMLBENCH_CACHE": str(cache), "PYTHONPATH": str(REPO)},
        timeout=600,
    )


def run_script(name: str, args: list[str], cache: Path) -> str:
    """stdout of ``benchmarks/<name>`` run with ``args`` (fails the test on a non-zero exit)."""
    proc = script_process(name, args, cache)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_train_throughput_prints_every_variant_and_both_ratios(cache_dir: Path) -> None:
    out = run_script(
        "train_throughput.py",
        [
            "--dataset",
            "glyphs",
            "--budget",
            "smoke",
            "--threads",
            "1",
            "--iters",
            "3",
            "--warmup-iters",
            "2",
            "--repeats",
            "1",
        ],
        cache_dir,
    )
    assert re.search(r"torch CPU capability \S+", out)
    for variant in (
        "dmlbench",
        "dmlbench-noprefetch",
        "pml",
        "pml-cl",
        "pml-cl-batched",
        "pml-cl-batched-w1",
    ):
        assert re.search(rf"^\| {re.escape(variant)} \| [0-9.]+ \|", out, re.M), variant
    assert re.search(r"^ratio \(a\) dmlbench / PML as documented: [0-9.]+x$", out, re.M)
    assert re.search(r"^ratio \(b\) engine alone, 1 OS thread each: .*: [0-9.]+x$", out, re.M)
    assert re.search(r"^ratio \(b'\) .*: [0-9.]+x$", out, re.M)


@pytest.mark.slow
def test_profile_fold_prints_the_shares_and_the_flop_rate(cache_dir: Path) -> None:
    out = run_script(
        "profile_fold.py",
        [
            "--dataset",
            "glyphs",
            "--budget",
            "smoke",
            "--loss",
            "contrastive",
            "--repeats",
            "1",
            "--set",
            "train.max_epochs=1",
            "--mm-size",
            "256",
            "--clock-ghz",
            "2.0",
        ],
        cache_dir,
    )
    for piece in (
        "forward (model)",
        "loss forward",
        "backward",
        "optimiser step",
        "batch prep (sample + augment)",
        "validation embedding",
        "validation kNN + metric (faiss MAP@R)",
        "Python/other",
    ):
        assert re.search(rf"^\| {re.escape(piece)}[^|]* \| [0-9.]+ \| [0-9.]+% \|$", out, re.M), piece
    assert re.search(r"FLOPs per training image .* \| [0-9.]+ MFLOP", out)
    assert re.search(r"^\| torch\.mm 256x256 .* GFLOP/s", out, re.M)
    assert re.search(r"^\| theoretical peak \| [0-9.]+ GFLOP/s", out, re.M)
    assert "x 2.00 GHz (--clock-ghz)" in out


@pytest.mark.slow
def test_oversubscription_prints_both_depths_their_ratio_and_equal_scores(cache_dir: Path) -> None:
    out = run_script(
        "oversubscription.py",
        ["--dataset", "glyphs", "--budget", "smoke", "--epochs", "1", "--repeats", "2"],
        cache_dir,
    )
    assert re.search(r"torch CPU capability \S+", out)
    for depth in (2, 0):
        assert re.search(rf"^\| {depth} \| [0-9.]+ \([0-9.]+-[0-9.]+\) \| [0-9.]+ \|$", out, re.M), depth
    assert re.search(
        r"^ratio depth 2 / depth 0, per repeat: median [0-9.]+ \(min [0-9.]+, max [0-9.]+\)$", out, re.M
    )
    # The two depths train on bit-identical batches, so the script checks the folds came out equal.
    assert "same validation scores at both depths: yes" in out


def test_oversubscription_refuses_to_let_a_set_override_the_fixed_epochs(cache_dir: Path) -> None:
    proc = script_process("oversubscription.py", ["--set", "train.patience=3"], cache_dir)
    assert proc.returncode != 0
    assert "--set train.patience=3" in proc.stderr and "--epochs" in proc.stderr


@pytest.mark.slow
def test_eval_scaling_prints_the_table_the_fits_and_sop(cache_dir: Path) -> None:
    out = run_script(
        "eval_scaling.py",
        ["--n", "1500,3000", "--dims", "128", "--max-pml-n", "1500", "--sop-n", "3000"],
        cache_dir,
    )
    header = next(line for line in out.splitlines() if line.startswith("| dim | N |"))
    for column in ("exact s", "pml s", "ivf MAP@R error", "hnsw MAP@R error"):
        assert column in header
    assert re.search(r"^\| 128 \| 3,000 \| .* \| – \| – \| [+-][0-9.]+ \| [+-][0-9.]+ \|$", out, re.M)
    assert re.search(r"^\| exact \| 128 \| 1,500-3,000 \| [0-9.-]+ \|", out, re.M)
    assert re.search(r"^\| all of SOP \(--sop-n 3,000\) \| 3,000 \| 128 \| [0-9.]+ \|", out, re.M)
    assert "Largest |MAP@R error| of an approximate index" in out


def write_fake_omniglot(root: Path, n_classes: int, n_drawers: int) -> Path:
    """An ``images_background`` zip in the official layout: seeded random strokes, 105 px like Omniglot's."""
    import io
    import zipfile

    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(0)
    root.mkdir(parents=True)
    with zipfile.ZipFile(root / "images_background.zip", "w") as zf:
        for c in range(n_classes):
            base = rng.uniform(10, 95, size=(3, 4))  # a class is three strokes; drawers jitter them
            for d in range(n_drawers):
                image = Image.new("L", (105, 105), 255)
                draw = ImageDraw.Draw(image)
                for stroke in base + rng.normal(0, 3, size=base.shape):
                    draw.line([float(v) for v in stroke], fill=0, width=4)
                buffer = io.BytesIO()
                image.save(buffer, format="PNG")
                zf.writestr(
                    f"images_background/Alpha/character{c + 1:02d}/{c + 1:04d}_{d + 1:02d}.png",
                    buffer.getvalue(),
                )
    return root


@pytest.mark.slow
def test_trunk_probe_prints_every_weights_row_and_is_deterministic(tmp_path: Path, cache_dir: Path) -> None:
    from benchmark.models.pretrained import BUILTIN_WEIGHTS, WEIGHTS_DIR

    data = write_fake_omniglot(tmp_path / "omniglot", n_classes=6, n_drawers=4)
    candidate = WEIGHTS_DIR / BUILTIN_WEIGHTS.get("smallcnn-symbols-v2").file
    args = ["--data-dir", str(data), "--max-classes", "5", "--weights", f"candidate={candidate}"]
    out = run_script("trunk_probe.py", args, cache_dir)
    assert re.search(r"torch CPU capability \S+", out)
    assert "5 classes, 20 images, 28 px" in out
    assert "| weights | sha256 | trunk P@1 | trunk MAP@R | model P@1 | model MAP@R |" in out
    cell = r" \| [0-9]+\.[0-9]{2}"
    for label in ["random", *BUILTIN_WEIGHTS.names(), "candidate"]:
        assert re.search(rf"^\| {re.escape(label)} \| [-0-9a-f]+(?:{cell}){{4}} \|$", out, re.M), label
    # The candidate is v2's file: same checksum, same scores.
    rows = {
        line.split(" | ")[0][2:]: line.split(" | ", 1)[1] for line in out.splitlines() if line[:2] == "| "
    }
    assert rows["candidate"] == rows["smallcnn-symbols-v2"]
    table = [line for line in out.splitlines() if line.startswith("|")]
    again = run_script("trunk_probe.py", args, cache_dir)
    assert [line for line in again.splitlines() if line.startswith("|")] == table


@pytest.mark.slow
def test_fold_epoch_speed_prints_one_row_per_process_count(cache_dir: Path) -> None:
    out = run_script(
        "fold_epoch_speed.py",
        ["--dataset", "glyphs", "--budget", "smoke", "--epochs", "1", "--procs", "1,2"],
        cache_dir,
    )
    assert re.search(r"device cpu, torch \S+, CPU capability \S+", out)
    for procs in (1, 2):
        assert re.search(
            rf"^P={procs}: s per fold epoch per process median [0-9.]+ \(min [0-9.]+, max [0-9.]+\); "
            r"aggregate [0-9.]+ fold epochs/s$",
            out,
            re.M,
        ), procs


def test_fold_epoch_speed_refuses_to_let_a_set_override_the_fixed_epochs(cache_dir: Path) -> None:
    proc = script_process("fold_epoch_speed.py", ["--set", "train.patience=3"], cache_dir)
    assert proc.returncode != 0
    assert "--set train.patience=3" in proc.stderr and "--epochs" in proc.stderr


@pytest.mark.skipif(not OMNIGLOT.is_dir(), reason=f"Omniglot data not at {OMNIGLOT}")
def test_fold_blocks_prints_each_blocks_alphabets_and_each_folds_levels(cache_dir: Path) -> None:
    import json

    from benchmark.records import board_key

    args = ["--data-dir", str(OMNIGLOT), "--exclude", "margin", "--alphabets", "--classes", "15"]
    args += ["--draws", "3"]
    out = run_script("fold_blocks.py", args, cache_dir)
    blocks = re.findall(r"^\| (test|fold \d validation) \| (\d+) \| (.+) \|$", out, re.M)
    assert [b[0] for b in blocks] == ["test"] + [f"fold {i} validation" for i in range(4)]
    for _, n, alphabets in blocks:
        assert sum(int(k) for k in re.findall(r"\((\d+)\)(?:,|$)", alphabets)) == int(n)
    # The levels, recomputed from the record files of the current mini settings (the newest
    # mini record's board key), margin left out.
    docs = [
        json.loads(p.read_text()) for p in (REPO / "results" / "omniglot" / "mlrc" / "records").glob("*.json")
    ]
    mini = [d for d in docs if d["budget"] == "mini"]
    key = board_key(max(mini, key=lambda d: d["created"]))
    group = [d for d in mini if board_key(d) == key and d["loss"] != "margin"]
    assert f", {len(group)} records (" in out
    for i in range(4):
        folds = [rep["folds"][i] for d in group for rep in d["test"]["rep_details"]]
        zero = [v for f in folds for e, v in f["curve"] if e == 0]
        best = [f["best_val_map_at_r"] for f in folds]
        row = (
            f"| {i} | {len(folds)} | {100 * min(zero):.1f}–{100 * max(zero):.1f} | "
            f"{100 * min(best):.1f}–{100 * max(best):.1f} |"
        )
        assert row in out.splitlines(), row
    # Each alphabet of 15 characters or more, once, lowest mean first, its mean inside its span;
    # every alphabet of a validation block is there (the smallest, Tagalog, has 17 characters).
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| (\d+\.\d) \| (\d+\.\d)–(\d+\.\d) \|$", out, re.M)
    assert len(rows) == len({r[0] for r in rows}) >= 8
    means = [float(r[2]) for r in rows]
    assert means == sorted(means)
    assert all(float(lo) <= m <= float(hi) for (_, _, _, lo, hi), m in zip(rows, means, strict=True))
    in_val = {a for _, _, alphabets in blocks[1:] for a in re.findall(r"(.+?) \(\d+\)(?:, |$)", alphabets)}
    assert in_val <= {r[0] for r in rows}


@pytest.mark.slow
def test_fold_blocks_refuses_records_made_on_other_data(tmp_path: Path, cache_dir: Path) -> None:
    data = write_fake_omniglot(tmp_path / "omniglot", n_classes=16, n_drawers=3)
    proc = script_process("fold_blocks.py", ["--data-dir", str(data)], cache_dir)
    assert proc.returncode == 2
    assert "split fingerprints" in proc.stderr and "they were made on other data" in proc.stderr
