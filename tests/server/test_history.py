"""The version history: every change of a memory file keeps a version with who, when and how; memory_get reads a
version, memory_restore brings one back as a new version, deleted files are listed and restored; retention; the
history lives beside the files, not in the search index."""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.errors import PermissionDeniedError
from server.index.errors import InvalidArgumentError
from server.memory.history import HistoryService
from server.memory.service import CallerContext, MemoryService
from server.mirror import history as h
from server.mirror import queries as q
from server.mirror.history import Retention
from server.mirror.mirror import Mirror
from server.mirror.state import STATE_SCHEMA_VERSION, open_state
from server.sync.service import SyncService
from syncproto.messages import PushChange
from syncproto.wire import sha256_hex
from tests.fakes.embedder import HashingEmbedder
from tests.postgres_support import ON_SERVER_DISK, open_file_store

pytestmark = pytest.mark.usefixtures("backend")  # every test runs on SQLite and on PostgreSQL


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2024, 5, 1, 9, 0, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now


def caller(name: str, access: str = "rw") -> CallerContext:
    return CallerContext(name, f"SHA256:{name}", {"proj": access}, "proj", access)  # type: ignore[arg-type]


ALICE, BOB, READER = caller("alice"), caller("bob"), caller("reader", "r")
PATH = "memory/decisions.md"


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(tmp_path: Path, clock: Clock) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path / "data", HashingEmbedder(), clock=clock, rescan_interval=0.0)
    yield running
    running.close()


@pytest.fixture
def history(service: MemoryService) -> HistoryService:
    return HistoryService(service)


def replace(service: MemoryService, who: CallerContext, text: str, path: str = PATH) -> str:
    current = service.get(who, path)
    return service.write(who, text, path=path, mode="replace", expected_hash=current.hash or "absent").hash


@ON_SERVER_DISK
def test_every_kind_of_change_keeps_a_version_with_who_when_and_how(service, history, clock):
    sync = SyncService(service)
    first = replace(service, ALICE, "# Decisions\n\nSQLite.\n")
    clock.now += dt.timedelta(minutes=1)
    pushed = "# Decisions\n\nSQLite.\n\nWAL mode.\n"
    sync.push(BOB, [PushChange(PATH, first, pushed)])
    merged_base = sha256_hex(pushed.encode())
    sync.push(BOB, [PushChange(PATH, merged_base, pushed + "\nBackups nightly.\n")])
    sync.push(ALICE, [PushChange(PATH, merged_base, "# Decisions\n\nFTS5 too.\n" + pushed[12:])])
    sync.push(BOB, [PushChange(PATH, first, "Something else entirely.\n")])  # stale base, no clean merge
    (service.data_dir / "indexes" / "proj" / "files" / "MEMORY.md").write_text("# On the server's disk\n")
    service.list(ALICE)  # notices the edit on disk
    service.delete(ALICE, PATH)

    changes = [(v.path, v.change, v.updated_by) for v in reversed(history.history(ALICE).versions)]

    conflict = next(path for path, change, _ in changes if change == "conflict")
    assert changes == [
        (PATH, "write", "alice"),
        (PATH, "push", "bob"),
        (PATH, "push", "bob"),
        (PATH, "merge", "alice"),
        (conflict, "conflict", "bob"),
        ("MEMORY.md", "disk", "(disk)"),
        (PATH, "delete", "alice"),
    ]
    assert conflict.startswith("memory/decisions.conflict-bob-")
    first_version = history.history(ALICE, path=PATH).versions[-1]
    assert (first_version.hash, first_version.updated_at) == (first, "2024-05-01T09:00:00Z")


def test_memory_get_reads_a_past_version_and_refuses_one_that_does_not_exist(service, history):
    replace(service, ALICE, "We use SQLite.\n")
    replace(service, ALICE, "We use Postgres.\n")
    old = history.history(ALICE, path=PATH).versions[-1]

    got = service.get(ALICE, PATH, version=old.version)

    assert (got.content, got.hash, got.version, got.exists) == ("We use SQLite.", old.hash, old.version, True)
    assert service.get(ALICE, PATH).content == "We use Postgres."
    with pytest.raises(InvalidArgumentError, match="has no version 999"):
        service.get(ALICE, PATH, version=999)
    for wrong in (0, 2**63):  # past a 64-bit revision the databases failed with an unmapped OverflowError
        with pytest.raises(InvalidArgumentError, match="version must be a whole number"):
            service.get(ALICE, PATH, version=wrong)
        with pytest.raises(InvalidArgumentError, match="version must be a whole number"):
            history.restore(ALICE, PATH, wrong)


