"""The channel's guard against a database out of reach (`Outage`), shared by the session store
(`server.postgres.sessions`) and the callers list (`server.postgres.callers`)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator

from channel.errors import StoreUnavailable
from server.errors import EngineError
from server.postgres.connection import PgConnection

log = logging.getLogger(__name__)

OUTAGE_FIRST_SECONDS, OUTAGE_MAX_SECONDS = 1.0, 30.0  # calls refused at once after the database is lost


class Outage:
    """The database out of reach: every call of the channel's (sessions, callers) runs on the server's event loop,
    so while a connection is lost calls are refused at once (503s) rather than each waiting up to the connect
    timeout; one call tries again after a backoff that doubles from OUTAGE_FIRST_SECONDS to OUTAGE_MAX_SECONDS, and
    the first that answers ends it."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._until = 0.0
        self._backoff = OUTAGE_FIRST_SECONDS

    @contextlib.contextmanager
    def guard(self, db: PgConnection) -> Iterator[None]:
        """The database's failures as the channel's StoreUnavailable (a 503 for the peer; the cause is logged)."""
        if self._clock() < self._until:
            raise StoreUnavailable()
        try:
            yield
        except EngineError as exc:
            if db.backend_pid() is None:  # the connection is gone, not one statement refused
                self._until = self._clock() + self._backoff
                log.warning("postgres: the channel's database is out of reach; refusing for %.0f s", self._backoff)
                self._backoff = min(2 * self._backoff, OUTAGE_MAX_SECONDS)
            raise StoreUnavailable() from exc
        self._backoff = OUTAGE_FIRST_SECONDS
