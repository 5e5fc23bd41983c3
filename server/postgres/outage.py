"""The channel's guard against a database out of reach (`Outage`), shared by the session store
(`server.postgres.sessions`) and the callers list (`server.postgres.callers`)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator

from channel.errors import StoreUnavailable
from server.errors import EngineError
from server.postgres.connection import PgConnection

log = logging.getLogger(__name__)

OUTAGE_FIRST_SECONDS, OUTAGE_MAX_SECONDS = 1.0, 30.0  # calls refused at once after the database is lost
# How long the call that starts a reconnection waits for it: a database back answers well within this, one behind
# a silent partition would hold the event loop for the whole connect timeout.
RECONNECT_WAIT_SECONDS = 0.25


class Outage:
    """The database out of reach: every call of the channel's (sessions, callers) runs on the server's event loop,
    so while a connection is lost calls are refused at once (503s) and never connect there. Once a backoff has
    passed (doubling from OUTAGE_FIRST_SECONDS to OUTAGE_MAX_SECONDS), the next call starts a reconnection on a
    thread of its own (one at a time) and waits for it up to RECONNECT_WAIT_SECONDS; the first that succeeds ends
    the outage, and one that fails starts the next backoff."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # the state below: calls also come from the metrics collector's thread
        self._lost = False
        self._until = 0.0
        self._backoff = OUTAGE_FIRST_SECONDS
        self._reconnecting: threading.Thread | None = None
        self._closed = False

    @contextlib.contextmanager
    def guard(self, db: PgConnection) -> Iterator[None]:
        """The database's failures as the channel's StoreUnavailable (a 503 for the peer; the cause is logged)."""
        if not self._reachable(db):
            raise StoreUnavailable()
        try:
            yield
        except EngineError as exc:
            if db.backend_pid() is None:  # the connection is gone, not one statement refused
                with self._lock:
                    if not self._lost:
                        self._lost = True
                        self._back_off()
            raise StoreUnavailable() from exc

    def _reachable(self, db: PgConnection) -> bool:
        """Whether a call may use `db`: no outage, or its backoff passed and the reconnection this call starts
        succeeded within RECONNECT_WAIT_SECONDS."""
        with self._lock:
            if not self._lost:
                return True
            if self._reconnecting is not None or self._closed or self._clock() < self._until:
                return False
            attempt = self._reconnecting = threading.Thread(
                target=self._reconnect, args=(db,), name="postgres-reconnect", daemon=True
            )
            attempt.start()  # under the lock: `close` must not find it made but not started
        attempt.join(RECONNECT_WAIT_SECONDS)
        with self._lock:
            return not self._lost

    def _reconnect(self, db: PgConnection) -> None:
        """On its own thread: one statement, which connects again (one attempt, up to the connect timeout)."""
        answered = False
        try:
            db.execute("SELECT 1")
            answered = True
        except EngineError:
            pass  # logged by the connection
        finally:
            with self._lock:
                self._reconnecting = None
                if answered:
                    self._lost, self._backoff = False, OUTAGE_FIRST_SECONDS
                else:
                    self._back_off()
        if answered:
            log.info("postgres: the channel's database answers again")

    def _back_off(self) -> None:
        """Refuse calls for the backoff, and double it for the next time (the lock held)."""
        self._until = self._clock() + self._backoff
        log.warning("postgres: the channel's database is out of reach; refusing for %.0f s", self._backoff)
        self._backoff = min(2 * self._backoff, OUTAGE_MAX_SECONDS)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the reconnection under way, if any, to end; True when none is under way any more."""
        with self._lock:
            attempt = self._reconnecting
        if attempt is not None:
            attempt.join(timeout)
        return attempt is None or not attempt.is_alive()

    def close(self) -> None:
        """Start no more reconnections and wait for the one under way (one connection attempt), so that none
        opens a connection after its owner closed it."""
        with self._lock:
            self._closed = True
        self.wait()
