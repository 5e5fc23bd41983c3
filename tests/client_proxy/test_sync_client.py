"""The proxy's side of file sync, piece by piece: which paths are synced, the state file, the local files' safe
writes, the watcher, and `memory-proxy status`. The whole loop against the server is in
tests/client_proxy/test_sync_loop.py."""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import time

import anyio
import pytest

from client_proxy import cli
from client_proxy.config import ProxyConfig
from client_proxy.errors import ConfigError
from client_proxy.settings import RunSettings
from client_proxy.sync.apply import Reconciler
from client_proxy.sync.local_files import RACY_NS, WRITING_NS, LocalFiles, UnsyncableError, sha256_hex
from client_proxy.sync.plan import pending_pushes
from client_proxy.sync.scope import (
    DEFAULT_MAX_FILE_BYTES,
    UnsafePathError,
    content_problem,
    is_excluded,
    name_problem,
    safe_target,
)
from client_proxy.sync.state import Base, StateCorruptError, StateStore, SyncState, Unapplied, state_home
from client_proxy.sync.unapplied import RETRY_FIRST, RETRY_MAX, UnappliedRetry
from client_proxy.sync.watcher import Wakeup, Watcher
from syncproto.content import read_capped
from syncproto.messages import Change
from tests.proxy_support import init_proxy_home

pytestmark = pytest.mark.anyio

SERVER = "https://memory.example"
INDEX = "notes"
WAIT = 10.0


@pytest.fixture
def project(tmp_path):
    folder = tmp_path / "project"
    (folder / "memory").mkdir(parents=True)
    return folder


def h(text: str) -> str:
    return sha256_hex(text.encode())


def later_clock() -> int:
    """A clock far enough ahead that every file counts as stable (not "racy") for the hash cache."""
    return time.time_ns() + 10 * RACY_NS


# -- scope --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", ["MEMORY.md", "memory.md", "memory/notes.md", "memory/2026/11/23.md", "memory/été.md", "memory/a b.md"]
)
def test_memory_files_at_the_root_and_under_memory_are_synced(path):
    assert name_problem(path) is None


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("notes.md", "not a memory file"),
        ("memory/notes.txt", "not a memory file"),
        ("docs/MEMORY.md", "not a memory file"),
        ("memory/../MEMORY.md", "'..'"),
        ("memory/./a.md", "'.'"),
        ("memory/.hidden.md", "hidden"),
        ("memory/.git/x.md", "hidden"),
        ("/etc/memory/a.md", "absolute"),
        ("memory/a:b.md", "':'"),
        ("memory/a\\b.md", "'\\\\'"),
        ("memory/a\nb.md", "control"),
        ("memory/a\x00b.md", "control"),
        ("memory/a\u202eb.md", "control"),
        ("memory/a%2e.md", "percent"),
        ("memory/CON.md", "reserved"),
        ("memory/trailing .md", None),  # fine: only a part's ends matter
        ("memory/e\u0301te.md", "NFC"),
        ("memory/" + "x" * 256 + ".md", "longer than 255 bytes"),
    ],
)
def test_names_the_server_would_refuse_are_never_synced(path, why):
    problem = name_problem(path)
    if why is None:
        assert problem is None
    else:
        assert problem is not None and why in problem


def test_exclude_patterns_match_the_relative_path_across_folders():
    assert is_excluded("memory/private/a/b.md", ["memory/private/**"])
    assert not is_excluded("memory/public.md", ["memory/private/**"])
    assert is_excluded("MEMORY.md", ["MEMORY.md"])


def test_content_over_the_cap_binary_or_not_utf8_is_not_synced():
    assert content_problem(b"# fine\n", 100) is None
    assert "larger than" in content_problem(b"x" * 101, 100)
    assert "NUL" in content_problem(b"a\x00b", 100)
    assert "UTF-8" in content_problem(b"caf\xe9", 100)
    assert "2 MiB" in content_problem(b"x" * (DEFAULT_MAX_FILE_BYTES + 1), DEFAULT_MAX_FILE_BYTES)


@pytest.mark.parametrize("path", ["/tmp/x.md", "../outside.md", "memory/../../x.md", ".git/config", "src/main.py"])
def test_a_server_path_outside_the_memory_files_is_refused(project, path):
    with pytest.raises(UnsafePathError):
        safe_target(project, path)


