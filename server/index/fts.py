"""Turn any user text into a safe FTS5 MATCH expression: quoted terms joined by OR, never FTS5 syntax."""

from __future__ import annotations

import re

MAX_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
# Words so common that they add no ranking signal but make an OR query touch most rows.
STOPWORDS = frozenset(
    """a an and are as at be but by for from has have he her his i if in into is it its me my no not of on or
    our she so than that the their them then there these they this to was we were what when where which who
    why will with you your do does did can could would should been being""".split()
)


def query_terms(query: str, max_terms: int = MAX_TERMS) -> list[str]:
    """Distinct lowercased words of `query` in order, stopwords dropped unless nothing else is left."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    content = [w for w in words if w not in STOPWORDS]
    return (content or words)[:max_terms]


def match_expression(query: str) -> str | None:
    """An FTS5 MATCH string for `query`, or None when it has no searchable word."""
    return terms_expression(query_terms(query))


def terms_expression(terms: list[str]) -> str | None:
    """An FTS5 MATCH string for words of `query_terms`, or None when there are none."""
    if not terms:
        return None
    # A double-quoted string is a phrase of plain tokens in FTS5; \\w+ never contains a quote.
    return " OR ".join(f'"{term}"' for term in terms)
