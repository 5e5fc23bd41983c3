"""SQL text for the search index in PostgreSQL (`server.postgres.search`), built by pure functions; `?` placeholders
(`server.postgres.connection`). The filters' conditions are the SQLite engine's (`server.index.queries`), on the
same aliases: chunks `c`, their files `f` (here the table `indexed_files`), a vector table by its own name.

Keyword ranking is BM25 as FTS5 computes it (k1 1.2, b 0.75, IDF `ln((N - n + 0.5) / (n + 0.5))` floored at 1e-6,
the heading weighted 0.5 beside the text), from statistics kept in tables: each chunk's lexemes with their counts
and the chunk's length (`chunk_terms`, whose primary key's index holds all three, so a word's postings are read
from the index alone), and the number of chunks and their total length (`keyword_stats`). The lexemes are FTS5's
own tokens, from its tokenizer and porter stemmer (`server.index.fts_tokens`), computed in Python for the chunks and
for the query alike, so both backends cut, fold and stem the same words and find the same chunks. A query word FTS5
cuts into several tokens (`max_file_bytes`) is a phrase there; here, without positions, a chunk must hold all its
tokens, and the word scores the sum of theirs. A term's document frequency is counted from its postings, which the
query reads anyway. `bench/bench_pg_keyword.py` compared the ranking functions; `bench/bench_pg_search.py` measures
this one, `bench/bench_pg_keyword_scale.py` its cost at 100k and 1M chunks.
"""

from __future__ import annotations

import hashlib
import re

from server.index.fts_tokens import fts_tokens
from server.index.queries import Filters, chunk_conditions, file_conditions, label_conditions
from server.mirror.queries import Query
from server.postgres.connection import INDEX_SCHEMA_PREFIX

K1, B = 1.2, 0.75
HEADING_WEIGHT = 0.5  # as the engine's `bm25(chunks_fts, 1.0, 0.5)`
# A lexeme's characters kept: chunk_terms' btree key holds at most about 2.7 kB, and one longer word (a hex dump, a
# key) made its whole file unindexable. A longer token keeps its start and a hash of the whole, so two long words
# sharing their first characters stay apart, and a query cut alike still finds its own.
MAX_LEXEME_CHARS = 200
_HASH_CHARS = 16


def lexeme(token: str) -> str:
    """The lexeme stored for an FTS5 token: itself, or when longer than MAX_LEXEME_CHARS its start, a space (never
    in a token) and a hash of the whole token, MAX_LEXEME_CHARS in all."""
    if len(token) <= MAX_LEXEME_CHARS:
        return token
    digest = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()[:_HASH_CHARS]
    return f"{token[: MAX_LEXEME_CHARS - _HASH_CHARS - 1]} {digest}"


def query_lexemes(word: str) -> list[str]:
    """The distinct lexemes of one word of a query (`server.index.fts.query_terms`): the tokens FTS5 makes of it."""
    return list(dict.fromkeys(lexeme(token) for token in fts_tokens(word)))


def chunk_terms(heading: str, text: str) -> tuple[list[str], list[float], int]:
    """A chunk's lexemes and their weighted counts (each in the text 1, each in the heading HEADING_WEIGHT), and
    its length for BM25 (its tokens in both, as FTS5 counts a row's length)."""
    counts: dict[str, float] = {}
    length = 0
    for weight, column in ((1.0, text), (HEADING_WEIGHT, heading)):
        for token in fts_tokens(column):
            key = lexeme(token)
            counts[key] = counts.get(key, 0.0) + weight
            length += 1
    return list(counts), list(counts.values()), length


HNSW_M, HNSW_EF_CONSTRUCTION = 32, 256  # the vector tables' index (`hnsw_index`)
_TABLE_NAME = re.compile(r"^vectors_[0-9]{1,9}$")


def _table(name: str) -> str:
    if not _TABLE_NAME.match(name):
        raise ValueError("bad vector table name")
    return name


def vector_literal(vector: bytes | object) -> str:
    """A float32 vector (bytes, as the embedding cache keeps it, or an array) as pgvector's text form."""
    import numpy as np

    values = np.frombuffer(vector, dtype=np.float32) if isinstance(vector, bytes) else np.asarray(vector)
    return "[" + ",".join(repr(float(v)) for v in values) + "]"


# meta ------------------------------------------------------------------------------------------------------


