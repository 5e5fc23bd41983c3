"""The mirror: atomic writes, the state record (revisions, tombstones, who and when), links refused, disk edits."""

from __future__ import annotations

import datetime as dt
import os
import resource
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import server.mirror.files as mirror_module
import server.mirror.mirror as mirror_mirror
import server.mirror.state as mirror_state
from server.errors import ConflictError, UnsafePathError
from server.index.errors import EngineError, InvalidArgumentError
from server.memory.text import count_lines_of_bytes
from server.mirror.mirror import (
    ABSENT,
    DISK,
    LEFTOVER_AGE_NS,
    STATE_SCHEMA_VERSION,
    IdempotencyRecord,
    Mirror,
    sha256_hex,
)
from tests.postgres_support import ON_SERVER_DISK, open_file_store


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += dt.timedelta(**delta)


# PostgreSQL keeps the files in the database and no copy of them on disk.
ON_DISK_COPY = pytest.mark.sqlite_only("reads the SQLite mirror's files on disk")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def mirror(tmp_path: Path, clock: Clock, backend: str, request: pytest.FixtureRequest) -> Iterator[Mirror]:
    m = open_file_store(backend, request, tmp_path / "idx", clock=clock, max_file_bytes=4096)
    yield m
    m.close()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    (folder / "memory").mkdir(parents=True)
    (folder / "secret.md").write_text("outside secret\n")
    (folder / "memory" / "x.md").write_text("outside memory\n")
    return folder


def test_a_written_file_reads_back_with_its_hash_lines_and_author(mirror: Mirror) -> None:
    state = mirror.write("memory/notes.md", "one\ntwo\n", caller="alice")
    assert state.hash == sha256_hex(b"one\ntwo\n")
    assert (state.lines, state.size, state.revision) == (2, 8, 1)
    got = mirror.read("memory/notes.md")
    assert got is not None
    assert (got.text, got.hash, got.lines, got.updated_by, got.updated_at) == (
        "one\ntwo\n",
        state.hash,
        2,
        "alice",
        "2024-05-01T09:30:00Z",
    )


@ON_DISK_COPY
def test_a_written_file_is_on_the_sqlite_mirrors_disk(mirror: Mirror) -> None:
    mirror.write("memory/notes.md", "one\ntwo\n", caller="alice")
    assert (mirror.files_dir / "memory" / "notes.md").read_bytes() == b"one\ntwo\n"


def test_a_missing_file_reads_as_none(mirror: Mirror) -> None:
    assert mirror.read("MEMORY.md") is None
    assert mirror.read("memory/deep/er/x.md") is None


def test_every_change_bumps_the_one_revision_counter_of_the_index(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "a", caller="alice")
    mirror.write("memory/b.md", "b", caller="bob")
    mirror.write("memory/a.md", "a2", caller="bob")
    mirror.delete("memory/b.md", caller="alice")
    assert mirror.revision() == 4
    changes = mirror.changes_since(1)
    assert [(c.path, c.revision, c.deleted, c.updated_by) for c in changes] == [
        ("memory/a.md", 3, False, "bob"),
        ("memory/b.md", 4, True, "alice"),
    ]
    assert mirror.changes_since(4) == []


def test_writing_identical_content_changes_nothing(mirror: Mirror) -> None:
    first = mirror.write("memory/a.md", "same", caller="alice")
    again = mirror.write("memory/a.md", "same", caller="bob")
    assert again.revision == first.revision == mirror.revision()
    assert again.updated_by == "alice"


def test_expected_hash_absent_creates_only_a_new_file(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "first", caller="alice", expected_hash=ABSENT)
    with pytest.raises(ConflictError, match="already exists") as caught:
        mirror.write("memory/a.md", "second", caller="bob", expected_hash=ABSENT)
    assert caught.value.current_hash == sha256_hex(b"first")
    assert mirror.read("memory/a.md").text == "first"  # type: ignore[union-attr]


def test_a_stale_expected_hash_is_refused_and_names_the_current_hash(mirror: Mirror) -> None:
    old = mirror.write("memory/a.md", "v1", caller="alice")
    new = mirror.write("memory/a.md", "v2", caller="bob", expected_hash=old.hash)
    with pytest.raises(ConflictError) as caught:
        mirror.write("memory/a.md", "v3", caller="alice", expected_hash=old.hash)
    assert new.hash in str(caught.value)
    assert caught.value.current_hash == new.hash
    assert mirror.read("memory/a.md").text == "v2"  # type: ignore[union-attr]
    with pytest.raises(ConflictError, match="does not exist"):
        mirror.write("memory/b.md", "x", caller="alice", expected_hash=old.hash)


