"""One redaction rule: a pattern, the literals that must occur before it is worth running, and a judge.

Speed comes from three habits. Every pattern starts with a literal (a boundary check is a lookbehind written
after it), so the regex engine finds candidates with a fast substring search instead of trying every position:
a megabyte is scanned in about a millisecond per rule. Case-blind rules match the text with A-Z folded to
a-z instead of using IGNORECASE, which would cost ten times more. And every quantifier is possessive (`{m,n}+`,
`++`, Python 3.11) or bounded, so no match attempt can backtrack catastrophically.

That alone does not make a scan linear: a pattern that reads up to n characters and then fails is tried again at
the next occurrence of its literal, so a text repeating the literal (`key=key=key=…`, `curl curl …`) cost n per
occurrence (a megabyte took 5-10 s). A value is therefore read to the end of its run and refused by the judge
when too long (the search resumes after the run), and a gap between two literals stops at the next occurrence
of the first one. `tests/redaction/test_redaction.py` times a megabyte of each such shape.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable
from dataclasses import dataclass

Span = tuple[int, int]
# Given a match and the original text (a folded rule's match is on the folded copy, same positions), the span
# to replace or None to keep the match as it is.
Judge = Callable[[re.Match[str], str], Span | None]

_FOLD = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def fold(text: str) -> str:
    """`text` with A-Z lowered and nothing else changed: unlike `str.lower`, every position stays where it was."""
    return text.translate(_FOLD)


def after_edge(literal: str, edge: str) -> str:
    """`literal` where no character of the class `edge` precedes it, literal first so it can be searched for."""
    escaped = re.escape(literal)
    return rf"{escaped}(?<![{edge}]{escaped})"


def secret_group(match: re.Match[str], text: str) -> Span:
    """The span of the `secret` group, or of the whole match when the pattern has no such group."""
    return match.span("secret") if "secret" in match.re.groupindex else match.span()


def when(test: Callable[[str], bool]) -> Judge:
    """A judge that replaces the secret group only if `test` accepts its text."""

    def judge(match: re.Match[str], text: str) -> Span | None:
        start, end = secret_group(match, text)
        return (start, end) if test(text[start:end]) else None

    return judge


@dataclass(frozen=True)
class Rule:
    """Where one kind of secret shows itself and which part of a match is the secret.

    `folded` rules are written in lower case and run on `fold(text)`.
    """

    kind: str
    pattern: re.Pattern[str]
    judge: Judge = secret_group
    folded: bool = False
