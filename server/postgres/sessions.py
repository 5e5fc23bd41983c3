"""Channel sessions shared by every replica through PostgreSQL: a `channel.store.SessionStore`.

A handshake on one replica stores its session (keys sealed, `server.postgres.sealing`); a request landing on
another finds it there, opens the keys once and keeps the session in its own cache. What must agree across
replicas is decided by the database, each in one statement or one transaction:

- a request: its frame counter (once per session) and its request id (once per device key for a session
  lifetime) are inserted under unique keys together with the session's liveness check and `last_used`, so a
  frame accepted on one replica is refused on every other (never sent twice: a lost answer is a 503, not the
  request's own counter found and taken for a replay);
- a handshake: the msg1 timestamp grows per key (an upsert that only raises it), and the caps per caller and in
  total hold under an advisory lock taken by every opening;
- response nonces: each replica leases blocks of the session's send counter (`send_next`), so two replicas never
  seal under one nonce, and the counters still grow within each response, as clients check. A request's commit
  leases the next block when fewer than SEND_RESERVE nonces are left, so its answer can be sealed even if the
  database is lost while the request runs; a lease that fails leaves the session to lease again on the next frame;
- ending: a session evicted, expired or of a revoked key is deleted; a replica's cached copy is checked again at
  least every RECHECK_SECONDS (and every request checks liveness in its commit anyway).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from psycopg import Cursor

from channel.constants import MAX_SESSIONS, MAX_SESSIONS_PER_CALLER, SESSION_IDLE, SESSION_LIFETIME
from channel.keys import PrivateKey
from channel.sealer import Revoked
from channel.session import Session
from channel.timestamps import stray_above
from server.errors import EngineError
from server.postgres.channel_schema import open_channel_db
from server.postgres.connection import PgConnection
from server.postgres.outage import Outage
from server.postgres.sealing import KeySealer

log = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0  # a cached session is looked up again after this long (ended elsewhere: noticed by then)
TOUCH_SECONDS = 5.0  # an open stream writes `last_used` at most this often (idle expiry is minutes)
SEND_BLOCK = 1 << 16  # response nonces leased at a time
SEND_RESERVE = SEND_BLOCK // 2  # a request's commit leases a block when fewer are left (a 2**63 space: waste is free)

_COMMIT = """
WITH live AS (
    SELECT id, static_key FROM sessions WHERE id = ? AND expires_at > ? AND last_used > ?),
counter AS (
    INSERT INTO counters(session_id, counter) SELECT id, ? FROM live
    ON CONFLICT DO NOTHING RETURNING session_id),
request AS (
    INSERT INTO request_ids(static_key, request_id, opened_at) SELECT static_key, ?, ? FROM live
    WHERE EXISTS (SELECT 1 FROM counter)
    ON CONFLICT DO NOTHING RETURNING request_id),
touched AS (
    UPDATE sessions SET last_used = GREATEST(last_used, ?), send_next = send_next + ?
    WHERE id = ? AND EXISTS (SELECT 1 FROM request)
    RETURNING send_next)
SELECT (SELECT count(*) FROM live), (SELECT count(*) FROM counter), (SELECT count(*) FROM request),
    (SELECT send_next FROM touched)
"""
_RAISE_TIMESTAMP = """
INSERT INTO timestamps(static_key, latest) VALUES(?, ?)
ON CONFLICT(static_key) DO UPDATE SET latest = EXCLUDED.latest
WHERE timestamps.latest < EXCLUDED.latest OR timestamps.latest > ?
RETURNING latest
"""


class _Refused(Exception):
    """Rolls back a handshake's transaction that may not open its session."""


class _Nonces:
    """A session's response nonces on this replica: the rest of the block it leased last (`lease` takes the next,
    giving its end). A lease that fails takes nothing and keeps nothing, so the next frame leases again."""

    def __init__(self, lease: Callable[[], int]) -> None:
        self._lease = lease
        self._next = self._end = 0

    def __iter__(self) -> _Nonces:
        return self

    def __next__(self) -> int:
        if self._next >= self._end:
            self.leased(self._lease())  # StoreUnavailable, or Revoked once the session is gone
        self._next += 1
        return self._next - 1

    def wanted(self) -> int:
        """How many nonces a request's commit should lease with it: a block, or none while enough are left."""
        return SEND_BLOCK if self._end - self._next < SEND_RESERVE else 0

    def leased(self, end: int) -> None:
        """Use the block ending at `end`; never one ending lower than the one in use, so the counters only grow."""
        if end > self._end:
            self._next, self._end = max(end - SEND_BLOCK, self._next), end


