"""Change notices between servers sharing one database: a change committed by any of them wakes the long-polls
waiting on every other.

A file store's write sends `NOTIFY` on its index's channel inside the transaction that records the change
(`notify_statement`), so PostgreSQL delivers it only on commit. `ChangeListener` keeps a connection of its own
that LISTENs on that channel, in a daemon thread, and calls `on_notice` for every notification but those of the
store's own changes (noticed as they are made). When that
connection drops, it connects again (after RETRY_SECONDS) and calls `on_notice` once, since notifications sent
meanwhile are lost. An idle connection is checked every CHECK_SECONDS, so a silently dead one is noticed too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
from psycopg import sql

from server.mirror.queries import Query
from server.postgres.connection import SESSION_SETTINGS, session

log = logging.getLogger(__name__)

CHECK_SECONDS = 30.0  # an idle listening connection is checked this often
RETRY_SECONDS = 1.0  # wait before connecting again after the listening connection failed
WAIT_SECONDS = 0.2  # longest wait for notifications before looking whether to stop (`close` waits as long)


def notify_statement(channel: str) -> Query:
    """`NOTIFY channel` as a statement with a placeholder; within a transaction, sent only when it commits."""
    return "SELECT pg_notify(?, '')", (channel,)


class ChangeListener:
    """LISTENs on `channel` of the database at `url` in a daemon thread, calling `on_notice` (in that thread)
    for each notification, and once after connecting again. `close` stops it."""

    def __init__(
        self, url: str, channel: str, on_notice: Callable[[], None], *, own_pid: Callable[[], int | None]
    ) -> None:
        """`own_pid`: the server process of the connection whose changes are noticed already (not called again)."""
        self._url, self._channel, self._on_notice, self._own_pid = url, channel, on_notice, own_pid
        self._stop = threading.Event()
        self._conn: psycopg.Connection[Any] | None = None
        self.listening = threading.Event()  # set while a connection listens
        self._connections = 0  # connections made so far: after the first, notifications may have been missed
        self._thread = threading.Thread(target=self._run, name=f"pg-listen-{channel}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT_SECONDS * 4)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._listen()
            except psycopg.Error as exc:  # its text may hold the URL: only its kind is logged
                log.warning("postgres: listening for changes on %s failed (%s)", self._channel, type(exc).__name__)
            except Exception:  # a bug must not end the listening for good
                log.exception("postgres: listening for changes on %s failed", self._channel)
            finally:
                self.listening.clear()
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
            self._stop.wait(RETRY_SECONDS)

    def _listen(self) -> None:
        conn = self._conn = session(self._url, SESSION_SETTINGS)
        conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self._channel)))
        self._connections += 1
        self.listening.set()
        if self._connections > 1:
            log.info("postgres: listening for changes on %s again", self._channel)
            self._notice()  # whatever was sent while no connection listened
        checked = time.monotonic()
        while not self._stop.is_set():
            for notification in conn.notifies(timeout=WAIT_SECONDS):
                checked = time.monotonic()  # the connection works
                if notification.pid != self._own_pid() and not self._stop.is_set():
                    self._notice()
            if time.monotonic() - checked >= CHECK_SECONDS:
                conn.execute("SELECT 1")
                checked = time.monotonic()

    def _notice(self) -> None:
        try:
            self._on_notice()
        except Exception:  # a listener's failure must not stop the listening
            log.exception("postgres: a change listener failed")
