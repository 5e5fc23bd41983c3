"""Opening indexes on PostgreSQL: many at once on a fresh database, an open that fails half way, and an open that
waits for another replica's migration while the indexes already open go on answering."""

from __future__ import annotations

import datetime as dt
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from server.errors import EngineError
from server.index.engine_settings import EngineSettings
from server.indexes.registry import IndexRegistry, OpenIndex
from server.indexes.storage import FileStore, SearchIndex
from server.postgres import files
from server.postgres.backend import PgBackend
from server.postgres.search import PgSearchIndex
from tests.sync_support import eventually

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)
BOUND = 10.0  # seconds: the longest a test waits for what should happen at once


class WatchedBackend:
    """A PgBackend that tells when an open of each index has begun and how many there were."""

    def __init__(self, backend: PgBackend) -> None:
        self.backend = backend
        self.entered: defaultdict[str, threading.Event] = defaultdict(threading.Event)
        self.opens: Counter[str] = Counter()

    def exists(self, name: str) -> bool:
        return self.backend.exists(name)

    def open(self, name: str, *, on_change: Callable[[], None]) -> tuple[SearchIndex, FileStore]:
        self.opens[name] += 1
        self.entered[name].set()
        return self.backend.open(name, on_change=on_change)


@pytest.fixture
def registry(postgres_url: str, tmp_path: Path) -> Iterator[IndexRegistry]:
    """A registry opening indexes on the test's database as a server does; closed at the end."""
    backend = WatchedBackend(PgBackend(postgres_url, tmp_path / "data", None, EngineSettings(), lambda: NOW))
    opened = IndexRegistry(backend, lambda name: None)
    yield opened
    opened.close()


def listeners(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"pg-listen-index_{name}" and t.is_alive()]


def test_many_indexes_opened_at_once_on_a_fresh_database_all_open(postgres_url: str, tmp_path: Path) -> None:
    # Each migration held only its own schema's lock, and all created pgvector: one failed (UniqueViolation).
    backend = PgBackend(postgres_url, tmp_path / "data", None, EngineSettings(), lambda: NOW)
    names = [f"index{n}" for n in range(6)]
    start = threading.Barrier(len(names))
    opened: list[tuple[SearchIndex, FileStore]] = []
    failed: list[BaseException] = []

    def open_one(name: str) -> None:
        start.wait(BOUND)
        try:
            opened.append(backend.open(name, on_change=lambda: None))
        except EngineError as exc:
            failed.append(exc.__cause__ or exc)

    threads = [threading.Thread(target=open_one, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for index, store in opened:
        index.close()
        store.close()
    assert [repr(exc) for exc in failed] == []
    assert len(opened) == len(names)


@pytest.mark.anyio
async def test_an_open_that_fails_after_the_backend_opened_leaves_no_listener_and_no_connection(
    registry: IndexRegistry, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The search index and file store were neither registered nor closed: the store's listener kept both alive
    # and connected for the life of the process.
    registry.get("proj")
    with psycopg.connect(postgres_url, autocommit=True) as observer:

        def connections() -> set[int]:
            rows = observer.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            return {int(pid) for (pid,) in rows}

        listening = "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN \"index_proj\"'"
        # "proj"'s listener connects on a thread of its own: counted among those before only once it has
        await eventually(lambda: observer.execute(listening).fetchall() == [(1,)], "proj to listen", within=BOUND)
        before = connections()  # a connection among them may close meanwhile (work of "proj" ending): no matter

        def lost(self: PgSearchIndex) -> bool:
            raise EngineError("the database failed while connecting")

        monkeypatch.setattr(PgSearchIndex, "needs_rebuild", property(lost))
        with pytest.raises(EngineError, match="failed while connecting"):
            registry.open("other")
        await eventually(lambda: not listeners("other"), "the failed open's listener to stop", within=BOUND)
        await eventually(lambda: connections() <= before, "the failed open's connections to close", within=BOUND)
        monkeypatch.undo()
        assert registry.get("other").index.name == "other"  # opened at the next try
        assert len(listeners("other")) == 1


def test_an_index_whose_open_waits_keeps_no_other_index_waiting(registry: IndexRegistry, postgres_url: str) -> None:
    # One lock for the whole registry: while another replica migrated index "other", a search on "proj" (open
    # already) waited until that migration ended.
    proj = registry.get("proj")
    proj.mirror.write("memory/a.md", "alpha note\n", caller="alice")
    assert registry.index_quietly(proj)
    backend = registry.backend
    assert isinstance(backend, WatchedBackend)
    other: list[OpenIndex | None] = []
    answers: list[object] = []
    with psycopg.connect(postgres_url) as replica:  # another replica migrating "other": holds its lock
        replica.execute("SELECT pg_advisory_xact_lock(hashtext('index_other'))")
        openers = [threading.Thread(target=lambda: other.append(registry.open("other"))) for _ in range(2)]
        try:
            for opener in openers:
                opener.start()
            assert backend.entered["other"].wait(BOUND)

            def use_others() -> None:
                answers.append([hit.path for hit in registry.get("proj").index.search("alpha").hits])
                answers.append(registry.get("third").index.name)

            user = threading.Thread(target=use_others, daemon=True)
            user.start()
            user.join(BOUND)
            assert answers == [["memory/a.md"], "third"]
            assert other == []  # still waiting for the migration
        finally:
            replica.rollback()
    for opener in openers:
        opener.join(60)
    assert len(other) == 2 and other[0] is not None and other[0] is other[1]
    assert backend.opens["other"] == 1


@pytest.mark.anyio
async def test_a_file_store_whose_listener_cannot_start_closes_its_connection(
    postgres_url: str, tmp_path: Path
) -> None:
    def no_thread(*args: object, **kwargs: object) -> None:
        raise RuntimeError("can't start new thread")

    application = "memory-test-listener"
    with psycopg.connect(postgres_url, autocommit=True) as observer:

        def connections() -> int:
            rows = observer.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (application,))
            return int(rows.fetchall()[0][0])

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(files, "ChangeListener", no_thread)
            with pytest.raises(RuntimeError):
                files.PgFileStore(f"{postgres_url}&application_name={application}", "proj", tmp_path / "files")
        await eventually(lambda: connections() == 0, "the store's connection to close", within=BOUND)
