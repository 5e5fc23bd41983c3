"""Backups beside a busy server: a laptop uploading its transcript, or a tool rewriting memory files, right after
every copy of the state (forced by a hook, so every copy meets files newer than it). The backup succeeds from one
copy, and what it archives is what its state says: verified, restored, and served as recorded."""

from __future__ import annotations

import datetime as dt
import io
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import apsw
import pytest

from server.backup import snapshot
from server.backup.create import take_backup
from server.backup.restore import restore_archive
from server.cli import serve
from server.cli.main import main
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from server.sync.sessions import SessionUpload, SessionUploads
from syncproto.paths import session_file_path
from syncproto.wire import sha256_hex
from tests.fakes.embedder import HashingEmbedder

ALICE = CallerContext("alice", "SHA256:alice", {"team": "rw"}, "team", "rw")
DAY = dt.date(2026, 5, 1)
PART = [session_file_path("alice", DAY, "s1", number) for number in (1, 2)]
FILES = "indexes/team/files/"


@pytest.fixture
def serving(tmp_path: Path) -> Iterator[MemoryService]:
    """A serving server's service over a data folder of memory files (the folder is `tmp_path / "data"`)."""
    serve.ensure_server_key(tmp_path / "keys", out=io.StringIO())
    service = MemoryService(tmp_path / "data", HashingEmbedder(), rescan_interval=0.0)
    try:
        for number in range(6):
            text = f"# Host {number}\n\nThe staging host {number} is kestrel-{number}.\n"
            service.write(ALICE, text, path=f"memory/hosts/{number}.md", mode="replace", expected_hash="absent")
        yield service
    finally:
        service.close()


def _turns(count: int) -> str:
    return "# Session s1\n\n" + "".join(f"- turn {turn}: alice asked about kestrel\n" for turn in range(count))


def _upload(service: MemoryService, count: int, parts: tuple[tuple[int, str], ...]) -> None:
    """What a laptop's upload of session s1 does on the server (`POST /sync/sessions`)."""
    SessionUploads(service).upload(ALICE, SessionUpload("s1", DAY, count, parts))


def _write_after_every_state_copy(monkeypatch: pytest.MonkeyPatch, write: Callable[[int], None]) -> list[str]:
    """Make `write(n)` run right after the n-th copy of a state (n from 1), before its files are read; the names
    of the databases copied, in order."""
    copied: list[str] = []
    copy = snapshot.copy_database

    def copy_then_write(source: Path, target: Path, *, vec: bool = False) -> bool:
        done = copy(source, target, vec=vec)
        copied.append(source.name)
        if source.name == "state.sqlite3":
            write(copied.count("state.sqlite3"))
        return done

    monkeypatch.setattr(snapshot, "copy_database", copy_then_write)
    monkeypatch.setattr(snapshot, "RETRY_PAUSE", 0.0)
    return copied


