"""The schema of one index in PostgreSQL, as numbered migrations (like `server.mirror.state` and
`server.index.migrations` for SQLite): SQL text, or a function run on the migrating connection where the work needs
Python. `schema_version` holds how many have run; replicas opening the same index at once take an advisory lock, so
each migration runs once.

The files themselves live here (`files.content`): a replica holds no mirror folder of its own as the truth.
The tables and columns match SQLite's state database where they overlap, so the mirror's history and record
functions run on both.
"""

from __future__ import annotations

from collections.abc import Callable

from server.errors import EngineError
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection

M001_FILES = """
CREATE TABLE meta(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision BIGINT NOT NULL                -- the last change's number: one counter per index
);
INSERT INTO meta(id, revision) VALUES(1, 0);
CREATE TABLE files(
    path TEXT PRIMARY KEY,
    hash TEXT,                              -- sha256 hex of the bytes; NULL = deleted (tombstone)
    size BIGINT NOT NULL,
    lines BIGINT NOT NULL,
    revision BIGINT NOT NULL,
    updated_by TEXT NOT NULL,               -- caller name
    updated_at TEXT NOT NULL,               -- ISO 8601 UTC
    content BYTEA                           -- the bytes of a live file; NULL for a tombstone
);
CREATE INDEX files_by_revision ON files(revision);
CREATE INDEX files_by_hash ON files(hash);
CREATE TABLE idempotency(
    caller TEXT NOT NULL,
    key TEXT NOT NULL,                      -- idempotency_key_digest of the key
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY(caller, key)
);
CREATE INDEX idempotency_by_age ON idempotency(created_at);
CREATE TABLE versions(
    hash TEXT PRIMARY KEY,                  -- sha256 hex of the bytes
    data BYTEA NOT NULL,                    -- zlib-compressed bytes
    stored_at TEXT NOT NULL
);
CREATE INDEX versions_by_age ON versions(stored_at);
CREATE TABLE sync_callers(
    caller TEXT PRIMARY KEY,
    last_pull_at TEXT,
    pulled_revision BIGINT,
    last_push_at TEXT,
    pushed_revision BIGINT
);
CREATE TABLE history(
    revision BIGINT PRIMARY KEY,
    path TEXT NOT NULL,
    hash TEXT,
    size BIGINT NOT NULL,
    change TEXT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX history_by_path ON history(path, revision);
CREATE INDEX history_by_hash ON history(hash);
"""

# `CREATE EXTENSION IF NOT EXISTS` is not safe against a concurrent creation: two indexes migrated at once on a fresh
# database (each under its own schema's lock) both created pgvector, and one failed on pg_extension's unique name.
# A lock for the whole database, held until the migration commits, lets the second see the first's extension.
EXTENSION_LOCK = "memory.extensions"  # named as no schema is, so its advisory lock is its own

# The search index (`server.postgres.search`): the SQLite engine's tables (`server.index.migrations`) with the
# indexed files as `indexed_files` (`files` holds the file store's), keyword statistics for BM25 instead of FTS5
# (`chunk_terms`: each chunk's lexemes with their weighted counts; `keyword_stats`: chunks and their total length),
# and the embedding cache. The vectors live in a table per model (`vectors_<n>`, pgvector, an HNSW index), named in
# `search_meta` like the SQLite engine's meta.
M002_SEARCH = f"""
SELECT pg_advisory_xact_lock(hashtext('{EXTENSION_LOCK}'));
CREATE EXTENSION IF NOT EXISTS vector SCHEMA public;
-- English stems without a stopword list, as FTS5's porter tokenizer: every word is found and counted
CREATE TEXT SEARCH DICTIONARY memory_stem (TEMPLATE = snowball, Language = english);
CREATE TABLE search_meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE indexed_files(
    id BIGSERIAL PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    source TEXT NOT NULL,
    hash TEXT NOT NULL,                     -- of the bytes indexed: `files.hash` differs until the file is indexed
    size BIGINT NOT NULL,
    lines BIGINT NOT NULL,
    day TEXT,
    indexed_at DOUBLE PRECISION NOT NULL
);
CREATE TABLE chunks(
    id BIGSERIAL PRIMARY KEY,               -- never reused: a vector row never points at another chunk's text
    file_id BIGINT NOT NULL REFERENCES indexed_files(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    start_line INTEGER NOT NULL,
    end_line INTEGER NOT NULL,
    heading TEXT NOT NULL,
    context TEXT NOT NULL,
    text TEXT NOT NULL,
    hash TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    tags TEXT NOT NULL DEFAULT '',
    category TEXT NOT NULL DEFAULT '',
    terms INTEGER NOT NULL                  -- words the keyword index counted: the chunk's length for BM25
);
CREATE INDEX chunks_by_file ON chunks(file_id, ordinal);
CREATE INDEX chunks_by_category ON chunks(category) WHERE category <> '';
CREATE INDEX chunks_by_hash ON chunks(hash);
CREATE TABLE chunk_tags(
    tag TEXT NOT NULL,
    chunk_id BIGINT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    PRIMARY KEY(tag, chunk_id)
);
CREATE INDEX chunk_tags_by_chunk ON chunk_tags(chunk_id);
CREATE TABLE chunk_terms(
    lexeme TEXT NOT NULL,
    chunk_id BIGINT NOT NULL REFERENCES chunks(id) ON DELETE CASCADE,
    tf REAL NOT NULL,                       -- occurrences in the text, plus half of those in the heading (as FTS5)
    PRIMARY KEY(lexeme, chunk_id)
);
CREATE INDEX chunk_terms_by_chunk ON chunk_terms(chunk_id);
CREATE TABLE keyword_stats(
    id INTEGER PRIMARY KEY CHECK (id = 1),
    chunks BIGINT NOT NULL,
    terms BIGINT NOT NULL
);
INSERT INTO keyword_stats(id, chunks, terms) VALUES(1, 0, 0);
CREATE TABLE embedding_cache(
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    hash TEXT NOT NULL,
    vector BYTEA NOT NULL,                  -- float32, little-endian, as the SQLite engine's
    used_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY(provider, model, hash)
);
CREATE INDEX embedding_cache_used_at ON embedding_cache(used_at);
"""


