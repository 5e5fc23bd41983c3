from __future__ import annotations

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
