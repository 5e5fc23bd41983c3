"""`memory-server status` and `memory-server backup` on a data folder an older version wrote, and may still be
serving while the operator upgrades: neither changes the schema of a live database, `status` starts no background
work, and the backup brings its own copies up to date instead."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import io
import json
import logging
import tarfile
import threading
from pathlib import Path

import apsw
import pytest

from server.backup import snapshot
from server.backup.create import take_backup
from server.backup.restore import restore_archive, verify_archive
from server.cli import serve
from server.cli.main import main
from server.errors import BackupError
from server.index import relabel
from server.index.migrations import SCHEMA_VERSION as INDEX_SCHEMA
from server.index.store import load_vec, vec_available
from server.indexes import registry
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from server.mirror.state import STATE_SCHEMA_VERSION
from syncproto.paths import session_file_path
from tests.fakes.embedder import HashingEmbedder

ALICE = CallerContext("alice", "SHA256:alice", {"team": "rw"}, "team", "rw")
SESSION = session_file_path("alice", dt.date(2026, 5, 1), "s1", 1)
OLDER = 3  # the schema of both databases before the version history (state) and labels (index)


def _write_folder(root: Path) -> Path:
    """A data folder written by this version: four memory files, a transcript, the keys; its index's folder."""
    serve.ensure_server_key(root / "keys", out=io.StringIO())
    service = MemoryService(root / "data", HashingEmbedder(), rescan_interval=0.0)
    try:
        for number in range(4):
            text = f"# Host {number}\n\nThe staging host {number} is kestrel-{number}.\n"
            service.write(ALICE, text, path=f"memory/hosts/{number}.md", mode="replace", expected_hash="absent")
        service.indexes.get("team").mirror.write(SESSION, "alice talked about kestrel\n", caller="alice")
    finally:
        service.close()
    return root / "data" / "indexes" / "team"


def _step_back(index: Path) -> None:
    """Make both databases what the version before history and labels wrote (schema 3): the tables and columns
    migration 4 of each added are taken away again."""
    assert (STATE_SCHEMA_VERSION, INDEX_SCHEMA) == (4, 4), "a newer migration: take it away here too"
    state = apsw.Connection(str(index / "state.sqlite3"))
    try:
        state.execute(f"DROP TABLE history; PRAGMA user_version = {OLDER}")
    finally:
        state.close()
    db = apsw.Connection(str(index / "index.sqlite3"))
    try:
        if vec_available():
            load_vec(db)
        db.execute(
            "DROP INDEX chunks_by_category; DROP TABLE chunk_tags;"
            " ALTER TABLE chunks DROP COLUMN tags; ALTER TABLE chunks DROP COLUMN category;"
            f" PRAGMA user_version = {OLDER}"
        )
    finally:
        db.close()


@pytest.fixture
def older(tmp_path: Path) -> Path:
    """The index folder of a data folder an older version wrote (`tmp_path/data`, keys in `tmp_path/keys`)."""
    index = _write_folder(tmp_path)
    _step_back(index)
    return index


def _schema(path: Path) -> int:
    db = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(db.execute("PRAGMA user_version").fetchall()[0][0])
    finally:
        db.close()


def _folder(index: Path) -> dict[str, str]:
    """Every file of the index's own folder (not its memory files) by name, with its sha256."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in index.iterdir() if p.is_file()}


def _status(data: Path, *options: str) -> int:
    return main(["--data-dir", str(data), "status", "--index", "team", *options])


@pytest.fixture
def hashing_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI embeds with the fixtures' model (nothing is embedded: the status only compares its name)."""
    monkeypatch.setattr(importlib.import_module("server.cli.main"), "_embedder", lambda args: HashingEmbedder())


def _engine_threads() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(("rebuild-", "relabel-", "rechunk-"))}