def _backup(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    archive = tmp_path / "b.tar"
    manifest = take_backup(
        tmp_path / "data", tmp_path / "keys", archive, settings="", server_key=True, server_version="t"
    )
    return archive, manifest


def _archived_files(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {
            m.name.removeprefix(FILES): tar.extractfile(m).read()  # type: ignore[union-attr]
            for m in tar
            if m.name.startswith(FILES)
        }


def _archived_state(archive: Path, tmp_path: Path) -> dict[str, str | None]:
    """Path -> hash (None: a tombstone) of every row of the archive's state."""
    copy = tmp_path / "archived-state.sqlite3"
    with tarfile.open(archive) as tar:
        copy.write_bytes(tar.extractfile("indexes/team/state.sqlite3").read())  # type: ignore[union-attr]
    db = apsw.Connection(str(copy))
    try:
        return {
            str(path): None if digest is None else str(digest)
            for path, digest in db.execute("SELECT path, hash FROM files")
        }
    finally:
        db.close()


def _revision(data_dir: Path) -> int:
    db = apsw.Connection(str(data_dir / "indexes" / "team" / "state.sqlite3"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(db.execute("SELECT value FROM meta WHERE key = 'revision'").fetchall()[0][0])  # type: ignore[arg-type]
    finally:
        db.close()


def _restored_and_served(archive: Path, tmp_path: Path) -> dict[str, bytes]:
    """Restore `archive`, open a server on it and read every live file through it; path -> bytes served. The
    server finds nothing changed on its disk (its revision does not move): the files are what its state says."""
    restored = tmp_path / "restored"
    restore_archive(archive, restored / "data", restored / "keys")
    revision = _revision(restored / "data")
    service = MemoryService(restored / "data", HashingEmbedder(), rescan_interval=0.0)
    try:
        mirror = service.indexes.get("team").mirror
        served = {}
        for state in mirror.reconcile_all():
            read = mirror.read(state.path)
            assert read is not None and read.hash == state.hash == sha256_hex(read.text.encode("utf-8"))
            served[state.path] = read.text.encode("utf-8")
        assert mirror.revision() == revision
    finally:
        service.close()
    return served


def test_a_backup_beside_a_laptop_uploading_its_transcript_after_every_copy_succeeds_and_restores_as_archived(
    serving, tmp_path, monkeypatch
):
    _upload(serving, 1, ((1, _turns(1)),))
    revision = serving.indexes.get("team").mirror.revision()
    copied = _write_after_every_state_copy(monkeypatch, lambda n: _upload(serving, 1, ((1, _turns(1 + n)),)))

    archive, manifest = _backup(tmp_path)

    assert copied.count("state.sqlite3") == 1 and manifest["indexes"] == {"team": {"revision": revision, "files": 7}}
    files = _archived_files(archive)
    assert files[PART[0]] == _turns(2).encode()  # as the disk held it after the copy
    assert _archived_state(archive, tmp_path)[PART[0]] == sha256_hex(_turns(2).encode())
    assert main(["backup", "--verify", str(archive)]) == 0
    assert _restored_and_served(archive, tmp_path) == files


def test_a_transcript_part_an_upload_removed_after_the_copy_is_left_out_and_its_archived_state_says_removed(
    serving, tmp_path, monkeypatch
):
    _upload(serving, 2, ((1, _turns(1)), (2, _turns(2))))
    _write_after_every_state_copy(monkeypatch, lambda n: _upload(serving, 1, ((1, _turns(2 + n)),)))

    archive, manifest = _backup(tmp_path)

    assert manifest["indexes"]["team"]["files"] == 7  # type: ignore[index]
    files = _archived_files(archive)
    assert PART[1] not in files and files[PART[0]] == _turns(3).encode()
    state = _archived_state(archive, tmp_path)
    assert state[PART[1]] is None and state[PART[0]] == sha256_hex(_turns(3).encode())
    assert main(["backup", "--verify", str(archive)]) == 0
    assert PART[1] not in _restored_and_served(archive, tmp_path)


def test_memory_files_rewritten_after_every_copy_are_backed_up_even_one_recorded_before_versions_existed(
    serving, tmp_path, monkeypatch
):
    mirror = serving.indexes.get("team").mirror
    legacy = mirror.read("memory/hosts/3.md")
    assert legacy is not None
    state_db = apsw.Connection(str(tmp_path / "data" / "indexes" / "team" / "state.sqlite3"))
    with state_db:  # as a file recorded before the versions table existed: only the disk has its bytes
        state_db.execute("DELETE FROM versions WHERE hash = ?", (legacy.hash,))
    state_db.close()

    def rewrite(n: int) -> None:
        for path in ("memory/hosts/3.md", "memory/hosts/4.md"):
            current = serving.get(ALICE, path).hash
            serving.write(ALICE, f"# Host\n\nRewritten {n} times.\n", path=path, mode="replace", expected_hash=current)

    copied = _write_after_every_state_copy(monkeypatch, rewrite)

    archive, _ = _backup(tmp_path)

    # The legacy file's write stored its new bytes as a version: the second copy has them, whatever came after.
    assert copied.count("state.sqlite3") == 2
    files = _archived_files(archive)
    assert files["memory/hosts/3.md"] == files["memory/hosts/4.md"] == b"# Host\n\nRewritten 1 times.\n"
    assert main(["backup", "--verify", str(archive)]) == 0
    assert _restored_and_served(archive, tmp_path) == files
