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
