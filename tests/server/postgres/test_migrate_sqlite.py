"""`memory-server migrate --to postgres` on a real PostgreSQL: an SQLite deployment's files (the truth, disk edits
included), revisions, tombstones, history, idempotency records and callers' syncs carried over; a second run, or
a target already in use, refused with nothing changed."""

from __future__ import annotations

import datetime as dt
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.cli.main import main
from server.mirror.mirror import Mirror
from server.mirror.state import IdempotencyRecord
from server.postgres.files import PgFileStore

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A SQLite deployment: index "team" with a written, an edited, a deleted file and a transcript; index
    "solo" with one file. MEMORY.md is then edited on the server's disk, behind the mirror."""
    data = tmp_path / "data"
    team = Mirror(data / "indexes" / "team", clock=lambda: NOW)
    team.write("MEMORY.md", "# Team\n\nDeploys on Tuesdays.\n", caller="alice")
    team.write("memory/notes.md", "first\n", caller="alice")
    team.write("memory/notes.md", "first\nsecond\n", caller="bob")
    team.write("memory/gone.md", "short-lived\n", caller="bob")
    team.delete("memory/gone.md", caller="alice")
    team.write("sessions/laptop/2026-11-20-s1.md", "# Session\n\nuser: hello\n", caller="alice")
    team.remember(IdempotencyRecord("alice", "key-1", "request-digest", '{"ok": true}'))
    team.record_sync("bob", "pull", 3)
    team.close()
    solo = Mirror(data / "indexes" / "solo", clock=lambda: NOW)
    solo.write("memory/only.md", "one file\n", caller="carol")
    solo.close()
    (data / "indexes" / "team" / "files" / "MEMORY.md").write_text("# Team\n\nDeploys on Wednesdays now.\n")
    return data


