"""Signed numbers on the generated pages: typographic minus, explicit plus, the sign kept at zero."""

from __future__ import annotations

import math

import pytest

from benchmark.report.numbers import MINUS, signed


@pytest.mark.parametrize(
    ("value", "digits", "text"),
    [
        (1.234, 2, "+1.23"),
        (-1.235001, 2, "\u22121.24"),
        (-0.001, 2, "\u22120.00"),  # negative, only below the shown precision
        (0.0, 2, "+0.00"),
        (-12.5, 0, "\u221212"),  # Python rounds half to even
        (3.14159, 4, "+3.1416"),
    ],
)
def test_signed_writes_the_sign_and_the_rounding_of_format(value: float, digits: int, text: str) -> None:
    assert signed(value, digits) == text


def test_the_minus_is_u2212_and_no_hyphen_is_left() -> None:
    assert MINUS == "\u2212"
    assert "-" not in signed(-7.0)
    # The same digits as Python's format, only the sign character differs.
    assert signed(-7.25).replace(MINUS, "-") == f"{-7.25:+.2f}"


def test_nan_is_written_as_format_writes_it() -> None:
    assert signed(math.nan) == "+nan"


def test_negative_digits_are_refused_with_the_value() -> None:
    with pytest.raises(ValueError, match="digits must be >= 0, got -1"):
        signed(1.0, -1)
