"""Backups in process: a real MemoryService (SQLite, sqlite-vec, the mirror) backed up, checked and restored; damaged
and hostile archives refused before anything is written; provider keys never archived."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
import json
import logging
import os
import random
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from server.backup import archive as backup_archive
from server.backup import snapshot
from server.backup.archive import Member, write_archive
from server.backup.create import take_backup
from server.backup.restore import restore_archive, verify_archive
from server.cli import serve
from server.cli.main import main
from server.errors import BackupError, DamagedArchiveError
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.rechunk import CHUNKING_KEY
from server.index.tuning import chunker_config, chunking_identity
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from server.settings import VARIABLES, Settings
from syncproto.paths import session_file_path, set_extra_folders
from syncproto.wire import MAX_FILE_BYTES
from tests.fakes.embedder import HashingEmbedder

ALICE = CallerContext("alice", "SHA256:alice", {"team": "rw"}, "team", "rw")
SESSION = session_file_path("alice", dt.date(2026, 5, 1), "s1", 1)
QUERIES = ("kestrel staging host", "blue-green deploys", "what did alice say in the session")
CANARY = "sk-proj-canary0123456789abcdefABCDEF0123456789"
SMALL = EngineSettings(chunker=chunker_config(64, 8))  # other chunking than the fixture's: a re-chunk


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A data folder with memory files, an overwrite (history), a session transcript (no versions) and keys."""
    serve.ensure_server_key(tmp_path / "keys", out=io.StringIO())
    service = MemoryService(tmp_path / "data", HashingEmbedder(), rescan_interval=0.0)
    try:
        for number in range(12):
            text = f"# Host {number}\n\nThe staging host {number} is kestrel-{number}; deploys are blue-green.\n"
            service.write(ALICE, text, path=f"memory/hosts/{number}.md", mode="replace", expected_hash="absent")
        first = service.get(ALICE, "memory/hosts/0.md")
        retired = "# Host 0\n\nRetired.\n"
        service.write(ALICE, retired, path="memory/hosts/0.md", mode="replace", expected_hash=first.hash)
        service.indexes.get("team").mirror.write(SESSION, "alice said the session was about kestrel\n", caller="alice")
    finally:
        service.close()
    return tmp_path


def _answers(data_dir: Path) -> list[list[tuple[str, int, float, str]]]:
    service = MemoryService(data_dir, HashingEmbedder(), rescan_interval=0.0)
    try:
        return [
            [(hit.path, hit.start_line, hit.score, hit.snippet) for hit in service.search(ALICE, query).hits]
            for query in QUERIES
        ]
    finally:
        service.close()


def _backup(folder: Path, target: Path | None = None) -> Path:
    target = target or folder / "backup.tar"
    take_backup(folder / "data", folder / "keys", target, settings="", server_key=True, server_version="test")
    return target


def test_a_restored_folder_answers_the_same_searches_with_its_history_and_transcripts(folder, tmp_path):
    before = _answers(folder / "data")
    archive = _backup(folder)
    restored = tmp_path / "restored"

    manifest = restore_archive(archive, restored / "data", restored / "keys")

    assert manifest["indexes"] == {"team": {"revision": 14, "files": 13}}
    assert _answers(restored / "data") == before and all(before)
    mirror = restored / "data" / "indexes" / "team" / "files"
    assert (mirror / SESSION).read_text("utf-8") == "alice said the session was about kestrel\n"
    service = MemoryService(restored / "data", HashingEmbedder())
    try:
        versions = service.indexes.get("team").mirror.history.versions("memory/hosts/0.md")
        assert [v.change for v in versions] == ["write", "write"]
    finally:
        service.close()
    assert (restored / "keys" / "server.key").read_bytes() == (folder / "keys" / "server.key").read_bytes()


