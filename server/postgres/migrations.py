"""The schema of one index in PostgreSQL, as numbered migrations (like `server.mirror.state` and
`server.index.migrations` for SQLite). `schema_version` holds how many have run; replicas opening the same index
at once take an advisory lock, so each migration runs once.

The files themselves live here (`files.content`): a replica holds no mirror folder of its own as the truth.
The tables and columns match SQLite's state database where they overlap, so the mirror's history and record
functions run on both.
"""

from __future__ import annotations

from server.errors import EngineError
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

MIGRATIONS: tuple[str, ...] = (M001_FILES,)


def migrate(db: PgConnection, schema: str, migrations: tuple[str, ...] = MIGRATIONS) -> None:
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
            db.execute(migrations[number])
            db.execute("UPDATE schema_version SET version = ?", (number + 1,))
