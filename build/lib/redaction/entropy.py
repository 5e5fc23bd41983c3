"""Does a string look machine-made? The test a value must pass when only its context says "credential".

Shannon entropy alone cannot tell a 20-character random token from a 20-character identifier: both use about
as many distinct characters as they are long (a random base62 string of 20 has 3.5 to 4.3 bits per character,
`WordPieceTokenizerFactory` has 3.8). So `looks_random` asks three cheap questions, with thresholds measured on
20,000 uniformly random strings per alphabet and length:

- entropy of at least 3.5 bits per character (3.0 for hexadecimal, whose alphabet caps it at 4): about 99.9%
  of random base62/base64 strings of 20 characters pass, and all longer ones; 99.9% of random hex strings of
  32 characters pass (hex secrets are 32, 40 or 64 long). This drops repetitive values (`aaaa…`,
  `1234512345…`). 3.5 is also the threshold of gitleaks' generic API key rule.
- letters and digits both present: words and most identifiers have no digit; a random base62 string of 32
  characters lacks one with probability 0.4%, of 20 characters 3% (the price of this rule).
- not identifier-shaped: split into pieces (a run of capitals, a capitalised or lower-case word, a run of
  digits), an identifier's pieces are long (`_Curve25519_PrivateKey` 5.0 characters on average,
  `HttpResponseForbidden403` 6.0) while a random base62 string's average about 1.7 and reach 3.5 in 0.26% of
  draws of 20 characters (0.09% of 32). Hex strings skip this test: their long digit runs would trip it, and
  an identifier cannot be written in hex.
"""

from __future__ import annotations

import math
import re
from collections import Counter

MIN_RANDOM_LENGTH = 20
MIN_ENTROPY = 3.5
MIN_HEX_ENTROPY = 3.0
MAX_PIECE_LENGTH = 3.5

_HEX = frozenset("0123456789abcdefABCDEF")
_PIECES = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def shannon_entropy(text: str) -> float:
    """Bits per character of `text`'s own character distribution (0 for an empty or one-symbol string)."""
    if not text:
        return 0.0
    size = len(text)
    return -sum(n / size * math.log2(n / size) for n in Counter(text).values())


def char_classes(text: str) -> int:
    """How many of lower case, upper case and digits `text` mixes (0 to 3)."""
    return any(c.islower() for c in text) + any(c.isupper() for c in text) + any(c.isdigit() for c in text)


def looks_random(text: str) -> bool:
    """Whether `text` is long, varied and digit-bearing like a generated token rather than a name or a word."""
    if len(text) < MIN_RANDOM_LENGTH:
        return False
    if not any(c.isdigit() for c in text) or not any(c.isalpha() for c in text):
        return False
    if not set(text) - _HEX - set("-_"):
        return shannon_entropy(text) >= MIN_HEX_ENTROPY
    if shannon_entropy(text) < MIN_ENTROPY:
        return False
    pieces = _PIECES.findall(text)
    return sum(map(len, pieces)) < MAX_PIECE_LENGTH * len(pieces)