def test_concurrent_replaces_on_the_same_hash_let_exactly_one_win(mirror: Mirror) -> None:
    base = mirror.write("memory/a.md", "base", caller="alice")
    outcomes: list[str] = []

    def replace(n: int) -> None:
        try:
            mirror.write("memory/a.md", f"writer {n}", caller=f"w{n}", expected_hash=base.hash)
            outcomes.append("won")
        except ConflictError:
            outcomes.append("lost")

    threads = [threading.Thread(target=replace, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]


@ON_DISK_COPY
def test_writes_leave_no_temporary_files(mirror: Mirror) -> None:
    for n in range(5):
        mirror.write("memory/a.md", f"version {n}", caller="alice")
    assert sorted(p.name for p in (mirror.files_dir / "memory").iterdir()) == ["a.md"]


@pytest.mark.parametrize("name", ["n" * 252 + ".md", "é" * 126 + ".md", "n" * 236 + ".md"])
def test_a_file_whose_name_is_as_long_as_a_path_part_may_be_is_written_rewritten_and_deleted(
    mirror: Mirror, name: str
) -> None:
    path = f"memory/{name}"
    first = mirror.write(path, "v1", caller="alice")
    second = mirror.write(path, "v2", caller="alice", expected_hash=first.hash)
    assert (file := mirror.read(path)) is not None and file.hash == second.hash
    assert mirror.delete(path, caller="alice") is not None and mirror.read(path) is None


@ON_DISK_COPY
def test_a_temporary_file_left_by_a_crash_is_never_taken_for_a_memory_file(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "x", caller="alice")
    (mirror.files_dir / "memory" / ".0123456789abcdef.tmp").write_text("half written")
    assert [f.path for f in mirror.list()] == ["memory/a.md"]


@ON_DISK_COPY
def test_hidden_files_a_crash_left_over_an_hour_ago_are_removed_and_nothing_else(mirror: Mirror) -> None:
    mirror.write("memory/notes/a.md", "x", caller="alice")
    folder = mirror.files_dir / "memory" / "notes"
    old = time.time() - LEFTOVER_AGE_NS / 10**9 - 60
    names = {
        ".0123456789abcdef.tmp": old,  # a staged write or a deleted file set aside, by a process that died
        ".fedcba9876543210.tmp": time.time(),  # recent: another process's may be under way
        ".vim-a.md.swp": old,  # not the mirror's
        ".0123456789ABCDEF.tmp": old,
    }
    for name, mtime in names.items():
        (folder / name).write_text("left behind")
        os.utime(folder / name, (mtime, mtime))
    assert [f.path for f in mirror.list()] == ["memory/notes/a.md"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(set(names) - {".0123456789abcdef.tmp"} | {"a.md"})


@ON_DISK_COPY
def test_a_same_size_rewrite_gets_a_later_mtime(mirror: Mirror) -> None:
    target = mirror.files_dir / "memory" / "a.md"
    mirror.write("memory/a.md", "aaaa", caller="alice")
    first = target.stat().st_mtime_ns
    mirror.write("memory/a.md", "bbbb", caller="alice")
    assert target.stat().st_mtime_ns > first


def test_delete_leaves_a_tombstone_and_a_missing_file_is_not_deleted(mirror: Mirror) -> None:
    written = mirror.write("memory/a.md", "bye", caller="alice")
    previous = mirror.delete("memory/a.md", caller="bob")
    assert previous is not None and previous.hash == written.hash
    assert not (mirror.files_dir / "memory" / "a.md").exists()
    tomb = mirror.state("memory/a.md")
    assert tomb is not None and tomb.deleted and tomb.updated_by == "bob"
    assert mirror.read("memory/a.md") is None
    assert mirror.delete("memory/a.md", caller="bob") is None


def test_delete_with_a_stale_hash_keeps_the_file(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "keep me", caller="alice")
    with pytest.raises(ConflictError):
        mirror.delete("memory/a.md", caller="bob", expected_hash="0" * 64)
    assert mirror.read("memory/a.md").text == "keep me"  # type: ignore[union-attr]


def test_size_and_encoding_limits(mirror: Mirror) -> None:
    with pytest.raises(InvalidArgumentError, match="larger than 4096"):
        mirror.write("memory/a.md", "x" * 4097, caller="alice")
    with pytest.raises(InvalidArgumentError, match="NUL"):
        mirror.write("memory/a.md", "a\x00b", caller="alice")
    with pytest.raises(InvalidArgumentError, match="surrogate"):
        mirror.write("memory/a.md", "a\ud800b", caller="alice")
    assert mirror.read("memory/a.md") is None


@ON_SERVER_DISK
def test_files_on_disk_over_the_cap_or_not_utf8_are_refused_on_read(mirror: Mirror) -> None:
    (mirror.files_dir / "memory").mkdir(exist_ok=True)
    (mirror.files_dir / "memory" / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(InvalidArgumentError, match="not UTF-8"):
        mirror.read("memory/latin1.md")
    (mirror.files_dir / "memory" / "big.md").write_text("y" * 5000)
    with pytest.raises(InvalidArgumentError, match="larger than"):
        mirror.read("memory/big.md")


def test_paths_go_through_the_gate(mirror: Mirror) -> None:
    for bad in ("../x.md", "/etc/passwd", "memory/../../x.md", "memory/.git/x.md", "notes.txt"):
        with pytest.raises(InvalidArgumentError):
            mirror.write(bad, "x", caller="alice")
        with pytest.raises(InvalidArgumentError):
            mirror.read(bad)


# links planted in the mirror ----------------------------------------------------------------------------


@ON_SERVER_DISK
def test_a_symlinked_memory_folder_is_refused_for_every_operation(mirror: Mirror, outside: Path) -> None:
    os.symlink(outside / "memory", mirror.files_dir / "memory")
    with pytest.raises(UnsafePathError, match="symbolic link"):
        mirror.read("memory/x.md")
    with pytest.raises(UnsafePathError):
        mirror.write("memory/x.md", "overwrite", caller="alice")
    with pytest.raises(UnsafePathError):
        mirror.write("memory/new.md", "new", caller="alice")
    with pytest.raises(UnsafePathError):
        mirror.delete("memory/x.md", caller="alice")
    assert mirror.list() == []
    assert (outside / "memory" / "x.md").read_text() == "outside memory\n"
    assert sorted(p.name for p in (outside / "memory").iterdir()) == ["x.md"]


@ON_SERVER_DISK
def test_a_symlinked_nested_folder_is_refused(mirror: Mirror, outside: Path) -> None:
    mirror.write("memory/real.md", "real", caller="alice")
    os.symlink(outside / "memory", mirror.files_dir / "memory" / "sub")
    with pytest.raises(UnsafePathError):
        mirror.read("memory/sub/x.md")
    with pytest.raises(UnsafePathError):
        mirror.write("memory/sub/y.md", "y", caller="alice")
    assert [f.path for f in mirror.list()] == ["memory/real.md"]
    assert not (outside / "memory" / "y.md").exists()


@ON_SERVER_DISK
def test_a_symlinked_file_is_refused_and_its_target_untouched(mirror: Mirror, outside: Path) -> None:
    (mirror.files_dir / "memory").mkdir()
    os.symlink(outside / "secret.md", mirror.files_dir / "memory" / "link.md")
    os.symlink(outside / "secret.md", mirror.files_dir / "MEMORY.md")
    for path in ("memory/link.md", "MEMORY.md"):
        with pytest.raises(UnsafePathError):
            mirror.read(path)
        with pytest.raises(UnsafePathError):
            mirror.write(path, "pwned", caller="alice")
        with pytest.raises(UnsafePathError):
            mirror.delete(path, caller="alice")
    assert mirror.list() == []
    assert (outside / "secret.md").read_text() == "outside secret\n"
    assert (mirror.files_dir / "memory" / "link.md").is_symlink()


@ON_SERVER_DISK
def test_a_dangling_symlink_is_not_created_through(mirror: Mirror, tmp_path: Path) -> None:
    (mirror.files_dir / "memory").mkdir()
    os.symlink(tmp_path / "nowhere.md", mirror.files_dir / "memory" / "ghost.md")
    with pytest.raises(UnsafePathError):
        mirror.write("memory/ghost.md", "x", caller="alice", expected_hash=ABSENT)
    assert not (tmp_path / "nowhere.md").exists()


@ON_SERVER_DISK
def test_a_folder_or_fifo_where_a_file_should_be_is_refused(mirror: Mirror) -> None:
    (mirror.files_dir / "memory" / "dir.md").mkdir(parents=True)
    os.mkfifo(mirror.files_dir / "memory" / "pipe.md")
    for path in ("memory/dir.md", "memory/pipe.md"):
        with pytest.raises(UnsafePathError):
            mirror.read(path)
        with pytest.raises(UnsafePathError):
            mirror.write(path, "x", caller="alice")
    assert mirror.list() == []


@ON_SERVER_DISK
def test_a_file_where_a_folder_should_be_is_refused(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "x", caller="alice")
    with pytest.raises(UnsafePathError):
        mirror.write("memory/a.md/b.md", "x", caller="alice")


# changes made on disk -----------------------------------------------------------------------------------


@ON_SERVER_DISK
def test_a_file_edited_on_disk_is_recorded_as_changed_by_disk(mirror: Mirror, clock: Clock) -> None:
    mirror.write("memory/a.md", "v1\n", caller="alice")
    clock.advance(minutes=5)
    (mirror.files_dir / "memory" / "a.md").write_text("edited by the operator\n")
    got = mirror.read("memory/a.md")
    assert got is not None
    assert (got.text, got.updated_by, got.updated_at, got.revision) == (
        "edited by the operator\n",
        DISK,
        "2024-05-01T09:35:00Z",
        2,
    )
    assert mirror.read("memory/a.md").revision == 2  # type: ignore[union-attr]


@ON_SERVER_DISK
def test_listing_records_new_edited_and_vanished_files(mirror: Mirror) -> None:
    mirror.write("memory/keep.md", "keep", caller="alice")
    mirror.write("memory/gone.md", "gone", caller="alice")
    mirror.write("memory/edit.md", "edit", caller="alice")
    (mirror.files_dir / "memory" / "gone.md").unlink()
    (mirror.files_dir / "memory" / "edit.md").write_text("edited, and longer")
    (mirror.files_dir / "MEMORY.md").write_text("# new on disk\n")
    (mirror.files_dir / "memory" / "ignored.txt").write_text("not memory")
    (mirror.files_dir / "other").mkdir()
    (mirror.files_dir / "other" / "x.md").write_text("outside the rules")
    files = {f.path: f for f in mirror.list()}
    assert sorted(files) == ["MEMORY.md", "memory/edit.md", "memory/keep.md"]
    assert files["MEMORY.md"].updated_by == DISK and files["MEMORY.md"].lines == 1
    assert files["memory/edit.md"].updated_by == DISK
    assert files["memory/keep.md"].updated_by == "alice"
    gone = mirror.state("memory/gone.md")
    assert gone is not None and gone.deleted and gone.updated_by == DISK
    revision = mirror.revision()
    mirror.list()
    assert mirror.revision() == revision  # nothing new: nothing recorded


@ON_DISK_COPY
def test_a_touched_but_unchanged_file_is_not_a_change(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "same", caller="alice")
    os.utime(mirror.files_dir / "memory" / "a.md", ns=(1, 1))
    mirror.list()
    assert mirror.state("memory/a.md").updated_by == "alice"  # type: ignore[union-attr]


def test_list_filters_by_prefix_and_by_day(mirror: Mirror) -> None:
    for path in ("MEMORY.md", "memory/2024-04-30.md", "memory/2024-05-01.md", "memory/team/2024-05-02.md"):
        mirror.write(path, "x", caller="alice")
    mirror.write("memory/notes.md", "x", caller="alice")
    assert [f.path for f in mirror.list("memory/2024")] == ["memory/2024-04-30.md", "memory/2024-05-01.md"]
    assert [f.path for f in mirror.list(date_from="2024-05-01")] == [
        "memory/2024-05-01.md",
        "memory/team/2024-05-02.md",
    ]
    assert [f.path for f in mirror.list(date_to="2024-04-30")] == ["memory/2024-04-30.md"]


# idempotency and the state database -------------------------------------------------------------------


def test_idempotency_records_are_kept_per_caller_and_expire(mirror: Mirror, clock: Clock) -> None:
    record = IdempotencyRecord("alice", "k1", "req", '{"ok": 1}')
    mirror.write("memory/a.md", "x", caller="alice", record=record)
    assert mirror.recall("alice", "k1") == record
    assert mirror.recall("bob", "k1") is None
    clock.advance(days=8)
    mirror.remember(IdempotencyRecord("alice", "k2", "req", "{}"))
    assert mirror.recall("alice", "k1") is None
    assert mirror.recall("alice", "k2") is not None


def test_a_failed_write_stores_no_idempotency_record(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "x", caller="alice")
    with pytest.raises(ConflictError):
        mirror.write(
            "memory/a.md", "y", caller="alice", expected_hash=ABSENT, record=IdempotencyRecord("alice", "k", "r", "{}")
        )
    assert mirror.recall("alice", "k") is None


def _failing_at(point: str):
    """A fault point that fails the change there, inside its transaction, as a commit on a full disk would."""

    def fault(name: str) -> None:
        if name == point:
            raise apsw.FullError("database or disk is full")

    return fault


@ON_DISK_COPY
def test_a_write_whose_state_is_not_committed_leaves_the_file_as_it_was_and_a_retry_writes_once(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = mirror.write("memory/a.md", "first\n", caller="alice")
    record = IdempotencyRecord("alice", "k1", "r", "{}")
    monkeypatch.setattr(mirror_mirror, "fault_point", _failing_at("mirror.write.published"))
    with pytest.raises(apsw.FullError):
        mirror.write("memory/a.md", "first\nsecond\n", caller="alice", record=record)
    monkeypatch.undo()
    assert (mirror.files_dir / "memory" / "a.md").read_text() == "first\n"
    assert sorted(p.name for p in (mirror.files_dir / "memory").iterdir()) == ["a.md"]
    assert mirror.recall("alice", "k1") is None and mirror.revision() == first.revision
    assert [v.change for v in mirror.history.versions("memory/a.md")] == ["write"]  # no change "by disk"
    mirror.write("memory/a.md", "first\nsecond\n", caller="alice", record=record)
    assert (mirror.files_dir / "memory" / "a.md").read_text() == "first\nsecond\n"


@ON_DISK_COPY
def test_a_new_file_whose_state_is_not_committed_is_not_left_on_disk(
    mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mirror_mirror, "fault_point", _failing_at("mirror.write.published"))
    with pytest.raises(apsw.FullError):
        mirror.write("memory/new.md", "text", caller="alice")
    monkeypatch.undo()
    assert list((mirror.files_dir / "memory").iterdir()) == [] and mirror.list() == []


@ON_DISK_COPY
def test_a_delete_whose_state_is_not_committed_keeps_the_file(mirror: Mirror, monkeypatch: pytest.MonkeyPatch) -> None:
    written = mirror.write("memory/a.md", "keep me", caller="alice")
    monkeypatch.setattr(mirror_mirror, "fault_point", _failing_at("mirror.delete.unlinked"))
    with pytest.raises(apsw.FullError):
        mirror.delete("memory/a.md", caller="alice")
    monkeypatch.undo()
    assert sorted(p.name for p in (mirror.files_dir / "memory").iterdir()) == ["a.md"]
    assert (kept := mirror.read("memory/a.md")) is not None and kept.revision == written.revision


@ON_DISK_COPY
def test_a_write_whose_commit_cannot_grow_the_state_file_leaves_the_file_as_it_was(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "first\n", caller="alice")
    mirror._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the next commit must append to the empty log
    before = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2048, hard))  # the staged file fits, a page of the log does not
    try:
        with pytest.raises(apsw.IOError):
            mirror.write("memory/a.md", "first\nsecond\n", caller="alice")
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, before)
    assert (mirror.files_dir / "memory" / "a.md").read_text() == "first\n"
    assert [v.change for v in mirror.history.versions("memory/a.md")] == ["write"]


def test_state_survives_reopening_and_carries_a_schema_version(tmp_path: Path, clock: Clock) -> None:
    first = Mirror(tmp_path / "idx", clock=clock)
    first.write("memory/a.md", "x", caller="alice")
    first.close()
    again = Mirror(tmp_path / "idx", clock=clock)
    try:
        assert again.revision() == 1
        assert again.read("memory/a.md").updated_by == "alice"  # type: ignore[union-attr]
    finally:
        again.close()
    db = apsw.Connection(str(tmp_path / "idx" / "state.sqlite3"))
    assert db.execute("PRAGMA user_version").fetchall()[0][0] == STATE_SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
    db.execute(f"PRAGMA user_version = {STATE_SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(EngineError, match="newer"):
        Mirror(tmp_path / "idx", clock=clock)


@ON_SERVER_DISK
def test_a_file_over_the_cap_on_disk_is_listed_but_never_loaded(mirror: Mirror) -> None:
    (mirror.files_dir / "memory").mkdir()
    data = b"line\r\n" * 2000 + b"tail"  # 12,004 bytes, cap 4,096
    (mirror.files_dir / "memory" / "huge.md").write_bytes(data)
    [entry] = mirror.list()
    assert (entry.path, entry.size, entry.lines, entry.hash) == ("memory/huge.md", len(data), 2001, sha256_hex(data))
    with pytest.raises(InvalidArgumentError, match="larger than 4096"):
        mirror.read("memory/huge.md")


@ON_SERVER_DISK
def test_a_file_over_the_cap_on_disk_is_neither_deleted_nor_replaced_as_its_bytes_could_not_be_brought_back(
    mirror: Mirror,
) -> None:
    mirror.write("memory/huge.md", "small start\n", caller="alice")
    data = b"important line\n" * 300  # 4,500 bytes, cap 4,096: never held, so never kept as a version
    (mirror.files_dir / "memory" / "huge.md").write_bytes(data)
    [entry] = mirror.list()
    for change in (
        lambda: mirror.delete("memory/huge.md", caller="alice", expected_hash=entry.hash),
        lambda: mirror.write("memory/huge.md", "new\n", caller="alice", expected_hash=entry.hash),
        lambda: mirror.write("memory/huge.md", "new\n", caller="alice"),
    ):
        with pytest.raises(InvalidArgumentError, match="its text is not kept, so this could not be undone"):
            change()
    assert (mirror.files_dir / "memory" / "huge.md").read_bytes() == data
    assert [v.hash for v in mirror.history.versions("memory/huge.md")] == [entry.hash, sha256_hex(b"small start\n")]


@ON_SERVER_DISK
def test_a_file_whose_bytes_no_version_keeps_is_kept_before_it_is_replaced(mirror: Mirror) -> None:
    mirror.write("memory/a.md", "first\n", caller="alice")
    digest = sha256_hex(b"first\n")
    with mirror.lock:  # as a state from before versions were kept has it
        mirror._db.execute("DELETE FROM versions WHERE hash = ?", (digest,))
    assert mirror.version_text(digest) == "first\n"  # read from the file on disk while it is there

    mirror.write("memory/a.md", "second\n", caller="alice", expected_hash=digest)

    assert mirror.version_text(digest) == "first\n"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64).map(lambda b: b.replace(b"\x00", b"")), st.integers(min_value=1, max_value=8))
