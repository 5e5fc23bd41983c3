"""The SQLite file of one index: opening with sqlite-vec, WAL, migrations, meta, and corruption detection."""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import apsw

from server.index.errors import CorruptIndexError, EngineError
from server.index.migrations import migrate

log = logging.getLogger(__name__)

MMAP_BYTES = 1 << 30
BUSY_TIMEOUT_MS = 10_000
_CORRUPTION = (apsw.CorruptError, apsw.NotADBError)
# sqlite-vec reports damaged shadow tables as plain SQL errors: a blob of the wrong size or unreadable, chunks it
# cannot iterate, a rowid its own index already holds (SQLite's own constraint errors say "failed:" and are
# ConstraintError). Its errors about a caller's input say "BLOB" in capitals instead. An FTS5 or vec0 table whose
# shadow tables are damaged fails its constructor.
_VEC_DAMAGE = re.compile(
    r"(vectors?|validity|rowids) blob|blob (read|size)|(from|opening) blob|chunks iter|UNIQUE constraint failed on \w+ "
    r"|vtable constructor failed"
)


# What a thread sees when another closed its connection under it, to set a damaged database aside.
LET_GO = (apsw.ConnectionClosedError, apsw.InterruptError, apsw.ThreadingViolationError)

_BARE_ERROR = "SQL logic error"


def vec_available() -> bool:
    """Whether the sqlite-vec extension can be loaded here."""
    try:
        import sqlite_vec  # noqa: F401
    except ImportError:
        return False
    return True


def load_vec(db: apsw.Connection) -> None:
    """Load sqlite-vec into `db`; extension loading is switched off again right after."""
    import sqlite_vec

    db.enable_load_extension(True)
    db.load_extension(sqlite_vec.loadable_path())
    db.enable_load_extension(False)


def is_corruption(exc: BaseException) -> bool:
    """The database is damaged: SQLite says so, or sqlite-vec cannot read its own tables."""
    if isinstance(exc, _CORRUPTION):
        return True
    # SQLite names what is wrong with a statement; a bare "SQL logic error" is a virtual table (sqlite-vec) that
    # failed to read its shadow tables without saying why: the fault loop's noise drew it from a DELETE.
    damage = str(exc) == _BARE_ERROR or bool(_VEC_DAMAGE.search(str(exc)))
    return isinstance(exc, (apsw.SQLError, apsw.SchemaChangeError)) and damage


def is_missing_table(exc: BaseException) -> bool:
    """A table the index's own statement names is not there: a vector table swapped out by the background
    rebuild between two reads (gone on a second try), or a schema the damage took away (still gone)."""
    return isinstance(exc, apsw.SQLError) and str(exc).startswith("no such table: ")


def for_the_guard(exc: BaseException) -> bool:
    """What the engine's guard (`MemoryIndex._guard`) deals with rather than its caller: damage, a table gone, or a
    connection another thread closed to set a damaged database aside (LET_GO)."""
    return is_corruption(exc) or is_missing_table(exc) or isinstance(exc, LET_GO)


def is_disk_full(exc: BaseException) -> bool:
    """The disk or the quota is full, as the OS or SQLite says it."""
    return isinstance(exc, apsw.FullError) or (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT))


class _Held:
    """A thread's connection, in the thread's local storage: when the thread ends, its storage goes and with it this,
    whose finalizer closes the connection (`Store._let_go`)."""

    def __init__(self, db: apsw.Connection) -> None:
        self.db = db


