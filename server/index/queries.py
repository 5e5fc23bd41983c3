"""SQL text for search, built by pure functions from validated filters; executed in search.py."""

from __future__ import annotations

import re
import sys
from collections.abc import Collection
from dataclasses import dataclass

_TABLE_NAME = re.compile(r"^vectors_[0-9]{1,9}$")


@dataclass(frozen=True)
class Filters:
    """Validated search filters. `path_prefix` is a relative POSIX prefix; days are `YYYY-MM-DD`."""

    sources: tuple[str, ...] = ()
    path_prefix: str = ""
    date_from: str | None = None
    date_to: str | None = None
    tags: tuple[str, ...] = ()  # a chunk with any of these tags passes
    category: str | None = None

    @property
    def labelled(self) -> bool:
        """Filters on tags or category: those live on chunks, not in the vector table's metadata."""
        return bool(self.tags or self.category)


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix`, for a range scan (paths compare by
    code point, as their UTF-8 bytes do); None when there is none (`prefix` is all U+10FFFF)."""
    for end in range(len(prefix), 0, -1):
        last = ord(prefix[end - 1])
        if last < sys.maxunicode:
            return prefix[: end - 1] + chr(0xE000 if last == 0xD7FF else last + 1)  # never a surrogate
    return None


def file_conditions(filters: Filters, alias: str) -> tuple[list[str], list[object]]:
    conditions: list[str] = []
    params: list[object] = []
    if filters.sources:
        conditions.append(f"{alias}.source IN ({', '.join('?' for _ in filters.sources)})")
        params.extend(filters.sources)
    if filters.path_prefix:
        conditions.append(f"{alias}.path >= ?")
        params.append(filters.path_prefix)
        if (bound := prefix_upper_bound(filters.path_prefix)) is not None:
            conditions.append(f"{alias}.path < ?")
            params.append(bound)
    if filters.date_from or filters.date_to:
        # Both bounds always: undated files have day NULL (files) or '' (vec0 metadata cannot be NULL).
        conditions.append(f"{alias}.day >= ? AND {alias}.day <= ?")
        params.extend([filters.date_from or "0000-01-01", filters.date_to or "9999-12-31"])
    return conditions, params


def label_conditions(filters: Filters) -> tuple[list[str], list[object]]:
    """The tag and category conditions, on chunks `c`."""
    conditions: list[str] = []
    params: list[object] = []
    if filters.category:
        conditions.append("c.category = ?")
        params.append(filters.category)
    if filters.tags:
        marks = ", ".join("?" for _ in filters.tags)
        conditions.append(f"c.id IN (SELECT chunk_id FROM chunk_tags WHERE tag IN ({marks}))")
        params.extend(filters.tags)
    return conditions, params


def chunk_conditions(filters: Filters) -> tuple[list[str], list[object]]:
    """Every condition of `filters`, on chunks `c` joined to files `f`."""
    conditions, params = file_conditions(filters, "f")
    more, more_params = label_conditions(filters)
    return conditions + more, params + more_params


def labelled_chunks_sql(filters: Filters) -> tuple[str, list[object]]:
    """The chunks that pass filters with tags or category: the set the vector side ranks exactly."""
    conditions, params = chunk_conditions(filters)
    sql = f"SELECT c.id FROM chunks c JOIN files f ON f.id = c.file_id WHERE {' AND '.join(conditions) or '1'}"
    return sql, params


def file_labels_sql(filters: Filters, paths: Collection[str] | None = None) -> tuple[str, list[object]]:
    """Per file (among `paths`, when given) that has a chunk passing the tag and category filters (every file
    without them): its path, the tags of all its chunks and their categories (each comma-separated, unordered)."""
    conditions, params = label_conditions(filters)
    where = [f"f.id IN (SELECT c.file_id FROM chunks c WHERE {' AND '.join(conditions)})"] if conditions else []
    if paths is not None:
        where.append(f"f.path IN ({', '.join('?' for _ in paths)})")
        params.extend(paths)
    sql = (
        "SELECT f.path, (SELECT group_concat(DISTINCT t.tag) FROM chunk_tags t JOIN chunks c ON c.id = t.chunk_id"
        " WHERE c.file_id = f.id), (SELECT group_concat(DISTINCT c.category) FROM chunks c"
        f" WHERE c.file_id = f.id AND c.category != '') FROM files f{' WHERE ' if where else ''}{' AND '.join(where)}"
    )
    return sql, params


# The keyword side scores the whole match once into this per-connection temp table, then reads the best rows and
# the vector candidates' rows from it. FTS5 computes bm25 for every matching row whatever the LIMIT, so the match
# is the cost and is paid once; asking FTS5 for `rowid IN (...)` instead re-runs the query per rowid, recomputing
# bm25's IDF statistics each time (measured 1 ms per row on SciFact), and joining chunks and files onto every
# match doubles the cost (measured at 100k chunks), so that join happens only when a filter needs it.
CREATE_KEYWORD_SCORES = "CREATE TEMP TABLE IF NOT EXISTS keyword_scores(id INTEGER PRIMARY KEY, rank REAL NOT NULL)"
CLEAR_KEYWORD_SCORES = "DELETE FROM temp.keyword_scores"
FILL_KEYWORD_SCORES = (
    "INSERT INTO temp.keyword_scores(id, rank) SELECT rowid, bm25(chunks_fts, 1.0, 0.5) FROM chunks_fts"
    " WHERE chunks_fts MATCH ?"
)


def keyword_best_sql(filters: Filters, limit: int) -> tuple[str, list[object]]:
    """The `limit` best-scored rows of the keyword scores (more negative bm25 is better) that pass the filters."""
    conditions, params = chunk_conditions(filters)
    if not conditions:
        return "SELECT id, rank FROM temp.keyword_scores ORDER BY rank LIMIT ?", [limit]
    sql = (
        "SELECT s.id, s.rank FROM temp.keyword_scores s JOIN chunks c ON c.id = s.id JOIN files f ON f.id = c.file_id"
        f" WHERE {' AND '.join(conditions)} ORDER BY s.rank LIMIT ?"
    )
    return sql, [*params, limit]


def keyword_scores_of_sql(chunk_ids: list[int]) -> tuple[str, list[object]]:
    """The keyword scores of given chunks (those that matched at all)."""
    return f"SELECT id, rank FROM temp.keyword_scores WHERE id IN ({', '.join('?' for _ in chunk_ids)})", [*chunk_ids]


def vector_sql(table: str, filters: Filters, k: int) -> tuple[str, list[object]]:
    """KNN over the vec0 table; filters run inside the scan on its metadata columns."""
    table = _vector_table(table)
    conditions, params = file_conditions(filters, table)
    where = "".join(f" AND {c}" for c in conditions)
    sql = f"SELECT chunk_id, distance FROM {table} WHERE embedding MATCH ? AND k = ?{where}"
    return sql, ["<query vector>", k, *params]


def vector_by_id_sql(table: str) -> str:
    """One chunk's vector from vec0, run once per id: vec0 answers `chunk_id IN (...)` by scanning the whole table
    (326 ms for 40 ids at a million chunks) and `chunk_id = ?` by a lookup (0.7 ms for the 40)."""
    return f"SELECT chunk_id, embedding FROM {_vector_table(table)} WHERE chunk_id = ?"


def cached_vectors_by_id_sql(provider: str, model: str, chunk_ids: list[int]) -> tuple[str, list[object]]:
    """Chunk vectors from the embedding cache: a B-tree lookup each, where vec0 reads a whole 1,024-vector block
    per row (measured 7.6 ms for 40 rows on SciFact)."""
    marks = ", ".join("?" for _ in chunk_ids)
    sql = (
        "SELECT c.id, e.vector FROM chunks c JOIN embedding_cache e"
        f" ON e.provider = ? AND e.model = ? AND e.hash = c.hash WHERE c.id IN ({marks})"
    )
    return sql, [provider, model, *chunk_ids]


def is_vector_table(name: str) -> bool:
    """Whether `name` is a vec0 table's name as the index makes them (`vectors_<n>`), safe in SQL text."""
    return bool(_TABLE_NAME.match(name))


def _vector_table(name: str) -> str:
    """`name`, checked to be a vector table's before it goes into SQL text."""
    if not is_vector_table(name):
        raise ValueError("bad vector table name")
    return name


def missing_vectors_sql(table: str, after: int = 0) -> tuple[str, list[object]]:
    """How many chunks after id `after` have no vector in `table`, and the largest chunk id, in one snapshot.

    From the first chunk: one scan of the vec0 table's ids, then one of the chunks (0.54 s at a million chunks; a
    vec0 lookup per chunk, `NOT EXISTS`, took 6.4 s; bench/bench_pending.py). After a mark: a lookup for each
    chunk written since."""
    table, params = _vector_table(table), list[object]()
    if after <= 0:
        missing = f"SELECT count(*) FROM chunks WHERE id NOT IN (SELECT chunk_id FROM {table})"
    else:
        vector = f"SELECT 1 FROM {table} v WHERE v.chunk_id = c.id"
        missing, params = f"SELECT count(*) FROM chunks c WHERE c.id > ? AND NOT EXISTS ({vector})", [after]
    return f"SELECT ({missing}), (SELECT coalesce(max(id), 0) FROM chunks)", params


def chunks_without_vectors_sql(table: str, after: int, limit: int) -> tuple[str, list[object]]:
    """The next `limit` chunks after id `after` that have no vector in `table`, with what embedding and the vec0
    row need. Paged by id: chunk ids only grow (AUTOINCREMENT, one writer), so a fill reads each chunk once; from
    the first id each time, a rebuild's n-th batch would step over the n-1 batches filled before it."""
    sql = (
        "SELECT c.id, c.hash, CASE WHEN c.context = '' THEN c.text ELSE c.context || char(10) || c.text END,"
        " f.source, f.path, coalesce(f.day, '') FROM chunks c JOIN files f ON f.id = c.file_id"
        f" WHERE c.id > ? AND NOT EXISTS (SELECT 1 FROM {_vector_table(table)} v WHERE v.chunk_id = c.id)"
        " ORDER BY c.id LIMIT ?"
    )
    return sql, [after, limit]


def create_vector_table_sql(table: str, dimensions: int) -> str:
    if not is_vector_table(table) or not 1 <= dimensions <= 8192:
        raise ValueError("bad vector table definition")
    return (
        f"CREATE VIRTUAL TABLE {table} USING vec0(chunk_id INTEGER PRIMARY KEY,"
        f" embedding float[{dimensions}] distance_metric=cosine, source text, path text, day text)"
    )


def spans_sql(chunk_ids: list[int]) -> tuple[str, list[object]]:
    """Where each chunk is: its file and line range, with its heading and text (for its body's range, merged with
    its neighbours' into one place)."""
    marks = ", ".join("?" for _ in chunk_ids)
    sql = (
        "SELECT c.id, f.path, c.start_line, c.end_line, c.heading, c.text"
        f" FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.id IN ({marks})"
    )
    return sql, list(chunk_ids)


def hits_sql(chunk_ids: list[int]) -> tuple[str, list[object]]:
    marks = ", ".join("?" for _ in chunk_ids)
    sql = (
        "SELECT c.id, f.path, f.source, f.day, c.start_line, c.end_line, c.heading, c.text, f.indexed_at, c.tags,"
        f" c.category FROM chunks c JOIN files f ON f.id = c.file_id WHERE c.id IN ({marks})"
    )
    return sql, list(chunk_ids)
