"""Pretrain the ``smallcnn`` trunk on rendered Unicode symbols: the built-in ``smallcnn-symbols-v2``, ``-v3``.

MLRC fine-tunes an ImageNet-pretrained trunk; no such weights can be downloaded here, so this script
makes the CPU budgets' equivalent, deterministically (fixed seeds, one torch thread, no data
loader workers), from a source whose classes are disjoint from every evaluated dataset:

- classes: symbols (Unicode category S*) of the blocks in ``benchmark.models.pretrained.SOURCE_BLOCKS``
  (arrows, mathematical operators, technical symbols, box drawing, geometric shapes, currency...)
  mapped in all 12 DejaVu faces of matplotlib; a symbol that looks like a glyphs class (Latin,
  Greek, Cyrillic letter or digit: e.g. ∑ and Σ, ∆ and Δ) or like an earlier symbol in at least half
  of the faces is dropped, with glyphs' own look-alike rule; so is a symbol that looks like one of
  Omniglot's handwritten characters (e.g. ○ and the Korean ㅇ, ─ and ㅡ), compared with the
  drawings themselves by ``benchmark.models.lookalike`` (no installed font covers Omniglot's
  scripts); the threshold's calibration (rendered Latin letters against Omniglot's handwritten
  ones) and every symbol removed, with the class it resembles, go into the provenance;
- images: ``--train-renderings`` (default 3) jittered renderings per face for training and one
  more held out to report accuracy (glyphs' jitter, another seed), bright ink on black like the
  benchmark's character datasets, normalised as the training loop does;
- training: softmax classification (a linear head on the 128-d pooled features, dropped
  afterwards), Adam, with the suite's "characters" augmentation, for ``--epochs`` passes or exactly
  ``--steps`` optimiser steps (``--match-steps-of NAME``: as many as a built-in's recipe took).
  Classification rather than a metric-learning loss because MLRC's trunks are
  classification-pretrained, and because pretraining with one of the benchmarked losses would give
  that loss's family a head start.

Usage (writes benchmark/models/weights/NAME.{pt,json}; prints the sha256 to put into
benchmark/models/pretrained.py). The Omniglot data (the official zips) is required except with
``--tiny``, which compares with it only when given:

    # smallcnn-symbols-v2 (the defaults): 3 training renderings per face, 6 epochs = 144 steps
    PYTHONPATH=. python benchmarks/pretrain_trunk.py --omniglot-dir ../shared/data/omniglot
    # smallcnn-symbols-v3: the same source with v1's optimiser steps and images per epoch
    PYTHONPATH=. python benchmarks/pretrain_trunk.py --omniglot-dir ../shared/data/omniglot \
        --name smallcnn-symbols-v3 --train-renderings 19 --match-steps-of smallcnn-symbols
    PYTHONPATH=. python benchmarks/pretrain_trunk.py --tiny --out /tmp/tiny   # seconds, for tests

Why v3 exists: the filter leaves 87 of v1's 547 classes, so v2's recipe (same epochs, same
renderings per class) took 144 optimiser steps where v1 took 918, and probed weaker than v1
(``benchmarks/trunk_probe.py``). v3 restores v1's step count by rendering 19 instead of 3 training
images per symbol and face (19836 images, v1 had 19692), so that it also sees each image about as
often as v1 did (6 passes) rather than revisiting 3132 images 38 times.

The first built-in weights, ``smallcnn-symbols``, were made by this script before the Omniglot
filter existed (their provenance names the script's sha256 then); they stay registered, and the
``mini`` budget uses them until its boards are regenerated.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from benchmark.data.augment import CHARACTER_AUGMENT, eval_batch, train_batch
from benchmark.data.glyphs import (
    _REFERENCE_SIZE,
    _ROTATION_DEG,
    _SCALE_RANGE,
    _SHIFT_FRACTION,
    _STROKE_FRACTION,
    _load_fonts,
    drop_lookalikes,
    font_paths,
    measure_layout,
    render_faces,
    select_classes,
)
from benchmark.data.omniglot import read_characters
from benchmark.models import lookalike
from benchmark.models.pretrained import (
    BUILTIN_WEIGHTS,
    LOOKALIKE_DATASETS,
    SOURCE_FACES,
    WEIGHTS_DIR,
    is_source_candidate,
    sha256_of,
)
from benchmark.models.trunks import build_model

NAME = "smallcnn-symbols-v2"  # the default recipe's weights (--name for another)
SEED = 20240612  # the default --seed: every committed built-in was made with it
TRAIN_RENDERINGS_PER_FACE = 3  # the default; one more per face is rendered and held out
COMPARE_SIZE = 64  # rendering size for the Omniglot look-alike comparison


def source_classes(
    paths: list[Path], max_candidates: int | None, omniglot_dir: Path | None
) -> tuple[list[int], Any, dict[str, Any]]:
    """Source code points and their layout, and the Omniglot filter's record.

    Candidates are the symbols mapped in every face; dropped are look-alikes of a glyphs class or
    of each other (glyphs' rule), then look-alikes of an Omniglot character (benchmark.models.lookalike)
    when ``omniglot_dir`` is given.
    """
    from matplotlib.ft2font import FT2Font

    assert set(LOOKALIKE_DATASETS) == {"glyphs", "omniglot"}, "a new character dataset needs a filter here"
    common: set[int] | None = None
    for p in paths:
        mapped = set(FT2Font(str(p)).get_charmap())
        common = mapped if common is None else common & mapped
    candidates = sorted(c for c in common or () if is_source_candidate(c))[:max_candidates]
    layout = measure_layout(_load_fonts(paths, 1000), candidates)
    glyph_classes, glyph_layout = select_classes(font_paths())
    # Glyph classes go first: drop_lookalikes keeps the earlier of two look-alikes, so a symbol
    # that looks like a letter is dropped, never the letter. Each set is drawn in its own layout
    # (the one it will be trained / evaluated in).
    glyph_plain = render_faces(paths, glyph_classes, glyph_layout, _REFERENCE_SIZE, jitters=None)[:, :, 0]
    plain = render_faces(paths, candidates, layout, _REFERENCE_SIZE, jitters=None)[:, :, 0]
    keep = drop_lookalikes(np.concatenate([glyph_plain, plain]))
    n_glyphs = len(glyph_classes)
    kept = [candidates[i - n_glyphs] for i in keep if i >= n_glyphs]
    if omniglot_dir is None:
        return kept, layout, {"compared": False}
    images, labels, names = read_characters(omniglot_dir)
    references = lookalike.ink_masks(images)
    classes = np.unique(labels)
    # Rendered larger than the training size: a small symbol's ink box is scaled up into the
    # comparison frame, and should keep its shape when it is.
    symbols = lookalike.ink_masks(render_faces(paths, kept, layout, COMPARE_SIZE, jitters=None)[:, :, 0])
    distance = lookalike.class_distance(symbols, references, labels)
    flagged = lookalike.flag_lookalikes(distance)
    removed = []
    for i in np.flatnonzero(flagged.any(axis=1)):
        median = np.median(distance[i], axis=0)
        matches = sorted(np.flatnonzero(flagged[i]), key=lambda j: float(median[j]))
        removed.append(
            {
                "symbol": f"U+{kept[i]:04X}",
                "char": chr(kept[i]),
                "resembles": [f"{names[int(classes[j])]} ({float(median[j]):.2f})" for j in matches],
            }
        )
    record = {
        "compared": True,
        "sources": [p.name for p in sorted(omniglot_dir.glob("images_*"))],
        "n_classes": len(classes),
        "n_images": len(labels),
        "measure": "modified Hausdorff distance of ink masks, ink box scaled into a "
        f"{lookalike.NORMAL_SIZE}-px frame (benchmark.models.lookalike); median over a class's drawers",
        "threshold": lookalike.LOOKALIKE_DISTANCE,
        "face_fraction": lookalike.FACE_FRACTION,
        "calibration": calibrate(paths, glyph_layout, references, labels, names),
        "removed": removed,
    }
    return [c for i, c in enumerate(kept) if not flagged[i].any()], layout, record


def calibrate(
    paths: list[Path], layout: Any, references: np.ndarray, labels: np.ndarray, names: dict[int, str]
) -> dict[str, Any]:
    """Distances of rendered a-z (glyphs' layout) to their own handwritten Omniglot Latin class.

    The pairs known to be the same character, from which the threshold is chosen
    (benchmark.models.lookalike); empty when the Omniglot sources hold no Latin alphabet.
    """
    latin = {names[c].split("/")[1]: c for c in names if names[c].startswith("Latin/")}
    letters = "abcdefghijklmnopqrstuvwxyz"
    own = [latin.get(f"character{i + 1:02d}") for i in range(len(letters))]
    if None in own:
        return {}
    masks = lookalike.ink_masks(
        render_faces(paths, [ord(c) for c in letters], layout, COMPARE_SIZE, jitters=None)[:, :, 0]
    )
    distance = np.median(lookalike.class_distance(masks, references, labels), axis=1)
    classes = list(np.unique(labels))
    to_own = np.array([distance[i, classes.index(c)] for i, c in enumerate(own)])
    others = np.delete(distance.reshape(-1), [i * len(classes) + classes.index(c) for i, c in enumerate(own)])
    return {
        "pairs": "lowercase a-z rendered (median over faces) vs Omniglot Latin/character01-26",
        "to_own_class": {c: round(float(d), 3) for c, d in zip(letters, to_own, strict=True)},
        "to_own_class_quantiles_0_25_50_75_100": [
            round(float(q), 3) for q in np.quantile(to_own, [0, 0.25, 0.5, 0.75, 1])
        ],
        "to_other_classes_quantiles_0_1pct_5pct": [
            round(float(q), 3) for q in np.quantile(others, [0, 0.01, 0.05])
        ],
        "own_class_within_threshold": int((to_own <= lookalike.LOOKALIKE_DISTANCE).sum()),
    }


def render_source(
    paths: list[Path], classes: list[int], layout: Any, image_size: int, renderings: int, seed: int = SEED
) -> np.ndarray:
    """uint8 (classes, faces, renderings, size, size) renderings, jittered in glyphs' ranges (own seed)."""
    rng = np.random.default_rng(seed)
    shape = (len(classes), len(paths), renderings)
    # The columns of glyphs' _Jitter, in order: scale, dx, dy, rotation, stroke.
    jitters = np.stack(
        [
            rng.uniform(*_SCALE_RANGE, size=shape),
            rng.uniform(-_SHIFT_FRACTION, _SHIFT_FRACTION, size=shape),
            rng.uniform(-_SHIFT_FRACTION, _SHIFT_FRACTION, size=shape),
            rng.uniform(-_ROTATION_DEG, _ROTATION_DEG, size=shape),
            rng.uniform(0, _STROKE_FRACTION, size=shape),
        ],
        axis=-1,
    )
    return render_faces(paths, classes, layout, image_size, jitters)


def class_list_hash(classes: list[int]) -> str:
    """sha256 of the class code points as 'U+XXXX' lines: identifies the source classes."""
    return hashlib.sha256("\n".join(f"U+{c:04X}" for c in classes).encode()).hexdigest()


def recipe_steps(provenance: dict[str, Any]) -> int:
    """Optimiser steps a provenance's training took: its ``steps``, else epochs x full batches per epoch.

    Provenances written before ``--steps`` existed (smallcnn-symbols, -v2) do not record steps; their
    loop took ``n_train_images // batch_size`` steps per epoch (the last partial batch is dropped).
    """
    training = provenance["training"]
    if "steps" in training:
        return int(training["steps"])
    return int(training["epochs"]) * (
        int(provenance["source"]["n_train_images"]) // int(training["batch_size"])
    )


def pretrain(
    images: torch.Tensor,
    labels: torch.Tensor,
    n_classes: int,
    epochs: int,
    batch_size: int,
    lr: float,
    steps: int | None = None,
    seed: int = SEED,
) -> tuple[nn.Module, list[float]]:
    """Train smallcnn + linear head by softmax classification; returns the trunk and per-epoch loss.

    ``steps`` None: ``epochs`` passes over the data. Else exactly ``steps`` optimiser steps, in as
    many passes as they need (the last one cut short; its loss is the mean over its steps).
    """
    model = build_model("smallcnn", 1, 128, pretrained=False, weights_path="", seed=seed)
    trunk = model.trunk
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        head = nn.Linear(128, n_classes)
    params = list(trunk.parameters()) + list(head.parameters())
    opt = torch.optim.Adam(params, lr=lr)
    gen = torch.Generator().manual_seed(seed + 2)
    losses: list[float] = []
    trunk.train()
    per_epoch = len(labels) // batch_size
    if steps is not None:
        if steps < 1 or per_epoch < 1:
            raise SystemExit(
                f"--steps {steps} with {len(labels)} images of batch {batch_size}: nothing to train"
            )
        epochs = -(-steps // per_epoch)
    done = 0
    for _ in range(epochs):
        order = torch.randperm(len(labels), generator=gen)
        total, count = 0.0, 0
        for start in range(0, len(order) - batch_size + 1, batch_size):
            if steps is not None and done == steps:
                break
            done += 1
            idx = order[start : start + batch_size]
            x = train_batch(images[idx], CHARACTER_AUGMENT, gen)
            loss = F.cross_entropy(head(trunk(x)), labels[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        losses.append(total / max(count, 1))
    return trunk, losses


@torch.no_grad()
def held_out_accuracy(
    trunk: nn.Module, train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor, test_y: torch.Tensor
) -> float:
    """1-NN accuracy (cosine, trunk features) of held-out renderings against the training renderings."""
    trunk.eval()

    def feats(x: torch.Tensor) -> torch.Tensor:
        out = torch.cat([trunk(eval_batch(x[i : i + 512])) for i in range(0, len(x), 512)])
        return F.normalize(out, dim=1)

    a, b = feats(train_x), feats(test_x)
    nearest = (b @ a.T).argmax(dim=1)
    return float((train_y[nearest] == test_y).float().mean())


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=WEIGHTS_DIR, help="output folder (default: the package's)")
    ap.add_argument("--image-size", type=int, default=28)
    ap.add_argument("--name", default=NAME, help=f"weights name: NAME.pt and NAME.json (default {NAME})")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument(
        "--train-renderings",
        type=int,
        default=TRAIN_RENDERINGS_PER_FACE,
        help="jittered training renderings per symbol and face (one more is held out)",
    )
    steps = ap.add_mutually_exclusive_group()
    steps.add_argument("--steps", type=int, default=None, help="optimiser steps (default: --epochs passes)")
    steps.add_argument(
        "--match-steps-of",
        default=None,
        metavar="BUILTIN",
        help="as many optimiser steps as the built-in weights BUILTIN took (from its provenance)",
    )
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument(
        "--seed",
        type=int,
        default=SEED,
        help="jitter, initialisation and batch order (other seeds: variance)",
    )
    ap.add_argument("--max-candidates", type=int, default=None, help="first N candidate symbols only")
    ap.add_argument("--faces", type=int, default=len(SOURCE_FACES), help="first N of the 12 faces only")
    ap.add_argument("--omniglot-dir", type=Path, default=None, help="the Omniglot zips (look-alike filter)")
    ap.add_argument("--tiny", action="store_true", help="a seconds-long configuration (tests)")
    args = ap.parse_args(argv)
    if args.omniglot_dir is None and not args.tiny:
        ap.error("--omniglot-dir is required: the source is filtered against Omniglot's characters")
    if args.tiny:
        args.max_candidates, args.faces, args.epochs, args.image_size = 24, 2, 1, 16
    if args.train_renderings < 1:
        ap.error("--train-renderings must be at least 1")
    matched: dict[str, Any] | None = None
    if args.match_steps_of is not None:
        spec = BUILTIN_WEIGHTS.get(args.match_steps_of)
        args.steps = recipe_steps(json.loads((WEIGHTS_DIR / spec.provenance_file).read_text()))
        matched = {"builtin": spec.name, "sha256": spec.sha256, "steps": args.steps}
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    t0 = time.perf_counter()
    folder = font_paths()[0].parent
    paths = [folder / f for f in SOURCE_FACES[: args.faces]]
    classes, layout, omniglot_filter = source_classes(paths, args.max_candidates, args.omniglot_dir)
    renderings = args.train_renderings + 1
    rendered = render_source(paths, classes, layout, args.image_size, renderings, args.seed)
    n, f, r, s, _ = rendered.shape
    t_render = time.perf_counter() - t0
    labels = np.broadcast_to(np.arange(n)[:, None, None], (n, f, r))
    train_sel, test_sel = (slice(0, r - 1), slice(r - 1, r))

    def take(sel: slice) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(np.ascontiguousarray(rendered[:, :, sel].reshape(-1, 1, s, s)))
        y = torch.from_numpy(np.ascontiguousarray(labels[:, :, sel].reshape(-1))).long()
        return x, y

    train_x, train_y = take(train_sel)
    test_x, test_y = take(test_sel)
    trunk, losses = pretrain(
        train_x, train_y, n, args.epochs, args.batch_size, args.lr, args.steps, args.seed
    )
    per_epoch = len(train_y) // args.batch_size
    n_steps = args.steps if args.steps is not None else args.epochs * per_epoch
    accuracy = held_out_accuracy(trunk, train_x, train_y, test_x, test_y)
    t_total = time.perf_counter() - t0

    args.out.mkdir(parents=True, exist_ok=True)
    weights = args.out / f"{args.name}.pt"
    state = {k: v.detach().clone().contiguous() for k, v in trunk.state_dict().items()}
    torch.save(state, weights)
    digest = sha256_of(weights)
    provenance = {
        "name": args.name,
        "trunk": "smallcnn",
        "sha256": digest,
        "script": "benchmarks/pretrain_trunk.py",
        "script_sha256": sha256_of(Path(__file__)),
        "command": " ".join(
            ["python benchmarks/pretrain_trunk.py", *(argv if argv is not None else sys.argv[1:])]
        ),
        "commit": git_commit(),
        "seed": args.seed,
        "torch": torch.__version__,
        "torch_threads": 1,
        "source": {
            "description": (
                "Unicode symbols (category S*) of the blocks in benchmark.models.pretrained.SOURCE_BLOCKS "
                "mapped in every face below, minus look-alikes of glyphs classes and of each other and "
                "of Omniglot's characters (omniglot_filter); "
                f"{renderings} jittered renderings per face ({args.train_renderings} train, 1 held out), "
                "bright ink on black"
            ),
            "faces": [p.name for p in paths],
            "image_size": args.image_size,
            "n_classes": n,
            "n_train_images": len(train_y),
            "n_held_out_images": len(test_y),
            "class_list_sha256": class_list_hash(classes),
            "classes": [f"U+{c:04X}" for c in classes],
            "omniglot_filter": omniglot_filter,
        },
        "training": {
            "objective": "softmax cross-entropy, linear head on the pooled trunk features (dropped)",
            "optimizer": "Adam",
            "lr": args.lr,
            "batch_size": args.batch_size,
            "epochs": len(losses),
            "steps": n_steps,
            "steps_per_epoch": per_epoch,
            "steps_matched_to": matched,
            "augment": "characters",
            "epoch_losses": [round(x, 4) for x in losses],
            "held_out_1nn_accuracy": round(accuracy, 4),
        },
        "wall_s": {"render": round(t_render, 1), "total": round(t_total, 1)},
    }
    (args.out / f"{args.name}.json").write_text(json.dumps(provenance, indent=1) + "\n")
    print(
        f"{n} classes ({len(omniglot_filter.get('removed', []))} removed as Omniglot look-alikes), "
        f"{len(train_y)} training images, {n_steps} steps; epoch losses {[round(x, 4) for x in losses]}; "
        f"held-out 1-NN accuracy {accuracy:.3f}; {t_total:.0f} s (render {t_render:.0f} s)"
    )
    print(f"sha256 {digest}  {weights}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