def get_meta(key: str) -> Query:
    return "SELECT value FROM search_meta WHERE key = ?", (key,)


def set_meta(key: str, value: str) -> Query:
    return (
        "INSERT INTO search_meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, value),
    )


def delete_meta(key: str) -> Query:
    return "DELETE FROM search_meta WHERE key = ?", (key,)


# the files to index ------------------------------------------------------------------------------------------


def live_files(paths: list[str] | None = None) -> Query:
    """Path and hash of every live file of the file store, or of those of `paths`."""
    if paths is None:
        return "SELECT path, hash FROM files WHERE hash IS NOT NULL", ()
    return "SELECT path, hash FROM files WHERE hash IS NOT NULL AND path = ANY(?::text[])", (paths,)


def contents(paths: list[str]) -> Query:
    return "SELECT path, hash, content FROM files WHERE hash IS NOT NULL AND path = ANY(?::text[])", (paths,)


def any_unindexed() -> Query:
    """Whether a live file is not indexed at its hash (or an indexed file is gone): work left from before."""
    return (
        "SELECT EXISTS (SELECT 1 FROM files f LEFT JOIN indexed_files i ON i.path = f.path WHERE f.hash IS NOT NULL"
        " AND i.hash IS DISTINCT FROM f.hash) OR EXISTS (SELECT 1 FROM indexed_files i LEFT JOIN files f"
        " ON f.path = i.path AND f.hash IS NOT NULL WHERE f.path IS NULL)",
        (),
    )


def indexed(paths: list[str] | None = None) -> Query:
    """id, path and hash of every indexed file, or of those of `paths`."""
    if paths is None:
        return "SELECT id, path, hash FROM indexed_files", ()
    return "SELECT id, path, hash FROM indexed_files WHERE path = ANY(?::text[])", (paths,)


# writing -----------------------------------------------------------------------------------------------------


def adjust_stats(file_id: int, sign: int) -> Query:
    """Add (`sign` 1) or take away (-1) the chunks of one file in the keyword statistics."""
    return (
        "UPDATE keyword_stats s SET chunks = s.chunks + ? * x.n, terms = s.terms + ? * x.t"
        " FROM (SELECT count(*) AS n, coalesce(sum(terms), 0) AS t FROM chunks WHERE file_id = ?) x",
        (sign, sign, file_id),
    )


def delete_vectors_of_file(table: str, file_id: int) -> Query:
    return f"DELETE FROM {_table(table)} WHERE chunk_id IN (SELECT id FROM chunks WHERE file_id = ?)", (file_id,)


def delete_chunks_of_file(file_id: int) -> Query:
    """The chunks of one file (their terms and tags go with them)."""
    return "DELETE FROM chunks WHERE file_id = ?", (file_id,)


def delete_file(file_id: int) -> Query:
    return "DELETE FROM indexed_files WHERE id = ?", (file_id,)


def upsert_file(path: str, source: str, digest: str, size: int, lines: int, day: str | None, at: float) -> Query:
    return (
        "INSERT INTO indexed_files(path, source, hash, size, lines, day, indexed_at) VALUES(?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(path) DO UPDATE SET source = excluded.source, hash = excluded.hash, size = excluded.size,"
        " lines = excluded.lines, day = excluded.day, indexed_at = excluded.indexed_at RETURNING id",
        (path, source, digest, size, lines, day, at),
    )


INSERT_CHUNK = """
WITH v AS (SELECT ?::bigint AS file_id, ?::int AS ordinal, ?::int AS start_line, ?::int AS end_line,
        ?::text AS heading, ?::text AS context, ?::text AS text, ?::text AS hash, ?::int AS tokens,
        ?::text AS tags, ?::text AS category, ?::int AS terms),
c AS (INSERT INTO chunks(file_id, ordinal, start_line, end_line, heading, context, text, hash, tokens, tags,
        category, terms)
    SELECT * FROM v RETURNING id),
t AS (INSERT INTO chunk_terms(lexeme, chunk_id, tf, chunk_length) SELECT w.lexeme, c.id, w.tf, v.terms FROM c, v,
        unnest(?::text[], ?::real[]) AS w(lexeme, tf)),
g AS (INSERT INTO chunk_tags(tag, chunk_id) SELECT DISTINCT tag, c.id FROM c, unnest(?::text[]) tag)
SELECT id FROM c
"""


