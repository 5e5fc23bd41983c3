"""One index's files in PostgreSQL: a `FileStore` (`server.indexes.storage`) whose truth is the database.

The live bytes of each file sit in `files.content` beside its state (hash, revision, tombstone, who and when); the
history, merge bases, idempotency records and callers' syncs use the same tables and record functions as the
SQLite mirror (`server.mirror.state`, `server.mirror.history`). A change takes the index's revision row first
(`queries.lock_revision`), so writers on any replica take turns and `expected_hash` is checked against the
committed state. The search index reads the files from the same database (`server.postgres.search`): nothing is
laid out on a replica's disk, and nothing on that disk is read as a change. A change is announced to the other servers
on the database by a `NOTIFY` on the index's channel, sent on commit, and theirs are heard (`server.postgres.notify`):
`on_change` is called for every change, wherever it was made.
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import cast

from server.errors import InvalidArgumentError
from server.index.scan import DEFAULT_MAX_FILE_BYTES
from server.memory.text import count_lines_of_bytes
from server.mirror import queries as mq
from server.mirror.files import decoded_text, encoded
from server.mirror.history import ChangeKind, MirrorHistory, Retention, Version, change_stamp, record_change
from server.mirror.paths import normalise_mirror_path, refuse_collision
from server.mirror.records import StateRecords
from server.mirror.state import (
    ABSENT,
    FileState,
    IdempotencyRecord,
    MirrorFile,
    check_expected,
    load_version,
    state_of,
    store_version,
    utc_now,
)
from server.postgres import queries as q
from server.postgres.connection import PgConnection, schema_of
from server.postgres.migrations import migrate
from server.postgres.notify import ChangeListener, notify_statement
from syncproto.paths import is_session_file
from syncproto.wire import sha256_hex

log = logging.getLogger(__name__)


class PgFileStore(StateRecords):
    """The files and history of index `name` in the database at `url`. Thread-safe; every method blocks."""

    def __init__(
        self,
        url: str,
        name: str,
        files_dir: Path,
        *,
        clock: Callable[[], datetime] = utc_now,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        on_change: Callable[[], None] | None = None,
        retention: Retention | None = None,
    ) -> None:
        """`files_dir`: the folder the protocol names (`FileStore.files_dir`); nothing is kept there."""
        self.retention = retention or Retention()
        self.clock = clock
        self.max_file_bytes = max_file_bytes
        self.files_dir = files_dir
        self.lock = threading.RLock()
        self.unreadable: dict[str, str] = {}  # the database holds only readable text: stays empty
        super().__init__(on_change)
        schema = schema_of(name)
        self._db = PgConnection(url, schema)
        self._channel = schema
        try:
            migrate(self._db, schema)
            self.history = MirrorHistory(self._db, self.lock, self.version_text)
            self._listener = ChangeListener(url, schema, self._changed, own_pid=self._db.backend_pid)
        except BaseException:
            self._db.close()
            raise

    @property
    def listening(self) -> threading.Event:
        """Set while this store listens for the changes other servers make (`server.postgres.notify`)."""
        return self._listener.listening

    def close(self) -> None:
        self._listener.close()
        with self.lock:
            self._db.close()

    # reading -------------------------------------------------------------------------------------------

    def read(self, path: str) -> MirrorFile | None:
        """The live file at `path`, or None when there is none."""
        path = normalise_mirror_path(path)
        with self.lock:
            rows = self._db.execute(*q.live_file(path)).fetchall()
        if not rows:
            return None
        state = state_of(rows[0][:-1])
        text = decoded_text(path, bytes(rows[0][-1]), self.max_file_bytes)
        return MirrorFile(
            path, text, cast(str, state.hash), state.lines, state.size, state.revision, state.updated_by,
            state.updated_at,
        )  # fmt: skip

    def reconcile_all(self) -> builtins.list[FileState]:
        """The live files sorted by path: the database is the truth, so there is nothing on a disk to record."""
        with self.lock:
            rows = self._db.execute(*mq.live_states()).fetchall()
        return [state_of(r) for r in rows]

    def version_text(self, digest: str) -> str | None:
        """The text of a version this store has held (a merge base), or None when it is not kept any more."""
        with self.lock:
            data = load_version(self._db, digest)
            if data is None:
                rows = self._db.execute(*q.content_with_hash(digest)).fetchall()
                data = bytes(rows[0][0]) if rows else None
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def revision(self) -> int:
        with self.lock:
            return int(self._db.execute(*q.current_revision()).fetchall()[0][0])

    # writing -------------------------------------------------------------------------------------------

    def write(
        self,
        path: str,
        text: str,
        *,
        caller: str,
        expected_hash: str | None = None,
        record: IdempotencyRecord | None = None,
        change: ChangeKind = "write",
    ) -> FileState:
        """Replace the file at `path` with `text` (see `server.mirror.mirror.Mirror.write`): the state, the
        bytes, the version, the history row and `record` in one transaction."""
        path = normalise_mirror_path(path)
        data = encoded(text)
        if len(data) > self.max_file_bytes:
            raise InvalidArgumentError(f"the file would be larger than {self.max_file_bytes} bytes")
        with self.lock, self._db:
            self._db.execute(*q.lock_revision())
            current = self._current(path)
            check_expected(path, current.hash if current else None, expected_hash)
            if current is None:
                refuse_collision(path, (str(row[0]) for row in self._db.execute(*mq.live_paths())))
            digest = sha256_hex(data)
            if current is not None and current.hash == digest:
                self._remember(record)
                return current
            state = self._record(path, digest, data, count_lines_of_bytes(data), caller, change)
            if not is_session_file(path):  # transcripts are never merged: no merge bases
                store_version(self._db, digest, data, state.updated_at)
            self._remember(record)
            self._prune_versions()
        self._changed()
        return state

    def delete(
        self, path: str, *, caller: str, expected_hash: str | None = None, change: ChangeKind = "delete"
    ) -> FileState | None:
        """Remove the file at `path`, leaving a tombstone; the state it had (None when there was none)."""
        path = normalise_mirror_path(path)
        with self.lock, self._db:
            self._db.execute(*q.lock_revision())
            current = self._current(path)
            if current is None:
                if expected_hash not in (None, ABSENT):
                    check_expected(path, None, expected_hash)
                return None
            check_expected(path, current.hash, expected_hash)
            self._record(path, None, None, 0, caller, change)
        self._changed()
        return current

    # internals -----------------------------------------------------------------------------------------

    def _current(self, path: str) -> FileState | None:
        rows = self._db.execute(*mq.state_of_path(path)).fetchall()
        state = state_of(rows[0]) if rows else None
        return state if state is not None and state.hash is not None else None

    def _record(
        self, path: str, digest: str | None, data: bytes | None, lines: int, by: str, change: ChangeKind
    ) -> FileState:
        """Take the next revision, store the new state of `path` and its version, and tell the other servers on
        commit; call inside a transaction that holds the revision row."""
        revision = int(self._db.execute(*q.next_revision()).fetchall()[0][0])
        at = change_stamp(self._db, self.clock())  # never before the last change: the clock may be set back
        self._db.execute(*q.upsert_file(path, digest, data, lines, revision, by, at))
        self._db.execute(*notify_statement(self._channel))
        size = len(data or b"")
        if not is_session_file(path):
            record_change(self._db, Version(path, revision, digest, size, change, by, at))
        return FileState(path, digest, size, lines, revision, by, at)
