"""The words of a text exactly as the SQLite engine's FTS5 index cuts, folds and stems them, with FTS5's own
tokenizer (`migrations.FTS_TOKENIZER`: porter over unicode61, diacritics removed), so a backend keeping its own
keyword statistics (`server.postgres.search_queries`) finds the same words the SQLite engine finds."""

from __future__ import annotations

import threading
from typing import Any

import apsw

from server.index.migrations import FTS_TOKENIZER

_local = threading.local()  # one tokenizer (and its in-memory connection) per thread: no lock on the hot path


def _tokenizer() -> Any:
    found = getattr(_local, "tokenizer", None)
    if found is None:
        name, *args = FTS_TOKENIZER.split()
        found = _local.tokenizer = apsw.Connection(":memory:").fts5_tokenizer(name, args)
    return found


def fts_tokens(text: str) -> list[str]:
    """The tokens FTS5 indexes for `text`, in order (a word cut into several where FTS5 cuts it: `max_file_bytes`
    is max, file, byte). Text that is not valid UTF-8 (a lone surrogate) has its bad characters read as separators."""
    if not text:
        return []
    data = text.encode("utf-8", "replace")
    return [token[0] for token in _tokenizer()(data, apsw.FTS5_TOKENIZE_DOCUMENT, None, include_offsets=False)]