def test_a_server_path_through_a_symlinked_folder_or_onto_a_symlink_is_refused(project, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (project / "memory" / "linked").symlink_to(outside)
    (project / "memory" / "file.md").symlink_to(outside / "target.md")
    with pytest.raises(UnsafePathError, match="symlink"):
        safe_target(project, "memory/linked/x.md")
    with pytest.raises(UnsafePathError, match="symlink"):
        safe_target(project, "memory/file.md")
    (project / "memory").rename(project / "memory-real")
    (project / "memory").symlink_to(project / "memory-real")
    with pytest.raises(UnsafePathError, match="symlink"):
        safe_target(project, "memory/new.md")
    assert safe_target(project, "MEMORY.md") == project / "MEMORY.md"


# -- state ---------------------------------------------------------------------------------------------------------


def test_the_state_round_trips_privately_one_file_per_server_index_and_folder(tmp_path, project):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    state = store.fresh()
    state.revision = 57
    state.files["memory/a.md"] = Base(h("a"), 55, 1, 123)
    state.last_pull_at = "2026-11-23T10:15:00Z"
    state.rejected["memory/b.md"] = {"hash": None, "message": "no", "at": "2026-11-23T10:15:00Z"}
    state.add_conflict("memory/c.md", "memory/c.conflict-bob-20261123T101500Z.md", "2026-11-23T10:15:00Z")
    store.save(state)

    assert StateStore(home, SERVER, INDEX, project).load() == state
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert StateStore(home, SERVER, "other", project).path != store.path
    assert StateStore(home, SERVER, INDEX, project / "memory").path != store.path
    assert json.loads(store.path.read_text())["project"] == str(project)


@pytest.mark.parametrize(
    "content",
    [b"{not json", b'{"version": 1}', b"[]", b'{"version": 99}', b"\x00", b"[" * 100_000 + b"]" * 100_000],
)
def test_a_corrupt_state_file_is_moved_aside_and_sync_starts_fresh(tmp_path, project, caplog, content):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    store.save(store.fresh())
    store.path.write_bytes(content)

    with caplog.at_level(logging.WARNING):
        state = StateStore(home, SERVER, INDEX, project).load()

    assert state == store.fresh()
    assert not store.path.exists()
    [aside] = list(home.glob(f"{store.path.name}.corrupt-*"))
    assert aside.read_bytes() == content
    assert "moved aside" in caplog.text


def test_a_state_file_of_another_folder_under_this_name_is_not_trusted(tmp_path, project):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    other = StateStore(home, SERVER, INDEX, tmp_path).fresh()
    other.revision = 9
    home.mkdir(mode=0o700)
    store.path.write_text(json.dumps(other.to_json()))
    assert StateStore(home, SERVER, INDEX, project).load().revision == 0


def test_a_state_file_naming_an_extra_folder_survives_a_restart(tmp_path, project):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    state = store.fresh()
    state.files["notes/n.md"] = Base(h("n"), 3)  # synced while the server announced notes/
    state.rejected["notes/bad.md"] = {"hash": None, "message": "no", "at": "2026-11-23T10:15:00Z"}
    store.save(state)

    # a fresh process knows no extra folders before its first pull answer
    assert StateStore(home, SERVER, INDEX, project).load() == state
    assert not list(home.glob("*.corrupt-*"))


@pytest.mark.parametrize(
    "path",
    [
        "memory/a:b.md",  # refused since the rules keep names Windows and macOS laptops can hold (syncproto's example)
        "memory/CON.md",
        "sessions/alice/2026-01-01-s.md",
        "notes/.hidden.md",
        "../notes/n.md",
        "notes/n.txt",
    ],
)
def test_a_state_entry_with_a_refused_path_is_dropped_and_the_rest_kept(tmp_path, project, caplog, path):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    state = store.fresh()
    state.revision = 60
    state.files["memory/a.md"] = Base(h("a"), 55, 1, 123)
    state.rejected["memory/bad.md"] = {"hash": None, "message": "no", "at": "2026-11-23T10:15:00Z"}
    state.unapplied["memory/u.md"] = Unapplied(57, "cannot be written (Permission denied)", "2026-11-23T10:15:00Z")
    state.reset_listed = ["memory/a.md"]
    store.save(state)
    saved = json.loads(store.path.read_text())  # as an older proxy wrote it, under the rules of its day
    saved["files"][path] = {"base": h("b"), "revision": 56, "size": None, "mtime_ns": None}
    saved["rejected"][path] = {"hash": h("b"), "message": "no", "at": "2026-11-23T10:15:00Z"}
    saved["unapplied"][path] = {"revision": 58, "message": "cannot be written", "at": "2026-11-23T10:15:00Z"}
    saved["reset_listed"].append(path)
    store.path.write_text(json.dumps(saved))

    with caplog.at_level(logging.WARNING):
        loaded = StateStore(home, SERVER, INDEX, project).load()

    assert loaded == state
    assert not list(home.glob("*.corrupt-*"))
    [warning] = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert "dropped 4 entries" in warning.getMessage()
    assert path not in caplog.text and h("b") not in caplog.text


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("files", {"memory/a:b.md": {"base": "not a hash", "revision": 56}}),
        ("unapplied", {"memory/a:b.md": {"revision": "58", "message": "m", "at": "t"}}),
        ("reset_listed", ["memory/a.md", 3]),
    ],
)
def test_a_wrongly_typed_entry_sets_the_state_aside_even_under_a_refused_path(tmp_path, project, key, value):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    state = store.fresh()
    state.files["memory/a.md"] = Base(h("a"), 55)
    store.save(state)
    saved = json.loads(store.path.read_text())
    saved[key] = value if key == "reset_listed" else {**saved[key], **value}
    store.path.write_text(json.dumps(saved))

    assert StateStore(home, SERVER, INDEX, project).load() == store.fresh()
    assert list(home.glob("*.corrupt-*"))


def test_changes_left_unapplied_survive_a_restart_and_a_state_file_from_before_them_has_none(tmp_path, project):
    home = tmp_path / "state"
    store = StateStore(home, SERVER, INDEX, project)
    state = store.fresh()
    state.revision = 60
    state.unapplied["memory/a.md"] = Unapplied(57, "cannot be written (Permission denied)", "2026-11-23T10:15:00Z")
    store.save(state)
    assert StateStore(home, SERVER, INDEX, project).load() == state

    older = state.to_json()
    del older["unapplied"]
    store.path.write_text(json.dumps(older))
    loaded = StateStore(home, SERVER, INDEX, project).load()
    assert loaded.unapplied == {} and loaded.revision == 60
    assert not list(home.glob("*.corrupt-*"))