@ON_SERVER_DISK
def test_memory_get_of_a_listed_version_whose_text_is_not_kept_says_so_and_names_one_that_can_be_read(
    service, history, tmp_path
):
    replace(service, ALICE, "We use SQLite.\n")
    (tmp_path / "data" / "indexes" / "proj" / "files" / PATH).write_bytes(b"caf\xe9 latin-1\n")  # not UTF-8
    listed = history.history(ALICE, path=PATH).versions
    assert [(v.version, v.change) for v in listed] == [(2, "disk"), (1, "write")]

    with pytest.raises(InvalidArgumentError) as refused:
        service.get(ALICE, PATH, version=2)

    assert str(refused.value) == (
        f"the text of version 2 of {PATH} is not kept (the file was over the size cap or not UTF-8 text then), so "
        "it cannot be read or restored; version 1 is the newest before it that can be"
    )
    assert service.get(ALICE, PATH, version=1).content == "We use SQLite."


def test_a_before_that_is_no_version_is_refused_naming_before(service, history):
    replace(service, ALICE, "We use SQLite.\n")
    for wrong in (0, 2**63, 2**80):
        with pytest.raises(InvalidArgumentError, match=r"^before must be a whole number from 1"):
            history.history(ALICE, path=PATH, before=wrong)


def test_an_overwrite_is_undone_by_a_restore_which_is_itself_undoable(service, history):
    replace(service, ALICE, "The staging host is kestrel.\n")
    replace(service, BOB, "oops\n")
    good, bad = history.history(ALICE, path=PATH).versions[::-1]

    restored = history.restore(ALICE, PATH, good.version)

    assert service.get(ALICE, PATH).content == "The staging host is kestrel."
    assert (restored.changed, restored.hash, restored.indexed) == (True, good.hash, True)
    assert service.search(ALICE, "staging host kestrel").hits[0].path == PATH
    newest = history.history(ALICE, path=PATH).versions[0]
    assert (newest.version, newest.change, newest.updated_by) == (restored.version, "restore", "alice")
    history.restore(ALICE, PATH, bad.version)  # undo the undo
    assert service.get(ALICE, PATH).content == "oops"
    again = history.restore(ALICE, PATH, bad.version)
    assert again.changed is False


def test_a_deleted_file_can_be_listed_and_restored(service, history):
    replace(service, ALICE, "Keep this.\n")
    replace(service, ALICE, "Keep this, edited.\n", path="memory/other.md")
    service.delete(ALICE, PATH)

    gone = history.history(ALICE, deleted=True)

    assert [(v.path, v.change, v.hash) for v in gone.versions] == [(PATH, "delete", None)]
    deleted = service.get(ALICE, PATH, version=gone.versions[0].version)
    assert (deleted.exists, deleted.updated_by) == (False, "alice")
    history.restore(ALICE, PATH, gone.versions[0].restore_version)
    assert service.get(ALICE, PATH).content == "Keep this."
    assert history.history(ALICE, deleted=True).versions == []


def test_history_pages_with_before_and_a_reader_may_list_but_not_restore(service, history):
    for n in range(5):
        replace(service, ALICE, f"version {n}\n")

    first = history.history(READER, path=PATH, limit=2)
    second = history.history(READER, path=PATH, limit=2, before=first.next_before)
    last = history.history(READER, path=PATH, limit=2, before=second.next_before)

    shown = [v.version for page in (first, second, last) for v in page.versions]
    assert shown == sorted(shown, reverse=True) and len(set(shown)) == 5
    assert last.next_before is None
    with pytest.raises(PermissionDeniedError):
        history.restore(READER, PATH, shown[-1])
    with pytest.raises(InvalidArgumentError, match="limit"):
        history.history(READER, limit=1000)


def test_status_shows_the_size_of_the_history(service):
    before = service.status(ALICE)
    replace(service, ALICE, "one\n" * 100)
    replace(service, ALICE, "two\n" * 100)

    after = service.status(ALICE)

    assert after.history_versions == before.history_versions + 2
    assert 0 < after.history_bytes < 2 * 400  # compressed


def test_history_survives_a_forced_reindex_a_lost_index_and_a_model_change(tmp_path, clock):
    data = tmp_path / "data"
    first = MemoryService(data, HashingEmbedder(), clock=clock)
    replace(first, ALICE, "alpha\n")
    replace(first, ALICE, "beta\n")
    first.sync(ALICE, force=True)
    first.close()
    (data / "indexes" / "proj" / "index.sqlite3").unlink(missing_ok=True)  # PostgreSQL: no local index to lose
    second = MemoryService(data, HashingEmbedder(model="hashing-v2", dimensions=32), clock=clock)
    try:
        versions = HistoryService(second).history(ALICE, path=PATH).versions
        assert [second.get(ALICE, PATH, version=v.version).content for v in versions] == ["beta", "alpha"]
    finally:
        second.close()