def test_the_server_key_is_restored_private_and_the_archive_is_written_private(folder, tmp_path):
    archive = _backup(folder)
    restore_archive(archive, tmp_path / "r" / "data", tmp_path / "r" / "keys")

    assert stat.S_IMODE(archive.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "r" / "keys" / "server.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "r" / "keys").stat().st_mode) == 0o700


def test_a_transcript_changed_after_the_state_copy_is_archived_at_its_new_content_from_that_copy(folder, monkeypatch):
    copies = []
    copy = snapshot.copy_database

    def copy_then_append(source: Path, target: Path, *, vec: bool = False) -> bool:
        done = copy(source, target, vec=vec)
        if source.name == "state.sqlite3" and not copies:
            service = MemoryService(folder / "data", HashingEmbedder())
            try:  # the server appends to the transcript right after the copy: the disk no longer matches it
                service.indexes.get("team").mirror.write(SESSION, "appended later\n", caller="alice")
            finally:
                service.close()
        copies.append(source.name)
        return done

    monkeypatch.setattr(snapshot, "copy_database", copy_then_append)
    manifest = take_backup(
        folder / "data", folder / "keys", folder / "b.tar", settings="", server_key=True, server_version="t"
    )

    assert copies.count("state.sqlite3") == 1 and manifest["indexes"]["team"] == {"revision": 14, "files": 13}
    assert _members(folder / "b.tar")[f"indexes/team/files/{SESSION}"] == b"appended later\n"
    verify_archive(folder / "b.tar")  # and the archived state records that content


def test_a_memory_file_too_large_to_keep_rewritten_behind_the_server_after_every_copy_fails_the_backup(
    folder, monkeypatch
):
    # Over the cap, the mirror keeps no version of it: only the disk has its content, and a script keeps changing it.
    big = folder / "data" / "indexes" / "team" / "files" / "memory" / "big.md"
    big.write_bytes(b"# Big\n" + b"x" * MAX_FILE_BYTES)
    monkeypatch.setattr(snapshot, "RETRY_PAUSE", 0.0)
    copy = snapshot.copy_database
    writes = iter(range(1000))

    def copy_then_rewrite(source: Path, target: Path, *, vec: bool = False) -> bool:
        done = copy(source, target, vec=vec)
        if source.name == "state.sqlite3":
            big.write_bytes(f"# Big {next(writes)}\n".encode() + b"x" * MAX_FILE_BYTES)
        return done

    monkeypatch.setattr(snapshot, "copy_database", copy_then_rewrite)
    with pytest.raises(BackupError, match=r"memory/big\.md\); try again when the server is quieter"):
        _backup(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["data", "keys"]


@pytest.mark.parametrize("edit", ["removed", "edited"])
def test_a_transcript_changed_on_disk_behind_the_server_is_recorded_and_backed_up_as_the_disk_holds_it(
    folder, monkeypatch, edit
):
    monkeypatch.setattr(snapshot, "RETRY_PAUSE", 0.0)
    session = folder / "data" / "indexes" / "team" / "files" / SESSION
    if edit == "removed":
        session.unlink()
    else:
        session.write_text("edited behind the server's back\n", "utf-8")

    manifest = take_backup(
        folder / "data", folder / "keys", folder / "b.tar", settings="", server_key=True, server_version="t"
    )

    assert manifest["indexes"]["team"] == {"revision": 15, "files": 13 if edit == "edited" else 12}
    with tarfile.open(folder / "b.tar") as tar:
        names = tar.getnames()
        if edit == "removed":
            assert f"indexes/team/files/{SESSION}" not in names
        else:
            member = tar.extractfile(f"indexes/team/files/{SESSION}")
            assert member is not None and member.read() == b"edited behind the server's back\n"
    verify_archive(folder / "b.tar")


def _rechunk(data_dir: Path) -> str:
    """Cut the index again with other settings, as the server does after a chunk_tokens change; the live file."""
    index = MemoryIndex.open(data_dir, "team", HashingEmbedder(), settings=SMALL)
    try:
        assert index.rechunker.run() is True
        return index.db_path.name
    finally:
        index.close()


def test_a_rechunked_index_is_restored_with_its_search_index_and_nothing_is_embedded_again(folder, tmp_path):
    assert _rechunk(folder / "data").startswith("index-")  # the live search index is index-<n>.sqlite3 now
    archive = _backup(folder)
    restore_archive(archive, tmp_path / "r" / "data", tmp_path / "r" / "keys")

    embedder = HashingEmbedder()
    index = MemoryIndex.open(tmp_path / "r" / "data", "team", embedder, settings=SMALL)
    try:
        report = index.index()  # what the restored server's first search or sync runs
        assert embedder.embedded == 0 and report.chunks_embedded == 0 and not index.needs_rebuild
        assert index.db_path.name == "index.sqlite3"
    finally:
        index.close()
    description = json.loads((tmp_path / "r" / "data" / "indexes" / "team" / "index.json").read_text("utf-8"))
    assert "database" not in description and "next_database" not in description


def test_a_search_index_swapped_in_by_a_rechunk_during_the_copy_is_copied_again(folder, tmp_path, monkeypatch):
    copied: list[str] = []
    copy = snapshot.copy_database

    def copy_then_rechunk(source: Path, target: Path, *, vec: bool = False) -> bool:
        done = copy(source, target, vec=vec)
        copied.append(source.name)
        if copied == ["state.sqlite3", "index.sqlite3"]:  # the swap comes right after the first copy of it
            _rechunk(folder / "data")
        return done

    monkeypatch.setattr(snapshot, "copy_database", copy_then_rechunk)
    archive = _backup(folder)

    assert copied[-1].startswith("index-")
    archived = tmp_path / "archived.sqlite3"
    archived.write_bytes(_members(archive)["indexes/team/index.sqlite3"])
    db = apsw.Connection(str(archived))
    try:
        marks = db.execute("SELECT value FROM meta WHERE key = ?", (CHUNKING_KEY,)).fetchall()
    finally:
        db.close()
    assert marks == [(chunking_identity(SMALL.chunker),)]  # the re-chunked database, not the one it replaced


@pytest.mark.parametrize("server", ["stopped", "serving"])
def test_a_memory_file_put_on_the_servers_disk_but_not_yet_recorded_is_backed_up_and_restored(folder, tmp_path, server):
    on_disk = folder / "data" / "indexes" / "team" / "files" / "memory" / "decisions.md"
    on_disk.write_text("# Decisions\n\nWe chose PostgreSQL for billing.\n", "utf-8")
    serving = MemoryService(folder / "data", HashingEmbedder(), rescan_interval=0.0) if server == "serving" else None
    try:
        manifest = take_backup(
            folder / "data", folder / "keys", folder / "b.tar", settings="", server_key=True, server_version="t"
        )
        if serving is not None:  # the serving server reads the change the backup recorded as its own
            assert serving.get(ALICE, "memory/decisions.md").updated_by == "(disk)"
    finally:
        if serving is not None:
            serving.close()

    assert manifest["indexes"]["team"] == {"revision": 15, "files": 14}
    restore_archive(folder / "b.tar", tmp_path / "r" / "data", tmp_path / "r" / "keys")
    restored = MemoryService(tmp_path / "r" / "data", HashingEmbedder(), rescan_interval=0.0)
    try:
        assert "We chose PostgreSQL for billing." in restored.get(ALICE, "memory/decisions.md").content
    finally:
        restored.close()


def test_an_archive_of_a_server_with_extra_folders_is_backed_up_verified_and_restored_without_that_setting(
    folder, tmp_path
):
    set_extra_folders(["notes"])  # the backed-up server's MEMORY_EXTRA_PATHS
    try:
        service = MemoryService(folder / "data", HashingEmbedder(), rescan_interval=0.0)
        try:
            service.write(ALICE, "# Deploys\n\nBlue-green.\n", path="notes/deploys.md", expected_hash="absent")
        finally:
            service.close()
    finally:
        set_extra_folders(())  # the backup, verify and restore run without it
    archive = _backup(folder)

    assert verify_archive(archive)["indexes"]["team"]["files"] == 14
    restore_archive(archive, tmp_path / "r" / "data", tmp_path / "r" / "keys")
    restored = tmp_path / "r" / "data" / "indexes" / "team" / "files" / "notes" / "deploys.md"
    assert restored.read_text("utf-8") == "# Deploys\n\nBlue-green.\n"


@pytest.mark.parametrize("database", ["state.sqlite3", "index.sqlite3"])
def test_an_archive_a_newer_server_took_is_refused_by_verify_and_restore_before_anything_is_written(
    folder, tmp_path, capsys, database
):
    members = _members(_backup(folder))
    newer = tmp_path / "newer.sqlite3"
    newer.write_bytes(members[f"indexes/team/{database}"])
    db = apsw.Connection(str(newer))
    db.execute("PRAGMA user_version = 99")  # a schema past every migration this server has
    db.close()
    members[f"indexes/team/{database}"] = newer.read_bytes()
    forged = _rewritten(tmp_path / "newer.tar", members)
    capsys.readouterr()

    assert main(["backup", "--verify", str(forged)]) == 1
    assert f"team/{database} was taken by a newer server (schema 99" in capsys.readouterr().err
    target = tmp_path / "restored"
    assert main(["--data-dir", str(target / "data"), "--keys-dir", str(target / "keys"), "restore", str(forged)]) == 1
    assert "restore it with that version" in capsys.readouterr().err
    assert not (target / "data").exists() and not (target / "keys").exists()


def test_an_archive_without_the_search_index_its_description_names_is_sound_and_verify_and_restore_say_it_is_rebuilt(
    folder, tmp_path, capsys, caplog
):
    # What older versions archived after a re-chunk: an index.json naming the live index-<n>.sqlite3, not archived.
    members = _members(_backup(folder))
    description = json.loads(members["indexes/team/index.json"])
    members["indexes/team/index.json"] = json.dumps({**description, "database": "index-17.sqlite3"}).encode()
    forged = _rewritten(tmp_path / "older.tar", members)
    said = (
        "index 'team': the archive lacks its search index (index-17.sqlite3, which its index.json names); "
        "a restore rebuilds it from the files, embedding every chunk again (nothing is lost)"
    )
    capsys.readouterr()

    assert main(["backup", "--verify", str(forged)]) == 0
    out = capsys.readouterr().out
    assert "sound" in out and f"warning: {said}" in out
    restore_archive(forged, tmp_path / "r" / "data", tmp_path / "r" / "keys")
    assert [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING] == [
        f"restore: {said}"
    ]
    main(["backup", "--verify", str(_backup(folder, tmp_path / "today.tar"))])
    assert "warning" not in capsys.readouterr().out  # today's archives hold the search index index.json names


def test_verify_passes_a_sound_archive_and_names_a_flipped_byte(folder, capsys):
    archive = _backup(folder)
    assert main(["backup", "--verify", str(archive)]) == 0
    assert "sound" in capsys.readouterr().out
    with tarfile.open(archive) as tar:
        member = tar.getmember("indexes/team/files/memory/hosts/3.md")
    _flip(archive, member.offset_data + 5)

    assert main(["backup", "--verify", str(archive)]) == 1
    err = capsys.readouterr().err
    assert "cannot be trusted" in err and "memory/hosts/3.md does not match its sha256" in err


def _flip(archive: Path, offset: int) -> None:
    data = bytearray(archive.read_bytes())
    data[offset] ^= 0x01
    archive.write_bytes(bytes(data))


def _places(archive: Path) -> dict[str, int]:
    """Offsets of every kind of byte in an archive: headers, contents, padding, the manifest, the end."""
    with tarfile.open(archive) as tar:
        first, manifest = tar.getmember("settings.toml"), tar.getmember("manifest.json")
    size = archive.stat().st_size
    spread = random.Random(7).sample(range(size), 6)
    return {
        "a header's name": first.offset + 2,
        "a header's checksum": first.offset + 150,
        "a content": first.offset_data + 3,
        "a padding": first.offset_data + first.size + 1,
        "the manifest's header": manifest.offset + 124,
        "the manifest": manifest.offset_data + manifest.size // 2,
        "the manifest's last byte": manifest.offset_data + manifest.size - 2,
        "the end marker": manifest.offset_data + manifest.size + 600,
        "the last byte": size - 1,
        **{f"anywhere ({offset})": offset for offset in spread},
    }


def test_verify_catches_a_flipped_byte_wherever_it_is(folder):
    archive = _backup(folder)
    sound = archive.read_bytes()
    for where, offset in _places(archive).items():
        archive.write_bytes(sound)
        _flip(archive, offset)
        with pytest.raises(DamagedArchiveError):
            verify_archive(archive)
            pytest.fail(f"a flipped byte in {where} went unnoticed")


@pytest.mark.parametrize("keep", [0.3, 0.9, 0.999])
def test_verify_refuses_a_truncated_archive(folder, keep):
    archive = _backup(folder)
    data = archive.read_bytes()
    archive.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(DamagedArchiveError, match=r"truncated|no manifest"):
        verify_archive(archive)


def test_verify_finds_a_database_that_is_not_sound_even_when_its_hash_is_listed(folder, tmp_path):
    archive = _backup(folder)
    members = _members(archive)
    members["indexes/team/index.sqlite3"] = members["indexes/team/index.sqlite3"][:4096] + b"\0" * 8192
    with pytest.raises(DamagedArchiveError, match=r"index\.sqlite3"):
        verify_archive(_rewritten(tmp_path / "bad.tar", members))


def test_verify_finds_files_that_disagree_with_the_state(folder, tmp_path):
    archive = _backup(folder)
    members = _members(archive)
    members["indexes/team/files/memory/hosts/5.md"] = b"not what the state records\n"
    with pytest.raises(DamagedArchiveError, match=r"memory/hosts/5\.md differs"):
        verify_archive(_rewritten(tmp_path / "bad.tar", members))


def _members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar if m.name != "manifest.json"}  # type: ignore[union-attr]


def _rewritten(target: Path, members: dict[str, bytes]) -> Path:
    """An archive of `members`, sealed and listed truthfully (what a forger or a bug could write)."""
    work = target.with_name("forged")
    work.mkdir()
    listed = []
    for number, (name, data) in enumerate(members.items()):
        (work / str(number)).write_bytes(data)
        listed.append(Member(name, work / str(number)))
    write_archive(target, listed, _manifest({"team": {"revision": 14, "files": 13}}), work)
    return target


def _manifest(indexes: object) -> dict[str, object]:
    return {"created_at": "2026-05-01T00:00:00Z", "server_version": "forged", "indexes": indexes, "server_key": True}


def _tar(
    target: Path,
    entries: list[tuple[str, bytes]] | list[tuple[str, bytes, dict[str, str]]],
    links: tuple[tuple[str, str, bytes], ...] = (),
) -> Path:
    """A tar of `entries` (name, data, and PAX header fields if any) and `links`, written as a forger would."""
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, *pax in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.pax_headers = pax[0] if pax else {}
            tar.addfile(info, io.BytesIO(data))
        for name, link, kind in links:
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, link
            tar.addfile(info)
    return target


HOSTILE = {
    "absolute path": [("/tmp/evil.md", b"x")],
    "dot-dot": [("indexes/team/files/../../../evil.md", b"x")],
    "unknown member": [("evil.sh", b"#!/bin/sh\n")],
    "bad index name": [("indexes/../files/memory/a.md", b"x")],
    "duplicate": [("indexes/team/index.json", b"{}"), ("indexes/team/index.json", b"{}")],
    "file and folder": [("indexes/team/files/memory/a.md", b"x"), ("indexes/team/files/memory/a.md/b.md", b"y")],
    "hidden folder as an extra one": [("indexes/team/files/.git/a.md", b"x")],
    "device name as an extra folder": [("indexes/team/files/CON/a.md", b"x")],
    "invisible character in a folder": [("indexes/team/files/no\u200btes/a.md", b"x")],
    "not a transcript under sessions": [("indexes/team/files/sessions/alice/notes.md", b"x")],
    "not in canonical form": [("indexes/team/files/notes//a.md", b"x")],
    # Malformed GNU sparse maps, which tarfile reports as ValueError while reading the header.
    "sparse 1.0 map without its newline": [
        ("indexes/team/files/memory/a.md", b"x" * 512, {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"})
    ],
    "sparse 1.0 map count not a number": [
        ("indexes/team/files/memory/a.md", b"zz\n" + b"\0" * 509, {"GNU.sparse.major": "1", "GNU.sparse.minor": "0"})
    ],
    "sparse 0.1 map not numbers": [
        ("indexes/team/files/memory/a.md", b"x" * 512, {"GNU.sparse.map": "a,b", "GNU.sparse.size": "10"})
    ],
}


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[Path]:
    """A folder beside the restore target that nothing may ever write into."""
    outside = tmp_path / "outside"
    outside.mkdir()
    yield outside
    assert list(outside.iterdir()) == []


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_archive_is_refused_before_anything_is_written(case, tmp_path, victim):
    archive = _tar(tmp_path / "hostile.tar", HOSTILE[case])
    with pytest.raises(DamagedArchiveError):
        restore_archive(archive, tmp_path / "data", victim / "keys")
    assert not (tmp_path / "data").exists() and not (tmp_path / "evil.md").exists()


def test_a_sparse_member_is_refused_before_its_holes_are_written(tmp_path, victim, monkeypatch):
    # A 10 KB archive whose member's map says 1 TB: its holes read as zeros, and were written out until the disk
    # was full.
    archive = tmp_path / "sparse.tar"
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("indexes/team/files/memory/a.md")
        info.size = 10
        info.pax_headers = {"GNU.sparse.map": "0,10", "GNU.sparse.size": str(1 << 40)}
        tar.addfile(info, io.BytesIO(b"x" * 10))
    written: list[str] = []
    monkeypatch.setattr(backup_archive, "_copy_member", lambda _, __, name: written.append(name))
    with pytest.raises(DamagedArchiveError, match="sparse file"):
        restore_archive(archive, tmp_path / "data", victim / "keys")
    assert written == [] and not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    "indexes", [{"team": 5}, {"team": {"revision": "14", "files": 13}}, {"team": {"revision": 14}}, ["team"]]
)
def test_a_sealed_manifest_of_the_wrong_shape_is_refused_by_verify_and_restore_before_anything_is_written(
    folder, tmp_path, capsys, indexes
):
    forged = tmp_path / "forged.tar"
    work = tmp_path / "forged"
    work.mkdir()
    listed = []
    for number, (name, data) in enumerate(_members(_backup(folder)).items()):
        (work / str(number)).write_bytes(data)
        listed.append(Member(name, work / str(number)))
    write_archive(forged, listed, _manifest(indexes), work)
    capsys.readouterr()

    assert main(["backup", "--verify", str(forged)]) == 1
    assert "the manifest's index list is malformed" in capsys.readouterr().err
    target = tmp_path / "restored"
    assert main(["--data-dir", str(target / "data"), "--keys-dir", str(target / "keys"), "restore", str(forged)]) == 1
    assert "the manifest's index list is malformed; nothing was written" in capsys.readouterr().err
    assert not (target / "data").exists() and not (target / "keys").exists()


def test_restore_with_a_keys_folder_others_may_write_is_refused_clearly_and_writes_nothing(folder, tmp_path, capsys):
    archive = _backup(folder)
    keys = tmp_path / "shared-keys"
    keys.mkdir()
    keys.chmod(0o775)
    capsys.readouterr()

    assert main(["--data-dir", str(tmp_path / "new"), "--keys-dir", str(keys), "restore", str(archive)]) == 2
    assert "chmod go-w" in capsys.readouterr().err
    assert not (tmp_path / "new").exists() and list(keys.iterdir()) == []


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_a_link_member_is_refused_and_never_followed(kind, tmp_path, victim):
    links = (("indexes/team/files/memory/a.md", str(victim / "planted.md"), kind),)
    archive = _tar(tmp_path / "hostile.tar", [], links)
    with pytest.raises(DamagedArchiveError, match="not a regular file"):
        restore_archive(archive, tmp_path / "data", tmp_path / "keys")
    assert not (tmp_path / "data").exists()


def test_restore_refuses_a_data_folder_that_is_not_empty(folder, tmp_path):
    archive = _backup(folder)
    with pytest.raises(BackupError, match="not empty"):
        restore_archive(archive, folder / "data", tmp_path / "keys")


def test_restore_refuses_a_different_server_key_and_writes_nothing(folder, tmp_path):
    archive = _backup(folder)
    other = tmp_path / "other"
    serve.ensure_server_key(other / "keys", out=io.StringIO())
    with pytest.raises(BackupError, match=r"differs from the backup's server\.key"):
        restore_archive(archive, other / "data", other / "keys")
    assert not (other / "data").exists()


def test_restore_keeps_a_newer_callers_file_and_says_so(folder, tmp_path):
    (folder / "keys" / "callers.toml").write_text("# the backed-up callers\n", "utf-8")
    archive = _backup(folder)
    (folder / "keys" / "callers.toml").write_text("# edited after the backup\n", "utf-8")

    manifest = restore_archive(archive, tmp_path / "r" / "data", folder / "keys")
    assert manifest["keys_kept"] == ["callers.toml"] and manifest["keys_written"] == []
    assert (folder / "keys" / "callers.toml").read_text("utf-8") == "# edited after the backup\n"


def test_a_symlinked_callers_file_is_backed_up_and_an_identical_one_is_left_as_it_is_on_restore(folder, tmp_path):
    managed = tmp_path / "managed"  # config management keeps the file elsewhere and links it in
    managed.mkdir()
    (managed / "callers.toml").write_text("# managed elsewhere\n", "utf-8")
    (folder / "keys" / "callers.toml").symlink_to(managed / "callers.toml")
    archive = _backup(folder)
    assert _members(archive)["keys/callers.toml"] == b"# managed elsewhere\n"

    manifest = restore_archive(archive, tmp_path / "r" / "data", folder / "keys")

    assert manifest["keys_written"] == [] and manifest["keys_kept"] == []
    assert (folder / "keys" / "callers.toml").is_symlink()


def test_a_symlinked_server_key_is_still_refused_by_the_backup(folder, tmp_path):
    moved = tmp_path / "server.key"
    os.replace(folder / "keys" / "server.key", moved)
    (folder / "keys" / "server.key").symlink_to(moved)
    with pytest.raises(BackupError, match=r"server\.key"):
        _backup(folder)


def test_no_provider_key_or_key_file_reaches_the_archive(folder, tmp_path, monkeypatch, capsys):
    key_file = tmp_path / "voyage.key"
    key_file.write_text(CANARY, "utf-8")
    key_file.chmod(0o600)
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    monkeypatch.setenv("VOYAGE_API_KEY_FILE", str(key_file))
    monkeypatch.setenv("MEMORY_VOYAGE_BASE_URL", f"https://user:{CANARY}@voyage.example")
    archive = tmp_path / "b.tar"
    argv = ["--data-dir", str(folder / "data"), "--keys-dir", str(folder / "keys"), "backup", str(archive)]

    assert main(argv) == 0
    data = archive.read_bytes()
    assert CANARY.encode() not in data and str(key_file).encode() not in data
    settings = _members(archive)["settings.toml"].decode()
    assert 'voyage_base_url = "https://***@voyage.example"' in settings
    assert CANARY not in capsys.readouterr().out


def test_a_second_backup_removes_the_work_folder_a_killed_one_left(folder):
    stale = folder / f".backup.tar.{_dead_pid()}.backup"
    stale.mkdir()
    (stale / "archive-1.tmp").write_bytes(b"half")
    _backup(folder)
    assert not stale.exists() and verify_archive(folder / "backup.tar")["indexes"]


def test_a_restore_into_a_folder_holding_only_a_killed_restores_staging_folder_removes_it_and_restores(
    folder, tmp_path
):
    archive = _backup(folder)
    data = tmp_path / "new"
    staging = data / f".restore-{_dead_pid()}" / "indexes" / "team" / "files" / "memory"
    staging.mkdir(parents=True)
    (staging / "h1.md").write_text("half\n", "utf-8")

    manifest = restore_archive(archive, data, tmp_path / "keys")

    assert manifest["indexes"]["team"]["files"] == 13
    assert sorted(p.name for p in data.iterdir()) == ["indexes", "settings-from-backup.toml"]


def test_a_restore_beside_the_staging_folder_of_a_restore_still_running_is_refused(folder, tmp_path):
    archive = _backup(folder)
    running = tmp_path / "new" / f".restore-{os.getppid()}"  # a live process's
    running.mkdir(parents=True)
    with pytest.raises(BackupError, match="not empty"):
        restore_archive(archive, tmp_path / "new", tmp_path / "keys")
    assert running.is_dir()


def test_a_verify_removes_the_staging_folder_a_killed_verify_left_beside_the_archive(folder):
    archive = _backup(folder)
    stale = folder / f".{archive.name}.{_dead_pid()}.verify"
    (stale / "keys").mkdir(parents=True)
    (stale / "keys" / "server.key").write_bytes((folder / "keys" / "server.key").read_bytes())

    verify_archive(archive)

    assert sorted(p.name for p in folder.iterdir()) == ["backup.tar", "data", "keys"]


def _dead_pid() -> int:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    return pid


def test_a_server_without_an_index_yet_backs_up_and_restores_its_keys(tmp_path):
    serve.ensure_server_key(tmp_path / "keys", out=io.StringIO())
    (tmp_path / "data").mkdir()
    archive = tmp_path / "b.tar"
    take_backup(tmp_path / "data", tmp_path / "keys", archive, settings="", server_key=True, server_version="t")

    manifest = restore_archive(archive, tmp_path / "r" / "data", tmp_path / "r" / "keys")
    assert manifest["indexes"] == {} and manifest["keys_written"] == ["server.key", "server.pub"]
    assert (tmp_path / "r" / "data" / "indexes").is_dir()


@pytest.mark.parametrize("command", ["backup", "restore"])
def test_backup_and_restore_refuse_a_server_whose_files_live_in_postgresql(
    folder, tmp_path, monkeypatch, capsys, command
):
    monkeypatch.setenv("MEMORY_DATABASE_URL", "postgresql://memory:secret-pw@db.example/memory")
    archive = tmp_path / "b.tar"
    argv = ["--data-dir", str(folder / "data"), "--keys-dir", str(folder / "keys"), command, str(archive)]

    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "live in PostgreSQL" in err and "pg_dump" in err and "secret-pw" not in err
    assert not archive.exists()


def _behaviour(settings: Settings) -> Settings:
    """What a server does with these settings, apart from where this process looks and where each value came from."""
    return dataclasses.replace(
        settings, data_dir=Path(), keys_dir=Path(), config_file=None, origins={}, overridden={}, key_files={}
    )


@pytest.mark.parametrize(
    "env",
    [
        {},  # a default install: min_score auto, no extra paths, no metrics listener
        {
            "MEMORY_EXTRA_PATHS": "notes, decisions",
            "MEMORY_MIN_SCORE": "0.2",
            "MEMORY_WEIGHT_VECTOR": "0.6",
            "MEMORY_HISTORY_DAYS": "7",
            "MEMORY_METRICS_PORT": "9100",
            "MEMORY_EMBEDDING_PROVIDERS": "voyage,none",
            "MEMORY_VOYAGE_BASE_URL": "http://127.0.0.1:9/v1",
        },
    ],
)
def test_the_settings_a_backup_writes_load_with_config_to_the_same_effective_settings(
    folder, tmp_path, monkeypatch, env
):
    for variable in (*VARIABLES, "MEMORY_CONFIG"):
        monkeypatch.delenv(variable, raising=False)
    own = tmp_path / "memory-server.toml"
    own.write_text(
        "chunk_tokens = 200\n[indexes.team-docs]\nchunk_tokens = 128\nmin_score = 0.3\n"
        '[indexes."notes.v2"]\nmax_results = 3\nrerank = true\n[indexes.plain]\n'
    )
    own.chmod(0o600)
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    archive = tmp_path / "b.tar"
    argv = ["--config", str(own), "--data-dir", str(folder / "data"), "--keys-dir", str(folder / "keys")]

    assert main([*argv, "backup", str(archive)]) == 0
    written = tmp_path / "settings-from-backup.toml"
    written.write_bytes(_members(archive)["settings.toml"])
    written.chmod(0o600)

    backed_up = Settings.from_env(env, config_file=own)
    restored = Settings.from_env({}, config_file=written)
    for name in ("team-docs", "notes.v2", "plain", "other"):
        served, expected = restored.engine.for_index(name), backed_up.engine.for_index(name)
        assert dataclasses.replace(served, per_index={}) == dataclasses.replace(expected, per_index={})
    own_tables = {name: per_index for name, per_index in backed_up.engine.per_index.items() if name != "plain"}
    assert _behaviour(restored) == _behaviour(
        dataclasses.replace(backed_up, engine=dataclasses.replace(backed_up.engine, per_index=own_tables))
    )  # an index table that sets nothing of its own is the global settings, and is left out
