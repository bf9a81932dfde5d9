"""The pretraining source's appearance filter (benchmark.models.lookalike) and the shipped v2 source."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from conftest import OMNIGLOT, REPO

from benchmark.data.glyphs import _load_fonts, font_paths, measure_layout, render_faces
from benchmark.data.omniglot import read_characters
from benchmark.models import lookalike, pretrained
from benchmark.models.lookalike import NORMAL_SIZE, class_distance, flag_lookalikes, ink_mask, ink_masks
from benchmark.models.pretrained import BUILTIN_WEIGHTS, SOURCE_FACES, is_source_candidate

needs_omniglot = pytest.mark.skipif(
    not OMNIGLOT.is_dir(), reason=f"the real Omniglot data (the Korean ㅇ's drawings) is not at {OMNIGLOT}"
)
# The Omniglot Korean classes of the look-alikes named in issue 30, read off the drawings
# (images_background_small1.zip, Korean/character01-40 are the jamo ㅏ ㅐ ㅑ ㅒ ㅓ ㅔ ㅕ ㅖ ㅗ ㅘ ㅙ ㅚ ㅛ ㅜ
# ㅝ ㅞ ㅟ ㅠ ㅡ ㅢ ㅣ ㄱ ㄲ ㄴ ㄷ ㄸ ㄹ ㅁ ㅂ ㅃ ㅅ ㅆ ㅇ ㅈ ㅉ ㅊ ㅋ ㅌ ㅍ ㅎ in that order).
KOREAN = {
    "ㅇ": "Korean/character33",
    "ㅗ": "Korean/character09",
    "ㅜ": "Korean/character14",
    "ㅡ": "Korean/character19",
}
V2 = "smallcnn-symbols-v2"
COMPARE_SIZE = 64  # benchmarks/pretrain_trunk.py's COMPARE_SIZE


def _render(codepoints: list[int]) -> np.ndarray:
    """(symbols, 12 faces, S, S) ink masks of symbols drawn as benchmarks/pretrain_trunk.py compares them.

    The layout (em size) is the one measured over every candidate symbol, as in the script: the
    comparison frame rescales each glyph's ink box, but the pixels it starts from depend on it.
    """
    from matplotlib.ft2font import FT2Font

    folder = font_paths()[0].parent
    paths = [folder / f for f in SOURCE_FACES]
    mapped = [set(FT2Font(str(p)).get_charmap()) for p in paths]
    candidates = sorted(c for c in set.intersection(*mapped) if is_source_candidate(c))
    layout = measure_layout(_load_fonts(paths, 1000), candidates)
    return ink_masks(render_faces(paths, codepoints, layout, COMPARE_SIZE, jitters=None)[:, :, 0])


@pytest.fixture(scope="module")
def omniglot() -> tuple[np.ndarray, np.ndarray, dict[int, str]]:
    images, labels, names = read_characters(OMNIGLOT)
    return ink_masks(images), labels, names


def _class(
    omniglot: tuple[np.ndarray, np.ndarray, dict[int, str]], name: str
) -> tuple[np.ndarray, np.ndarray]:
    masks, labels, names = omniglot
    (char,) = [c for c, n in names.items() if n == name]
    return masks[labels == char], labels[labels == char]


# --- the pure functions, on synthetic images ------------------------------------------------------
def test_ink_mask_centres_and_scales_and_keeps_a_bar_a_bar() -> None:
    assert not ink_mask(np.zeros((40, 40), np.uint8)).any()
    square = np.zeros((100, 100), np.uint8)
    square[10:30, 60:80] = 255  # a small filled square off-centre
    mask = ink_mask(square)
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    assert (
        mask.shape == (NORMAL_SIZE, NORMAL_SIZE)
        and mask[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1].all()
    )
    assert len(rows) == len(cols) == round(lookalike.NORMAL_FILL * NORMAL_SIZE)
    assert abs((rows[0] + rows[-1]) / 2 - (NORMAL_SIZE - 1) / 2) <= 1
    bar = np.zeros((100, 100), np.uint8)
    bar[50:52, 10:90] = 255
    bar_rows = np.flatnonzero(ink_mask(bar).any(axis=1))
    assert len(bar_rows) <= 2 * lookalike.MAX_STRETCH  # stretched at most MAX_STRETCH times: still a bar


def test_distance_is_zero_for_the_same_shape_and_grows_with_difference() -> None:
    ring = np.zeros((64, 64), np.uint8)
    yy, xx = np.mgrid[:64, :64]
    ring[np.abs(np.hypot(yy - 32, xx - 32) - 20) < 2] = 255
    bar = np.zeros((64, 64), np.uint8)
    bar[31:34, 8:56] = 255
    masks = ink_masks(np.stack([ring, bar]))
    d = class_distance(masks[:, None], masks, np.array([7, 9]))
    assert d.shape == (2, 1, 2)
    assert d[0, 0, 0] == d[1, 0, 1] == 0
    assert d[0, 0, 1] > 2 and d[1, 0, 0] > 2


def test_flag_needs_half_of_the_faces() -> None:
    distance = np.array([[[0.5], [0.5], [3.0], [3.0]], [[0.5], [3.0], [3.0], [3.0]]])
    assert flag_lookalikes(distance, threshold=1.0).tolist() == [[True], [False]]


# --- against the real Omniglot drawings -----------------------------------------------------------
@needs_omniglot
def test_the_filter_flags_the_white_circle_against_the_korean_ieung(
    omniglot: tuple[np.ndarray, np.ndarray, dict[int, str]],
) -> None:
    ieung, labels = _class(omniglot, KOREAN["ㅇ"])
    assert len(ieung) == 20  # one drawing per drawer
    circle, bar = _render([ord("○"), ord("─")])
    distance = class_distance(np.stack([circle, bar]), ieung, labels)
    assert flag_lookalikes(distance)[:, 0].tolist() == [True, False]
    # ⊥ and ⊤ against ㅗ and ㅜ, ─ against ㅡ: the other jamo the issue names with a class here.
    for symbol, jamo in [("⊥", "ㅗ"), ("⊤", "ㅜ"), ("─", "ㅡ")]:
        masks, labels = _class(omniglot, KOREAN[jamo])
        assert flag_lookalikes(class_distance(_render([ord(symbol)]), masks, labels))[0, 0], (symbol, jamo)


def _mini_weights() -> str:
    """The built-in weights the ``mini`` budget fine-tunes (``builtin:<name>``)."""
    from benchmark.budgets import BUDGETS

    named = str(BUDGETS.get("mini").overrides["model.trunk_weights"])
    assert named.startswith("builtin:"), named
    return named.removeprefix("builtin:")


@needs_omniglot
@pytest.mark.parametrize("weights", sorted({V2, _mini_weights()}))
def test_the_shipped_source_holds_no_flagged_symbol(
    weights: str, omniglot: tuple[np.ndarray, np.ndarray, dict[int, str]]
) -> None:
    """v2's source, and the source of whatever weights ``mini`` names, pass the appearance filter."""
    spec = BUILTIN_WEIGHTS.get(weights)
    prov = json.loads((pretrained.WEIGHTS_DIR / spec.provenance_file).read_text())
    source = [int(c[2:], 16) for c in prov["source"]["classes"]]
    masks, labels, _ = omniglot
    flagged = flag_lookalikes(class_distance(_render(source), masks, labels))
    assert not [chr(source[i]) for i in np.flatnonzero(flagged.any(axis=1))]
    record = prov["source"]["omniglot_filter"]
    assert record["threshold"] == lookalike.LOOKALIKE_DISTANCE
    assert record["n_classes"] == len(np.unique(labels))
    removed = {r["symbol"] for r in record["removed"]}
    assert not removed & set(prov["source"]["classes"])
    assert {f"U+{ord(c):04X}" for c in "○□⊥⊤─│∧━┃"} <= removed


