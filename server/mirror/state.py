"""The mirror's state database (`state.sqlite3`): schema and migrations, and the records it holds.

Per path: the content hash, the revision (one counter per index), a tombstone after a delete, who changed it when.
Beside them: idempotency records of writes, past versions of files (the bases of three-way merges when laptops
push concurrent edits; kept `VERSION_DAYS` after they were last current), and each caller's last pull and push.
Nothing here can be rebuilt from the files: it is the sync history.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal, cast

import apsw

from server.errors import ConflictError, EngineError
from server.index.scan import day_of
from server.mirror.sql import SqlConnection
from syncproto.wire import sha256_hex

STATE_SCHEMA_VERSION = 4
ABSENT = "absent"  # `expected_hash` meaning "the file must not exist yet"
VERSION_DAYS = 30
BUSY_TIMEOUT_MS = 10_000


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """ISO 8601 in UTC to the second: `2024-05-01T09:30:00Z`."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def from_iso(text: str) -> datetime:
    """The moment an `iso` string names."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


def iso_epoch(seconds: float | None) -> str | None:
    """`iso` of an epoch time; None for None (or 0: never)."""
    return iso(datetime.fromtimestamp(seconds, UTC)) if seconds else None


@dataclass(frozen=True)
class FileState:
    """What `state.sqlite3` knows of one path. `hash` is None for a tombstone."""

    path: str
    hash: str | None
    size: int
    lines: int
    revision: int
    updated_by: str
    updated_at: str

    @property
    def deleted(self) -> bool:
        return self.hash is None


@dataclass(frozen=True)
class MirrorFile:
    """A live file: its bytes decoded (UTF-8) and its state."""

    path: str
    text: str
    hash: str
    lines: int
    size: int
    revision: int
    updated_by: str
    updated_at: str


# the mirror --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdempotencyRecord:
    caller: str
    key: str
    request: str  # digest of the call's arguments
    result: str  # JSON of the first answer


# the state database ------------------------------------------------------------------------------------


def _m001_initial(db: apsw.Connection) -> None:
    db.execute(
        """
        CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
        INSERT INTO meta(key, value) VALUES('revision', '0');
        CREATE TABLE files(
            path TEXT PRIMARY KEY,
            hash TEXT,                      -- sha256 hex of the bytes; NULL = deleted (tombstone)
            size INTEGER NOT NULL,
            mtime_ns INTEGER NOT NULL,      -- of the file when last seen, to skip hashing unchanged files
            lines INTEGER NOT NULL,
            revision INTEGER NOT NULL,      -- from meta 'revision', one counter per index
            updated_by TEXT NOT NULL,       -- caller name, or '(disk)'
            updated_at TEXT NOT NULL        -- ISO 8601 UTC
        ) WITHOUT ROWID;
        CREATE INDEX files_by_revision ON files(revision);
        CREATE TABLE idempotency(
            caller TEXT NOT NULL,
            key TEXT NOT NULL,
            request TEXT NOT NULL,          -- digest of the arguments of the first call
            result TEXT NOT NULL,           -- JSON of its answer
            created_at TEXT NOT NULL,
            PRIMARY KEY(caller, key)
        ) WITHOUT ROWID;
        CREATE INDEX idempotency_by_age ON idempotency(created_at);
        """
    )


def _m002_sync(db: apsw.Connection) -> None:
    db.execute(
        """
        CREATE TABLE versions(
            hash TEXT PRIMARY KEY,          -- sha256 hex of the bytes
            data BLOB NOT NULL,             -- zlib-compressed bytes
            stored_at TEXT NOT NULL         -- ISO 8601 UTC, refreshed when the version is written again
        ) WITHOUT ROWID;
        CREATE INDEX versions_by_age ON versions(stored_at);
        CREATE TABLE sync_callers(
            caller TEXT PRIMARY KEY,
            last_pull_at TEXT,
            pulled_revision INTEGER,
            last_push_at TEXT,
            pushed_revision INTEGER
        ) WITHOUT ROWID;
        """
    )


def _m003_hashed_idempotency_keys(db: apsw.Connection) -> None:
    """Idempotency keys are kept as their SHA-256 (`idempotency_key_digest`), never as sent: a caller may put
    anything in one. Keys stored before are hashed in place."""
    rows = db.execute("SELECT caller, key FROM idempotency").fetchall()
    for caller, key in rows:
        db.execute(
            "UPDATE idempotency SET key = ? WHERE caller = ? AND key = ?",
            (idempotency_key_digest(str(key)), caller, key),
        )


def _m004_history(db: apsw.Connection) -> None:
    """The history table, started with one row per path the state knows (its current version or tombstone)."""
    db.execute(
        """
        CREATE TABLE history(
            revision INTEGER PRIMARY KEY,   -- the change's revision: names the version
            path TEXT NOT NULL,
            hash TEXT,                      -- sha256 hex of the bytes after the change (in versions); NULL = deleted
            size INTEGER NOT NULL,
            change TEXT NOT NULL,           -- write, push, merge, conflict, delete, restore, disk, before-history
            updated_by TEXT NOT NULL,
            updated_at TEXT NOT NULL        -- ISO 8601 UTC
        );
        CREATE INDEX history_by_path ON history(path, revision);
        CREATE INDEX history_by_hash ON history(hash);
        INSERT INTO history(revision, path, hash, size, change, updated_by, updated_at)
            SELECT revision, path, hash, size, 'before-history', updated_by, updated_at FROM files
            WHERE path NOT LIKE 'sessions/%';
        """
    )


def idempotency_key_digest(key: str) -> str:
    """How an idempotency key is stored and looked up."""
    return "sha256:" + sha256_hex(key.encode("utf-8", "surrogatepass"))


MIGRATIONS: tuple[Callable[[apsw.Connection], None], ...] = (
    _m001_initial,
    _m002_sync,
    _m003_hashed_idempotency_keys,
    _m004_history,
)


def migrate_state(db: apsw.Connection) -> None:
    version = int(db.execute("PRAGMA user_version").fetchall()[0][0])  # type: ignore[arg-type]
    if version > len(MIGRATIONS):
        raise EngineError("the mirror state database is newer than this server")
    for number in range(version, len(MIGRATIONS)):
        with db:
            MIGRATIONS[number](db)
            db.execute(f"PRAGMA user_version = {number + 1}")


STATE_COLUMNS = "path, hash, size, lines, revision, updated_by, updated_at"


def state_of(row: tuple[object, ...]) -> FileState:
    path, digest, size, lines, revision, by, at = row
    number = cast(Callable[[object], int], int)
    digest_text = None if digest is None else str(digest)
    return FileState(str(path), digest_text, number(size), number(lines), number(revision), str(by), str(at))


# versions ---------------------------------------------------------------------------------------------


def store_version(db: SqlConnection, digest: str, data: bytes, at: str) -> None:
    """Keep `data` as the version `digest` (call inside a transaction)."""
    db.execute(
        "INSERT INTO versions(hash, data, stored_at) VALUES(?, ?, ?)"
        " ON CONFLICT(hash) DO UPDATE SET stored_at = excluded.stored_at",
        (digest, zlib.compress(data, 6), at),
    )


def has_version(db: SqlConnection, digest: str) -> bool:
    """Whether the bytes of `digest` are kept (as a version or a merge base)."""
    return bool(db.execute("SELECT 1 FROM versions WHERE hash = ?", (digest,)).fetchall())


def load_version(db: SqlConnection, digest: str) -> bytes | None:
    rows = db.execute("SELECT data FROM versions WHERE hash = ?", (digest,)).fetchall()
    return zlib.decompress(cast(bytes, rows[0][0])) if rows else None


def prune_versions(db: SqlConnection, now: datetime) -> int:
    """Forget contents that no live file has, no kept version of the history names, and nobody wrote for
    `VERSION_DAYS` (merge bases); how many went."""
    cutoff = iso(now - timedelta(days=VERSION_DAYS))
    db.execute(
        "DELETE FROM versions WHERE stored_at < ? AND hash NOT IN (SELECT hash FROM files WHERE hash IS NOT NULL)"
        " AND hash NOT IN (SELECT hash FROM history WHERE hash IS NOT NULL)",
        (cutoff,),
    )
    return db.changes()


# callers' sync -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CallerSync:
    """When a caller last pulled and pushed through `/sync`, and the revisions it reached."""

    caller: str
    last_pull_at: str | None
    pulled_revision: int | None
    last_push_at: str | None
    pushed_revision: int | None


def record_sync(db: SqlConnection, caller: str, kind: Literal["pull", "push"], revision: int, at: str) -> None:
    column = "pull" if kind == "pull" else "push"
    done = "pulled" if kind == "pull" else "pushed"
    db.execute(
        f"INSERT INTO sync_callers(caller, last_{column}_at, {done}_revision) VALUES(?, ?, ?)"
        f" ON CONFLICT(caller) DO UPDATE SET last_{column}_at = excluded.last_{column}_at,"
        f" {done}_revision = excluded.{done}_revision",
        (caller, at, revision),
    )


def sync_callers(db: SqlConnection) -> list[CallerSync]:
    rows = db.execute(
        "SELECT caller, last_pull_at, pulled_revision, last_push_at, pushed_revision FROM sync_callers ORDER BY caller"
    ).fetchall()
    out = []
    for caller, pull_at, pulled, push_at, pushed in rows:
        out.append(
            CallerSync(
                str(caller),
                None if pull_at is None else str(pull_at),
                None if pulled is None else int(cast(int, pulled)),
                None if push_at is None else str(push_at),
                None if pushed is None else int(cast(int, pushed)),
            )
        )
    return out


def listing(
    files: list[FileState], prefix: str = "", date_from: str | None = None, date_to: str | None = None
) -> list[FileState]:
    """The live `files` whose path starts with `prefix`; with a date bound, only daily logs
    (`memory/**/YYYY-MM-DD.md`) in the range."""
    files = [s for s in files if s.path.startswith(prefix)]
    if date_from or date_to:
        low, high = date_from or "0000-01-01", date_to or "9999-12-31"
        files = [s for s in files if (day := day_of(s.path)) is not None and low <= day <= high]
    return files


def check_expected(path: str, actual: str | None, expected: str | None) -> None:
    """ConflictError unless `expected` (None: anything, ABSENT: no file, or a hash) matches the file's current
    hash `actual` (None: no file)."""
    if expected is None:
        return
    if expected == ABSENT:
        if actual is not None:
            raise ConflictError(f"{path} already exists (current hash {actual}); pass that hash to replace it", actual)
        return
    if actual != expected:
        shown = actual if actual is not None else f"{ABSENT!r} (the file does not exist)"
        raise ConflictError(f"{path} has changed: expected_hash does not match; the current hash is {shown}", actual)


def count_live_files(db: SqlConnection) -> int:
    """How many live files (not tombstones) the state database behind `db` records."""
    value = db.execute("SELECT count(*) FROM files WHERE hash IS NOT NULL").fetchall()[0][0]
    assert isinstance(value, int), "count(*) is an integer"
    return value


def open_state(directory: Path) -> apsw.Connection:
    """A mirror's `state.sqlite3`, opened durable (WAL, synchronous FULL: it is not rebuildable) and migrated, its
    transactions immediate."""
    where = f"the mirror state of {directory.name!r} cannot be opened"
    try:
        db = apsw.Connection(str(directory / "state.sqlite3"))
    except apsw.Error as exc:
        raise EngineError(where) from exc
    try:
        db.set_busy_timeout(BUSY_TIMEOUT_MS)
        # Every `with db:` takes the write lock at its start, waiting for another process's write (a backup beside
        # the server opens its own connection): a deferred one reads first, and is refused at once, with no wait,
        # when the other commits before its first write. The mirror reads a file again under this lock before
        # recording it as changed on disk (`Mirror._reconcile`).
        db.transaction_mode = "IMMEDIATE"
        db.execute("PRAGMA journal_mode=WAL").fetchall()
        db.execute("PRAGMA synchronous=FULL")
        migrate_state(db)
    except BaseException as exc:
        db.close()
        if isinstance(exc, apsw.Error):
            raise EngineError(where) from exc
        raise
    return db
