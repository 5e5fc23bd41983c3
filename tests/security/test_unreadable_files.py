"""Finding 3: a file the server cannot read (no permission, over the size cap, not UTF-8) is never treated as
deleted: every laptop keeps its copy, and memory_status lists the file. The real server and a real `memory-proxy`
process; the permission case in process (the tests run as root, whom no file mode stops).

Such a file can be undone: a restore, a whole-file replace with its hash, or a laptop's push whose base is its hash
replace it, keeping its bytes as a version; what needs its text (an append) is refused, saying so. A file over the
size cap, whose bytes are never kept, is neither replaced nor deleted (that could not be undone), and the version a
deleted file's restore offers is always one whose text is kept. In process, with the real service."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.errors import InvalidArgumentError
from server.memory.history import HistoryService
from server.memory.service import CallerContext, MemoryService
from server.mirror.mirror import Mirror
from server.mirror.state import load_version
from server.sync.service import SyncService
from syncproto.messages import PushChange
from syncproto.wire import sha256_hex
from tests.fakes.embedder import HashingEmbedder
from tests.sync_support import Laptop, ProductServer, eventually

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("damage", ["not utf-8", "over the size cap"])
async def test_a_file_the_server_cannot_send_is_kept_on_every_laptop_and_listed_in_status(tmp_path, damage):
    server = ProductServer(tmp_path / "server", HashingEmbedder(), {"bob": {"team": "rw"}})
    bob = Laptop(tmp_path / "bob", server, "bob", "team")
    bob.write("memory/notes.md", "the deploy runbook\n")
    server.start()
    try:
        with bob.bare():
            await eventually(lambda: server.text("team", "memory/notes.md") is not None, "the first push")
            files = server.data_dir / "indexes" / "team" / "files"
            broken = b"\xff\xfe not text\n" if damage == "not utf-8" else b"x" * (2 * 1024 * 1024 + 1)
            # in one step, as a rename: a file written in place can be read empty halfway, which is a real edit
            staged = files / "memory" / ".notes.md.staged"
            staged.write_bytes(broken)
            os.replace(staged, files / "memory" / "notes.md")
            (files / "memory" / "pulled.md").write_text("pulled after the damage\n")  # the pull's marker
            await eventually(lambda: bob.read("memory/pulled.md") is not None, "the pull after the damage")
        assert bob.read("memory/notes.md") == "the deploy runbook\n"  # the old server deleted it here
        assert server.service is not None
        status = server.service.status(CallerContext("bob", "SHA256:b", {"team": "rw"}, "team", "rw"))
        assert list(status.unreadable) == ["memory/notes.md"]
    finally:
        server.stop()


def test_a_mirror_file_without_read_permission_keeps_its_state(tmp_path, monkeypatch):
    mirror = Mirror(tmp_path / "idx")
    mirror.write("memory/secret-plans.md", "kept\n", caller="alice")
    revision = mirror.revision()
    target = mirror.files_dir / "memory" / "secret-plans.md"
    os.utime(target, ns=(1, 1))  # changed on disk: the next listing looks at it again
    real_open = os.open

    def denied(path, flags, *args, **kwargs):
        if os.fspath(path) == "secret-plans.md":
            raise PermissionError(errno.EACCES, "Permission denied")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", denied)
    listed = [state.path for state in mirror.reconcile_all()]
    monkeypatch.undo()
    assert listed == ["memory/secret-plans.md"]  # the old mirror recorded a deletion here
    assert mirror.revision() == revision
    assert "memory/secret-plans.md" in mirror.unreadable
    mirror.close()


ALICE = CallerContext("alice", "SHA256:a", {"team": "rw"}, "team", "rw")
NOTES = "memory/notes.md"
DAMAGE = {"not utf-8": b"half \xff\xfe written\n", "NUL bytes": b"ok\x00\x00\x00\n"}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path / "data", HashingEmbedder(), rescan_interval=0.0)
    yield running
    running.close()


def _damaged(service: MemoryService, data: bytes, path: str = NOTES) -> tuple[Mirror, str]:
    """`path` written as good text, then its bytes on the server's disk replaced by `data`; the mirror, and the
    hash memory_list shows for it."""
    service.write(ALICE, "The good text.\n", path=path, mode="replace", expected_hash="absent")
    mirror = service.open_index(ALICE).mirror
    (mirror.files_dir / path).write_bytes(data)
    [listed] = [f for f in service.list(ALICE).files if f.path == path]
    assert listed.hash == sha256_hex(data)
    return mirror, listed.hash


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_file_damaged_on_the_servers_disk_is_undone_by_a_restore_keeping_its_bytes(service, damage):
    mirror, damaged = _damaged(service, DAMAGE[damage])
    history = HistoryService(service)
    good = history.history(ALICE, path=NOTES).versions[-1]

    restored = history.restore(ALICE, NOTES, good.version)  # refused before: the damaged text could not be read

    assert (restored.changed, service.get(ALICE, NOTES).content) == (True, "The good text.")
    assert load_version(mirror._db, damaged) == DAMAGE[damage]  # the damaged bytes stay a version
    assert NOTES not in mirror.unreadable


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_file_damaged_on_the_servers_disk_is_replaced_by_a_write_with_its_hash(service, damage):
    mirror, damaged = _damaged(service, DAMAGE[damage])
    with pytest.raises(InvalidArgumentError, match="so an append cannot be made to it; replace the whole file"):
        service.write(ALICE, "more\n", path=NOTES)
    with pytest.raises(InvalidArgumentError, match="so a write to one section cannot be made"):
        service.write(ALICE, "more\n", path=NOTES, mode="replace", heading="Notes", expected_hash="absent")

    written = service.write(ALICE, "Fixed.\n", path=NOTES, mode="replace", expected_hash=damaged)

    assert service.get(ALICE, NOTES).hash == written.hash == sha256_hex(b"Fixed.\n")
    assert load_version(mirror._db, damaged) == DAMAGE[damage]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_laptops_push_over_a_damaged_file_is_applied_when_its_base_is_the_files_hash(service, damage):
    mirror, damaged = _damaged(service, DAMAGE[damage])
    sync = SyncService(service)
    good = sha256_hex(b"The good text.\n")

    _, [stale] = sync.push(ALICE, [PushChange(NOTES, good, "Edited on a laptop.\n")])  # nothing to merge with
    _, [fixed] = sync.push(ALICE, [PushChange(NOTES, damaged, "Fixed from a laptop.\n")])

    assert (stale.status, fixed.status) == ("rejected", "applied")
    assert service.get(ALICE, NOTES).content == "Fixed from a laptop."
    assert load_version(mirror._db, damaged) == DAMAGE[damage]


def test_a_file_grown_past_the_size_cap_is_neither_deleted_nor_replaced_as_that_could_not_be_undone(service):
    big = b"important line\n" * (2 * 1024 * 1024 // 15 + 10)  # just over the 2 MiB cap: its bytes are never held
    mirror, damaged = _damaged(service, big)
    history, sync = HistoryService(service), SyncService(service)
    good = history.history(ALICE, path=NOTES).versions[-1]
    refused = "its text is not kept, so this could not be undone"

    for change in (
        lambda: service.delete(ALICE, NOTES),
        lambda: service.write(ALICE, "new\n", path=NOTES, mode="replace", expected_hash=damaged),
        lambda: history.restore(ALICE, NOTES, good.version),
    ):
        with pytest.raises(InvalidArgumentError, match=refused):
            change()
    _, results = sync.push(ALICE, [PushChange(NOTES, damaged, "new\n"), PushChange(NOTES, damaged, None)])

    assert [(r.status, refused in (r.message or "")) for r in results] == [("rejected", True)] * 2
    assert (mirror.files_dir / NOTES).read_bytes() == big  # the old server deleted it for good


@pytest.mark.parametrize("damage", ["over the size cap", "NUL bytes"])
def test_a_deleted_file_offers_the_newest_version_whose_text_can_be_restored(service, damage):
    data = b"x" * (2 * 1024 * 1024 + 1) if damage == "over the size cap" else DAMAGE["NUL bytes"]
    mirror, _ = _damaged(service, data)
    (mirror.files_dir / NOTES).unlink()  # removed on the server's disk, after it was damaged
    service.list(ALICE)
    history = HistoryService(service)

    [deleted] = history.history(ALICE, deleted=True).versions
    good = history.history(ALICE, path=NOTES).versions[-1]

    assert deleted.restore_version == good.version  # it offered the damaged version, which cannot come back
    history.restore(ALICE, NOTES, deleted.restore_version)
    assert service.get(ALICE, NOTES).content == "The good text."