def test_streamed_line_counts_match_whole_file_counts(data: bytes, block: int) -> None:
    read, write = os.pipe()
    try:
        os.write(write, data)
        os.close(write)
        write = -1
        original = mirror_module._READ_BLOCK
        mirror_module._READ_BLOCK = block
        try:
            snapshot = mirror_module._read_snapshot(read, 0, max_bytes=min(len(data), 3) - 1 if data else 0)
        finally:
            mirror_module._READ_BLOCK = original
    finally:
        os.close(read)
        if write >= 0:
            os.close(write)
    assert snapshot.digest == sha256_hex(data)
    assert snapshot.size == len(data)
    assert snapshot.lines == count_lines_of_bytes(data)


# versions, change listeners, callers' sync ------------------------------------------------------------------


def test_every_written_version_stays_readable_as_a_merge_base_until_pruned(tmp_path: Path, clock: Clock) -> None:
    changes: list[int] = []
    mirror = Mirror(tmp_path / "idx", clock=clock, on_change=lambda: changes.append(1))
    try:
        mirror.write("memory/a.md", "first\n", caller="alice")
        mirror.write("memory/a.md", "second\n", caller="alice")
        plant_on_disk = mirror.files_dir / "memory" / "a.md"
        plant_on_disk.write_text("third, by hand\n")
        mirror.reconcile_all()
        assert mirror.version_text(sha256_hex(b"first\n")) == "first\n"
        assert mirror.version_text(sha256_hex(b"third, by hand\n")) == "third, by hand\n"
        assert mirror.version_text("0" * 64) is None
        assert len(changes) == 3  # two writes and one change found on disk
        clock.advance(days=31)
        mirror.write("memory/b.md", "a month later\n", caller="alice")
        mirror.close()
        # Reopened: the prune reckons with no later time than the last change before it opened, plus the time
        # since by the monotonic clock (a month on the fake clock alone is no month).
        mirror = Mirror(tmp_path / "idx", clock=clock)
        mirror.write("memory/b.md", "other\n", caller="alice")  # pruning runs with a write
        assert mirror.version_text(sha256_hex(b"first\n")) is None
        assert mirror.version_text(sha256_hex(b"third, by hand\n")) == "third, by hand\n"  # still current
    finally:
        mirror.close()