def test_status_of_an_index_an_older_version_wrote_changes_nothing_and_says_the_server_upgrades_it(
    older, hashing_cli, capsys, caplog
):
    before = _folder(older)
    capsys.readouterr()

    assert _status(older.parents[1], "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert _status(older.parents[1]) == 0
    text = capsys.readouterr().out

    assert report["schema_version"] == OLDER
    assert report["schema_notice"] == (
        f"written by an older version (schema {OLDER}; this one knows {INDEX_SCHEMA}); "
        "the server upgrades it on its next start"
    )
    assert f"schema {OLDER} — written by an older version" in text
    assert report["files"] == {"memory": 4} and report["vector_state"] == "ready"
    assert report["model"] == "hashing-v1" and report["pending_vectors"] == 0
    assert _folder(older) == before  # no migration, no new file, not a byte changed
    assert _schema(older / "index.sqlite3") == OLDER and _schema(older / "state.sqlite3") == OLDER
    assert not _engine_threads() and not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_status_beside_a_serving_server_reads_what_it_committed_and_leaves_its_files_alone(
    tmp_path, hashing_cli, capsys
):
    _write_folder(tmp_path)
    serving = MemoryService(tmp_path / "data", HashingEmbedder(), rescan_interval=0.0)
    try:  # the server holds the database open in WAL mode: its last write may be in the WAL only
        serving.write(ALICE, "# Late\n\nWritten while the status ran.\n", path="memory/late.md")
        index = tmp_path / "data" / "indexes" / "team"
        assert (index / "index.sqlite3-wal").exists()
        capsys.readouterr()

        assert _status(tmp_path / "data", "--json") == 0
        report = json.loads(capsys.readouterr().out)

        assert report["files"] == {"memory": 5} and report["schema_notice"] is None
        assert report["schema_version"] == INDEX_SCHEMA
        serving.write(ALICE, "# Later\n\nStill served.\n", path="memory/later.md")  # the server writes on
    finally:
        serving.close()


def test_status_of_a_damaged_index_says_the_server_rebuilds_it_and_sets_nothing_aside(tmp_path, hashing_cli, capsys):
    index = _write_folder(tmp_path)
    (index / "index.sqlite3").write_bytes(b"not a database at all " * 400)
    before = _folder(index)

    assert _status(tmp_path / "data") == 1

    assert "is damaged; the server sets it aside and rebuilds it from the files" in capsys.readouterr().err
    assert _folder(index) == before and not _engine_threads()


def test_a_backup_beside_an_older_server_leaves_its_databases_at_their_schema_and_archives_copies_brought_up_to_date(
    older, tmp_path, caplog
):
    by_hand = older / "files" / "memory" / "by-hand.md"
    by_hand.write_text("# By hand\n\nPut here behind the server.\n", "utf-8")
    server = apsw.Connection(str(older / "state.sqlite3"))  # the older server, serving: its state open in WAL mode
    try:
        server.execute("PRAGMA journal_mode=WAL").fetchall()
        revision = server.execute("SELECT value FROM meta WHERE key = 'revision'").fetchall()
        archive = tmp_path / "b.tar"

        manifest = take_backup(tmp_path / "data", tmp_path / "keys", archive, settings="", server_key=True,
                               server_version="t")  # fmt: skip

        assert server.execute("PRAGMA user_version").fetchall() == [(OLDER,)]  # as that server left it
        assert not server.execute("SELECT 1 FROM sqlite_master WHERE name = 'history'").fetchall()
        assert server.execute("SELECT value FROM meta WHERE key = 'revision'").fetchall() == revision
        # What that server records itself when it lists the folder, the backup left to it:
        assert not server.execute("SELECT 1 FROM files WHERE path = 'memory/by-hand.md'").fetchall()
    finally:
        server.close()
    assert _schema(older / "index.sqlite3") == OLDER
    assert "its state was written by an older version (schema 3; this one knows 4) and is left as it is" in caplog.text

    assert manifest["indexes"]["team"]["files"] == 5  # four memory files and the transcript, as recorded
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "indexes/team/files/memory/by-hand.md" not in names
    verify_archive(archive)
    restore_archive(archive, tmp_path / "r" / "data", tmp_path / "r" / "keys")
    restored = tmp_path / "r" / "data" / "indexes" / "team"
    assert _schema(restored / "state.sqlite3") == STATE_SCHEMA_VERSION  # the archive's copies: this version's
    assert _schema(restored / "index.sqlite3") == INDEX_SCHEMA
    service = MemoryService(tmp_path / "r" / "data", HashingEmbedder(), rescan_interval=0.0)
    try:
        versions = service.indexes.get("team").mirror.history.versions("memory/hosts/2.md")
        assert [v.change for v in versions] == ["before-history"]
        assert "kestrel-2" in service.get(ALICE, "memory/hosts/2.md").content
    finally:
        service.close()


def test_a_memory_file_edited_by_hand_behind_an_older_server_that_kept_no_copy_fails_the_backup_saying_what_to_do(
    older, tmp_path, monkeypatch
):
    monkeypatch.setattr(snapshot, "RETRY_PAUSE", 0.0)
    state = apsw.Connection(str(older / "state.sqlite3"))
    try:  # an older server that kept no version of this file's content: only the disk had it
        state.execute("DELETE FROM versions WHERE hash = (SELECT hash FROM files WHERE path = 'memory/hosts/1.md')")
    finally:
        state.close()
    (older / "files" / "memory" / "hosts" / "1.md").write_text("# Host 1\n\nEdited by hand.\n", "utf-8")
    before = _folder(older)

    with pytest.raises(BackupError, match=r"memory/hosts/1\.md was changed on disk behind the server.*back up again"):
        take_backup(tmp_path / "data", tmp_path / "keys", tmp_path / "b.tar", settings="", server_key=True,
                    server_version="t")  # fmt: skip

    assert _folder(older) == before and _schema(older / "state.sqlite3") == OLDER
    assert not (tmp_path / "b.tar").exists()


def test_while_an_upgraded_index_is_chunked_again_search_and_status_say_the_server_does_it_not_memory_sync(
    older, monkeypatch
):
    waiting = threading.Event()  # the re-chunk after the upgrade, held back until the end of the test
    monkeypatch.setattr(relabel, "_relabel", lambda index: waiting.wait(30))
    monkeypatch.setattr(registry, "AUTO_INDEX_FILES", 1)  # a search indexes one changed file, not all four
    service = MemoryService(older.parents[1], HashingEmbedder(), rescan_interval=0.0)
    try:
        found = service.search(ALICE, "staging host kestrel")
        status = service.status(ALICE)
    finally:
        waiting.set()
        service.close()
    assert found.hits  # the old chunks answer meanwhile
    assert found.notice is not None and "re-reading 4 files for their tags" in found.notice
    assert "memory_sync" not in found.notice and found.pending_files == 0
    assert status.pending_files == 0


def test_a_data_folder_moved_while_upgraded_is_chunked_again_from_its_new_place(older, tmp_path):
    moved = tmp_path / "moved"
    older.parents[1].rename(moved)  # index.json still names the old place's files
    service = MemoryService(moved, HashingEmbedder(), rescan_interval=0.0)
    try:
        handle = service.indexes.get("team")
        thread = handle.index.relabel_thread
        assert thread is not None
        thread.join(30)
        assert all(handle.index.indexed_files().values())  # every file chunked again, none left waiting
        assert service.search(ALICE, "staging host kestrel-2").hits[0].path == "memory/hosts/2.md"
    finally:
        service.close()
