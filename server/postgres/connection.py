"""One connection to PostgreSQL, speaking as the mirror's record functions expect (`server.mirror.sql`).

Statements are written with `?` placeholders, as for SQLite, and turned into psycopg's here; each index lives in
its own schema, set as the connection's search path. `with connection:` is a transaction (nested: a savepoint),
as with apsw. Errors of the driver become `EngineError` here and nowhere else; their text may hold the database
URL, so it reaches only the log's cause chain, never the message.
"""

from __future__ import annotations

import contextlib
import logging
import select
import threading
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any

import psycopg
from psycopg import sql

from server.errors import EngineError
from server.index.naming import validate_name
from syncproto.wire import sha256_hex

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_SECONDS = 10
# A database that stops answering mid-connection (a network partition, a host gone without a reset) is given up
# on, not waited for through the kernel's retransmissions (a quarter of an hour; a statement behind a dropped port
# had not returned after 45 s when stopped): data unacknowledged for TCP_USER_TIMEOUT_MS fails the statement
# (tests/server/postgres/test_partition.py), and an idle connection (a LISTEN, one waiting on a long statement) is
# probed after KEEPALIVE_IDLE_SECONDS. Over a Unix socket libpq ignores them.
TCP_USER_TIMEOUT_MS = 15_000
KEEPALIVE_IDLE_SECONDS, KEEPALIVE_INTERVAL_SECONDS, KEEPALIVE_COUNT = 30, 10, 3
CONNECT_OPTIONS: dict[str, Any] = {  # psycopg.connect keywords
    "connect_timeout": CONNECT_TIMEOUT_SECONDS,
    "keepalives": 1,
    "keepalives_idle": KEEPALIVE_IDLE_SECONDS,
    "keepalives_interval": KEEPALIVE_INTERVAL_SECONDS,
    "keepalives_count": KEEPALIVE_COUNT,
    "tcp_user_timeout": TCP_USER_TIMEOUT_MS,
}
# The same from the database's side, for a server that vanished (a partition, a host gone: no reset reaches the
# database). Its backend would keep what the session holds (a file's row lock mid-write, an index's indexing
# lock) until the database host's own keepalive gave up, two hours by default, and every other server's write
# would wait on it: the database probes an idle connection as the server does, and ends a session left idle inside
# a transaction for IDLE_IN_TRANSACTION_MS (no transaction here waits on anything but the database: embedding
# runs outside them). Set on every connection made (`PgConnection`); over a Unix socket the TCP ones are ignored.
IDLE_IN_TRANSACTION_MS = 60_000
SESSION_SETTINGS: dict[str, str] = {
    "tcp_keepalives_idle": str(KEEPALIVE_IDLE_SECONDS),
    "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL_SECONDS),
    "tcp_keepalives_count": str(KEEPALIVE_COUNT),
    "tcp_user_timeout": str(TCP_USER_TIMEOUT_MS),
    "idle_in_transaction_session_timeout": str(IDLE_IN_TRANSACTION_MS),
}


IDLE_READS = 3  # an ended session's goodbye, then the end of its stream (`ended_while_idle`)

MAX_IDENTIFIER = 63  # bytes of a PostgreSQL name; longer ones are cut, so two long index names could meet


INDEX_SCHEMA_PREFIX = "index_"


def schema_of(index: str) -> str:
    """The schema holding index `index`: `index_<name>`, or for a long name its start and a digest of all of it.
    Index names are plain (`server.index.naming`: a-z, 0-9, `_.-`), so the schema needs no quote escaped."""
    schema = f"{INDEX_SCHEMA_PREFIX}{validate_name(index)}"
    if len(schema) <= MAX_IDENTIFIER:
        return schema
    return f"{schema[: MAX_IDENTIFIER - 17]}_{sha256_hex(index.encode())[:16]}"


def placeholders(statement: str) -> str:
    """`?` placeholders as psycopg's `%s` (a literal `%` doubled); no statement here has a `?` in a literal."""
    return statement.replace("%", "%%").replace("?", "%s")


