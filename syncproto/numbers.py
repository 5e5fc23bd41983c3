"""How either side reads a whole number a person wrote in a setting: one strict syntax for the server's settings
and the laptop's timings, so `--5`, `1.5` or a value of thousands of digits is each side's one-line configuration
error, never a traceback out of `int()` (which refuses more than 4300 digits).
"""

from __future__ import annotations

from typing import Final

MAX_WHOLE_DIGITS: Final = 18  # past every setting's range, and far under int()'s limit


def parse_whole(text: str) -> int | None:
    """`text` (stripped by the caller) as an int when it is ASCII digits with at most one leading '-', and at most
    MAX_WHOLE_DIGITS of them; None otherwise, for the caller to raise its own error naming the setting."""
    digits = text.removeprefix("-")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > MAX_WHOLE_DIGITS:
        return None
    return int(text)
