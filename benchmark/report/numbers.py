"""Signed numbers as the generated pages print them."""

from __future__ import annotations

#: U+2212: the pages' prose writes differences with the typographic minus ("loss − reference"), so
#: their numbers do too; Python's ``format`` writes the ASCII hyphen, which read beside it as a dash.
MINUS = "\u2212"


def signed(value: float, digits: int = 2) -> str:
    """``value`` with an explicit sign (``+`` or U+2212 minus) and ``digits`` decimals.

    A value that rounds to zero keeps its sign (``−0.00``: the difference is negative, only
    smaller than the shown precision); ``nan`` is ``+nan``, as ``format`` writes it.
    """
    if digits < 0:
        raise ValueError(f"digits must be >= 0, got {digits}")
    return f"{value:+.{digits}f}".replace("-", MINUS)
