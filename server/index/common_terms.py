"""Leave out of the keyword query the words found in a large share of the chunks (and, through the same counts,
the names every chunk shares out of the query's vector: `server.index.shared_names`).

FTS5 computes bm25 for every row that matches any query word, whatever the LIMIT, so the keyword side costs in
proportion to the matches: at 100k chunks a SciFact claim matched 56k rows (words such as "cells" or "patients"),
88 ms. A word in more than COMMON_SHARE of the chunks has an IDF under ln(1/COMMON_SHARE) ~ 2.3 where the words
that decide a ranking have 6 to 10, so it adds little to a score and most of the cost. In indexes of MIN_CHUNKS
chunks or more those words are dropped, unless every word of the query is that common: then the rarest stays.
The matches of the words left still grow with the index, so words are taken rarest first only while their summed
counts stay under MAX_MATCHES: a bound on the rows scored whatever the size (the rarest word always stays).

Measured on SciFact (13.6k chunks, so with the size floor lowered): nDCG@10 keyword 0.677 -> 0.666, hybrid
0.732 -> 0.728 at 10%; at 5% 0.656 and 0.719. Keeping the common words only in the scoring, as
`(all words) AND (rare words)`, kept keyword 0.675 but hybrid fell to 0.729 as well, at twice the cost of dropping
them. Below the floor nothing changes. Speed at 1k..1M chunks: bench/bench_scale.py.

Document frequencies come from counting each word's matches (a cost in proportion to them, so the common words
are the dear ones) and are kept per index for COUNTS_TTL seconds: an index does not change its vocabulary's
shares quickly. The rule is one for both backends: SQLite counts FTS5's rows here (`fts_counter`), PostgreSQL its
keyword postings (`server.postgres.search`), whose keyword side costs in proportion to the matches as well
(bench/bench_pg_keyword_scale.py).
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable

import apsw

from server.index.fts import terms_expression
from server.index.shared_names import query_texts as texts_of
from server.index.store import Store

COMMON_SHARE = 0.10
MIN_CHUNKS = 50_000  # below this the whole match is cheap enough (about 12 ms at 10k chunks): all words stay
MAX_MATCHES = 20_000  # past this many matches the next rarer word is not added (the match costs per row)
COUNTS_TTL = 600.0
MAX_COUNTS = 50_000  # words remembered per index; the table is cleared when it is full


Counter = tuple[Callable[[], int], Callable[[str], int]]  # the index's chunks; the chunks holding a word


class TermCounts:
    """Chunk counts of words, and of the index, remembered for a while."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, float]] = {}
        self._clock = clock

    def remembered(self, name: str, compute: Callable[[], int]) -> int:
        """The count called `name`, from `compute()` when not remembered or older than COUNTS_TTL."""
        now = self._clock()
        with self._lock:
            found = self._counts.get(name)
            if found is not None and now - found[1] < COUNTS_TTL:
                return found[0]
        value = compute()
        with self._lock:
            if len(self._counts) >= MAX_COUNTS:
                self._counts.clear()
            self._counts[name] = (value, now)
        return value

    def remembering(self, chunks: Callable[[], int], holding: Callable[[str], int]) -> Counter:
        """`chunks` and `holding` (one backend's counts, each a query) answered from memory while fresh."""
        return (
            lambda: self.remembered(" chunks", chunks),  # a space is never in a word
            lambda term: self.remembered(term, lambda: holding(term)),
        )


def rare_terms(terms: list[str], chunks: Callable[[], int], holding: Callable[[str], int]) -> list[str]:
    """`terms` (words of `query_terms`) without those in more than COMMON_SHARE of the index's `chunks()` (the
    rarest stays when all are), taken rarest first while their summed `holding(term)` stays under MAX_MATCHES."""
    if not terms:
        return terms
    total = chunks()
    if total < MIN_CHUNKS:
        return terms
    counts = {term: holding(term) for term in terms}
    chosen: set[str] = set()
    matches = 0  # at most: the rows matching more than one word count once
    for term in sorted(terms, key=lambda term: (counts[term], terms.index(term))):  # the rarest first
        if chosen and (counts[term] > COMMON_SHARE * total or matches + counts[term] > MAX_MATCHES):
            break
        chosen.add(term)
        matches += counts[term]
    return [term for term in terms if term in chosen]


def _scalar(db: apsw.Connection, sql: str, *bindings: str) -> int:
    return int(db.execute(sql, bindings).fetchall()[0][0])  # type: ignore[arg-type]


def fts_counter(db: apsw.Connection) -> Counter:
    """The SQLite engine's counts: its chunks, and the rows of chunks_fts matching a word."""
    return (
        lambda: _scalar(db, "SELECT count(*) FROM chunks"),
        lambda term: _scalar(db, "SELECT count(*) FROM chunks_fts WHERE chunks_fts MATCH ?", f'"{term}"'),
    )


_BY_STORE: weakref.WeakKeyDictionary[Store, TermCounts] = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def _counted(store: Store, db: apsw.Connection) -> Counter:
    with _REGISTRY_LOCK:
        counts = _BY_STORE.get(store)
        if counts is None:
            counts = _BY_STORE[store] = TermCounts()
    return counts.remembering(*fts_counter(db))


def keyword_match(store: Store, db: apsw.Connection, terms: list[str]) -> str | None:
    """The FTS5 MATCH string for `terms` with the index's common words left out, None when there are no terms."""
    return terms_expression(rare_terms(terms, *_counted(store, db)))


def query_texts(store: Store, db: apsw.Connection, query: str) -> list[str]:
    """The texts `query`'s vector is the mean of: as asked, and without the names the chunks share (`shared_names`)."""
    return texts_of(query, *_counted(store, db))
