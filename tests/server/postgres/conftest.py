"""The PostgreSQL search index's tests share this: index "proj" opened as a server opens it."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