def test_the_comparison_size_is_the_scripts() -> None:
    assert f"COMPARE_SIZE = {COMPARE_SIZE}" in (REPO / "benchmarks" / "pretrain_trunk.py").read_text()


def test_mini_fine_tunes_weights_whose_source_was_filtered_against_omniglot() -> None:
    """mini's weights record the Omniglot filter in their provenance (v1's, made before it, do not)."""
    spec = BUILTIN_WEIGHTS.get(_mini_weights())
    prov = json.loads((pretrained.WEIGHTS_DIR / spec.provenance_file).read_text())
    assert prov["source"]["omniglot_filter"]["threshold"] == lookalike.LOOKALIKE_DISTANCE
    v1 = json.loads(
        (pretrained.WEIGHTS_DIR / BUILTIN_WEIGHTS.get("smallcnn-symbols").provenance_file).read_text()
    )
    assert "omniglot_filter" not in v1["source"]


def test_omniglot_reader_matches_the_dataset_loader_classes() -> None:
    if not OMNIGLOT.is_dir():
        pytest.skip(f"the real Omniglot data is not at {OMNIGLOT}")
    images, labels, names = read_characters(Path(OMNIGLOT))
    assert images.ndim == 3 and len(images) == len(labels) and set(names) == set(labels.tolist())
    # Bright ink on black, as the dataset loader gives it: the background is the majority.
    assert np.median(images) == 0
