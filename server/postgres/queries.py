"""SQL text for an index's files in PostgreSQL, built by pure functions; `server.postgres.files` runs it. Where the
statement is the same as SQLite's, `server.mirror.queries` builds it (both take `?` placeholders)."""

from __future__ import annotations

from server.mirror.queries import Query
from server.mirror.state import STATE_COLUMNS


def lock_revision() -> Query:
    """The index's revision, its row locked until the transaction ends: writers of one index (on any replica)
    take turns, so revisions are given and committed in order and the change feed never skips one."""
    return "SELECT revision FROM meta WHERE id = 1 FOR UPDATE", ()


def current_revision() -> Query:
    return "SELECT revision FROM meta WHERE id = 1", ()


def next_revision() -> Query:
    return "UPDATE meta SET revision = revision + 1 WHERE id = 1 RETURNING revision", ()


def live_file(path: str) -> Query:
    """The state and bytes of the live file at `path` (no row for a tombstone or an unknown path)."""
    return f"SELECT {STATE_COLUMNS}, content FROM files WHERE path = ? AND hash IS NOT NULL", (path,)


def content_with_hash(digest: str) -> Query:
    return "SELECT content FROM files WHERE hash = ? LIMIT 1", (digest,)


def upsert_file(
    path: str, digest: str | None, content: bytes | None, lines: int, revision: int, by: str, at: str
) -> Query:
    """Store the new state and bytes of `path` (`digest` None: a tombstone)."""
    return (
        "INSERT INTO files(path, hash, size, lines, revision, updated_by, updated_at, content)"
        " VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET hash = excluded.hash,"
        " size = excluded.size, lines = excluded.lines, revision = excluded.revision,"
        " updated_by = excluded.updated_by, updated_at = excluded.updated_at, content = excluded.content",
        (path, digest, len(content or b""), lines, revision, by, at, content),
    )


def schema_exists(schema: str) -> Query:
    return "SELECT 1 FROM information_schema.schemata WHERE schema_name = ?", (schema,)
