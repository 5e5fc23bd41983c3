"""A few connections to one index's schema, lent to one caller at a time: searches and reads run beside each other
and beside the indexing connection, and a process never opens more than `size` of them per index."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from server.postgres.connection import PgConnection


class ConnectionPool:
    """Connections to schema `schema` of the database at `url`, opened as needed, at most `size`."""

    def __init__(self, url: str, schema: str, size: int) -> None:
        self._url, self._schema, self._size = url, schema, size
        self._idle: list[PgConnection] = []
        self._open = 0
        self._free = threading.Condition()

    @contextlib.contextmanager
    def connection(self) -> Iterator[PgConnection]:
        """A connection for the duration of the block (waits while all `size` are lent)."""
        with self._free:
            while not self._idle and self._open >= self._size:
                self._free.wait()
            db = self._idle.pop() if self._idle else None
            if db is None:
                self._open += 1
        if db is None:
            try:
                db = PgConnection(self._url, self._schema)
            except BaseException:
                with self._free:
                    self._open -= 1
                    self._free.notify()
                raise
        try:
            yield db
        finally:
            with self._free:
                self._idle.append(db)
                self._free.notify()

    def close(self) -> None:
        """Close the idle connections (the owner waited for the calls in flight)."""
        with self._free:
            idle, self._idle = self._idle, []
        for db in idle:
            db.close()