def test_a_failing_change_listener_never_fails_the_write(
    tmp_path: Path, clock: Clock, backend: str, request: pytest.FixtureRequest
) -> None:
    def broken() -> None:
        raise RuntimeError("listener bug")

    mirror = open_file_store(backend, request, tmp_path / "idx", clock=clock, on_change=broken)
    try:
        assert mirror.write("memory/a.md", "kept\n", caller="alice").hash == sha256_hex(b"kept\n")
    finally:
        mirror.close()


def test_held_change_notices_are_sent_once_when_the_block_ends_and_only_for_that_thread(
    tmp_path: Path, clock: Clock, backend: str, request: pytest.FixtureRequest
) -> None:
    changes: list[str] = []
    heard = lambda: changes.append(threading.current_thread().name)  # noqa: E731
    mirror = open_file_store(backend, request, tmp_path / "idx", clock=clock, on_change=heard)
    try:
        with mirror.holding_changes():
            mirror.write("memory/a.md", "one\n", caller="alice")
            with mirror.holding_changes():
                mirror.write("memory/b.md", "two\n", caller="alice")
            assert changes == []  # the inner block does not release the outer one's notices
            other = threading.Thread(target=lambda: mirror.write("memory/c.md", "three\n", caller="bob"), name="other")
            other.start()
            other.join()
            assert changes == ["other"]  # another thread's write is not held
            mirror.delete("memory/a.md", caller="alice")
            assert changes == ["other"]
        assert changes == ["other", threading.current_thread().name]
        with mirror.holding_changes():
            pass
        assert len(changes) == 2  # nothing changed, nothing sent
    finally:
        mirror.close()


