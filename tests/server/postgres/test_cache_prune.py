"""The embedding cache in PostgreSQL keeps to the SQLite engine's rules (`server.index.cache_rules`): what nothing
has used for a month goes, once a day across every server on the database, never the live model's vectors of
current chunks; with a cap, the least recently used go first and those live ones last."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from server.index.cache_rules import claim_prune_sql, prune_sql
from server.index.engine_settings import EngineSettings
from server.postgres import search_vectors
from server.postgres.connection import PgConnection, schema_of
from server.postgres.files import PgFileStore
from server.postgres.search import PgSearchIndex
from server.postgres.search_vectors import cap_cache, model_of, prune_cache, read_space
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import eventually

pytestmark = pytest.mark.anyio

NOTES = {
    "memory/deploy.md": "# Deploying\n\nThe staging cluster is upgraded every Tuesday by the release train.\n",
    "memory/food.md": "# Lunch\n\nThe team prefers ramen on Fridays; the noodle shop opens at noon.\n",
    "memory/db.md": "# Database\n\nPostgreSQL replicas replay the write-ahead log from the primary.\n",
}
MONTH_AGO = 31 * 86400

Server = tuple[PgSearchIndex, PgFileStore, PgConnection]


@pytest.fixture
def open_server(postgres_url: str, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Opens index "proj" on the test's database as a server does, with a connection of its own to look at the
    cache through; all are closed at the end."""
    opened: list[Server] = []

    def start(name: str = "one", cap: int = 0) -> Server:
        index = PgSearchIndex(postgres_url, "proj", HashingEmbedder(), EngineSettings(cache_max_entries=cap))
        store = PgFileStore(postgres_url, "proj", tmp_path / name / "files", clock=lambda: dt.datetime.now(dt.UTC))
        opened.append((index, store, PgConnection(postgres_url, schema_of("proj"))))
        return opened[-1]

    yield start
    for index, store, db in opened:
        db.close()
        index.close()
        store.close()


def cached(db: PgConnection) -> set[str]:
    return {str(h) for (h,) in db.execute("SELECT hash FROM embedding_cache")}


def current(db: PgConnection) -> set[str]:
    return {str(h) for (h,) in db.execute("SELECT hash FROM chunks")}


def add(db: PgConnection, rows: list[tuple[str, str, float]]) -> None:
    """Cached vectors (provider, hash, used_at): of the live model (`HashingEmbedder`'s) for provider "test"."""
    with db:
        for provider, digest, used_at in rows:
            model = HashingEmbedder().model if provider == "test" else "m"
            db.execute(
                "INSERT INTO embedding_cache(provider, model, hash, vector, used_at) VALUES(?, ?, ?, ?, ?)",
                (provider, model, digest, b"\x00", used_at),
            )


def pruned_at(db: PgConnection) -> float:
    return float(db.execute("SELECT value FROM search_meta WHERE key = 'cache_pruned_at'").fetchall()[0][0])


def prune_due_again(db: PgConnection) -> None:
    with db:
        db.execute("UPDATE search_meta SET value = '0' WHERE key = 'cache_pruned_at'")


def test_old_unused_vectors_are_pruned_and_live_ones_kept(open_server: Callable[..., Server]) -> None:
    index, store, db = open_server()
    for path, text in NOTES.items():
        store.write(path, text, caller="alice")
    index.index()
    live = cached(db)
    assert live == current(db) and len(live) == 3
    assert pruned_at(db) > time.time() - 60  # the day's prune ran after indexing
    store.write("memory/food.md", NOTES["memory/food.md"] + "\nThe shop also sells gyoza.\n", caller="alice")
    index.index()  # the file's old chunk vector is now unreferenced
    add(db, [("old", "h", 0.0)])
    assert len(cached(db)) == len(live) + 2

    # Everything else was used just now: nothing else is old enough, and the daily throttle holds the next back.
    prune_due_again(db)
    space = read_space(db)
    assert prune_cache(db, space) == 1  # only the other model's month-old row
    add(db, [("old", "h2", 0.0)])
    assert prune_cache(db, space) == 0  # throttled
    assert "h" not in cached(db) and "h2" in cached(db)

    with db:
        db.execute("UPDATE embedding_cache SET used_at = ?", (time.time() - MONTH_AGO,))
    prune_due_again(db)
    assert prune_cache(db, space) == 2  # the edited chunk's old vector, and h2
    assert cached(db) == current(db) and len(cached(db)) == 3
    assert index.search("noodle shop").mode == "hybrid"


