"""The conflict copy's name (`server.sync.conflicts`): beside the file, unique, and always a valid path, however long
the file's own path is; and a conflict on a long path keeps the losing laptop's text instead of rejecting it."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from server.memory.service import CallerContext, MemoryService
from server.mirror.paths import normalise_memory_path
from server.sync.conflicts import conflict_path
from server.sync.service import SyncService
from syncproto.messages import PushChange
from syncproto.paths import MAX_PATH_CHARS, MAX_SEGMENT_BYTES
from syncproto.wire import sha256_hex
from tests.fakes.embedder import HashingEmbedder

MOMENT = dt.datetime(2026, 11, 23, 10, 15, tzinfo=dt.UTC)
LONG_FOLDERS = "memory/projects-" + "x" * 230 + "/" + "y" * 240  # a valid folder path of 488 characters
CALLER = "a-caller-with-a-rather-long-name-" + "z" * 31  # 64 characters, the longest a caller name may be


def _never(_path: str) -> bool:
    return False


@pytest.mark.parametrize(
    "path",
    [
        f"{LONG_FOLDERS}/n.md",
        f"{LONG_FOLDERS}/{'é' * 10}.md",
        "memory/" + "d" * 240 + "/" + "ü" * 125 + ".md",
        "memory/" + "n" * 252 + ".md",
    ],
)
def test_a_conflict_copy_of_a_long_path_is_itself_a_valid_path_that_ends_in_the_conflict_suffix(path: str) -> None:
    assert normalise_memory_path(path) == path
    copy = conflict_path(path, CALLER, MOMENT, _never)
    assert normalise_memory_path(copy) == copy
    assert len(copy) <= MAX_PATH_CHARS and len(copy.rsplit("/", 1)[1].encode()) <= MAX_SEGMENT_BYTES
    assert copy.endswith(f".conflict-{CALLER}-20261123T101500Z.md")


def test_a_conflict_copy_keeps_its_folder_when_it_fits_and_goes_under_memory_when_the_folder_leaves_no_room() -> None:
    assert (
        conflict_path("memory/deep/db.md", "bob", MOMENT, _never) == "memory/deep/db.conflict-bob-20261123T101500Z.md"
    )
    deepest = f"{LONG_FOLDERS}/" + "w" * 11 + "/n.md"  # 505 characters: no room for the suffix beside it
    assert normalise_memory_path(deepest) == deepest
    assert conflict_path(deepest, "bob", MOMENT, _never) == "memory/n.conflict-bob-20261123T101500Z.md"


def test_shortened_conflict_copies_in_the_same_second_stay_unique() -> None:
    path = f"{LONG_FOLDERS}/n.md"
    made: set[str] = set()
    for _ in range(3):
        made.add(conflict_path(path, CALLER, MOMENT, made.__contains__))
    assert len(made) == 3 and all(normalise_memory_path(copy) == copy for copy in made)


def test_a_conflict_on_a_long_path_keeps_the_losing_laptops_text_as_a_copy(tmp_path: Path) -> None:
    service = MemoryService(tmp_path / "data", HashingEmbedder())
    alice = CallerContext("alice", "SHA256:alice", {"team": "rw"}, "team", "rw")
    bob = CallerContext("bob", "SHA256:bob", {"team": "rw"}, "team", "rw")
    path = f"{LONG_FOLDERS}/n.md"
    try:
        sync = SyncService(service)
        sync.push(alice, [PushChange(path, None, "v1\n")])
        sync.push(alice, [PushChange(path, sha256_hex(b"v1\n"), "alice\n")])
        _, [result] = sync.push(bob, [PushChange(path, sha256_hex(b"v1\n"), "bob\n")])
        assert result.status == "conflict" and result.conflict_path is not None
        assert service.get(bob, result.conflict_path).content == "bob"
        assert service.get(bob, path).content == "alice"
    finally:
        service.close()
