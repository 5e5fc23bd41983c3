"""The one syntax of a whole number in a setting, which the server's settings and the laptop's timings both read."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from syncproto.numbers import MAX_WHOLE_DIGITS, parse_whole

LARGEST = 10**MAX_WHOLE_DIGITS - 1


@given(st.integers(-LARGEST, LARGEST))
def test_every_whole_number_within_the_digit_cap_reads_back_as_itself(number):
    assert parse_whole(str(number)) == number


@pytest.mark.parametrize(
    "text",
    [
        "",
        "-",
        "--5",
        "-+5",
        "+5",
        "5-",
        "1.0",
        "0.9",
        "1e3",
        "inf",
        "nan",
        "1_000",
        " 5",
        "٣",
        "0x10",
        "9" * 19,
        "-" + "9" * 19,
        "9" * 5000,
    ],
)
def test_anything_else_is_refused_without_reaching_int(text):
    assert parse_whole(text) is None
