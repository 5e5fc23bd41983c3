"""`fts_tokens`: a text's words as the SQLite engine's FTS5 index holds them, from any thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import apsw

from server.index.fts_tokens import fts_tokens
from server.index.migrations import FTS_TOKENIZER

TEXT = "Café ÜBER deployments किताब x² ½ İstanbul max_file_bytes nai\u0308ve สวัสดีครับ"


def test_the_tokens_are_the_ones_an_fts5_table_of_the_engine_indexes() -> None:
    db = apsw.Connection(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(text, tokenize='{FTS_TOKENIZER}')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    db.execute("INSERT INTO t(text) VALUES(?)", (TEXT,))
    indexed = [str(row[0]) for row in db.execute("SELECT term FROM v ORDER BY offset")]
    assert fts_tokens(TEXT) == indexed
    assert fts_tokens(TEXT)[:4] == ["cafe", "uber", "deploy", "क"] and "istanbul" in indexed


def test_threads_cut_at_once_each_get_their_own_words() -> None:
    texts = [f"word{n} Résumés{n} {'x' * n}" for n in range(200)]
    with ThreadPoolExecutor(8) as pool:
        found = list(pool.map(fts_tokens, texts))
    assert found == [[f"word{n}", f"resumes{n}", *(["x" * n] if n else [])] for n in range(200)]


def test_a_lone_surrogate_is_a_separator_not_an_error() -> None:
    assert fts_tokens("ab\ud800cd") == ["ab", "cd"]
    assert fts_tokens("") == []
