"""The PostgreSQL tests share this: index "proj" opened as a server opens it, and the test's database made out of
reach as when it restarts."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from psycopg import sql

from server.index.engine_settings import EngineSettings
from server.postgres.files import PgFileStore
from server.postgres.search import PgSearchIndex
from tests.fakes.embedder import HashingEmbedder

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)

Opened = tuple[PgSearchIndex, PgFileStore]


@pytest.fixture
def open_index(postgres_url: str, tmp_path: Path) -> Iterator[Callable[..., Opened]]:
    """Opens index "proj" on the test's database as a server does (search index and file store); all are closed
    at the end."""
    opened: list[Opened] = []

    def start(embedder: HashingEmbedder | None = None, name: str = "one") -> Opened:
        index = PgSearchIndex(postgres_url, "proj", embedder, EngineSettings())
        store = PgFileStore(postgres_url, "proj", tmp_path / name / "files", clock=lambda: NOW)
        opened.append((index, store))
        return index, store

    yield start
    for index, store in opened:
        index.close()
        store.close()


@pytest.fixture
def reachable(postgres_server: str, postgres_url: str) -> Iterator[Callable[[bool], None]]:
    """`reachable(False)`: the test's database refuses connections and every one open is cut, as while it restarts;
    `reachable(True)`: it takes them again (as it does at the end of the test)."""
    database = urlsplit(postgres_url).path.lstrip("/")

    def allow(allowed: bool) -> None:
        with psycopg.connect(postgres_server, autocommit=True) as admin:
            change = sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}")
            admin.execute(change.format(sql.Identifier(database), sql.Literal(allowed)))
            if not allowed:
                admin.execute(  # returns once they are gone, each one's goodbye sent
                    "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = %s", (database,)
                )

    yield allow
    allow(True)