def insert_chunk(values: tuple[object, ...], tags: list[str]) -> Query:
    """One chunk with its keyword terms (`chunk_terms` of its heading and text) and tags; `values` in the order of
    `v` above but its `terms`, ending with the heading and text. Returns its id."""
    lexemes, counts, length = chunk_terms(str(values[4]), str(values[6]))
    return INSERT_CHUNK, (*values, length, lexemes, counts, tags)


def recount_stats() -> Query:
    """The keyword statistics counted again from every chunk."""
    return (
        "UPDATE keyword_stats SET chunks = x.n, terms = x.t"
        " FROM (SELECT count(*) AS n, coalesce(sum(terms), 0) AS t FROM chunks) x",
        (),
    )


def insert_vector(table: str, chunk_id: int, vector: bytes, source: str, path: str, day: str) -> Query:
    return (
        f"INSERT INTO {_table(table)}(chunk_id, embedding, source, path, day) VALUES(?, ?::vector, ?, ?, ?)"
        " ON CONFLICT(chunk_id) DO NOTHING",
        (chunk_id, vector_literal(vector), source, path, day),
    )


def hnsw_index(table: str) -> str:
    """The HNSW index by cosine distance on a vector table, with m=32, ef_construction=256: at 1M chunks and
    ef_search 1000, pgvector's defaults (16, 64) found 0.934 of the true 10 nearest, m=32 with ef_construction=128
    0.974, these 0.987, better than binary quantisation with exact re-ranking (`bench/bench_pgvector.py`,
    `bench/results/pgvector.md`)."""
    table = _table(table)
    return (
        f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_cosine_ops)"
        f" WITH (m = {HNSW_M}, ef_construction = {HNSW_EF_CONSTRUCTION})"
    )


def create_vector_table(table: str, dimensions: int) -> list[str]:
    """A model's vectors, with an HNSW index by cosine distance. Chunk ids without a foreign key: the rebuild
    fills a table while files change, and a vector whose chunk went is deleted with its file or at the swap."""
    if not 1 <= dimensions <= 2000:  # pgvector's HNSW indexes at most 2,000 dimensions
        raise ValueError("bad vector table definition")
    table = _table(table)
    return [
        f"CREATE TABLE {table}(chunk_id BIGINT PRIMARY KEY, embedding vector({dimensions}) NOT NULL,"
        ' source TEXT NOT NULL, path TEXT COLLATE "C" NOT NULL, day TEXT NOT NULL)',
        hnsw_index(table),
    ]


def estimated_rows(table: str) -> Query:
    """The planner's estimate of a table's rows (kept by autovacuum; -1 before its first count), read for free."""
    return "SELECT reltuples FROM pg_class WHERE oid = ?::regclass", (_table(table),)


def drop_vector_table(table: str) -> str:
    return f"DROP TABLE IF EXISTS {_table(table)}"


def delete_orphan_vectors(table: str) -> Query:
    return f"DELETE FROM {_table(table)} v WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.id = v.chunk_id)", ()


def chunks_without_vectors(table: str, after: int, limit: int) -> Query:
    return (
        "SELECT c.id, c.hash, CASE WHEN c.context = '' THEN c.text ELSE c.context || chr(10) || c.text END,"
        " f.source, f.path, coalesce(f.day, '') FROM chunks c JOIN indexed_files f ON f.id = c.file_id"
        f" WHERE c.id > ? AND NOT EXISTS (SELECT 1 FROM {_table(table)} v WHERE v.chunk_id = c.id)"
        " ORDER BY c.id LIMIT ?",
        (after, limit),
    )


def count_missing(table: str, after: int = 0) -> Query:
    """How many chunks after id `after` have no vector in `table`, and the largest chunk id, in one snapshot."""
    vector = f"SELECT 1 FROM {_table(table)} v WHERE v.chunk_id = c.id"
    missing = f"SELECT count(*) FROM chunks c WHERE c.id > ? AND NOT EXISTS ({vector})"
    return f"SELECT ({missing}), (SELECT coalesce(max(id), 0) FROM chunks)", (after,)


# the embedding cache -----------------------------------------------------------------------------------------


def cached(provider: str, model: str, hashes: list[str], now: float) -> Query:
    """The cached vectors of `hashes`, each marked as used now."""
    return (
        "UPDATE embedding_cache SET used_at = ? WHERE provider = ? AND model = ? AND hash = ANY(?::text[])"
        " RETURNING hash, vector",
        (now, provider, model, hashes),
    )