@contextlib.contextmanager
def translated(doing: str) -> Iterator[None]:
    """The driver's errors while `doing` something, as one EngineError naming only what was being done."""
    try:
        yield
    except psycopg.Error as exc:
        log.error("postgres: %s failed (%s)", doing, type(exc).__name__)
        raise EngineError(f"the database failed while {doing}") from exc


class Farewell:
    """A connection's notice handler that hears the database say goodbye: the FATAL message a session ended while
    idle is sent (a restart, a terminated backend), which libpq passes on as a notice."""

    def __init__(self) -> None:
        self.said = False

    def __call__(self, diagnostic: psycopg.errors.Diagnostic) -> None:
        if diagnostic.severity_nonlocalized in ("FATAL", "PANIC"):
            self.said = True


def ended_while_idle(conn: psycopg.Connection[Any], farewell: Farewell) -> bool:
    """Whether the database ended `conn`'s session while it was idle (a restart, a terminated backend): its goodbye
    (heard by `farewell`, the connection's notice handler) and then the end of the stream wait to be read. Reads
    what waits without blocking; an ended one is closed, even when the end of its stream has not come yet."""
    for _ in range(IDLE_READS):
        if farewell.said and not conn.closed:
            conn.close()
        if conn.closed:
            return True
        if not select.select([conn.pgconn.socket], [], [], 0)[0]:
            return False
        try:
            conn.pgconn.consume_input()
            conn.pgconn.is_busy()  # parses what was read: a goodbye reaches `farewell` now
        except psycopg.OperationalError:  # the end of the stream: the connection is closed now
            return True
    return conn.closed


def settings_statement(settings: Mapping[str, str]) -> tuple[str, list[str]]:
    """One statement setting every run-time parameter of `settings` for the session, and its bindings."""
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    return f"SELECT {calls}", [part for item in settings.items() for part in item]


def session(url: str, settings: Mapping[str, str], options: Mapping[str, Any] | None = None) -> psycopg.Connection[Any]:
    """A new connection in autocommit mode, made with libpq's `options` over CONNECT_OPTIONS, its run-time
    `settings` set (SESSION_SETTINGS at least: the database lets go of it when this server vanishes)."""
    conn = psycopg.connect(url, autocommit=True, **{**CONNECT_OPTIONS, **(options or {})})
    conn.execute(*settings_statement(settings))
    return conn


