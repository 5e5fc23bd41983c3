from __future__ import annotations

import apsw
from hypothesis import given, settings
from hypothesis import strategies as st

from server.index.fts import match_expression, query_terms
from server.index.migrations import FTS_TOKENIZER


def _fts() -> apsw.Connection:
    db = apsw.Connection(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZER}')")
    db.execute("INSERT INTO t(text) VALUES ('the C compiler and a NEAR miss'), ('unterminated strings in x')")
    return db


def test_fts5_operators_become_plain_quoted_terms():
    assert match_expression('C++ "unterminated AND OR NOT * -x NEAR(') == '"c" OR "unterminated" OR "x" OR "near"'
    assert match_expression("*** ((( ---") is None


def test_stopwords_are_dropped_unless_nothing_else_is_left():
    assert query_terms("what is the rate limit") == ["rate", "limit"]
    assert query_terms("to be or not to be") == ["to", "be", "or", "not"]


def test_terms_are_distinct_and_capped():
    terms = query_terms(" ".join(f"w{i} w{i}" for i in range(100)))
    assert len(terms) == 32 and len(set(terms)) == 32


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_valid_match_expression(text):
    db = _fts()
    match = match_expression(text)
    if match is not None:
        db.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,)).fetchall()