@dataclass
class _Cached:
    session: Session
    checked: float  # when the database last said it is live
    written: float  # when `last_used` was last written


class PgSessionStore:
    """The sessions of every replica on one database. Calls run on the event loop: each is one short statement
    or transaction (see the module docstring), a cached session costs one statement per request."""

    def __init__(
        self,
        url: str,
        server_key: PrivateKey,
        clock: Callable[[], float],
        *,
        lifetime: float = SESSION_LIFETIME,
        idle: float = SESSION_IDLE,
        max_sessions: int = MAX_SESSIONS,
        max_per_caller: int = MAX_SESSIONS_PER_CALLER,
        random: Callable[[int], bytes] = os.urandom,
    ) -> None:
        self.lifetime, self.idle = lifetime, idle
        self._clock, self._random = clock, random
        self._max, self._max_per_caller = max_sessions, max_per_caller
        self._sealer = KeySealer(server_key)
        # A request's commit need not wait for the disk (3 ms of its 4, measured). What it guards stays safe: the
        # request's own writes (the files, in the same database) commit after it and wait for the disk, and the
        # log is flushed in order, so a replay record can be lost in a crash of the database only if nothing the
        # request changed survived it either. Every other write (files, callers) keeps waiting for the disk.
        self._db: PgConnection = open_channel_db(url, {"synchronous_commit": "off"})
        self._outage = Outage(clock)
        self._cache: dict[bytes, _Cached] = {}
        self._lock = threading.Lock()  # the cache, for the metrics collector's thread

    def close(self) -> None:
        self._outage.close()
        self._db.close()

    def _run(self, statement: str, bindings: tuple[object, ...]) -> Cursor[Any]:
        """One statement outside a transaction, never sent twice (`open_channel_db`)."""
        with self._outage.guard(self._db):
            return self._db.execute(statement, bindings)

    def __len__(self) -> int:
        now = self._clock()
        row = self._run(
            "SELECT count(*) FROM sessions WHERE expires_at > ? AND last_used > ?", (now, now - self.idle)
        ).fetchone()
        return int(row[0]) if row else 0

    def timestamp_is_fresh(self, static_key: bytes, timestamp: int) -> bool:
        row = self._run("SELECT latest FROM timestamps WHERE static_key = ?", (static_key,)).fetchone()
        latest = int(row[0]) if row else -1
        return latest > self._stray_above() or timestamp > latest

    def _stray_above(self) -> int:
        """A recorded timestamp above this was accepted before the clock check existed: it is ignored
        (`channel.timestamps.stray_above`)."""
        return stray_above(self._clock())

    def open(self, session: Session, timestamp: int) -> bool:
        now = self._clock()
        sealed = self._sealer.seal(session.id, session.receive_key, session.send_key, self._random(24))
        try:
            with self._outage.guard(self._db), self._db as db:
                db.execute("SELECT pg_advisory_xact_lock(hashtext('channel.sessions'))")
                raised = db.execute(_RAISE_TIMESTAMP, (session.static_key, timestamp, self._stray_above()))
                if raised.fetchone() is None:
                    raise _Refused()
                db.execute("DELETE FROM sessions WHERE expires_at <= ? OR last_used <= ?", (now, now - self.idle))
                mine = [
                    bytes(row[0])
                    for row in db.execute(
                        "SELECT id FROM sessions WHERE caller = ? ORDER BY created", (session.caller,)
                    ).fetchall()
                ]
                total_row = db.execute("SELECT count(*) FROM sessions").fetchone()
                total = int(total_row[0]) if total_row else 0
                if total >= self._max and len(mine) < self._max_per_caller:
                    raise _Refused()
                evicted = mine[: max(0, len(mine) - self._max_per_caller + 1)]
                for gone in evicted:
                    db.execute("DELETE FROM sessions WHERE id = ?", (gone,))
                db.execute("DELETE FROM request_ids WHERE opened_at <= ?", (now - self.lifetime,))
                db.execute(
                    "INSERT INTO sessions(id, caller, static_key, sealed_keys, created, expires_at, last_used)"
                    " VALUES(?, ?, ?, ?, ?, ?, ?)",
                    (
                        session.id,
                        session.caller,
                        session.static_key,
                        sealed,
                        session.created,
                        session.expires_at,
                        session.last_used,
                    ),
                )
        except _Refused:
            return False
        for gone in evicted:
            self._forget(gone)
        session.send_counters = self._nonces(session.id)
        self._remember(_Cached(session, now, now))
        return True

    def get(self, session_id: bytes) -> Session | None:
        now = self._clock()
        cached = self._cache.get(session_id)
        if cached is not None and now - cached.checked < RECHECK_SECONDS and cached.session.alive(now, self.idle):
            return cached.session
        row = self._run(
            "SELECT caller, static_key, sealed_keys, created, expires_at, last_used FROM sessions"
            " WHERE id = ? AND expires_at > ? AND last_used > ?",
            (session_id, now, now - self.idle),
        ).fetchone()
        if row is None:
            self._forget(session_id)
            return None
        if cached is not None:
            cached.checked = now
            cached.session.last_used = max(cached.session.last_used, float(row[5]))
            return cached.session
        try:
            receive_key, send_key = self._sealer.open(session_id, bytes(row[2]))
        except EngineError:
            log.error("a stored session does not open with this server's key: do all replicas read one server.key?")
            return None
        session = Session(
            id=session_id,
            caller=str(row[0]),
            static_key=bytes(row[1]),
            receive_key=receive_key,
            send_key=send_key,
            created=float(row[3]),
            expires_at=float(row[4]),
            last_used=float(row[5]),
        )
        session.send_counters = self._nonces(session_id)
        self._remember(_Cached(session, now, now))
        return session

    def commit_request(self, session: Session, counter: int, request_id: bytes) -> str | None:
        if not session.window.accept(counter):  # a copy that came to this replica before: no query needed
            return "replayed-counter"
        now = self._clock()
        nonces = session.send_counters if isinstance(session.send_counters, _Nonces) else None
        lease = nonces.wanted() if nonces is not None else 0
        bindings = (session.id, now, now - self.idle, counter, request_id, now, now, lease, session.id)
        # Never sent twice: a connection lost after the database committed it but before its answer came is a
        # 503, where the statement sent again on a new connection would find its own counter and refuse the
        # request as a replay.
        row = self._run(_COMMIT, bindings).fetchone()
        live, counted, opened, send_next = row if row else (0, 0, 0, None)
        if not live:
            self._forget(session.id)
            return "no-session"
        if not counted:
            return "replayed-counter"
        if not opened:
            return "repeated-request"
        if lease and nonces is not None and send_next is not None:  # the answer's nonces, before the app runs
            nonces.leased(int(send_next))
        session.last_used = now
        cached = self._cache.get(session.id)
        if cached is not None:
            cached.checked = cached.written = now
        return None

    def touch(self, session: Session) -> None:
        now = self._clock()
        session.last_used = now
        cached = self._cache.get(session.id)
        if cached is None or now - cached.written >= TOUCH_SECONDS:
            self._run("UPDATE sessions SET last_used = GREATEST(last_used, ?) WHERE id = ?", (now, session.id))
            if cached is not None:
                cached.written = now

    def drop_key(self, static_key: bytes) -> int:
        cursor = self._run("DELETE FROM sessions WHERE static_key = ? RETURNING id", (static_key,))
        ended = [bytes(row[0]) for row in cursor.fetchall()]
        with self._lock:
            for sid in [sid for sid, entry in self._cache.items() if entry.session.static_key == static_key]:
                del self._cache[sid]
        return len(ended)

    def purge(self) -> int:
        """Delete expired sessions (with their counters) and request ids older than a session lifetime."""
        now = self._clock()
        cursor = self._run("DELETE FROM sessions WHERE expires_at <= ? OR last_used <= ?", (now, now - self.idle))
        ended = max(cursor.rowcount, 0)
        self._run("DELETE FROM request_ids WHERE opened_at <= ?", (now - self.lifetime,))
        with self._lock:
            for sid in [sid for sid, entry in self._cache.items() if not entry.session.alive(now, self.idle)]:
                del self._cache[sid]
        return ended

    def _nonces(self, session_id: bytes) -> _Nonces:
        """Response nonces from blocks this replica leases (see `_Nonces`)."""

        def lease() -> int:
            row = self._run(
                "UPDATE sessions SET send_next = send_next + ? WHERE id = ? RETURNING send_next",
                (SEND_BLOCK, session_id),
            ).fetchone()
            if row is None:
                raise Revoked()
            return int(row[0])

        return _Nonces(lease)

    def _remember(self, entry: _Cached) -> None:
        with self._lock:
            if len(self._cache) >= self._max:
                now = self._clock()
                for sid in [sid for sid, e in self._cache.items() if not e.session.alive(now, self.idle)]:
                    del self._cache[sid]
                if len(self._cache) >= self._max:  # all alive: the least recently checked goes (it is reloadable)
                    del self._cache[min(self._cache, key=lambda sid: self._cache[sid].checked)]
            self._cache[entry.session.id] = entry

    def _forget(self, session_id: bytes) -> None:
        with self._lock:
            self._cache.pop(session_id, None)