class PgConnection:
    """A connection in autocommit mode, its search path set to one schema; every call is serialised. A connection
    lost (the database restarted, a proxy cut it) is opened again: a statement outside a transaction (a read:
    every write here runs in one) or a BEGIN that finds it lost is tried once more on a new one, except while
    work relies on what the session holds (`pinned`). A connection that cannot be made is not tried twice in one
    call (each attempt may wait the whole connect timeout)."""

    def __init__(
        self,
        url: str,
        schema: str | None = None,
        settings: Mapping[str, str] | None = None,
        *,
        resend: bool = True,
        connect: Mapping[str, Any] | None = None,
    ) -> None:
        """`settings`: run-time parameters (`statement_timeout`...) set, over SESSION_SETTINGS, on every
        connection made, the first and any made again after one was lost. `resend=False`: no statement or BEGIN
        is sent again at once on a new connection after it failed (`execute`); the next call connects again.
        `connect`: libpq's options over CONNECT_OPTIONS (`tcp_user_timeout`...)."""
        self._url, self._schema, self._resend = url, schema, resend
        self._settings = {**SESSION_SETTINGS, **(settings or {})}
        self._connect_options = dict(connect or {})
        self._lock = threading.RLock()
        self._transactions: list[contextlib.AbstractContextManager[Any]] = []
        self._pins = 0
        self._changes = 0
        self._closed = False
        self._farewell: Farewell  # the current connection's notice handler (`_connect`)
        self._conn = self._connect()

    def _connect(self) -> psycopg.Connection[Any]:
        with translated("connecting"):
            conn = session(self._url, self._settings, self._connect_options)
            self._farewell = Farewell()
            conn.add_notice_handler(self._farewell)
            if self._schema is not None:  # created by `server.postgres.migrations.migrate`, under its lock
                # public: where pgvector's type and operators are (`migrations.M002_SEARCH`)
                conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(self._schema)))
        return conn

    def _may_reconnect(self) -> bool:
        """The connection is lost and nothing relies on its session: no transaction runs on it, none is pinned,
        and it was not closed on purpose."""
        return self._conn.closed and not self._transactions and not self._pins and not self._closed

    def _usable(self, *, checked: bool = False) -> psycopg.Connection[Any]:
        """The connection, opened again if it was lost and it may be (`_may_reconnect`); `checked`: found lost
        first when the database ended its session while it was idle, before a statement is sent on it."""
        if checked and not self._conn.closed and not self._transactions and not self._pins:
            ended_while_idle(self._conn, self._farewell)
        if self._may_reconnect():
            log.warning("postgres: the connection was lost; connecting again")
            self._conn = self._connect()
        return self._conn

    @contextlib.contextmanager
    def pinned(self) -> Iterator[None]:
        """Work that relies on what this session holds (a session-level advisory lock) runs inside: a connection
        lost meanwhile is not opened again until the last pin ends, so the work fails (EngineError) instead of
        going on in a new session that holds nothing."""
        with self._lock:
            self._pins += 1
        try:
            yield
        finally:
            with self._lock:
                self._pins -= 1

    def execute(self, statements: str, bindings: Any = None, /, *, resend: bool | None = None) -> psycopg.Cursor[Any]:
        """Run one statement (`?` placeholders); its cursor, rows fetched or iterated. `resend=False` (the
        connection's own setting when None): not sent again on a new connection when it failed, as a write outside
        a transaction whose answer was lost (it may have committed); a session the database ended while it was
        idle (a restart) is found before the statement is sent, and a new one used."""
        text = statements if bindings is None else placeholders(statements)
        resend = self._resend if resend is None else resend
        with self._lock:
            was_open = not self._conn.closed
            try:
                with translated("running a statement"):
                    cursor = self._usable(checked=not resend).execute(text, bindings)
            except EngineError:
                if not resend or not was_open or not self._may_reconnect():  # a failed connect: not twice
                    raise
                with translated("running a statement"):
                    cursor = self._usable().execute(text, bindings)
            self._changes = cursor.rowcount
            return cursor

    def changes(self) -> int:
        return max(self._changes, 0)

    def __enter__(self) -> PgConnection:
        self._lock.acquire()
        try:
            transaction = self._begin()
        except BaseException:
            self._lock.release()
            raise
        self._transactions.append(transaction)
        return self

    def _begin(self) -> contextlib.AbstractContextManager[Any]:
        """A transaction begun; when the connection turns out lost at BEGIN (nothing done yet), on a new one."""
        was_open = not self._conn.closed
        try:
            return self._begin_once()
        except EngineError:
            if not self._resend or not was_open or not self._may_reconnect():
                raise
            return self._begin_once()

    def _begin_once(self) -> contextlib.AbstractContextManager[Any]:
        transaction = self._usable(checked=not self._resend).transaction()
        with translated("starting a transaction"):
            transaction.__enter__()
        return transaction

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        transaction = self._transactions.pop()
        try:
            with translated("committing"):
                transaction.__exit__(kind, error, trace)
        finally:
            self._lock.release()

    def backend_pid(self) -> int | None:
        """The server process of the current connection (None once it is closed)."""
        conn = self._conn
        return None if conn.closed else conn.info.backend_pid

    def close(self) -> None:
        """Close the connection for good: a statement after it fails (EngineError) rather than connect again."""
        with self._lock:
            self._closed = True
            self._conn.close()