def _on_every_vector_table(body: str) -> str:
    """A block running the PL/pgSQL `body` (the table's name in `t.name`) for every vector table of the schema: the
    live model's and one a rebuild is filling."""
    return f"""
DO $$
DECLARE t record;
BEGIN
    FOR t IN SELECT c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname ~ '^vectors_[0-9]+$'
    LOOP
{body}
    END LOOP;
END $$;
"""


def _rebuild_hnsw(m: int, ef_construction: int) -> str:
    """Every vector table's HNSW index by cosine distance built again with these parameters. The build reads the
    whole table (many minutes at a million chunks). A migration passes the values it was written with, never
    `search_queries.hnsw_index`'s constants, which may change later."""
    return _on_every_vector_table(f"""\
        EXECUTE format('DROP INDEX IF EXISTS %I', t.name || '_hnsw');
        EXECUTE format('CREATE INDEX %I ON %I USING hnsw (embedding vector_cosine_ops)'
            ' WITH (m = {m}, ef_construction = {ef_construction})', t.name || '_hnsw', t.name);""")


# Migration 3 built the index again with m=32, ef_construction=128 instead of pgvector's defaults (16, 64), which
# found 0.76 of the true 10 nearest at 1M chunks. Migration 4 builds it again with ef_construction=256, so 3 now
# does nothing: a database still at version 2 would otherwise build it twice.
M003_HNSW_M32 = "SELECT 1"

# ef_construction 256 instead of 128: recall@10 0.987 instead of 0.974 at 1M chunks and ef_search 1000, indexes
# built and searched in one run (bench/results/pgvector.md).
M004_HNSW_EF256 = _rebuild_hnsw(32, 256)

# Paths compare and sort by their bytes, as SQLite's do. Under a language-aware collation (the official images'
# databases are en_US.utf8) 'memory/deploy.md' sorts after 'memory0', so a search's path-prefix range found nothing,
# and listings came out in another order than SQLite's. Lexemes are cut to 200 characters
# (`search_queries.MAX_LEXEME_CHARS` when this was written): a btree key holds at most about 2.7 kB.
M005_BYTE_PATHS_SHORT_LEXEMES = (
    """
ALTER TABLE files ALTER COLUMN path TYPE TEXT COLLATE "C";
ALTER TABLE history ALTER COLUMN path TYPE TEXT COLLATE "C";
ALTER TABLE indexed_files ALTER COLUMN path TYPE TEXT COLLATE "C";
"""
    + _on_every_vector_table(
        """        EXECUTE format('ALTER TABLE %I ALTER COLUMN path TYPE TEXT COLLATE "C"', t.name);"""
    )
    + """WITH long AS (DELETE FROM chunk_terms WHERE length(lexeme) > 200 RETURNING lexeme, chunk_id, tf)
INSERT INTO chunk_terms(lexeme, chunk_id, tf) SELECT left(lexeme, 200), chunk_id, sum(tf) FROM long GROUP BY 1, 2
ON CONFLICT (lexeme, chunk_id) DO UPDATE SET tf = chunk_terms.tf + excluded.tf;
"""
)

RETERM_BATCH = 1000  # chunks read, cut and written again per round of `m006_fts5_terms`