@pytest.mark.parametrize(
    "unapplied",
    [
        [],
        None,
        {"memory/a.md": "cannot be written"},
        {"memory/a.md": {"revision": -1, "message": "m", "at": "t"}},
        {"memory/a.md": {"revision": True, "message": "m", "at": "t"}},
        {"memory/a.md": {"revision": "57", "message": "m", "at": "t"}},
        {"memory/a.md": {"revision": 57, "message": 3, "at": "t"}},
        {"memory/a.md": {"revision": 57, "message": "m"}},
    ],
)
def test_a_state_file_with_a_malformed_unapplied_change_is_corrupt(tmp_path, project, unapplied):
    store = StateStore(tmp_path / "state", SERVER, INDEX, project)
    store.save(store.fresh())
    data = json.loads(store.path.read_text())
    store.path.write_text(json.dumps({**data, "unapplied": unapplied}))
    with pytest.raises(StateCorruptError, match=r"unapplied"):
        store.read()


def test_the_state_folder_follows_the_environment(tmp_path):
    assert state_home({"MEMORY_PROXY_STATE_HOME": "/s", "XDG_STATE_HOME": "/x"}) == __import__("pathlib").Path("/s")
    assert str(state_home({"XDG_STATE_HOME": "/x", "HOME": "/h"})) == "/x/memory-proxy"
    assert str(state_home({"HOME": "/h"})) == "/h/.local/state/memory-proxy"


# -- local files ---------------------------------------------------------------------------------------------------


def test_a_scan_finds_the_memory_files_and_says_why_others_in_scope_are_skipped(project, tmp_path, caplog):
    (project / "MEMORY.md").write_text("# root\n")
    (project / "memory" / "a.md").write_text("a\n")
    (project / "memory" / "deep" / "er").mkdir(parents=True)
    (project / "memory" / "deep" / "er" / "b.md").write_text("b\n")
    (project / "memory" / "notes.txt").write_text("not markdown\n")
    (project / "memory" / ".hidden.md").write_text("hidden\n")
    (project / "memory" / "big.md").write_bytes(b"x" * 101)
    (project / "memory" / "latin1.md").write_bytes(b"caf\xe9\n")
    (project / "memory" / "bad:name.md").write_text("colon\n")
    (tmp_path / "secret.md").write_text("outside\n")
    (project / "memory" / "link.md").symlink_to(tmp_path / "secret.md")
    (project / "memory" / "dirlink").symlink_to(tmp_path)
    files = LocalFiles(project, max_bytes=100)

    with caplog.at_level(logging.WARNING):
        scan = files.scan()
        files.scan()

    assert sorted(scan.files) == ["MEMORY.md", "memory/a.md", "memory/deep/er/b.md"]
    assert scan.files["memory/a.md"].hash == h("a\n")
    assert set(scan.skipped) == {"memory/big.md", "memory/latin1.md", "memory/bad:name.md", "memory/link.md"} | {
        "memory/dirlink"
    }
    assert "symlink" in scan.skipped["memory/link.md"]
    assert caplog.text.count("memory/big.md") == 1  # warned once, not at every rescan
    assert "outside" not in caplog.text and "colon" not in caplog.text  # never memory text


def test_a_symlinked_memory_folder_is_skipped_with_a_warning(project, tmp_path):
    (project / "memory").rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "a.md").write_text("a\n")
    (project / "memory").symlink_to(elsewhere)
    scan = LocalFiles(project, max_bytes=100).scan(["memory/a.md"])
    assert scan.files == {}
    assert "memory" in scan.skipped
    assert scan.absent == set()  # not synced is not deleted


def test_only_a_file_that_is_really_gone_counts_as_deleted(project):
    (project / "memory" / "kept.md").write_text("x" * 200)
    scan = LocalFiles(project, max_bytes=100).scan(["memory/kept.md", "memory/gone.md", "memory/private/p.md"])
    assert scan.absent == {"memory/gone.md", "memory/private/p.md"}
    assert "memory/kept.md" in scan.skipped  # too large now: skipped, never pushed as a delete
    excluded = LocalFiles(project, max_bytes=100, exclude=("memory/private/**",)).scan(["memory/private/p.md"])
    assert excluded.absent == set()


def test_a_vanished_project_folder_fails_the_scan_instead_of_deleting_everything(project, tmp_path):
    (project / "memory" / "a.md").write_text("a\n")
    files = LocalFiles(project, max_bytes=100)
    assert files.scan(["memory/a.md"]).files
    project.rename(tmp_path / "moved")
    with pytest.raises(FileNotFoundError):
        files.scan(["memory/a.md"])


def test_the_hash_cache_trusts_size_and_mtime_only_once_they_are_old_enough(project):
    path = project / "memory" / "a.md"
    path.write_text("one\n")
    now = LocalFiles(project, max_bytes=100)
    assert not now.scan().files["memory/a.md"].stable  # just written: a same-tick edit could hide behind it

    files = LocalFiles(project, max_bytes=100, clock_ns=later_clock)
    assert files.scan().files["memory/a.md"].stable
    info = path.stat()
    path.write_text("two\n")  # same size; put the old mtime back: only the cache can explain the old hash
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert files.scan().files["memory/a.md"].hash == h("one\n")
    assert LocalFiles(project, max_bytes=100).scan().files["memory/a.md"].hash == h("two\n")