def cache(provider: str, model: str, digest: str, vector: bytes, now: float) -> Query:
    return (
        "INSERT INTO embedding_cache(provider, model, hash, vector, used_at) VALUES(?, ?, ?, ?, ?)"
        " ON CONFLICT(provider, model, hash) DO UPDATE SET vector = excluded.vector, used_at = excluded.used_at",
        (provider, model, digest, vector, now),
    )


# searching ---------------------------------------------------------------------------------------------------


def term_chunks_sql(word: str) -> Query:
    """How many chunks hold `word` (all its lexemes, `query_lexemes`): its document frequency."""
    lexemes = query_lexemes(word)
    return (
        "SELECT count(*) FROM (SELECT chunk_id FROM chunk_terms WHERE lexeme = ANY(?::text[]) GROUP BY chunk_id"
        " HAVING count(*) = ?) x",
        (lexemes, len(lexemes)),
    )


def keyword_chunks_sql() -> Query:
    """How many chunks the keyword statistics count (every chunk of the index)."""
    return "SELECT chunks FROM keyword_stats", ()


def keyword_sql(terms: list[list[str]], filters: Filters, limit: int, also: list[int]) -> Query:
    """BM25 (negative: lower is better, as FTS5's) of the `limit` best chunks matching any of `terms` (each a query
    word's lexemes, `query_lexemes`: a chunk matches a word holding all of them) that pass `filters`, and of the
    chunks `also` (the vector candidates) that match at all. Each matched word adds its lexemes' scores, as FTS5 adds
    each phrase's. The lexemes come as an array, not from a function of the query in the statement, so the planner
    knows they are few and reads their postings by the index."""
    conditions, params = chunk_conditions(filters)
    best = "SELECT id, rank FROM scored"
    if conditions:
        best = (
            "SELECT s.id, s.rank FROM scored s JOIN chunks c ON c.id = s.id JOIN indexed_files f ON f.id = c.file_id"
            f" WHERE {' AND '.join(conditions)}"
        )
    numbers = [number for number, lexemes in enumerate(terms) for _ in lexemes]
    flat = [lexeme for lexemes in terms for lexeme in lexemes]
    sql = f"""
WITH q AS (SELECT term, lexeme, count(*) OVER (PARTITION BY term) AS parts
    FROM unnest(?::int[], ?::text[]) AS q(term, lexeme)),
p AS (SELECT t.chunk_id, t.lexeme, t.tf, t.chunk_length, count(*) OVER (PARTITION BY t.lexeme) AS df
    FROM chunk_terms t WHERE t.lexeme = ANY(?::text[])),
s AS (SELECT greatest(chunks, 1)::float8 AS n, greatest(terms, 1)::float8 / greatest(chunks, 1) AS avgdl
    FROM keyword_stats),
m AS (SELECT p.chunk_id, sum(greatest(ln(greatest((s.n - p.df + 0.5) / (p.df + 0.5), 1e-9)), 1e-6)
            * p.tf * {K1 + 1} / (p.tf + {K1} * (1 - {B} + {B} * p.chunk_length / s.avgdl))) AS score
    FROM p JOIN q ON q.lexeme = p.lexeme CROSS JOIN s
    GROUP BY p.chunk_id, q.term, q.parts HAVING count(*) = q.parts),
scored AS MATERIALIZED (SELECT chunk_id AS id, -sum(score) AS rank FROM m GROUP BY chunk_id)
({best} ORDER BY rank, id LIMIT ?)
UNION
SELECT id, rank FROM scored WHERE id = ANY(?::bigint[])"""
    return sql, (numbers, flat, list(dict.fromkeys(flat)), *params, limit, also)


def vector_sql(table: str, filters: Filters, k: int, query: str) -> Query:
    """The `k` nearest chunks by the HNSW index (the file filters checked as it scans: iterative scans, set on the
    connection, go on until `k` pass), with their cosine similarity."""
    table = _table(table)
    conditions, params = file_conditions(filters, table)
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    sql = f"SELECT chunk_id, 1 - (embedding <=> ?::vector) FROM {table}{where} ORDER BY embedding <=> ?::vector LIMIT ?"
    return sql, (query, *params, query, k)