def m006_fts5_terms(db: PgConnection) -> None:
    """Every chunk's keyword terms and length computed again from its text, as indexing now computes them: FTS5's
    own tokenizer and porter stemmer (`search_queries.chunk_terms`), where versions 2 to 5 cut words with a SQL
    regular expression and stemmed them with Snowball, so that accents, marks and some words never matched what
    the SQLite engine matches. In Python with indexing's own function, so the rows are what fresh indexing wrote
    then (a later change of the terms needs a migration of its own); in batches of RETERM_BATCH chunks. Its
    statements are its own: indexing's write the columns of the version it migrates to."""
    after = 0
    while True:
        rows = db.execute(
            "SELECT id, heading, text FROM chunks WHERE id > ? ORDER BY id LIMIT ?", (after, RETERM_BATCH)
        ).fetchall()
        if not rows:
            break
        chunk_ids: list[int] = []
        lexemes: list[str] = []
        counts: list[float] = []
        lengths: list[int] = []
        for chunk_id, heading, text in rows:
            words, weights, length = sq.chunk_terms(str(heading), str(text))
            chunk_ids += [int(chunk_id)] * len(words)
            lexemes += words
            counts += weights
            lengths.append(length)
        ids = [int(row[0]) for row in rows]
        db.execute("DELETE FROM chunk_terms WHERE chunk_id = ANY(?::bigint[])", (ids,))
        db.execute(  # the rows as version 6 holds them (version 7 adds each chunk's length)
            "INSERT INTO chunk_terms(lexeme, chunk_id, tf) SELECT * FROM unnest(?::text[], ?::bigint[], ?::real[])",
            (lexemes, chunk_ids, counts),
        )
        db.execute(
            "UPDATE chunks c SET terms = x.terms FROM unnest(?::bigint[], ?::int[]) AS x(id, terms) WHERE c.id = x.id",
            (ids, lengths),
        )
        after = ids[-1]
    db.execute(*sq.recount_stats())


# Each posting carries its chunk's length, and the primary key's index carries the posting's count and that length:
# the keyword side reads a word's postings from the index alone, where it read a heap page for each and then the
# chunk's row for its length. A SciFact claim's keyword search with every word, p50: 399 -> 118 ms at 100k chunks,
# 6.6 -> 1.4 s at a million, the same hits (bench/results/pg_keyword_scale.md). The table is copied whole, not
# updated in place (that would leave a dead row for every live one): 25 s at 100k chunks, once; 10% more space.
M007_POSTINGS_WITH_LENGTHS = """
CREATE TABLE chunk_postings AS
    SELECT t.lexeme, t.chunk_id, t.tf, c.terms AS chunk_length FROM chunk_terms t JOIN chunks c ON c.id = t.chunk_id;
DROP TABLE chunk_terms;
ALTER TABLE chunk_postings RENAME TO chunk_terms;
ALTER TABLE chunk_terms ALTER COLUMN lexeme SET NOT NULL, ALTER COLUMN chunk_id SET NOT NULL,
    ALTER COLUMN tf SET NOT NULL, ALTER COLUMN chunk_length SET NOT NULL;
ALTER TABLE chunk_terms ADD CONSTRAINT chunk_terms_pkey PRIMARY KEY (lexeme, chunk_id) INCLUDE (tf, chunk_length);
ALTER TABLE chunk_terms ADD CONSTRAINT chunk_terms_chunk_id_fkey FOREIGN KEY (chunk_id) REFERENCES chunks(id)
    ON DELETE CASCADE;
CREATE INDEX chunk_terms_by_chunk ON chunk_terms(chunk_id);
ANALYZE chunk_terms;
"""


Migration = str | Callable[[PgConnection], None]  # SQL text, or a step in Python on the migrating connection

MIGRATIONS: tuple[Migration, ...] = (
    M001_FILES,
    M002_SEARCH,
    M003_HNSW_M32,
    M004_HNSW_EF256,
    M005_BYTE_PATHS_SHORT_LEXEMES,
    m006_fts5_terms,
    M007_POSTINGS_WITH_LENGTHS,
)


def migrate(db: PgConnection, schema: str, migrations: tuple[Migration, ...] = MIGRATIONS) -> None:
    """Create the index's schema (the connection's search path) or bring it up to date; EngineError if it is
    newer than this server. `migrations`: another schema's (the channel's, `server.postgres.channel_schema`)."""
    with db:
        db.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (schema,))
        db.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')  # `schema_of` an index name: no quote in it
        db.execute("CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)")
        rows = db.execute("SELECT version FROM schema_version").fetchall()
        if not rows:
            db.execute("INSERT INTO schema_version(version) VALUES(0)")
        version = int(rows[0][0]) if rows else 0
        if version > len(migrations):
            raise EngineError(f"the database schema {schema} is newer than this server")
        for number in range(version, len(migrations)):
            step = migrations[number]
            if isinstance(step, str):
                db.execute(step)
            else:
                step(db)
            db.execute("UPDATE schema_version SET version = ?", (number + 1,))