def test_a_deleted_file_leaves_the_hash_cache_so_one_of_its_size_and_time_is_read_again(project):
    # The cache kept an entry for every file ever deleted (a long-running proxy's memory grew with them), and a
    # file put back with the same size and time (a restore keeping times) got the hash the deleted one had.
    path = project / "memory" / "a.md"
    path.write_text("one\n")
    files = LocalFiles(project, max_bytes=100, clock_ns=later_clock)
    assert files.scan().files["memory/a.md"].hash == h("one\n")
    info = path.stat()
    path.unlink()
    assert "memory/a.md" not in files.scan().files
    path.write_text("two\n")
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))
    assert files.scan().files["memory/a.md"].hash == h("two\n")


def test_a_file_written_to_while_it_is_read_counts_as_just_saved(project, monkeypatch):
    # An in-place save that begins after the file was opened: what was read may be a part, so it must wait like
    # a file saved just now, although its time when opened was a minute old.
    path = project / "memory" / "log.md"
    path.write_text("# Log\nfirst\n")
    minute_ago = time.time_ns() - 60 * 10**9
    os.utime(path, ns=(minute_ago, minute_ago))
    files = LocalFiles(project, max_bytes=100)
    assert files.read("memory/log.md") == (b"# Log\nfirst\n", h("# Log\nfirst\n"), 0)  # settled

    def read_while_saved(fd: int, max_bytes: int) -> bytes:
        data = read_capped(fd, max_bytes)
        path.write_text("# Log\nfirst\nsecond\n")
        return data

    monkeypatch.setattr("client_proxy.sync.local_files.read_capped", read_while_saved)
    found = files.read("memory/log.md")
    assert found is not None and found[:2] == (b"# Log\nfirst\n", h("# Log\nfirst\n"))
    assert 0 < found[2] <= WRITING_NS  # settles once WRITING_NS have passed since that write


def test_an_atomic_write_never_overwrites_a_file_changed_meanwhile(project):
    files = LocalFiles(project, max_bytes=100)
    path = project / "memory" / "a.md"
    path.write_text("base\n")
    path.write_text("the user's edit\n")

    assert files.write("memory/a.md", b"from the server\n", expected=h("base\n")) is None
    assert path.read_text() == "the user's edit\n"
    assert [p.name for p in (project / "memory").iterdir()] == ["a.md"]  # no temporary file left

    written = files.write("memory/a.md", b"from the server\n", expected=h("the user's edit\n"))
    assert written is not None and written.hash == h("from the server\n")
    assert path.read_text() == "from the server\n"


def test_a_file_named_as_long_as_the_rules_allow_is_written_and_replaced(project):
    rel = "memory/" + "a" * 252 + ".md"  # its last part is 255 bytes, the most a name may have
    assert name_problem(rel) is None
    files = LocalFiles(project, max_bytes=100)
    assert files.write(rel, b"one\n", expected=None) is not None
    written = files.write(rel, b"two\n", expected=h("one\n"))
    assert written is not None and written.hash == h("two\n")
    assert os.listdir(project / "memory") == [rel.split("/")[1]]  # no temporary file left


def test_a_write_or_delete_the_disk_refuses_makes_that_file_unsyncable(project, monkeypatch):
    (project / "memory" / "a.md").write_text("a\n")
    files = LocalFiles(project, max_bytes=100)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(UnsyncableError, match=r"cannot be written \(No space left on device\)"):
        files.write("memory/a.md", b"b\n", expected=h("a\n"))
    assert os.listdir(project / "memory") == ["a.md"]
    monkeypatch.setattr(os, "unlink", full)
    with pytest.raises(UnsyncableError, match="cannot be written"):
        files.delete("memory/a.md", expected=h("a\n"))
    assert (project / "memory" / "a.md").read_text() == "a\n"


def test_a_create_never_replaces_a_file_that_appeared_and_makes_its_folders(project):
    files = LocalFiles(project, max_bytes=100)
    (project / "memory" / "new.md").write_text("mine\n")
    assert files.write("memory/new.md", b"theirs\n", expected=None) is None
    assert (project / "memory" / "new.md").read_text() == "mine\n"
    assert files.write("memory/a/b/c.md", b"deep\n", expected=None) is not None
    assert (project / "memory" / "a" / "b" / "c.md").read_text() == "deep\n"


