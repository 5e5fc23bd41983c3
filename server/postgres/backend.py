"""`PgBackend`: each index's files and history in PostgreSQL (`server.postgres.files`), one schema per index.

The search index stays the SQLite engine (`server.index.MemoryIndex`) in `<data>/indexes/<name>/`, which can
always be rebuilt from the files: a replica's local cache, fed from the files laid out beside it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain
from server.index.engine import EngineSettings
from server.indexes.storage import FileStore, SearchIndex, open_beside_engine
from server.mirror.history import Retention
from server.postgres import queries as q
from server.postgres.connection import PgConnection, schema_of
from server.postgres.files import PgFileStore


class PgBackend:
    """Opens index `name` as a PostgreSQL file store at `url` beside a local SQLite search index."""

    def __init__(
        self,
        url: str,
        data_dir: Path,
        embedder: Embedder | ProviderChain | None,
        settings: EngineSettings,
        clock: Callable[[], dt.datetime],
        retention: Retention | None = None,
    ) -> None:
        self.url, self.data_dir, self.embedder = url, data_dir, embedder
        self.settings, self.clock, self.retention = settings, clock, retention

    def exists(self, name: str) -> bool:
        db = PgConnection(self.url)
        try:
            return bool(db.execute(*q.schema_exists(schema_of(name))).fetchall())
        finally:
            db.close()

    def open(self, name: str, *, on_change: Callable[[], None]) -> tuple[SearchIndex, FileStore]:
        def store(directory: Path) -> FileStore:
            return PgFileStore(
                self.url,
                name,
                directory / "files",
                clock=self.clock,
                max_file_bytes=self.settings.scan.max_file_bytes,
                on_change=on_change,
                retention=self.retention,
            )

        return open_beside_engine(self.data_dir, name, self.embedder, self.settings, store)