def test_each_callers_last_pull_and_push_are_kept(mirror: Mirror, clock: Clock) -> None:
    mirror.record_sync("alice", "push", 3)
    clock.advance(minutes=1)
    mirror.record_sync("alice", "pull", 4)
    mirror.record_sync("bob", "pull", 2)
    alice, bob = mirror.sync_callers()
    assert (alice.caller, alice.pushed_revision, alice.pulled_revision) == ("alice", 3, 4)
    assert (alice.last_push_at, alice.last_pull_at) == ("2024-05-01T09:30:00Z", "2024-05-01T09:31:00Z")
    assert (bob.caller, bob.pushed_revision, bob.last_push_at) == ("bob", None, None)


def test_a_version_1_state_file_is_migrated_keeping_its_records(tmp_path: Path, clock: Clock) -> None:
    folder = tmp_path / "idx"
    folder.mkdir()
    db = apsw.Connection(str(folder / "state.sqlite3"))
    mirror_state.MIGRATIONS[0](db)
    db.execute("PRAGMA user_version = 1")
    db.execute("INSERT INTO files VALUES('memory/a.md', NULL, 0, 0, 0, 7, 'alice', '2024-01-01T00:00:00Z')")
    db.execute("UPDATE meta SET value = '7' WHERE key = 'revision'")
    db.close()
    mirror = Mirror(folder, clock=clock)
    try:
        assert mirror.revision() == 7 and mirror.state("memory/a.md") is not None
        assert mirror.write("memory/a.md", "back\n", caller="bob").revision == 8
        assert mirror.version_text(sha256_hex(b"back\n")) == "back\n"
    finally:
        mirror.close()
