"""What an index's database holds, counted for the metrics: files per source, chunks, chunks still without a vector.

Read through any connection to `index.sqlite3` (the metrics open a read-only one); the schema stays this package's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import apsw

from server.index.queries import is_vector_table, missing_vectors_sql

COMPLETE_THROUGH = "vectors_complete_through"  # meta: "<table> <chunk id>", see complete_through
LOOKUPS_MAX = 20_000  # chunk ids past the mark counted one vec0 lookup each (6.6 us); more: one scan of them all


@dataclass(frozen=True)
class IndexCounts:
    files: dict[str, int]  # per source
    chunks: int
    pending_vectors: int | None  # None: unknown (sqlite-vec not loaded on this connection)
    rebuilding: bool  # a new vector table is being filled


def index_counts(db: apsw.Connection, *, vec_loaded: bool) -> IndexCounts:
    """The counts of the index behind `db` (`vec_loaded`: the connection has sqlite-vec, so vectors can be counted)."""
    files = {str(source): int(n) for source, n in db.execute("SELECT source, count(*) FROM files GROUP BY source")}
    chunks = _count(db, "SELECT count(*) FROM chunks")
    tables = "SELECT key, value FROM meta WHERE key IN ('vector_table', 'vector_next_table')"
    meta = {str(key): str(value) for key, value in db.execute(tables)}
    table = meta.get("vector_table")
    pending: int | None = 0 if table is None else None  # no live vectors: keyword-only, nothing waits
    if table is not None and vec_loaded and is_vector_table(table):
        pending = count_pending(db, table).missing
    return IndexCounts(files, chunks, pending, "vector_next_table" in meta)


def complete_through(mark: str | None, table: str) -> int:
    """The chunk id up to which every chunk has its vector in `table`, from the meta value COMPLETE_THROUGH ("<table>
    <id>"; 0: nothing known). It holds for good once found: a vector row goes only with its chunk or its whole
    table, chunk ids only grow (AUTOINCREMENT) and a new table takes a new name."""
    name, _, through = (mark or "").partition(" ")
    return int(through) if name == table and through.isdigit() else 0


class Pending(NamedTuple):
    missing: int  # chunks without a vector
    last: int  # the largest chunk id when counted
    mark: int  # the mark the count started from (complete_through)


def count_pending(db: apsw.Connection, table: str) -> Pending:
    """How many chunks have no vector in `table`. Past the mark only, one lookup a chunk, while that is at most
    LOOKUPS_MAX chunk ids; else (no mark, or the model has been out a long while) every chunk, by one scan of the
    vec0 table's ids."""
    rows = db.execute("SELECT value FROM meta WHERE key = ?", (COMPLETE_THROUGH,)).fetchall()
    mark = complete_through(str(rows[0][0]) if rows else None, table)
    after = mark if mark and _count(db, "SELECT coalesce(max(id), 0) FROM chunks") - mark <= LOOKUPS_MAX else 0
    missing, last = db.execute(*missing_vectors_sql(table, after)).fetchall()[0]
    assert isinstance(missing, int) and isinstance(last, int), "count(*) and max(id) are integers"
    return Pending(missing, last, mark)


def moved_mark(table: str, missing: int, last: int, mark: int) -> str | None:
    """The COMPLETE_THROUGH value a writer stores after a count from `mark` found `missing` chunks without a vector
    and `last` the largest chunk id; None when the mark stays (something is missing, or nothing is new)."""
    return f"{table} {last}" if missing == 0 and last > mark else None


def _count(db: apsw.Connection, sql: str) -> int:
    value = db.execute(sql).fetchall()[0][0]
    assert isinstance(value, int), "count(*) is an integer"
    return value
