"""Built-in pretrained trunk weights: dmlbench's stand-in for MLRC's ImageNet-pretrained trunk.

No ImageNet weights can be downloaded for the CPU budgets, so the suite pretrains its own
``smallcnn`` on a *source* whose classes are disjoint from every evaluated dataset: Unicode
symbols (arrows, mathematical operators, technical symbols, box drawing, geometric shapes,
currency) rendered from matplotlib's DejaVu faces by ``benchmarks/pretrain_trunk.py``. The
weights file and its provenance JSON ship in ``benchmark/models/weights/``.

``model.trunk_weights = "builtin:NAME"`` names such a file. Its sha256 is checked against the
value fixed here every time it is resolved (so a corrupted or regenerated-but-not-committed file
is a clear error, never silently different weights), and the run record carries the checksum and
the provenance.

This module imports no torch, so that configuration checks stay cheap.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmark.data.fonts import DEJAVU_FACES
from benchmark.errors import ConfigError
from benchmark.registry import Registry

BUILTIN_PREFIX = "builtin:"
WEIGHTS_DIR = Path(__file__).parent / "weights"

# --- the pretraining source ---------------------------------------------------------------------
# Unicode blocks the source classes come from (inclusive ranges), and the faces they are rendered
# in: the 12 DejaVu faces map 549 symbols of these blocks in common, the STIX italics only 46.
SOURCE_BLOCKS: tuple[tuple[str, int, int], ...] = (
    ("Currency Symbols", 0x20A0, 0x20CF),
    ("Arrows", 0x2190, 0x21FF),
    ("Mathematical Operators", 0x2200, 0x22FF),
    ("Miscellaneous Technical", 0x2300, 0x23FF),
    ("Box Drawing", 0x2500, 0x257F),
    ("Block Elements", 0x2580, 0x259F),
    ("Geometric Shapes", 0x25A0, 0x25FF),
    ("Miscellaneous Symbols", 0x2600, 0x26FF),
    ("Dingbats", 0x2700, 0x27BF),
    ("Miscellaneous Mathematical Symbols-A", 0x27C0, 0x27EF),
    ("Supplemental Arrows-A", 0x27F0, 0x27FF),
    ("Supplemental Arrows-B", 0x2900, 0x297F),
    ("Miscellaneous Mathematical Symbols-B", 0x2980, 0x29FF),
    ("Supplemental Mathematical Operators", 0x2A00, 0x2AFF),
    ("Miscellaneous Symbols and Arrows", 0x2B00, 0x2BFF),
)
SOURCE_FACES: tuple[str, ...] = DEJAVU_FACES


def is_source_candidate(codepoint: int) -> bool:
    """Whether a code point may be a pretraining class: a symbol (category S*) of SOURCE_BLOCKS.

    Symbols only: no letter (L*), digit or mark of any script can be a source class, which is
    what keeps the source disjoint from character datasets (glyphs' letters, Omniglot's
    alphabets) by construction; the blocks add a second, positional guarantee.
    """
    if not any(lo <= codepoint <= hi for _, lo, hi in SOURCE_BLOCKS):
        return False
    return unicodedata.category(chr(codepoint)).startswith("S")


# --- what the source must be disjoint from -------------------------------------------------------
# The registered datasets whose classes are characters, which the source must not resemble either
# (benchmarks/pretrain_trunk.py filters look-alikes against each). The dataset registry declares no
# "images are characters" property, so the list is kept here, and a test checks every registered
# dataset against it. svhn's classes (digits 0-9) are glyphs classes too, so glyphs' filter covers
# them; the others are photographs, or a user's folders.
LOOKALIKE_DATASETS: tuple[str, ...] = ("glyphs", "omniglot")

# Omniglot's 50 alphabets (background + evaluation sets) and the Unicode blocks of their scripts.
# An empty tuple: an invented script with no Unicode encoding (its characters cannot be a Unicode
# symbol class by identity; the source classes are still required to be symbols, not letters).
OMNIGLOT_ALPHABET_BLOCKS: dict[str, tuple[tuple[int, int], ...]] = {
    "Alphabet_of_the_Magi": (),
    "Angelic": (),
    "Anglo-Saxon_Futhorc": ((0x16A0, 0x16FF),),
    "Arcadian": ((0x0370, 0x03FF), (0x1F00, 0x1FFF)),
    "Armenian": ((0x0530, 0x058F), (0xFB13, 0xFB17)),
    "Asomtavruli_(Georgian)": ((0x10A0, 0x10FF), (0x2D00, 0x2D2F)),
    "Atemayar_Qelisayer": (),
    "Atlantean": (),
    "Aurek-Besh": (),
    "Avesta": ((0x10B00, 0x10B3F),),
    "Balinese": ((0x1B00, 0x1B7F),),
    "Bengali": ((0x0980, 0x09FF),),
    "Blackfoot_(Canadian_Aboriginal_Syllabics)": ((0x1400, 0x167F), (0x18B0, 0x18FF)),
    "Braille": ((0x2800, 0x28FF),),
    "Burmese_(Myanmar)": ((0x1000, 0x109F), (0xA9E0, 0xA9FF), (0xAA60, 0xAA7F)),
    "Cyrillic": ((0x0400, 0x052F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F)),
    "Early_Aramaic": ((0x10840, 0x1085F), (0x10900, 0x1091F)),
    "Futurama": (),
    "Ge_ez": ((0x1200, 0x139F), (0x2D80, 0x2DDF)),
    "Glagolitic": ((0x2C00, 0x2C5F), (0x1E000, 0x1E02F)),
    "Grantha": ((0x11300, 0x1137F),),
    "Greek": ((0x0370, 0x03FF), (0x1F00, 0x1FFF)),
    "Gujarati": ((0x0A80, 0x0AFF),),
    "Gurmukhi": ((0x0A00, 0x0A7F),),
    "Hebrew": ((0x0590, 0x05FF), (0xFB1D, 0xFB4F)),
    "Inuktitut_(Canadian_Aboriginal_Syllabics)": ((0x1400, 0x167F), (0x18B0, 0x18FF)),
    "Japanese_(hiragana)": ((0x3040, 0x309F),),
    "Japanese_(katakana)": ((0x30A0, 0x30FF), (0x31F0, 0x31FF)),
    "Kannada": ((0x0C80, 0x0CFF),),
    "Keble": (),
    "Korean": ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF)),
    "Latin": ((0x0020, 0x024F), (0x1E00, 0x1EFF)),
    "Malay_(Jawi_-_Arabic)": ((0x0600, 0x06FF), (0x0750, 0x077F)),
    "Malayalam": ((0x0D00, 0x0D7F),),
    "Manipuri": ((0xABC0, 0xABFF), (0xAAE0, 0xAAFF)),
    "Mkhedruli_(Georgian)": ((0x10A0, 0x10FF), (0x1C90, 0x1CBF)),
    "Mongolian": ((0x1800, 0x18AF),),
    "N_Ko": ((0x07C0, 0x07FF),),
    "Ojibwe_(Canadian_Aboriginal_Syllabics)": ((0x1400, 0x167F), (0x18B0, 0x18FF)),
    "Old_Church_Slavonic_(Cyrillic)": ((0x0400, 0x052F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F)),
    "Oriya": ((0x0B00, 0x0B7F),),
    "Sanskrit": ((0x0900, 0x097F), (0xA8E0, 0xA8FF)),
    "Sylheti": ((0xA800, 0xA82F),),
    "Syriac_(Estrangelo)": ((0x0700, 0x074F), (0x0860, 0x086F)),
    "Syriac_(Serto)": ((0x0700, 0x074F), (0x0860, 0x086F)),
    "Tagalog": ((0x1700, 0x171F),),
    "Tengwar": (),
    "Tibetan": ((0x0F00, 0x0FFF),),
    "Tifinagh": ((0x2D30, 0x2D7F),),
    "ULOG": (),
}


# --- built-in weights ----------------------------------------------------------------------------
@dataclass(frozen=True)
class BuiltinWeights:
    """A committed weights file: its trunk, file names in WEIGHTS_DIR, and the sha256 it must have."""

    name: str
    trunk: str
    file: str
    provenance_file: str
    sha256: str
    description: str


BUILTIN_WEIGHTS: Registry[BuiltinWeights] = Registry("built-in trunk weights")
BUILTIN_WEIGHTS.register(
    "smallcnn-symbols",
    BuiltinWeights(
        name="smallcnn-symbols",
        trunk="smallcnn",
        file="smallcnn-symbols.pt",
        provenance_file="smallcnn-symbols.json",
        sha256="ba3642878882c3c6999a6961bb588ceb1e6ba7c46cad1331cb75f3f6fd47ae32",
        description=(
            "smallcnn pretrained (softmax classification) on Unicode symbols rendered at 28 px from "
            "the 12 DejaVu faces; classes disjoint from glyphs and Omniglot by identity "
            "(benchmarks/pretrain_trunk.py before the Omniglot look-alike filter); mini's until v3"
        ),
    ),
)
# The same recipe on the source minus the symbols that look like an Omniglot character
# (benchmark.models.lookalike, issue 30).
BUILTIN_WEIGHTS.register(
    "smallcnn-symbols-v2",
    BuiltinWeights(
        name="smallcnn-symbols-v2",
        trunk="smallcnn",
        file="smallcnn-symbols-v2.pt",
        provenance_file="smallcnn-symbols-v2.json",
        sha256="0376fadada7f18ad1cacb09c2e110cb93feccff94682d7ead780762aba743084",
        description=(
            "smallcnn pretrained (softmax classification) on Unicode symbols rendered at 28 px from "
            "the 12 DejaVu faces; classes disjoint from glyphs and Omniglot by identity and by "
            "appearance (benchmarks/pretrain_trunk.py, filter benchmark.models.lookalike)"
        ),
    ),
)
# v2's source trained for v1's 918 optimiser steps (v2 took 144): 19 instead of 3 training renderings
# per symbol and face, so that it also makes v1's 6 passes. The mini budget's, measured with
# benchmarks/trunk_probe.py (benchmarks/README.md): better than v2, still below v1.
BUILTIN_WEIGHTS.register(
    "smallcnn-symbols-v3",
    BuiltinWeights(
        name="smallcnn-symbols-v3",
        trunk="smallcnn",
        file="smallcnn-symbols-v3.pt",
        provenance_file="smallcnn-symbols-v3.json",
        sha256="06fa08f0b5724abdecc38b3d92f9624cb2bf037ae7e4700ce0a464eb0427e24a",
        description=(
            "smallcnn-symbols-v2's source (Unicode symbols disjoint from glyphs and Omniglot by identity "
            "and by appearance) with v1's optimiser steps: 19 jittered renderings per symbol and face, "
            "918 steps (benchmarks/pretrain_trunk.py --match-steps-of smallcnn-symbols)"
        ),
    ),
)


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def is_builtin(value: str) -> bool:
    """Whether a ``model.trunk_weights`` value names built-in weights (``builtin:NAME``)."""
    return value.startswith(BUILTIN_PREFIX)


def builtin_spec(value: str) -> BuiltinWeights:
    """The built-in weights named by ``builtin:NAME`` (unknown names list the valid ones)."""
    name = value[len(BUILTIN_PREFIX) :]
    if name not in BUILTIN_WEIGHTS:
        raise ConfigError(
            f"model.trunk_weights = {value!r}: no built-in weights {name!r}; built-in: "
            + ", ".join(f"{BUILTIN_PREFIX}{n}" for n in BUILTIN_WEIGHTS.names())
            + "."
        )
    return BUILTIN_WEIGHTS.get(name)


def verified_path(spec: BuiltinWeights, weights_dir: Path | None = None) -> Path:
    """The path of a built-in weights file after checking that its sha256 is the registered one.

    ``weights_dir`` defaults to the module's WEIGHTS_DIR, read at each call.
    """
    path = (weights_dir or WEIGHTS_DIR) / spec.file
    if not path.is_file():
        raise ConfigError(
            f"Built-in trunk weights {BUILTIN_PREFIX}{spec.name}: the file {path} is missing "
            "(a broken installation; reinstall dmlbench, or regenerate with benchmarks/pretrain_trunk.py)."
        )
    actual = sha256_of(path)
    if actual != spec.sha256:
        raise ConfigError(
            f"Built-in trunk weights {BUILTIN_PREFIX}{spec.name}: {path} has sha256 {actual}, but "
            f"dmlbench expects {spec.sha256}. The file is corrupted or was regenerated without updating "
            "benchmark/models/pretrained.py; restore the committed file (git checkout -- it) or reinstall."
        )
    return path


def resolve_weights(value: str) -> Path:
    """A ``model.trunk_weights`` value as a file path: ``builtin:NAME`` checked by checksum, else the path."""
    if is_builtin(value):
        return verified_path(builtin_spec(value))
    return Path(value).expanduser()


def weights_record(trunk: str, pretrained: bool, value: str) -> dict[str, Any] | None:
    """What a run record says about the trunk's weights: file, sha256 and (built-in) provenance.

    None for a randomly initialised trunk. Raises for built-in weights of another trunk, or whose
    file fails its checksum.
    """
    if not pretrained or not value:
        return None
    if not is_builtin(value):
        path = Path(value).expanduser()
        return {"file": str(path), "sha256": sha256_of(path), "provenance": None}
    spec = builtin_spec(value)
    if spec.trunk != trunk:
        raise ConfigError(
            f"model.trunk_weights = {value!r} are weights of trunk {spec.trunk!r}, not of "
            f"model.trunk = {trunk!r}; add --set model.trunk={spec.trunk}."
        )
    path = verified_path(spec)
    provenance = json.loads((path.parent / spec.provenance_file).read_text())
    return {"file": value, "sha256": spec.sha256, "provenance": provenance}
