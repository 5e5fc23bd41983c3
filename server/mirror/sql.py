"""What the mirror's records are written through: an SQL connection with `?` placeholders.

SQLite's `apsw.Connection` is one; `server.postgres.connection.PgConnection` (PostgreSQL) is the other. The record
functions of `server.mirror.state` and `server.mirror.history` take either, so both backends share them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class SqlCursor(Protocol):
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class SqlConnection(Protocol):
    """`with connection:` is a transaction."""

    def __enter__(self) -> Any: ...
    def __exit__(self, kind: Any, error: Any, trace: Any, /) -> Any: ...
    def execute(self, statements: str, bindings: Any = None, /) -> SqlCursor: ...
    def close(self) -> None: ...
    def changes(self) -> int:
        """Rows changed by the last statement."""