def labelled_vector_sql(table: str, filters: Filters, k: int, query: str) -> Query:
    """The `k` chunks most similar among those passing tag or category filters, ranked exactly (the `+ 0` keeps
    the planner off the approximate index: a filter may leave few chunks, which a scan of the index would miss)."""
    table = _table(table)
    conditions, params = chunk_conditions(filters)
    sql = (
        f"SELECT v.chunk_id, 1 - (v.embedding <=> ?::vector) FROM {table} v JOIN chunks c ON c.id = v.chunk_id"
        f" JOIN indexed_files f ON f.id = c.file_id WHERE {' AND '.join(conditions) or 'true'}"
        " ORDER BY (v.embedding <=> ?::vector) + 0, v.chunk_id LIMIT ?"
    )
    return sql, (query, *params, query, k)


def similarities_sql(table: str, chunk_ids: list[int], query: str) -> Query:
    """Exact cosine similarity of given chunks (the keyword candidates the KNN did not return)."""
    return (
        f"SELECT chunk_id, 1 - (embedding <=> ?::vector) FROM {_table(table)} WHERE chunk_id = ANY(?::bigint[])",
        (query, chunk_ids),
    )


def vectors_of_sql(table: str, chunk_ids: list[int]) -> Query:
    """The stored vector of given chunks, as arrays of reals (for MMR)."""
    return f"SELECT chunk_id, embedding::real[] FROM {_table(table)} WHERE chunk_id = ANY(?::bigint[])", (chunk_ids,)


def spans_sql(chunk_ids: list[int]) -> Query:
    return (
        "SELECT c.id, f.path, c.start_line, c.end_line, c.heading, c.text FROM chunks c"
        " JOIN indexed_files f ON f.id = c.file_id WHERE c.id = ANY(?::bigint[])",
        (chunk_ids,),
    )


def hits_sql(chunk_ids: list[int]) -> Query:
    """The columns of `server.index.queries.hits_sql`."""
    return (
        "SELECT c.id, f.path, f.source, f.day, c.start_line, c.end_line, c.heading, c.text, f.indexed_at, c.tags,"
        " c.category FROM chunks c JOIN indexed_files f ON f.id = c.file_id WHERE c.id = ANY(?::bigint[])",
        (chunk_ids,),
    )


def file_labels_sql(filters: Filters, paths: list[str] | None) -> Query:
    """As `server.index.queries.file_labels_sql`."""
    conditions, params = label_conditions(filters)
    where = [f"f.id IN (SELECT c.file_id FROM chunks c WHERE {' AND '.join(conditions)})"] if conditions else []
    if paths is not None:
        where.append("f.path = ANY(?::text[])")
        params.append(paths)
    sql = (
        "SELECT f.path, (SELECT string_agg(DISTINCT t.tag, ',') FROM chunk_tags t JOIN chunks c ON c.id = t.chunk_id"
        " WHERE c.file_id = f.id), (SELECT string_agg(DISTINCT c.category, ',') FROM chunks c"
        " WHERE c.file_id = f.id AND c.category <> '') FROM indexed_files f"
        f"{' WHERE ' if where else ''}{' AND '.join(where)}"
    )
    return sql, tuple(params)


def counts_by_source() -> Query:
    """Files and chunks per source; chunks counted per file first (one row a file to group, where the join of
    every chunk to its file with count(DISTINCT) sorted a million rows)."""
    return (
        "SELECT f.source, count(*), coalesce(sum(c.n), 0) FROM indexed_files f LEFT JOIN"
        " (SELECT file_id, count(*) AS n FROM chunks GROUP BY file_id) c ON c.file_id = f.id GROUP BY f.source",
        (),
    )


def schema_bytes() -> Query:
    """The size of every table of the search path's schema (an index's: its files, history and search index), with
    its indexes and TOAST."""
    return (
        "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c JOIN pg_namespace n"
        " ON n.oid = c.relnamespace WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'm')",
        (),
    )


def index_schemas() -> Query:
    """The schemas holding an index's search tables (`schema_of`'s `index_` prefix), by name; a schema still being
    created by `migrations.migrate` is not seen before its transaction commits."""
    return (
        "SELECT n.nspname FROM pg_namespace n JOIN pg_class c ON c.relnamespace = n.oid WHERE c.relname = 'search_meta'"
        " AND c.relkind = 'r' AND starts_with(n.nspname, ?) ORDER BY n.nspname",
        (INDEX_SCHEMA_PREFIX,),
    )