class Store:
    """Hands out one configured connection per thread to the database at `path`, closed when the thread ends: the
    server's work runs on worker threads that come and go (anyio retires one idle for 10 s), and each left its
    connection open, two file descriptors and up to a page cache each, until the server ran out of descriptors."""

    def __init__(self, path: Path, *, load_vec: bool = True) -> None:
        self.path = path
        self.vec_loaded = load_vec and vec_available()
        self._local = threading.local()
        self._connections: set[apsw.Connection] = set()  # open, each of a live thread: close() closes them
        self._lock = threading.Lock()
        self.on_close: list[Callable[[], None]] = []  # called by close(), before the connections close
        self.closed = False  # then no thread opens a connection: the path may name a new database by now
        try:
            db = self.connection()
            # Touch the schema so a file that is not a database fails here, not in the middle of a search.
            migrate(db)
            db.execute("SELECT count(*) FROM files").fetchall()
        except _CORRUPTION as exc:
            self.close()
            raise CorruptIndexError(f"the index database {path.name} is damaged") from exc

    def connection(self) -> apsw.Connection:
        if self.closed:
            raise apsw.ConnectionClosedError(f"the index database {self.path.name} was closed")
        held: _Held | None = getattr(self._local, "held", None)
        if held is None:
            # Opened under the lock close() takes, so none opens while close() and the quarantine that follows it
            # move the files: one opened then met the files half moved ("disk I/O error") or an old WAL at the path.
            with self._lock:
                if self.closed:
                    raise apsw.ConnectionClosedError(f"the index database {self.path.name} was closed")
                held = _Held(self._open())
                self._connections.add(held.db)
            weakref.finalize(held, Store._let_go, self._connections, self._lock, held.db)
            self._local.held = held
        return held.db

    @staticmethod
    def _let_go(connections: set[apsw.Connection], lock: threading.Lock, db: apsw.Connection) -> None:
        """The connection of a thread that ended, closed (unless close() took it first)."""
        with lock:
            if db not in connections:
                return
            connections.discard(db)
        try:
            db.close()
        except apsw.Error as exc:  # a finalizer's error goes nowhere but stderr: say it in the log
            log.warning("closing an index connection of an ended thread failed: %s", type(exc).__name__)

    def _open(self) -> apsw.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = apsw.Connection(str(self.path))
        except apsw.CantOpenError as exc:
            raise EngineError(f"cannot open the index database at {self.path}") from exc
        db.set_busy_timeout(BUSY_TIMEOUT_MS)
        if self.vec_loaded:
            load_vec(db)
        db.execute("PRAGMA journal_mode=WAL").fetchall()
        db.execute("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA temp_store=MEMORY")
        # Reads through mmap skip a copy per page: a vec0 KNN scans every vector (measured 92 -> 80 ms at 100k
        # chunks, 10.5 -> 5.5 ms at 10k). Address space only; pages stay in the OS cache as before.
        db.execute(f"PRAGMA mmap_size={MMAP_BYTES}").fetchall()
        return db

    def close(self) -> None:
        self.closed = True
        for hook in self.on_close:
            hook()
        with self._lock:  # after any connection being opened now, which is then closed with the rest
            connections = list(self._connections)
            self._connections.clear()
        for db in connections:
            try:
                db.close()
            except apsw.ThreadingViolationError:
                # Busy in another thread (a search, the background rebuild): its statement stops with an
                # InterruptError, and the connection closes when that thread lets go of it.
                db.interrupt()
        self._local = threading.local()

    # meta ------------------------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self.connection().execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchall()
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str | None, db: apsw.Connection | None = None) -> None:
        db = db or self.connection()
        if value is None:
            db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            db.execute(
                "INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def chunk_count(self) -> int:
        value = self.connection().execute("SELECT count(*) FROM chunks").fetchall()[0][0]
        assert isinstance(value, int), "count(*) is an integer"
        return value

    def size_bytes(self) -> int:
        return database_bytes(self.path)


def database_bytes(path: Path) -> int:
    """The bytes the database at `path` takes on disk, with its WAL files."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(OSError):
            total += os.stat(f"{path}{suffix}").st_size
    return total


@contextlib.contextmanager
def read_only(path: Path, *, vec: bool, busy_ms: int = BUSY_TIMEOUT_MS) -> Iterator[apsw.Connection]:
    """A read-only connection to the database at `path` (waiting up to `busy_ms` for a writer), for reports
    (status, metrics). Beside a serving server it reads the WAL through the -shm that server keeps. A WAL database
    without a -wal is open in no process: it is read as immutable, since a read-only connection would create a -wal
    and a -shm and leave them behind (owned by whoever ran the report)."""
    if in_wal_mode(path) and not Path(f"{path}-wal").exists():
        where, flags = f"file:{quote(str(path))}?immutable=1", apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    else:
        where, flags = str(path), apsw.SQLITE_OPEN_READONLY
    db = apsw.Connection(where, flags=flags)
    try:
        db.set_busy_timeout(busy_ms)
        if vec:
            load_vec(db)
        yield db
    finally:
        db.close()


def in_wal_mode(path: Path) -> bool:
    """The database header's read and write versions say WAL (2), as every index database is opened."""
    with path.open("rb") as handle:
        header = handle.read(20)
    return header[18:20] == b"\x02\x02"


def quarantine(path: Path) -> Path:
    """Move a damaged database (and its WAL files) aside, so a rebuild starts clean and evidence is kept."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            os.replace(source, Path(f"{target}{suffix}"))
    log.warning("moved damaged index database aside to %s", target.name)
    return target
