from __future__ import annotations

import os
import threading

import apsw
import pytest

from server.index.errors import EngineError
from server.index.migrations import SCHEMA_VERSION
from server.index.store import Store


def test_a_new_database_is_migrated_in_wal_mode_with_sqlite_vec(tmp_path):
    store = Store(tmp_path / "i.sqlite3")
    db = store.connection()
    assert db.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
    assert db.execute("SELECT vec_version()").fetchall()[0][0].startswith("v")
    store.close()


def test_a_database_from_a_newer_version_is_refused_not_rebuilt(tmp_path):
    path = tmp_path / "i.sqlite3"
    db = apsw.Connection(str(path))
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(EngineError, match="newer version"):
        Store(path)
    assert path.exists()


def test_each_thread_gets_its_own_connection(tmp_path):
    import threading

    store = Store(tmp_path / "i.sqlite3")
    seen = []
    worker = threading.Thread(target=lambda: seen.append(store.connection()))
    worker.start()
    worker.join()
    assert seen[0] is not store.connection()
    store.close()


def test_a_version_1_database_is_migrated_forward_keeping_its_embedding_cache(tmp_path):
    from server.index.migrations import m001_initial

    path = tmp_path / "index.sqlite3"
    db = apsw.Connection(str(path))
    with db:
        m001_initial(db)
        db.execute("PRAGMA user_version = 1")
        db.execute("INSERT INTO embedding_cache VALUES('local', 'm', 'h1', x'00112233')")
    db.close()
    store = Store(path)
    try:
        migrated = store.connection()
        assert migrated.execute("PRAGMA user_version").fetchall()[0][0] == SCHEMA_VERSION >= 2
        assert migrated.execute("SELECT provider, model, hash, vector FROM embedding_cache").fetchall() == [
            ("local", "m", "h1", b"\x00\x11\x22\x33")
        ]
        # The cache key stays unique after the move to a rowid table.
        with pytest.raises(apsw.ConstraintError):
            migrated.execute(
                "INSERT INTO embedding_cache(provider, model, hash, vector) VALUES('local', 'm', 'h1', x'')"
            )
    finally:
        store.close()


def _table(path):
    db = apsw.Connection(str(path))
    db.execute("PRAGMA journal_mode=WAL").fetchall()
    db.execute("CREATE TABLE t(x)")
    return db


def test_a_deferred_read_then_write_fails_at_once_when_another_connection_wrote_in_between(tmp_path):
    # Why `writing` exists: SQLite refuses the stale snapshot's write without waiting for any busy timeout.
    a, b = _table(tmp_path / "i.sqlite3"), apsw.Connection(str(tmp_path / "i.sqlite3"))
    a.set_busy_timeout(5000)
    with pytest.raises(apsw.BusyError), a:
        a.execute("SELECT count(*) FROM t").fetchall()
        b.execute("INSERT INTO t VALUES (1)")
        a.execute("INSERT INTO t VALUES (2)")


def test_a_write_transaction_holds_the_write_lock_from_its_start(tmp_path):
    from server.index.transaction import writing

    a, b = _table(tmp_path / "i.sqlite3"), apsw.Connection(str(tmp_path / "i.sqlite3"))
    with writing(a):
        a.execute("SELECT count(*) FROM t").fetchall()
        with pytest.raises(apsw.BusyError):  # the other writer waits (here: no busy timeout, so it is told to)
            b.execute("INSERT INTO t VALUES (1)")
        a.execute("INSERT INTO t VALUES (2)")
    b.execute("INSERT INTO t VALUES (3)")
    assert [row[0] for row in a.execute("SELECT x FROM t ORDER BY x")] == [2, 3]


def test_a_write_transaction_rolls_back_on_an_error_and_nests_as_a_savepoint(tmp_path):
    from server.index.transaction import writing

    a = _table(tmp_path / "i.sqlite3")
    with pytest.raises(ValueError), writing(a):
        a.execute("INSERT INTO t VALUES (1)")
        with writing(a):
            a.execute("INSERT INTO t VALUES (2)")
        raise ValueError("stop")
    assert a.execute("SELECT count(*) FROM t").fetchall()[0][0] == 0
    assert not a.in_transaction


def test_a_closed_store_opens_no_new_connection(tmp_path):
    # After a damaged database is set aside its path names the new one: a thread still holding the old store must
    # not open a connection there and read a half-made schema.
    store = Store(tmp_path / "i.sqlite3")
    store.close()
    with pytest.raises(apsw.ConnectionClosedError):
        store.connection()


def test_a_connection_being_opened_as_the_store_closes_is_closed_with_the_rest(tmp_path, monkeypatch):
    # A search thread opened its connection while another closed the store and moved its files aside: it met them
    # half moved and failed "disk I/O error" (CI, tests/server/index/test_damage_threads.py), or kept a connection
    # close() never saw.
    store = Store(tmp_path / "i.sqlite3")
    opening, closing = threading.Event(), threading.Event()
    real_open = Store._open

    def open_slowly(self: Store) -> apsw.Connection:
        opening.set()
        assert closing.wait(timeout=10)
        return real_open(self)

    monkeypatch.setattr(Store, "_open", open_slowly)
    store.on_close.append(closing.set)
    opened: list[apsw.Connection] = []
    opener = threading.Thread(target=lambda: opened.append(store.connection()))
    opener.start()
    assert opening.wait(timeout=10)
    store.close()
    opener.join(timeout=10)
    (db,) = opened
    with pytest.raises(apsw.ConnectionClosedError):
        db.execute("SELECT 1")


def _open_files(path) -> int:
    """This process's file descriptors on the database at `path` and its WAL and shared-memory files."""
    fds = os.listdir("/proc/self/fd")
    return sum(1 for fd in fds if os.path.realpath(f"/proc/self/fd/{fd}").startswith(str(path)))


def test_a_threads_connection_is_closed_when_the_thread_ends(tmp_path):
    # The server's work runs on worker threads that come and go (anyio retires one idle for 10 s): each left its
    # connection open, and a server under bursty use ran out of file descriptors within hours.
    store = Store(tmp_path / "i.sqlite3")

    def work() -> None:
        store.connection().execute("SELECT count(*) FROM files").fetchall()

    def in_a_thread() -> None:
        thread = threading.Thread(target=work)
        thread.start()
        thread.join()

    work()
    in_a_thread()
    # SQLite keeps a closed connection's descriptor while another connection of the process holds the file's locks,
    # and opens the next connection on it: one more than this thread's own, whatever the number of threads.
    settled = _open_files(store.path)
    for _ in range(20):
        in_a_thread()
    assert _open_files(store.path) == settled
    assert len(store._connections) == 1  # this thread's, which close() still closes
    store.close()
    assert _open_files(store.path) == 0
