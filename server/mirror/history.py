"""The version history of an index's memory files, in the mirror's `state.sqlite3`.

Every recorded change of a memory file (a tool write, a laptop's push, a merge, a conflict copy, a delete, a
restore, an edit found on the server's disk) adds one row to `history`: the path, the revision the change got
(one counter per index, so a revision names one version of one file), the content hash after it (NULL: deleted),
how it changed, who changed it and when. The bytes live once per distinct content in `versions` (zlib, keyed by
sha256: the merge bases of sync), so a version costs a row plus its compressed bytes only when they are new. The
row is written by `Mirror._record`, in the transaction that records the file's new state: the history cannot
disagree with the mirror. Session transcripts have no history (they are appended logs, never merged or restored).

Retention (`Retention`): every version for `all_days`, then the last version of each day, dropped after `max_days`
(0: never). The newest row of a path and its newest version with content are always kept, so the current file
and the last text of a deleted file can always be restored. A wrong clock loses nothing: a change's time is never
earlier than the last change's (`change_stamp`), and the prune (`StateRecords._prune_versions`) reckons with no
later time than the history vouches for (`MirrorHistory.vouched_now`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal, cast

from server.errors import InvalidArgumentError
from server.mirror.files import encoded
from server.mirror.sql import SqlConnection
from server.mirror.state import from_iso, iso, prune_versions

ChangeKind = Literal["write", "push", "merge", "conflict", "delete", "restore", "disk", "before-history"]
HISTORY_COLUMNS = "path, revision, hash, size, change, updated_by, updated_at"
_CANDIDATES = 20  # versions looked at per query for the last restorable one


@dataclass(frozen=True)
class Retention:
    """How long versions are kept: all of them for `all_days`, then one a day until `max_days` (0: forever)."""

    all_days: int = 30
    max_days: int = 0


@dataclass(frozen=True)
class Version:
    """One version of one file: its state after a change, and how, by whom and when it changed."""

    path: str
    revision: int
    hash: str | None  # None: the change deleted the file
    size: int
    change: ChangeKind
    updated_by: str
    updated_at: str


@dataclass(frozen=True)
class VersionText:
    version: Version
    text: str | None  # None for a deletion


@dataclass(frozen=True)
class HistorySize:
    versions: int  # rows of history
    contents: int  # distinct contents kept (versions of files and merge bases)
    bytes: int  # their compressed bytes


def restorable(text: str | None) -> bool:
    """Whether `text` (a version's, None when it is not kept) could be a memory file again."""
    if text is None:
        return False
    try:
        encoded(text)
    except InvalidArgumentError:  # NUL characters: kept from a file damaged on the server's disk
        return False
    return True


def _version(row: tuple[object, ...]) -> Version:
    path, revision, digest, size, change, by, at = row
    number = cast(Callable[[object], int], int)
    kind = cast(ChangeKind, str(change))
    return Version(str(path), number(revision), None if digest is None else str(digest), number(size), kind,
                   str(by), str(at))  # fmt: skip


def record_change(db: SqlConnection, version: Version) -> None:
    """Add `version` to the history (call inside the transaction that records the file's state)."""
    db.execute(
        f"INSERT INTO history({HISTORY_COLUMNS}) VALUES(?, ?, ?, ?, ?, ?, ?)",
        (version.path, version.revision, version.hash, version.size, version.change, version.updated_by,
         version.updated_at),
    )  # fmt: skip


def history_sql(path: str | None, before: int | None, limit: int) -> tuple[str, tuple[object, ...]]:
    """Versions of `path` (of every path when None) below revision `before`, newest first."""
    where, args = ["revision < ?"], list[object]([before if before is not None else 1 << 62])
    if path is not None:
        where.append("path = ?")
        args.append(path)
    text = f"SELECT {HISTORY_COLUMNS} FROM history WHERE {' AND '.join(where)} ORDER BY revision DESC LIMIT ?"
    return text, (*args, limit)


def deleted_sql(prefix: str, before: int | None, limit: int) -> tuple[str, tuple[object, ...]]:
    """The deletions of files that are still deleted (their tombstone's revision), newest first."""
    return (
        f"SELECT {HISTORY_COLUMNS} FROM history WHERE revision IN"
        " (SELECT revision FROM files WHERE hash IS NULL AND substr(path, 1, ?) = ?)"
        " AND revision < ? ORDER BY revision DESC LIMIT ?",
        (len(prefix), prefix, before if before is not None else 1 << 62, limit),
    )


def last_content_sql(path: str, before: int, limit: int) -> tuple[str, tuple[object, ...]]:
    """The newest versions of `path` with content below revision `before` (whether or not their text is kept)."""
    return (
        f"SELECT {HISTORY_COLUMNS} FROM history WHERE path = ? AND revision < ? AND hash IS NOT NULL"
        " ORDER BY revision DESC LIMIT ?",
        (path, before, limit),
    )


def newest_stamp_sql() -> tuple[str, tuple[object, ...]]:
    """When the last change was recorded (its `updated_at`; no row when there is no history)."""
    return "SELECT updated_at FROM history ORDER BY revision DESC LIMIT 1", ()


def newest_stamp(db: SqlConnection) -> str | None:
    rows = db.execute(*newest_stamp_sql()).fetchall()
    return str(rows[0][0]) if rows else None


def change_stamp(db: SqlConnection, now: datetime) -> str:
    """When a change the clock reads `now` for is recorded: `iso(now)`, or the last change's time when the clock
    reads earlier (stepped back), so that the history's times never go backwards and no prune takes a version
    written minutes ago for one written long ago."""
    newest = newest_stamp(db)
    return max(iso(now), newest) if newest is not None else iso(now)


def prune_history_sql(retention: Retention, now: datetime) -> tuple[str, tuple[object, ...]]:
    """Delete the versions `retention` lets go. Plain window functions, every subquery named: the same text runs
    on SQLite and on every PostgreSQL. A version is as old as the newest time recorded up to it (`at`): one stamped
    by a clock that stood behind (before stamps were kept from going backwards) is not older than the one before."""
    keep_all = iso(now - timedelta(days=retention.all_days))
    keep_any = iso(now - timedelta(days=retention.max_days)) if retention.max_days > 0 else ""
    return (
        """
        DELETE FROM history WHERE revision IN (
            SELECT revision FROM (
                SELECT revision, at, has_text,
                    row_number() OVER (PARTITION BY path ORDER BY revision DESC) AS newest,
                    row_number() OVER (PARTITION BY path, has_text ORDER BY revision DESC) AS newest_of_kind,
                    row_number() OVER (PARTITION BY path, substr(at, 1, 10) ORDER BY revision DESC) AS of_day
                FROM (
                    SELECT revision, path, hash IS NOT NULL AS has_text,
                        max(updated_at) OVER (ORDER BY revision ROWS UNBOUNDED PRECEDING) AS at
                    FROM history
                ) AS stamped
            ) AS ranked WHERE at < ? AND newest > 1 AND NOT (has_text AND newest_of_kind = 1)
                AND (of_day > 1 OR at < ?)
        )
        """,
        (keep_all, keep_any),
    )


def prune_history(db: SqlConnection, retention: Retention, now: datetime) -> tuple[int, int]:
    """Drop the versions `retention` lets go, then the contents nothing needs any more (call inside a
    transaction); how many of each went."""
    db.execute(*prune_history_sql(retention, now))
    versions = db.changes()
    return versions, prune_versions(db, now)


class MirrorHistory:
    """Reads one mirror's history (`FileStore.history`); the mirror writes it. Thread-safe; every method blocks."""

    def __init__(self, db: SqlConnection, lock: threading.RLock, content: Callable[[str], str | None]) -> None:
        """`content(digest)` is the text of a content hash the mirror has held (None when it is not kept). Made
        when the store opens: the last change recorded until then is the time `vouched_now` counts from."""
        self._db, self._lock, self._content = db, lock, content
        self._since: tuple[datetime, float] | None = None
        self.vouched_now()

    def vouched_now(self) -> datetime | None:
        """The latest time the history vouches for: the last change recorded before the store opened (before its
        first change, when it had none), plus the time the process has run since by its monotonic clock, which no
        setting of the wall clock moves. None while there is no change at all. Real time is at least this, so a
        prune that reckons with no later time cannot age a version by a clock set ahead; after a server was down
        a while, it prunes that much later."""
        if self._since is None:
            with self._lock:
                newest = newest_stamp(self._db)
            if newest is None:
                return None
            self._since = (from_iso(newest), time.monotonic())
        stamp, monotonic = self._since
        return stamp + timedelta(seconds=time.monotonic() - monotonic)

    def versions(self, path: str | None = None, *, before: int | None = None, limit: int = 50) -> list[Version]:
        """Versions of `path` (every file's changes when None), newest first, below revision `before`."""
        with self._lock:
            return [_version(row) for row in self._db.execute(*history_sql(path, before, limit))]

    def deleted(self, prefix: str = "", *, before: int | None = None, limit: int = 50) -> list[Version]:
        """The deletions of files that are deleted now, newest first."""
        with self._lock:
            return [_version(row) for row in self._db.execute(*deleted_sql(prefix, before, limit))]

    def last_text(self, path: str, before: int) -> Version | None:
        """The newest version of `path` before revision `before` whose text is kept and could be written again
        (what a deletion's restore brings back): a file over the size cap, or not text, left no such version."""
        while True:
            with self._lock:
                rows = self._db.execute(*last_content_sql(path, before, _CANDIDATES)).fetchall()
                for row in rows:
                    found = _version(row)
                    if found.hash is not None and restorable(self._content(found.hash)):
                        return found
            if len(rows) < _CANDIDATES:
                return None
            before = _version(rows[-1]).revision

    def get(self, path: str, revision: int) -> VersionText | None:
        """Version `revision` of `path` with its text; None when there is no such version or its text is gone."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {HISTORY_COLUMNS} FROM history WHERE revision = ? AND path = ?", (revision, path)
            ).fetchall()
            if not rows:
                return None
            found = _version(rows[0])
            if found.hash is None:
                return VersionText(found, None)
            text = self._content(found.hash)
        return VersionText(found, text) if text is not None else None

    def size(self) -> HistorySize:
        with self._lock:
            versions = self._db.execute("SELECT count(*) FROM history").fetchall()[0][0]
            contents, stored = self._db.execute(
                "SELECT count(*), coalesce(sum(length(data)), 0) FROM versions"
            ).fetchall()[0]
        number = cast(Callable[[object], int], int)
        return HistorySize(number(versions), number(contents), number(stored))
