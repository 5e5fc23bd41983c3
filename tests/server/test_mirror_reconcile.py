"""Changes made on disk, recorded beside another process writing the same mirror (the server, while a backup opens
its own mirror on the folder): what is recorded as by `"(disk)"` is what the disk holds, and neither process's
write is refused for the other's. The other process is a second `Mirror` on the same folder, its write forced into
the window by a hook."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

import server.mirror.mirror as mirror_mirror
from server.mirror.files import Snapshot, take_snapshot
from server.mirror.mirror import DISK, Mirror, sha256_hex

PATH = "memory/x.md"
V1, V2 = "# X\n\nversion 1\n", "# X\n\nversion 2\n"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    return tmp_path / "team"


@pytest.fixture
def server(folder: Path) -> Iterator[Mirror]:
    mirror = Mirror(folder)
    yield mirror
    mirror.close()


@pytest.fixture
def backup(folder: Path, server: Mirror) -> Iterator[Mirror]:
    """The backup's own mirror on the server's folder (a connection of its own, as from another process)."""
    mirror = Mirror(folder)
    yield mirror
    mirror.close()


def _after_reading(monkeypatch: pytest.MonkeyPatch, then: Callable[[], None], *, read: int = 1) -> list[int]:
    """Run `then` right after the `read`-th read of PATH on disk returns; how many reads of PATH there were when
    `then` ran (empty while it did not)."""
    reads, ran = [0], list[int]()

    def take_then(files_dir: Path, path: str, max_bytes: int, *, quiet: bool = False) -> Snapshot | None:
        got = take_snapshot(files_dir, path, max_bytes, quiet=quiet)
        if path == PATH:
            reads[0] += 1
            if reads[0] == read:
                then()
                ran.append(read)
        return got

    monkeypatch.setattr(mirror_mirror, "take_snapshot", take_then)
    return ran


def _connection(mirror: Mirror) -> apsw.Connection:
    assert isinstance(mirror._db, apsw.Connection)
    return mirror._db


def _reconcile(mirror: Mirror, how: str) -> None:
    if how == "listing":
        mirror.reconcile_all()
    else:
        mirror.read(PATH)


def _disk(server: Mirror) -> str | None:
    on_disk = server.files_dir / PATH
    return on_disk.read_text() if on_disk.exists() else None


def _digest(text: str | None) -> str | None:
    return None if text is None else sha256_hex(text.encode())


@pytest.mark.parametrize(
    ("how", "before", "after"),
    [
        ("listing", V1, V2),
        ("read", V1, V2),
        ("listing", V1, None),
        ("read", V1, None),
        ("read", None, V1),  # a listing reads no file that is not there
    ],
    ids=["write-listing", "write-read", "delete-listing", "delete-read", "create-read"],
)
def test_a_change_by_another_process_between_the_disk_read_and_the_row_read_is_not_recorded_as_made_on_disk(
    server: Mirror, backup: Mirror, monkeypatch: pytest.MonkeyPatch, how: str, before: str | None, after: str | None
) -> None:
    if before is not None:
        server.write(PATH, before, caller="alice")
        os.utime(server.files_dir / PATH, ns=(1, 1))  # a write in flight moved the mtime: the listing reads it
    else:
        server.write("memory/other.md", "other\n", caller="alice")

    def the_server_changes_it() -> None:
        if after is None:
            server.delete(PATH, caller="alice")
        else:
            server.write(PATH, after, caller="alice")

    ran = _after_reading(monkeypatch, the_server_changes_it)
    _reconcile(backup, how)
    monkeypatch.undo()

    assert ran == [1]
    assert _disk(server) == after
    state = backup.state(PATH)
    assert state is not None and state.hash == _digest(after) and state.updated_by == "alice"
    assert [v.updated_by for v in backup.history.versions()].count(DISK) == 0
    backup.reconcile_all()
    assert backup.state(PATH) == state  # nothing left to record either


def test_a_file_changed_on_disk_again_while_it_is_recorded_is_recorded_as_the_disk_holds_it(
    server: Mirror, backup: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.write(PATH, V1, caller="alice")
    (server.files_dir / PATH).write_text("edited by hand\n")

    def edited_again() -> None:
        (server.files_dir / PATH).write_text("edited by hand, twice\n")

    ran = _after_reading(monkeypatch, edited_again)
    got = backup.read(PATH)
    monkeypatch.undo()

    assert ran == [1]
    assert got is not None and (got.text, got.hash, got.updated_by) == (
        "edited by hand, twice\n",
        _digest("edited by hand, twice\n"),
        DISK,
    )
    assert [(v.change, v.hash) for v in backup.history.versions(PATH)] == [
        ("disk", _digest("edited by hand, twice\n")),
        ("write", _digest(V1)),
    ]


def test_a_write_by_another_process_waits_while_a_change_on_disk_is_read_again_and_recorded(
    server: Mirror, backup: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.write(PATH, V1, caller="alice")
    (server.files_dir / PATH).write_text("edited by hand\n")
    _connection(server).set_busy_timeout(0)  # told to wait rather than waiting
    refused: list[apsw.BusyError] = []

    def the_server_writes() -> None:
        try:
            server.write(PATH, V2, caller="alice")
        except apsw.BusyError as exc:
            refused.append(exc)

    ran = _after_reading(monkeypatch, the_server_writes, read=2)  # the second read: under the write lock
    recorded = backup.read(PATH)
    monkeypatch.undo()

    assert ran == [2] and len(refused) == 1 and recorded is not None and recorded.text == "edited by hand\n"
    assert _disk(server) == "edited by hand\n"  # the refused write left the file as it was
    written = server.write(PATH, V2, caller="alice")  # once the lock is free
    assert backup.state(PATH) == written and _disk(server) == V2


def test_a_write_is_not_refused_when_another_process_commits_between_its_first_read_and_its_first_write(
    server: Mirror, backup: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.write(PATH, V1, caller="alice")
    _connection(backup).set_busy_timeout(0)  # told to wait rather than waiting
    other: list[str] = []
    revision = server._revision

    def revision_then_the_other_commits() -> int:
        number = revision()
        if _connection(server).in_transaction and not other:
            try:
                backup.record_sync("bob", "pull", number)
                other.append("committed")
            except apsw.BusyError:
                other.append("waits")
        return number

    monkeypatch.setattr(server, "_revision", revision_then_the_other_commits)
    written = server.write(PATH, V2, caller="alice")
    monkeypatch.undo()

    assert other == ["waits"] and _disk(server) == V2 and backup.state(PATH) == written
    backup.record_sync("bob", "pull", written.revision)  # once the lock is free
    assert [(c.caller, c.pulled_revision) for c in backup.sync_callers()] == [("bob", written.revision)]