def test_the_cap_drops_the_least_recently_used_first_and_the_live_vectors_last(
    open_server: Callable[..., Server],
) -> None:
    index, store, db = open_server()
    for path, text in NOTES.items():
        store.write(path, text, caller="alice")
    index.index()
    live = current(db)
    add(db, [("old", "recent", 9e9), ("test", "older", 100.0), ("test", "oldest", 50.0)])
    with db:  # the live vectors used in the order of their hashes
        for n, digest in enumerate(sorted(live)):
            db.execute("UPDATE embedding_cache SET used_at = ? WHERE hash = ?", (1000.0 + n, digest))
    space = read_space(db)

    assert cap_cache(db, len(live) + 2, space) == 1
    assert cached(db) == live | {"recent", "older"}  # the least recently used went first
    assert cap_cache(db, len(live), space) == 2
    assert cached(db) == live  # another model's vector goes before a live one, however recent
    assert cap_cache(db, 1, space) == 2
    assert cached(db) == {max(live)}  # the live ones last, the least recently used of them first
    assert cap_cache(db, 0, space) == 0 and cap_cache(db, 5, space) == 0  # no cap; under it


def test_an_index_with_a_cap_keeps_to_it_after_indexing_and_still_searches_by_meaning(
    open_server: Callable[..., Server],
) -> None:
    index, store, db = open_server(cap=2)
    add(db, [("old", "recent", 9e9)])
    for path, text in NOTES.items():
        store.write(path, text, caller="alice")
    index.index()
    assert len(cached(db)) == 2 and cached(db) <= current(db)
    result = index.search("noodle shop")
    assert result.mode == "hybrid" and result.hits[0].path == "memory/food.md"  # the vector table answers


async def test_two_servers_sharing_a_database_prune_once(open_server: Callable[..., Server], postgres_url: str) -> None:
    one, store, first = open_server("one")
    _, _, second = open_server("two")
    for path, text in NOTES.items():
        store.write(path, text, caller="alice")
    one.index()
    add(first, [("old", f"h{n}", 0.0) for n in range(5)])
    prune_due_again(first)
    space = read_space(first)
    done = threading.Event()
    answers: list[int] = []

    def prune_on_two() -> None:
        answers.append(prune_cache(second, space))
        done.set()

    # The first server's prune has claimed the day and not committed yet: the second's waits for it.
    claimed_at = time.time()
    with first:
        assert first.execute(*claim_prune_sql("search_meta", claimed_at)).fetchall()
        waiter = threading.Thread(target=prune_on_two)
        waiter.start()
        with closing(PgConnection(postgres_url)) as watcher:
            await eventually(lambda: blocked(watcher, second), "the second server's claim to wait", within=10)
        first.execute(*prune_sql(model_of(space), time.time()))
        assert first.changes() == 5
    with anyio.fail_after(10):
        await anyio.to_thread.run_sync(done.wait)
    waiter.join()
    assert answers == [0]
    assert pruned_at(second) == claimed_at  # the second server claimed nothing
    assert cached(first) == current(first)

    # Both at once, the day's prune due again: one of them prunes, the other finds it done.
    add(first, [("old", f"g{n}", 0.0) for n in range(4)])
    prune_due_again(first)
    start = threading.Barrier(2)
    results: list[int] = []

    def prune(db: PgConnection) -> None:
        start.wait(5)
        results.append(prune_cache(db, space))

    threads = [threading.Thread(target=prune, args=(db,)) for db in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [0, 4]


def blocked(observer: PgConnection, db: PgConnection) -> bool:
    """Whether `db`'s statement waits for a lock."""
    rows = observer.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", (db.backend_pid(),)
    ).fetchall()
    return bool(rows) and rows[0][0] == "Lock"


def test_a_cache_that_cannot_be_tidied_leaves_the_indexing_run_reported_and_is_tried_again(
    open_server: Callable[..., Server], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A database error in the day's prune failed the whole call, though every file was indexed.
    index, store, db = open_server()
    for path, text in NOTES.items():
        store.write(path, text, caller="alice")
    failing = ("SELECT 1 / 0", ())  # a real error inside the prune's transaction, after the day's claim
    monkeypatch.setattr(search_vectors, "prune_sql", lambda *_: failing)
    report = index.index()
    assert report.files_indexed == 3 and report.chunks_pending == 0
    assert index.search("noodle shop").mode == "hybrid"
    assert "embedding cache not tidied (DivisionByZero)" in caplog.text
    assert not db.execute("SELECT 1 FROM search_meta WHERE key = 'cache_pruned_at'").fetchall()  # rolled back
    monkeypatch.undo()
    store.write("memory/food.md", NOTES["memory/food.md"] + "\nThe shop also sells gyoza.\n", caller="alice")
    index.index()
    assert pruned_at(db) > time.time() - 60  # the next run claimed the day and pruned