def test_a_replaced_file_keeps_its_permissions(project):
    path = project / "memory" / "a.md"
    path.write_text("old\n")
    path.chmod(0o600)
    LocalFiles(project, max_bytes=100).write("memory/a.md", b"new\n", expected=h("old\n"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_delete_happens_only_while_the_file_still_has_the_expected_hash(project):
    files = LocalFiles(project, max_bytes=100)
    path = project / "memory" / "a.md"
    path.write_text("edited\n")
    assert files.delete("memory/a.md", expected=h("base\n")) is False
    assert path.exists()
    assert files.delete("memory/a.md", expected=h("edited\n")) is True
    assert not path.exists()
    assert files.delete("memory/a.md", expected=h("edited\n")) is True  # already gone


def test_pending_pushes_are_what_differs_from_the_bases(project, tmp_path):
    (project / "memory" / "same.md").write_text("same\n")
    (project / "memory" / "edited.md").write_text("new\n")
    (project / "memory" / "created.md").write_text("created\n")
    (project / "memory" / "refused.md").write_text("refused\n")
    state = StateStore(tmp_path, SERVER, INDEX, project).fresh()
    state.files = {
        "memory/same.md": Base(h("same\n"), 1),
        "memory/edited.md": Base(h("old\n"), 2),
        "memory/deleted.md": Base(h("gone\n"), 3),
    }
    state.rejected["memory/refused.md"] = {"hash": h("refused\n"), "message": "no", "at": "t"}
    scan = LocalFiles(project, max_bytes=100).scan(list(state.files))
    pending = {(item.path, item.kind) for item in pending_pushes(state, scan)}
    assert pending == {("memory/edited.md", "edit"), ("memory/created.md", "create"), ("memory/deleted.md", "delete")}
    (project / "memory" / "refused.md").write_text("refused, then fixed\n")
    scan = LocalFiles(project, max_bytes=100).scan(list(state.files))
    assert ("memory/refused.md", "create") in {(item.path, item.kind) for item in pending_pushes(state, scan)}


def test_pending_pushes_put_deletes_before_creates_and_edits(project, tmp_path):
    # `Notes.md` renamed `notes.md`: the server refuses the new name while the old one lives
    (project / "memory" / "notes.md").write_text("notes\n")
    (project / "memory" / "b.md").write_text("edited\n")
    state = StateStore(tmp_path, SERVER, INDEX, project).fresh()
    state.files = {"memory/Notes.md": Base(h("notes\n"), 1), "memory/b.md": Base(h("b\n"), 2)}
    scan = LocalFiles(project, max_bytes=100).scan(list(state.files))
    assert [(item.path, item.kind) for item in pending_pushes(state, scan)] == [
        ("memory/Notes.md", "delete"),
        ("memory/b.md", "edit"),
        ("memory/notes.md", "create"),
    ]


def test_a_refusal_as_the_same_file_as_another_name_lasts_only_while_the_server_holds_such_a_name(project, tmp_path):
    (project / "memory" / "notes.md").write_text("notes\n")
    (project / "memory" / "Notes.md").write_text("other\n")  # both on this disk; one file on a Mac
    (project / "memory" / "big.md").write_text("big\n")
    state = StateStore(tmp_path, SERVER, INDEX, project).fresh()
    state.files["memory/Notes.md"] = Base(h("other\n"), 1)
    refusal = "memory/notes.md would be the same file as memory/Notes.md on macOS and Windows laptops"
    state.rejected["memory/notes.md"] = {"hash": h("notes\n"), "message": refusal, "at": "t"}
    state.rejected["memory/big.md"] = {"hash": h("big\n"), "message": "larger than the cap", "at": "t"}

    def pending() -> list[tuple[str, str]]:
        scan = LocalFiles(project, max_bytes=100).scan(state.files)
        return [(item.path, item.kind) for item in pending_pushes(state, scan)]

    assert pending() == []
    (project / "memory" / "Notes.md").unlink()  # its deletion goes first, in the same push
    assert pending() == [("memory/Notes.md", "delete"), ("memory/notes.md", "create")]
    del state.files["memory/Notes.md"]
    state.unapplied["memory/NOTES.md"] = Unapplied(2, "on macOS and Windows it is the same file as ...", "t")
    assert pending() == []  # a name the server holds that this laptop could not write
    state.unapplied.clear()
    assert pending() == [("memory/notes.md", "create")]  # the other refusal stands


# -- changes left unapplied ---------------------------------------------------------------------------------------


def test_a_pulled_change_is_kept_for_a_retry_only_when_something_on_this_laptop_stands_in_its_way(project, caplog):
    state = SyncState(SERVER, INDEX, str(project))
    files = LocalFiles(project, exclude=("memory/private/**",), max_bytes=100)
    at = "2026-11-23T10:15:00Z"
    reconciler = Reconciler(files, state, lambda: at)
    (project / "memory" / "Taken.md").write_text("mine\n")  # not synced yet
    (project / "memory" / "folder.md").mkdir()  # a folder where a file is to go

    def apply(path: str, text: str, revision: int, digest: str | None = None) -> str:
        return reconciler.apply_change(Change(path, revision, digest or h(text), text), reset=False)

    assert apply("memory/private/p.md", "p\n", 1) == "skipped"  # excluded: by choice
    assert apply("memory/lying.md", "l\n", 2, h("something else")) == "skipped"  # the server's fault
    assert apply("memory/taken.md", "theirs\n", 3) == "skipped"
    assert apply("memory/folder.md", "f\n", 4) == "skipped"
    assert apply("memory/folder.md", "f\n", 4) == "skipped"
    assert state.unapplied == {
        "memory/taken.md": Unapplied(3, "on macOS and Windows it is the same file as memory/Taken.md", at),
        "memory/folder.md": Unapplied(4, "memory/folder.md is not a regular file", at),
    }
    assert caplog.text.count("not applying the server's change: memory/folder.md is not a regular file") == 1

    (project / "memory" / "Taken.md").rename(project / "memory" / "mine.md")
    (project / "memory" / "folder.md").rmdir()
    assert apply("memory/taken.md", "theirs\n", 3) == "written"
    assert apply("memory/folder.md", "f\n", 4) == "written"
    assert state.unapplied == {}


def test_unapplied_changes_are_retried_at_start_then_ever_less_often_while_the_retries_write_none():
    clock = [0.0]
    retry = UnappliedRetry(lambda: clock[0])
    state = SyncState(SERVER, INDEX, "/p", revision=90)
    left = Unapplied(57, "cannot be written (Permission denied)", "t")
    state.unapplied = {"memory/a.md": left, "memory/b.md": Unapplied(80, "is not a regular file", "t")}

    assert retry.rewind(state)  # at once: the cause may have gone while sync was off
    assert state.revision == 56 and state.unapplied == {}
    delays = []
    for _ in range(6):
        state.revision, state.unapplied["memory/a.md"] = 90, left  # pulled again: b.md written, a.md not
        delay = retry.due_in(state)
        assert delay is not None
        clock[0] += delay - 1
        assert not retry.rewind(state) and state.revision == 90
        clock[0] += 1
        assert retry.rewind(state) and state.revision == 56
        delays.append(delay)
    assert delays == [RETRY_FIRST, 2 * RETRY_FIRST, 4 * RETRY_FIRST, 8 * RETRY_FIRST, RETRY_MAX, RETRY_MAX]

    state.revision = 90  # written at last
    assert retry.due_in(state) is None and not retry.rewind(state)
    state.unapplied["memory/c.md"] = Unapplied(91, "cannot be written (Permission denied)", "t")
    assert retry.due_in(state) == RETRY_FIRST  # another file: from the start


def test_unapplied_changes_wait_for_a_reset_listing_and_never_move_the_pull_forward():
    clock = [0.0]
    retry = UnappliedRetry(lambda: clock[0])
    state = SyncState(SERVER, INDEX, "/p", revision=10, reset_listed=["memory/a.md"])
    state.unapplied["memory/b.md"] = Unapplied(500, "is not a regular file", "t")  # newer than the pull's `next`
    assert retry.due_in(state) is None and not retry.rewind(state)  # the listing brings every path anyway
    state.reset_listed = None
    assert retry.rewind(state)
    assert state.revision == 10
    state.unapplied["memory/b.md"] = Unapplied(0, "is not a regular file", "t")
    clock[0] += retry.due_in(state) or 0.0
    assert retry.rewind(state)
    assert state.revision == 0


# -- watcher -------------------------------------------------------------------------------------------------------


@pytest.fixture
async def watching(project):
    wakeup = Wakeup(quiet=0.05, max_delay=0.5)
    watcher = Watcher(project, wakeup)
    await anyio.to_thread.run_sync(watcher.start)
    await wakeup.wait(0)  # a wake-up for the initial watch of memory/, if any
    try:
        yield wakeup, watcher
    finally:
        await anyio.to_thread.run_sync(watcher.stop)


async def woken(wakeup: Wakeup) -> bool:
    with anyio.fail_after(WAIT):
        return await wakeup.wait(WAIT)


async def test_the_watcher_notices_create_modify_rename_and_delete(watching, project):
    wakeup, _ = watching
    path = project / "memory" / "a.md"
    path.write_text("created\n")
    assert await woken(wakeup)
    path.write_text("modified\n")
    assert await woken(wakeup)
    path.rename(project / "memory" / "b.md")
    assert await woken(wakeup)
    (project / "memory" / "b.md").unlink()
    assert await woken(wakeup)
    (project / "MEMORY.md").write_text("root\n")
    assert await woken(wakeup)


async def test_a_burst_of_saves_wakes_the_syncer_once(project):
    # a quiet time long enough that a loaded machine's gaps between 30 saves never end the burst
    wakeup = Wakeup(quiet=0.5, max_delay=10)
    watcher = Watcher(project, wakeup)
    await anyio.to_thread.run_sync(watcher.start)
    await wakeup.wait(0)
    try:
        for number in range(30):
            (project / "memory" / f"n{number}.md").write_text(f"{number}\n")
        assert await woken(wakeup)
        assert not await wakeup.wait(0.6)  # the whole burst was one wake-up
    finally:
        await anyio.to_thread.run_sync(watcher.stop)


async def test_reading_files_or_touching_other_files_does_not_wake_the_syncer(watching, project):
    wakeup, _ = watching
    (project / "memory" / "a.md").write_text("a\n")
    assert await woken(wakeup)
    (project / "memory" / "a.md").read_text()
    (project / "unrelated.txt").write_text("not memory\n")
    (project / "memory" / ".a.md.tmp").write_text("a temporary file\n")
    assert not await wakeup.wait(0.3)


async def test_a_memory_folder_made_after_start_is_watched_once_refreshed(tmp_path):
    project = tmp_path / "empty-project"
    project.mkdir()
    wakeup = Wakeup(quiet=0.05, max_delay=0.5)
    watcher = Watcher(project, wakeup)
    await anyio.to_thread.run_sync(watcher.start)
    try:
        (project / "memory").mkdir()
        assert await woken(wakeup)  # the root watch sees the folder appear
        await anyio.to_thread.run_sync(watcher.refresh)
        assert await woken(wakeup)  # watching it: look once for what was written before the watch began
        (project / "memory" / "a.md").write_text("a\n")
        assert await woken(wakeup)
    finally:
        await anyio.to_thread.run_sync(watcher.stop)


async def test_a_steady_stream_of_events_still_wakes_within_the_max_delay():
    wakeup = Wakeup(quiet=0.2, max_delay=0.5)
    started = time.monotonic()

    async def keep_poking() -> None:
        while True:
            await anyio.to_thread.run_sync(wakeup.poke)
            await anyio.sleep(0.05)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(keep_poking)
        assert await woken(wakeup)
        tasks.cancel_scope.cancel()
    assert time.monotonic() - started < 2.0


async def test_a_wake_up_asked_for_comes_on_time_through_a_burst_that_goes_on():
    wakeup = Wakeup(quiet=30, max_delay=60)  # the burst below would hold the syncer for half a minute
    wakeup.poke()
    wakeup.poke_in(0.05)
    with anyio.fail_after(10):
        assert await wakeup.wait(60)


async def test_a_wake_up_asked_for_with_no_events_comes_at_its_time_not_before():
    wakeup = Wakeup(quiet=0.01, max_delay=0.02)
    started = time.monotonic()
    wakeup.poke_in(0.2)
    with anyio.fail_after(10):
        assert await wakeup.wait(60)
    assert time.monotonic() - started >= 0.2
    assert not await wakeup.wait(0)  # and it was the one wake-up


@pytest.mark.parametrize("from_thread", [False, True], ids=["on-the-loop", "from-a-thread"])
async def test_an_urgent_poke_ends_a_quiet_time_already_being_waited_out(from_thread):
    wakeup = Wakeup(quiet=30, max_delay=60)  # a file saved just before a scan was asked for

    async def poke_urgently() -> None:
        await anyio.wait_all_tasks_blocked()  # the wait below is sleeping out the quiet time
        if from_thread:
            await anyio.to_thread.run_sync(lambda: wakeup.poke(urgent=True))
        else:
            wakeup.poke(urgent=True)

    wakeup.poke()
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(poke_urgently)
            assert await wakeup.wait(60)
    assert not await wakeup.wait(0)  # the save and the urgent poke were one wake-up


async def test_a_wake_delivered_after_its_burst_was_taken_neither_wakes_nor_fails():
    wakeup = Wakeup(quiet=0.01, max_delay=0.02)
    wakeup.poke(urgent=True)
    with anyio.fail_after(10):
        assert await wakeup.wait(60)
    wakeup._set()  # what a poke from another thread delivers late, once the wait above has taken its burst
    assert not await wakeup.wait(0.1)
    wakeup.poke()
    with anyio.fail_after(10):
        assert await wakeup.wait(60)  # and the next poke still wakes


# -- status --------------------------------------------------------------------------------------------------------


@pytest.fixture
def configured(tmp_path, monkeypatch):
    home = tmp_path / "home"
    init_proxy_home(home, url=SERVER)
    monkeypatch.setenv("MEMORY_PROXY_HOME", str(home))
    monkeypatch.setenv("MEMORY_PROXY_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("MEMORY_INDEX", raising=False)
    monkeypatch.delenv("MEMORY_PROXY_SYNC", raising=False)
    return tmp_path / "state"


def status(capsys, project, *extra: str) -> str:
    assert cli.main(["status", "--project", str(project), "--index", INDEX, *extra]) == 0
    return capsys.readouterr().out


def test_status_of_a_folder_never_synced_lists_every_file_as_pending(configured, project, capsys):
    (project / "MEMORY.md").write_text("# root\n")
    (project / "memory" / "a.md").write_text("a\n")
    text = status(capsys, project)
    assert f"server:     {SERVER}" in text and f"index:      {INDEX}" in text
    assert "sync:       on (--project)" in text
    assert "last pull:  never" in text
    assert "pending:    2 changes to push" in text
    assert "  create  MEMORY.md" in text and "  create  memory/a.md" in text


def test_status_shows_pending_conflicts_rejections_and_the_last_error(configured, project, capsys):
    (project / "memory" / "edited.md").write_text("edited\n")
    (project / "memory" / "x.conflict-bob-20261123T101500Z.md").write_text("theirs\n")
    (project / "memory" / "big.md").write_bytes(b"x" * (DEFAULT_MAX_FILE_BYTES + 1))
    store = StateStore(configured, SERVER, INDEX, project.resolve())
    state = store.fresh()
    state.revision = 61
    state.last_pull_at = "2026-11-23T10:15:00Z"
    state.files["memory/edited.md"] = Base(h("before\n"), 58)
    state.files["memory/x.conflict-bob-20261123T101500Z.md"] = Base(h("theirs\n"), 60)
    state.files["memory/deleted.md"] = Base(h("gone\n"), 59)
    state.add_conflict("memory/x.md", "memory/x.conflict-bob-20261123T101500Z.md", "2026-11-23T10:15:00Z")
    state.rejected["memory/bad.md"] = {"hash": h("bad\n"), "message": "path contains ':'", "at": "t"}
    state.last_error = {"at": "2026-11-23T10:16:00Z", "message": "pull: cannot reach the memory server"}
    store.save(state)

    text = status(capsys, project)
    assert "last pull:  2026-11-23T10:15:00Z (revision 61)" in text
    assert "pending:    2 changes to push" in text
    assert "  edit    memory/edited.md" in text and "  delete  memory/deleted.md" in text
    assert "memory/x.md: yours saved as memory/x.conflict-bob-20261123T101500Z.md" in text
    assert "memory/bad.md: path contains ':'" in text
    assert "memory/big.md: larger than 2 MiB" in text
    assert "last error: pull: cannot reach the memory server (2026-11-23T10:16:00Z)" in text

    report = json.loads(status(capsys, project, "--json"))
    assert report["pending"]["count"] == 2
    assert report["conflicts"]["files"] == ["memory/x.conflict-bob-20261123T101500Z.md"]
    assert report["last_pull"] == {"at": "2026-11-23T10:15:00Z", "revision": 61}


def test_status_lists_the_servers_changes_not_written_here_yet(configured, project, capsys):
    store = StateStore(configured, SERVER, INDEX, project.resolve())
    state = store.fresh()
    refused = Unapplied(57, "cannot be written (Permission denied)", "2026-11-23T10:15:00Z")
    state.unapplied["memory/locked/a.md"] = refused
    store.save(state)

    text = status(capsys, project)
    assert "unapplied:  1 change from the server not written here yet" in text
    assert "  memory/locked/a.md: cannot be written (Permission denied) (2026-11-23T10:15:00Z)" in text
    report = json.loads(status(capsys, project, "--json"))
    assert report["unapplied"] == [
        {
            "path": "memory/locked/a.md",
            "revision": 57,
            "message": "cannot be written (Permission denied)",
            "at": "2026-11-23T10:15:00Z",
        }
    ]
    assert "unapplied:" not in status(capsys, project.parent)  # another folder: nothing waits


def test_status_says_when_a_proxy_is_syncing_the_folder_now(configured, project, capsys):
    store = StateStore(configured, SERVER, INDEX, project.resolve())
    assert "is syncing this folder now" not in status(capsys, project)
    assert store.claim()
    try:
        assert "sync:       on (--project); a memory-proxy is syncing this folder now" in status(capsys, project)
    finally:
        store.release()
    again = StateStore(configured, SERVER, INDEX, project.resolve())
    assert again.claim()  # released: the next proxy may take it
    again.release()


def test_status_reports_a_corrupt_state_file_without_touching_it(configured, project, capsys):
    store = StateStore(configured, SERVER, INDEX, project.resolve())
    configured.mkdir(mode=0o700)
    store.path.write_text("{broken")
    text = status(capsys, project)
    assert "the next `memory-proxy run` moves it aside" in text
    assert store.path.read_text() == "{broken"


def test_status_says_why_sync_is_off_for_a_folder_without_memory_files(configured, tmp_path, capsys, monkeypatch):
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.chdir(bare)
    assert cli.main(["status", "--index", INDEX]) == 0
    assert "holds no MEMORY.md, memory.md or memory/" in capsys.readouterr().out
    monkeypatch.setenv("MEMORY_PROXY_SYNC", "0")
    assert cli.main(["status", "--index", INDEX, "--project", str(bare)]) == 0
    assert "sync:       off (MEMORY_PROXY_SYNC=0)" in capsys.readouterr().out


# -- configuration -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('sync = "no"', "sync must be true or false"),
        ('sync_exclude = "memory/private/**"', "must be a list of strings"),
        ("sync_exclude = [1]", "must be a list of strings"),
        ('sync_exclude = ["/memory/**"]', "relative path"),
        ('sync_exclude = ["memory\\\\x"]', "relative path"),
        ('sync_exclude = [""]', "1 to 512 characters"),
        ("synk = false", "unknown field 'synk'"),
    ],
)
def test_the_sync_keys_of_proxy_toml_are_checked_strictly(tmp_path, line, error):
    home = tmp_path / "home"
    init_proxy_home(home, url=SERVER)
    with open(home / "proxy.toml", "a") as config:
        config.write(line + "\n")
    with pytest.raises(ConfigError, match=error):
        ProxyConfig.load(home)


def test_init_run_again_keeps_the_sync_keys(tmp_path):
    home = tmp_path / "home"
    init_proxy_home(home, url=SERVER)
    with open(home / "proxy.toml", "a") as config:
        config.write('sync = false\nsync_exclude = ["memory/private/**", "memory/drafts/*.md"]\n')
    init_proxy_home(home, url="https://elsewhere.example")
    config = ProxyConfig.load(home)
    assert config.server_url == "https://elsewhere.example"
    assert (config.sync, config.sync_exclude) == (False, ("memory/private/**", "memory/drafts/*.md"))


@pytest.mark.parametrize(
    ("no_sync", "env", "toml", "given", "files", "expected"),
    [
        (True, "1", True, True, True, "off (--no-sync)"),
        (False, "1", False, False, False, "on (MEMORY_PROXY_SYNC=1)"),
        (False, "0", True, True, True, "off (MEMORY_PROXY_SYNC=0)"),
        (False, "maybe", None, True, True, "off (MEMORY_PROXY_SYNC='maybe' is neither 0 nor 1)"),
        (False, None, False, True, True, "off (sync = false in"),
        (False, None, True, False, False, "on (sync = true in"),
        (False, None, None, True, False, "on (--project)"),
        (False, None, None, False, True, "on (the folder holds memory files)"),
        (False, None, None, False, False, "off: "),
    ],
)
def test_whether_run_syncs_follows_flag_then_environment_then_config_then_the_folder(
    tmp_path, monkeypatch, no_sync, env, toml, given, files, expected
):
    home = tmp_path / "home"
    init_proxy_home(home, url=SERVER)
    if toml is not None:
        with open(home / "proxy.toml", "a") as config:
            config.write(f"sync = {str(toml).lower()}\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    if files:
        (folder / "memory.md").write_text("x\n")
    monkeypatch.chdir(folder)
    environ = {"MEMORY_PROXY_HOME": str(home), **({"MEMORY_PROXY_SYNC": env} if env else {})}
    settings = RunSettings.from_env(
        environ, index=INDEX, project=str(folder) if given else None, log_file=None, no_sync=no_sync
    )
    choice = settings.sync_choice(ProxyConfig.load(home))
    assert choice.reason.startswith(expected)
    assert choice.enabled == expected.startswith("on")