@pytest.fixture
def database(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    return postgres_url


@pytest.fixture
def opened(database: str, tmp_path: Path) -> Iterator[dict[str, PgFileStore]]:
    stores: dict[str, PgFileStore] = {}
    yield stores
    for store in stores.values():
        store.close()


def migrate(data: Path, *extra: str) -> int:
    return main(["--data-dir", str(data), "migrate", "--to", "postgres", *extra])


def test_every_index_is_carried_with_its_files_revisions_tombstones_and_history(
    data_dir: Path, database: str, opened: dict[str, PgFileStore], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = Mirror(data_dir / "indexes" / "team")
    expected = {s.path: s for s in before.reconcile_all()}  # the disk edit recorded, as the migration does
    revision, history = before.revision(), before.history.versions(limit=100)
    before.close()

    assert migrate(data_dir) == 0
    out = capsys.readouterr().out
    assert "team: revision 7, 3 files, 1 tombstones" in out and "solo: revision 1, 1 files" in out

    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica" / "files")
    assert team.revision() == revision == 7
    held = team.read("MEMORY.md")
    assert held is not None and held.text == "# Team\n\nDeploys on Wednesdays now.\n"
    assert held.updated_by == "(disk)" and held.revision == expected["MEMORY.md"].revision
    assert {s.path: s for s in team.reconcile_all()} == expected
    assert [(s.path, s.hash) for s in team.changes_since(0) if s.hash is None] == [("memory/gone.md", None)]
    assert team.history.versions(limit=100) == history
    first = next(v for v in history if v.path == "memory/notes.md" and v.updated_by == "alice")
    earlier = team.history.get("memory/notes.md", first.revision)
    assert earlier is not None and earlier.text == "first\n"  # a past version's bytes came along
    assert team.recall("alice", "key-1") == IdempotencyRecord("alice", "key-1", "request-digest", '{"ok": true}')
    assert [(c.caller, c.pulled_revision) for c in team.sync_callers()] == [("bob", 3)]
    solo = opened["solo"] = PgFileStore(database, "solo", tmp_path / "replica2" / "files")
    only = solo.read("memory/only.md")
    assert only is not None and only.text == "one file\n"


def test_a_second_migration_is_refused_before_copying_anything(
    data_dir: Path, database: str, opened: dict[str, PgFileStore], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert migrate(data_dir, "--index", "team") == 0
    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica" / "files")
    team.write("memory/after.md", "written by a replica after the move\n", caller="alice")
    capsys.readouterr()

    assert migrate(data_dir) == 2
    err = capsys.readouterr().err
    assert "index 'team' already holds 4 file(s) at revision 8" in err and "nothing was copied" in err
    assert database not in err
    assert team.revision() == 8
    assert team.read("memory/after.md") is not None
    solo = opened["solo"] = PgFileStore(database, "solo", tmp_path / "replica2" / "files")
    assert solo.revision() == 0  # refused as a whole: the index that was free was not copied either


def test_an_unreadable_file_stops_its_index_with_its_name_and_copies_nothing(
    data_dir: Path, database: str, opened: dict[str, PgFileStore], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (data_dir / "indexes" / "team" / "files" / "memory" / "binary.md").write_bytes(b"\xff\xfe not utf-8\n")

    assert migrate(data_dir, "--index", "team") == 2
    err = capsys.readouterr().err
    assert "memory/binary.md" in err and "migrate again" in err
    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica" / "files")
    assert team.revision() == 0 and team.reconcile_all() == []


def test_a_rerun_after_a_failed_index_skips_the_indexes_already_copied_and_copies_the_rest(
    data_dir: Path, database: str, opened: dict[str, PgFileStore], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    binary = data_dir / "indexes" / "team" / "files" / "memory" / "binary.md"
    binary.write_bytes(b"\xff\xfe not utf-8\n")
    assert migrate(data_dir) == 2  # solo (first by name) copied, team refused
    binary.unlink()
    capsys.readouterr()

    assert migrate(data_dir) == 0
    out = capsys.readouterr().out
    assert "solo: already in the database (revision 1, 1 files); skipped" in out and "team: revision" in out
    solo = opened["solo"] = PgFileStore(database, "solo", tmp_path / "replica" / "files")
    only = solo.read("memory/only.md")
    assert solo.revision() == 1 and only is not None and only.text == "one file\n"
    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica2" / "files")
    notes = team.read("memory/notes.md")
    assert notes is not None and notes.text == "first\nsecond\n"
    assert migrate(data_dir) == 0  # a finished migration run again changes nothing


def test_a_finished_migration_of_an_index_a_laptop_pulled_but_with_no_file_yet_is_skipped_when_run_again(
    tmp_path: Path, database: str, opened: dict[str, PgFileStore], capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "fresh"
    empty = Mirror(data / "indexes" / "team", clock=lambda: NOW)
    empty.record_sync("alice-laptop", "pull", 0)  # a laptop's first pull: revision 0, no file, a caller's sync
    empty.close()
    assert migrate(data) == 0
    capsys.readouterr()

    assert migrate(data) == 0  # a finished migration run again changes nothing
    assert "team: already in the database (revision 0, 0 files); skipped" in capsys.readouterr().out
    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica" / "files")
    assert team.revision() == 0 and [(c.caller, c.pulled_revision) for c in team.sync_callers()] == [
        ("alice-laptop", 0)
    ]


def test_a_target_holding_only_a_servers_sync_records_is_refused_and_keeps_them(
    data_dir: Path, database: str, opened: dict[str, PgFileStore], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica" / "files")
    team.record_sync("carol-laptop", "pull", 0)  # a replica served the still empty index before the migration

    assert migrate(data_dir, "--index", "team") == 2
    err = capsys.readouterr().err
    assert "index 'team' already holds no file but records of its use" in err and "nothing was copied" in err
    assert team.revision() == 0 and [c.caller for c in team.sync_callers()] == ["carol-laptop"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--index", "nosuch"), "no index 'nosuch'"),
        ((), "set MEMORY_DATABASE_URL"),
    ],
)
def test_a_bad_request_says_what_is_wrong(
    data_dir: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...], message: str,
) -> None:  # fmt: skip
    if "MEMORY_DATABASE_URL" in message:
        monkeypatch.delenv("MEMORY_DATABASE_URL", raising=False)
    else:
        monkeypatch.setenv("MEMORY_DATABASE_URL", postgres_url)
    monkeypatch.delenv("MEMORY_CONFIG", raising=False)
    assert migrate(data_dir, *args) == 2
    assert message in capsys.readouterr().err


def test_an_index_is_copied_a_file_at_a_time_not_held_in_memory_whole(
    database: str, opened: dict[str, PgFileStore], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "big"
    mirror = Mirror(data / "indexes" / "team", clock=lambda: NOW)
    body = "".join(f"line {n} of a long note about the deploy pipeline\n" for n in range(4000))  # ~200 kB
    for number in range(40):
        mirror.write(f"memory/notes/note-{number:02}.md", f"# Note {number}\n\n{body}", caller="alice")
    mirror.close()
    total = 40 * len(body)

    tracemalloc.start()
    try:
        assert migrate(data) == 0
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "team: revision 40, 40 files" in capsys.readouterr().out
    assert peak < total / 4, f"the copy held {peak / 1e6:.1f} MB at once for {total / 1e6:.1f} MB of files"
    team = opened["team"] = PgFileStore(database, "team", tmp_path / "replica" / "files")
    copied = team.read("memory/notes/note-39.md")
    assert copied is not None and copied.text == f"# Note 39\n\n{body}"
