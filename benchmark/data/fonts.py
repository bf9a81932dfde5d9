"""The font faces that ship with matplotlib and that rendered datasets draw from (no torch here).

One list for the embedded ``glyphs`` dataset and the symbol source of the built-in pretrained
trunk (``benchmark.models.pretrained``), which must stay importable without torch.
"""

from __future__ import annotations

# Regular, bold, italic/oblique and bold-italic of the three DejaVu families.
DEJAVU_FACES: tuple[str, ...] = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSans-BoldOblique.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "DejaVuSerif-BoldItalic.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSansMono-Oblique.ttf",
    "DejaVuSansMono-BoldOblique.ttf",
)
# The same four styles of STIX General.
STIX_FACES: tuple[str, ...] = (
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "STIXGeneralBolIta.ttf",
)
