"""The PostgreSQL file store on a real PostgreSQL: what replicas sharing one database see of each other's changes,
the history, migrations and errors."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from server.errors import ConflictError, EngineError, InvalidArgumentError
from server.index.engine_settings import EngineSettings
from server.mirror.state import ABSENT
from server.postgres.backend import PgBackend
from server.postgres.connection import schema_of
from server.postgres.files import PgFileStore
from tests.postgres_support import cut_all, database_url

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)


@pytest.fixture
def replicas(postgres_url: str, tmp_path: Path) -> Iterator[Callable[[str], PgFileStore]]:
    """Opens index "proj" as a replica with its own local folder; all are closed at the end."""
    opened: list[PgFileStore] = []

    def open_replica(name: str) -> PgFileStore:
        store = PgFileStore(postgres_url, "proj", tmp_path / name / "files", clock=lambda: NOW)
        opened.append(store)
        return store

    yield open_replica
    for store in opened:
        store.close()


def test_a_write_on_one_replica_is_read_listed_and_fed_on_another(
    replicas: Callable[[str], PgFileStore],
) -> None:
    one, two = replicas("one"), replicas("two")
    written = one.write("memory/notes.md", "the deploy runs on Tuesdays\n", caller="alice")
    seen = two.read("memory/notes.md")
    assert seen is not None and seen.text == "the deploy runs on Tuesdays\n" and seen.hash == written.hash
    assert [s.path for s in two.list()] == ["memory/notes.md"]
    assert [(s.path, s.revision) for s in two.changes_since(0)] == [("memory/notes.md", 1)]
    assert two.revision() == one.revision() == 1


def test_a_replace_based_on_an_old_hash_from_another_replica_is_a_conflict(
    replicas: Callable[[str], PgFileStore],
) -> None:
    one, two = replicas("one"), replicas("two")
    first = one.write("MEMORY.md", "v1\n", caller="alice", expected_hash=ABSENT)
    two.write("MEMORY.md", "v2 from bob\n", caller="bob", expected_hash=first.hash)
    with pytest.raises(ConflictError):
        one.write("MEMORY.md", "v2 from alice\n", caller="alice", expected_hash=first.hash)
    current = one.read("MEMORY.md")
    assert current is not None and current.text == "v2 from bob\n"


def test_concurrent_writers_on_two_replicas_get_every_revision_once_in_order(
    replicas: Callable[[str], PgFileStore],
) -> None:
    stores = [replicas("one"), replicas("two")]
    errors: list[BaseException] = []

    def writer(n: int) -> None:
        try:
            for i in range(10):
                stores[n].write(f"memory/w{n}-{i}.md", f"note {n} {i}\n", caller=f"c{n}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    feed = stores[1].changes_since(0)
    assert [s.revision for s in feed] == list(range(1, 21))
    assert stores[0].changes_since(15) == feed[15:]


def test_a_deleted_file_leaves_a_tombstone_and_its_last_text_in_the_history(
    replicas: Callable[[str], PgFileStore],
) -> None:
    store = replicas("one")
    store.write("memory/gone.md", "keep this thought\n", caller="alice")
    before = store.delete("memory/gone.md", caller="alice")
    assert before is not None and store.read("memory/gone.md") is None
    tombstone = store.state("memory/gone.md")
    assert tombstone is not None and tombstone.deleted and tombstone.revision == 2
    assert [(v.revision, v.change) for v in store.history.versions("memory/gone.md")] == [(2, "delete"), (1, "write")]
    assert [v.path for v in store.history.deleted()] == ["memory/gone.md"]
    last = store.history.last_text("memory/gone.md", 2)
    assert last is not None and last.revision == 1
    version = store.history.get("memory/gone.md", 1)
    assert version is not None and version.text == "keep this thought\n"
    assert store.history.size().versions == 2
    assert store.delete("memory/gone.md", caller="alice") is None


def test_a_replica_whose_clock_is_set_back_stamps_no_change_before_the_last_one(
    postgres_url: str, tmp_path: Path
) -> None:
    behind = [NOW]
    right = PgFileStore(postgres_url, "proj", tmp_path / "one" / "files", clock=lambda: NOW)
    wrong = PgFileStore(postgres_url, "proj", tmp_path / "two" / "files", clock=lambda: behind[0])
    try:
        right.write("memory/a.md", "v0\n", caller="alice")
        behind[0] = NOW - dt.timedelta(days=365)  # a year back: a prune would take these for versions a year old
        wrong.write("memory/a.md", "v1\n", caller="bob")
        wrong.write("memory/b.md", "other\n", caller="bob")
        wrong.delete("memory/b.md", caller="bob")

        stamps = [v.updated_at for v in reversed(right.history.versions())]
        assert stamps == ["2024-05-01T09:30:00Z"] * 4
        assert [s.updated_at for s in right.changes_since(0)] == ["2024-05-01T09:30:00Z"] * 2
    finally:
        right.close()
        wrong.close()


def test_idempotency_records_and_callers_syncs_are_kept(replicas: Callable[[str], PgFileStore]) -> None:
    from server.mirror.state import IdempotencyRecord

    one, two = replicas("one"), replicas("two")
    record = IdempotencyRecord("alice", "retry-key-1", "sha256:args", '{"ok": true}')
    one.write("MEMORY.md", "x\n", caller="alice", record=record)
    assert two.recall("alice", "retry-key-1") == record
    assert two.recall("bob", "retry-key-1") is None
    one.record_sync("alice", "pull", 1)
    two.record_sync("alice", "push", 1)
    [synced] = one.sync_callers()
    assert (synced.caller, synced.pulled_revision, synced.pushed_revision) == ("alice", 1, 1)


def test_a_database_schema_newer_than_the_server_is_refused(
    postgres_url: str, replicas: Callable[[str], PgFileStore]
) -> None:
    replicas("one")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute('UPDATE "index_proj".schema_version SET version = 99')
    with pytest.raises(EngineError, match="newer than this server"):
        replicas("two")


def test_the_backend_tells_which_indexes_exist(postgres_url: str, tmp_path: Path) -> None:
    backend = PgBackend(postgres_url, tmp_path / "data", None, EngineSettings(), lambda: NOW)
    assert not backend.exists("proj")
    index, store = backend.open("proj", on_change=lambda: None)
    index.close()
    store.close()
    assert backend.exists("proj") and not backend.exists("other")


def test_a_database_that_cannot_be_reached_is_an_engine_error_that_shows_no_url(
    postgres_url: str, tmp_path: Path
) -> None:
    url = database_url(postgres_url, "no_such_database").replace("postgres:@", "postgres:hunter2@")
    with pytest.raises(EngineError) as caught:
        PgFileStore(url, "proj", tmp_path / "files")
    assert "hunter2" not in str(caught.value) and "no_such_database" not in str(caught.value)


def test_long_index_names_get_distinct_schemas_within_postgresqls_name_limit() -> None:
    first, second = schema_of("a" * 63 + "1"), schema_of("a" * 63 + "2")
    assert first != second and max(len(first), len(second)) <= 63
    assert schema_of("proj") == "index_proj"
    with pytest.raises(InvalidArgumentError):
        schema_of('proj"; DROP SCHEMA public; --')


def test_the_test_database_has_pgvector(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        row = conn.execute("SELECT '[1,0]'::vector <=> '[0,1]'::vector").fetchone()
    assert row is not None and row[0] == pytest.approx(1.0)


def test_a_server_configured_with_a_database_url_keeps_its_files_in_postgresql(
    postgres_url: str, tmp_path: Path
) -> None:
    from server.cli.serve import storage_backend
    from server.index.embeddings.chain import ProviderChain
    from server.indexes.storage import SqliteBackend
    from server.settings import Settings
    from tests.fakes.embedder import HashingEmbedder

    providers = ProviderChain.of([HashingEmbedder()])
    assert isinstance(storage_backend(Settings.from_env({}), tmp_path / "data", providers), SqliteBackend)
    settings = Settings.from_env({"MEMORY_DATABASE_URL": postgres_url})
    backend = storage_backend(settings, tmp_path / "data", providers)
    index, store = backend.open("proj", on_change=lambda: None)
    try:
        store.write("MEMORY.md", "kept in the database\n", caller="alice")
    finally:
        index.close()
        store.close()
    with psycopg.connect(postgres_url) as db:
        row = db.execute('SELECT content FROM "index_proj".files WHERE path = %s', ("MEMORY.md",)).fetchone()
    assert row is not None and bytes(row[0]) == b"kept in the database\n"


def test_a_replica_whose_connection_was_cut_connects_again(
    postgres_url: str, replicas: Callable[[str], PgFileStore]
) -> None:
    store = replicas("one")
    store.write("MEMORY.md", "before the cut\n", caller="alice")
    assert cut_all(postgres_url) >= 1
    read = store.read("MEMORY.md")  # a read is tried again on a new connection
    assert read is not None and read.text == "before the cut\n"
    cut_all(postgres_url)
    store.write("MEMORY.md", "after the cut\n", caller="alice")  # BEGIN finds it cut: a new connection
    assert store.revision() == 2