@pytest.mark.sqlite_only("the SQLite mirror renames the file inside its transaction")
def test_a_change_whose_transaction_fails_leaves_no_version_and_no_file(tmp_path, monkeypatch):
    mirror = Mirror(tmp_path / "idx")
    mirror.write(PATH, "kept\n", caller="alice")

    def broken(self: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr("server.mirror.files.Staged.publish", broken)
    with pytest.raises(OSError, match="disk full"):
        mirror.write(PATH, "lost\n", caller="alice")

    assert [v.hash for v in mirror.history.versions(PATH)] == [sha256_hex(b"kept\n")]
    assert mirror.read(PATH).text == "kept\n"  # type: ignore[union-attr]
    assert not list((tmp_path / "idx" / "files" / "memory").glob(".*.tmp"))
    mirror.close()


def test_retention_keeps_everything_for_a_while_then_the_last_version_of_each_day(tmp_path, clock, backend, request):
    retention = Retention(all_days=30, max_days=90)
    mirror = open_file_store(backend, request, tmp_path / "idx", clock=clock, retention=retention)
    for month, day in ((1, 1), (1, 2), (2, 1)):  # three versions a day
        for hour in (9, 12, 18):
            clock.now = dt.datetime(2024, month, day, hour, tzinfo=dt.UTC)
            mirror.write(PATH, f"{month}-{day} at {hour}\n", caller="alice")
    clock.now = dt.datetime(2024, 3, 20, 9, tzinfo=dt.UTC)
    mirror.write("memory/gone.md", "deleted long ago\n", caller="alice")
    mirror.delete("memory/gone.md", caller="alice")
    for hour in (9, 12):
        clock.now = dt.datetime(2024, 4, 20, hour, tzinfo=dt.UTC)
        mirror.write(PATH, f"recent {hour}\n", caller="alice")
    mirror.close()
    clock.now = dt.datetime(2024, 4, 25, tzinfo=dt.UTC)  # January is over 90 days old, February is not

    again = open_file_store(backend, request, tmp_path / "idx", clock=clock, retention=retention)
    again.write("memory/other.md", "any write prunes (at most hourly)\n", caller="alice")

    kept = [v.updated_at for v in again.history.versions(PATH)]
    assert kept == ["2024-04-20T12:00:00Z", "2024-04-20T09:00:00Z", "2024-02-01T18:00:00Z"]
    gone = [(v.change, again.history.get(v.path, v.revision)) for v in again.history.versions("memory/gone.md")]
    assert [change for change, _ in gone] == ["delete", "write"]  # the deleted file's last text stays restorable
    assert gone[1][1] is not None and gone[1][1].text == "deleted long ago\n"
    again.close()


@pytest.mark.sqlite_only("a migration of the SQLite state database")
def test_a_state_from_before_the_history_starts_it_with_each_files_current_version(tmp_path):
    mirror = Mirror(tmp_path / "idx")
    mirror.write(PATH, "from before\n", caller="alice")
    mirror.close()
    db = open_state(tmp_path / "idx")
    db.execute("DROP TABLE history; PRAGMA user_version = 3")
    db.close()

    again = Mirror(tmp_path / "idx")

    versions = again.history.versions()
    assert [(v.path, v.change, v.updated_by) for v in versions] == [(PATH, "before-history", "alice")]
    assert again.history.get(PATH, versions[0].revision).text == "from before\n"  # type: ignore[union-attr]
    db = open_state(tmp_path / "idx")
    assert db.execute("PRAGMA user_version").fetchall()[0][0] == STATE_SCHEMA_VERSION
    db.close()
    again.close()


def _bad_clock_writes(store: Mirror, clock: Clock, step: dt.timedelta) -> None:
    """One version with the clock right, then five a minute apart with the clock `step` off."""
    store.write(PATH, "v0, the clock right\n", caller="alice")
    clock.now += step
    for n in range(1, 6):
        clock.now += dt.timedelta(minutes=1)
        store.write(PATH, f"v{n}, the clock {step.days} days off\n", caller="alice")


def test_a_clock_set_back_for_a_few_minutes_loses_no_version_at_the_next_prune(tmp_path, clock, backend, request):
    store = open_file_store(backend, request, tmp_path / "idx", clock=clock)
    right = clock.now
    _bad_clock_writes(store, clock, -dt.timedelta(days=365))  # a VM resumed, a bad NTP source
    clock.now = right + dt.timedelta(hours=1, minutes=1)  # set right again; an hour later the prune is due
    store._pruned_at = 0.0  # what time.monotonic() does after PRUNE_SECONDS

    store.write("memory/other.md", "any write prunes\n", caller="bob")

    kept = [store.history.get(PATH, v.revision) for v in store.history.versions(PATH)]
    assert [v.text for v in kept if v is not None] == [f"v{n}, the clock -365 days off\n" for n in range(5, 0, -1)] + [
        "v0, the clock right\n"
    ]  # the old prune took them for a year old and dropped four
    store.close()


def test_a_clock_set_ahead_when_the_server_starts_loses_no_recent_version(tmp_path, clock, backend, request):
    retention = Retention(all_days=30, max_days=90)
    store = open_file_store(backend, request, tmp_path / "idx", clock=clock, retention=retention)
    for n in range(5):
        clock.now += dt.timedelta(minutes=1)
        store.write(PATH, f"v{n}\n", caller="alice")
    store.close()
    right = clock.now
    clock.now = right + dt.timedelta(days=365)  # restarted with a clock a year ahead: its first write prunes

    again = open_file_store(backend, request, tmp_path / "idx", clock=clock, retention=retention)
    again.write("memory/other.md", "x\n", caller="bob")
    clock.now = right + dt.timedelta(minutes=5)  # set right

    assert [v.revision for v in again.history.versions(PATH)] == [5, 4, 3, 2, 1]  # the old prune kept only 5
    again.close()


@pytest.mark.sqlite_only("drives the SQLite mirror's prune; PostgreSQL's stamps: tests/server/postgres/test_files.py")
def test_history_times_never_go_backwards_and_the_prune_waits_while_the_clock_reads_earlier(tmp_path, clock, caplog):
    store = Mirror(tmp_path / "idx", clock=clock)
    caplog.set_level(logging.WARNING, logger="server.mirror.records")
    store.write(PATH, "v0\n", caller="alice")
    clock.now -= dt.timedelta(days=365)
    for n in range(1, 4):
        store._pruned_at = 0.0  # a prune is due at each write
        store.write(PATH, f"v{n}\n", caller="alice")

    stamps = [v.updated_at for v in reversed(store.history.versions(PATH))]
    assert stamps == ["2024-05-01T09:00:00Z"] * 4  # the old server stamped three of them 2023
    assert store.state(PATH).updated_at == stamps[-1]  # type: ignore[union-attr]
    waits = [r.getMessage() for r in caplog.records if "earlier than the last recorded change" in r.getMessage()]
    assert len(waits) == 1  # logged once, not at every prune skipped
    store.close()


_FROM_SUBQUERY = re.compile(r"\b(?:FROM|JOIN)\s*\(", re.IGNORECASE)
_NOT_A_NAME = {"WHERE", "ORDER", "GROUP", "LIMIT", "UNION", "EXCEPT", "INTERSECT", "JOIN", "ON", "HAVING", "WINDOW"}


def _unnamed_subqueries(sql: str) -> list[str]:
    """The subqueries in FROM (or JOIN) of `sql` that have no alias, which PostgreSQL 15 and older refuse."""
    found = []
    for match in _FROM_SUBQUERY.finditer(sql):
        depth, at = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(sql[at], 0)
            at += 1
        name = re.match(r"\s*(?:AS\s+)?([A-Za-z_]\w*)", sql[at:], re.IGNORECASE)
        if name is None or name.group(1).upper() in _NOT_A_NAME:
            found.append(" ".join(sql[match.start() : at].split()))
    return found


def test_the_check_for_unnamed_subqueries_finds_them() -> None:
    assert _unnamed_subqueries("SELECT a FROM (SELECT a FROM t) WHERE a > 1") == ["FROM (SELECT a FROM t)"]
    assert _unnamed_subqueries("SELECT a FROM (SELECT (1) AS a) AS x WHERE a > 1") == []
    assert _unnamed_subqueries("SELECT a FROM t WHERE a IN (SELECT a FROM u)") == []


@pytest.mark.sqlite_only("traces the SQLite connection; the builders' text is the same on PostgreSQL")
def test_every_statement_of_the_history_and_the_mirror_names_its_subqueries_for_postgresql_15(tmp_path, clock):
    built = [
        h.history_sql(PATH, None, 5),
        h.deleted_sql("memory/", 9, 5),
        h.prune_history_sql(Retention(all_days=1, max_days=2), clock.now),
        q.changes_after(0, 5),
        q.states_of_paths([PATH, "MEMORY.md"]),
    ]
    statements = [sql for sql, _ in built]
    store = Mirror(tmp_path / "idx", clock=clock, retention=Retention(all_days=1, max_days=2))
    store._db.exec_trace = lambda _cursor, sql, _bindings: statements.append(sql) or True
    store.write(PATH, "one\n", caller="alice")
    store.write(PATH, "two\n", caller="alice")
    store.delete(PATH, caller="alice")
    store.history.versions(PATH)
    store.history.deleted()
    store.history.last_text(PATH, 9)
    clock.now += dt.timedelta(days=3)
    store._pruned_at = 0.0
    store.write("memory/other.md", "prunes\n", caller="alice")
    store.close()

    assert any("DELETE FROM history" in sql for sql in statements)  # the prune ran
    assert [found for sql in statements for found in _unnamed_subqueries(sql)] == []
