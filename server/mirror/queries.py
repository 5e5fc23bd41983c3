"""SQL text for the mirror's state database (`state.sqlite3`), built by pure functions; `server.mirror.mirror`
runs it. Each returns the statement and its parameters."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from server.mirror.state import STATE_COLUMNS, IdempotencyRecord, idempotency_key_digest, iso

IDEMPOTENCY_DAYS = 7

Query = tuple[str, tuple[object, ...]]


def state_of_path(path: str) -> Query:
    """The recorded state of one path (a tombstone too)."""
    return f"SELECT {STATE_COLUMNS} FROM files WHERE path = ?", (path,)


def states_of_paths(paths: list[str]) -> Query:
    marks = ", ".join("?" for _ in paths)
    return f"SELECT {STATE_COLUMNS} FROM files WHERE path IN ({marks})", tuple(paths)


def known_files() -> Query:
    """Path, hash, size and mtime of every live file, to tell which files on disk changed."""
    return "SELECT path, hash, size, mtime_ns FROM files WHERE hash IS NOT NULL", ()


def live_paths() -> Query:
    return "SELECT path FROM files WHERE hash IS NOT NULL", ()


def live_states() -> Query:
    return f"SELECT {STATE_COLUMNS} FROM files WHERE hash IS NOT NULL ORDER BY path", ()


def changes_after(revision: int, limit: int) -> Query:
    """Paths changed after `revision`, oldest change first."""
    return f"SELECT {STATE_COLUMNS} FROM files WHERE revision > ? ORDER BY revision LIMIT ?", (revision, limit)


def paths_with_hash(digest: str) -> Query:
    return "SELECT path FROM files WHERE hash = ?", (digest,)


def current_revision() -> Query:
    return "SELECT value FROM meta WHERE key = 'revision'", ()


def set_revision(revision: int) -> Query:
    return "UPDATE meta SET value = ? WHERE key = 'revision'", (str(revision),)


def upsert_file(
    path: str, digest: str | None, size: int, mtime_ns: int, lines: int, revision: int, by: str, at: str
) -> Query:
    """Store the new state of `path` (`digest` None: a tombstone)."""
    return (
        "INSERT INTO files(path, hash, size, mtime_ns, lines, revision, updated_by, updated_at)"
        " VALUES(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET hash = excluded.hash,"
        " size = excluded.size, mtime_ns = excluded.mtime_ns, lines = excluded.lines,"
        " revision = excluded.revision, updated_by = excluded.updated_by, updated_at = excluded.updated_at",
        (path, digest, size, mtime_ns, lines, revision, by, at),
    )


def touch_file(path: str, digest: str, mtime_ns: int) -> Query:
    """Record a new mtime for a file whose content did not change (still `digest`)."""
    return "UPDATE files SET mtime_ns = ? WHERE path = ? AND hash = ?", (mtime_ns, path, digest)


def recall(caller: str, key: str) -> Query:
    return "SELECT request, result FROM idempotency WHERE caller = ? AND key = ?", (caller, key)


def remember(record: IdempotencyRecord, at: str) -> Query:
    """Store a record, or overwrite the result of the caller's record with that key."""
    return (
        "INSERT INTO idempotency(caller, key, request, result, created_at) VALUES(?, ?, ?, ?, ?)"
        " ON CONFLICT(caller, key) DO UPDATE SET result = excluded.result",
        (record.caller, record.key, record.request, record.result, at),
    )


def forget_records_before(cutoff: str) -> Query:
    return "DELETE FROM idempotency WHERE created_at < ?", (cutoff,)


def remember_record(record: IdempotencyRecord, now: datetime) -> list[Query]:
    """Store `record` (its key as its digest, never as sent) and forget the records older than IDEMPOTENCY_DAYS."""
    cutoff = iso(datetime.fromtimestamp(now.timestamp() - IDEMPOTENCY_DAYS * 86400, UTC))
    kept = dataclasses.replace(record, key=idempotency_key_digest(record.key))
    return [remember(kept, iso(now)), forget_records_before(cutoff)]
