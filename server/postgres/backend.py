"""`PgBackend`: each index in PostgreSQL, one schema per index: its files and history (`server.postgres.files`)
and its search index (`server.postgres.search`). Replicas on one database share both.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

from server.index.embeddings.base import Embedder
from server.index.embeddings.chain import ProviderChain
from server.index.engine_settings import EngineSettings
from server.index.naming import index_dir
from server.indexes.storage import FileStore, SearchIndex
from server.mirror.history import Retention
from server.postgres import queries as q
from server.postgres.connection import PgConnection, schema_of
from server.postgres.files import PgFileStore
from server.postgres.search import PgSearchIndex


class PgBackend:
    """Opens index `name` as a PostgreSQL file store and search index at `url`."""

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
        index = PgSearchIndex(self.url, name, self.embedder, self.settings.for_index(name))
        try:
            store = PgFileStore(
                self.url,
                name,
                index_dir(self.data_dir, name) / "files",
                clock=self.clock,
                max_file_bytes=self.settings.scan.max_file_bytes,
                on_change=on_change,
                retention=self.retention,
            )
        except BaseException:
            index.close()
            raise
        return index, store
