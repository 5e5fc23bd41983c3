"""`memory_sync` by source and by path: only those files are looked at and indexed, deletions under the path
included; a bad source or path is a clear error."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.errors import InvalidArgumentError
from server.index.scan import ScanConfig
from server.memory.service import CallerContext, MemoryService
from server.memory.upkeep import selected_paths
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import channel_user, connect, plant, structured
from tests.postgres_support import ON_SERVER_DISK

pytestmark = pytest.mark.usefixtures("backend")  # every test runs on SQLite and on PostgreSQL

ALICE = CallerContext("alice", "SHA256:a", {"proj": "rw"}, "proj", "rw")
PATHS = ["MEMORY.md", "memory/a.md", "memory/b/c.md", "memory/bb.md", "sessions/laptop/2026-11-20-s1.md"]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path / "data", HashingEmbedder())
    yield running
    running.close()


def plant_all(service: MemoryService, tmp_path: Path) -> None:
    service.status(ALICE)  # the index and its mirror exist
    for path in PATHS:
        plant(tmp_path / "data", "proj", path, f"# {path}\n\nNotes kept in {path}.\n")


def test_selected_paths_follow_the_scan_rules_and_a_prefix_is_a_folder_or_one_file():
    source_of = ScanConfig().source_of
    assert selected_paths(PATHS, source_of, "sessions", "") == {"sessions/laptop/2026-11-20-s1.md"}
    assert selected_paths(PATHS, source_of, None, "memory/b") == {"memory/b/c.md"}  # not memory/bb.md
    assert selected_paths(PATHS, source_of, None, "memory/a.md") == {"memory/a.md"}
    assert selected_paths(PATHS, source_of, "memory", "") == set(PATHS) - {"sessions/laptop/2026-11-20-s1.md"}


@ON_SERVER_DISK
def test_a_sync_of_one_folder_indexes_only_the_files_under_it(service, tmp_path):
    plant_all(service, tmp_path)
    folder = service.sync(ALICE, path="memory/b/")
    assert (folder.files_seen, folder.files_indexed) == (1, 1)
    sessions = service.sync(ALICE, source="sessions")
    assert (sessions.files_seen, sessions.files_indexed) == (1, 1)
    rest = service.sync(ALICE)
    assert rest.files_indexed == len(PATHS) - 2


@ON_SERVER_DISK
def test_a_file_deleted_under_the_path_leaves_the_index_and_others_stay(service, tmp_path):
    plant_all(service, tmp_path)
    service.sync(ALICE, force=True)
    (tmp_path / "data" / "indexes" / "proj" / "files" / "memory" / "b" / "c.md").unlink()
    (tmp_path / "data" / "indexes" / "proj" / "files" / "memory" / "a.md").unlink()
    removed = service.sync(ALICE, path="memory/b")
    assert removed.files_removed == 1
    assert service.sync(ALICE).files_removed == 1  # memory/a.md waited for a sync of its own


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"source": "photos"}, "unknown source 'photos'"), ({"path": "../outside"}, "relative path inside")],
)
def test_a_bad_source_or_path_is_a_clear_error(service, arguments, message):
    with pytest.raises(InvalidArgumentError, match=message):
        service.sync(ALICE, **arguments)


@pytest.mark.anyio
@ON_SERVER_DISK
async def test_memory_sync_takes_source_and_path_through_mcp(service, tmp_path):
    plant_all(service, tmp_path)
    async with connect(service, channel_user("alice", {"proj": "rw"}, "proj")) as client:
        synced = structured(await client.call_tool("memory_sync", {"source": "memory", "path": "memory/b"}))
    assert synced["files_indexed"] == 1
