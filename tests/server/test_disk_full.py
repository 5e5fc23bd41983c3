"""A full disk: a write that cannot be stored is refused with a clear error over MCP and over sync, nothing is
left half-written, and the server carries on by itself once space returns. A real tmpfs of 4 MiB (the tests run
as root, who may mount one)."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.error_table import STORAGE_FULL, answer_for, recognised
from server.errors import StorageFullError
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import channel_user, connect, error, structured

pytestmark = pytest.mark.anyio
ALICE = channel_user("alice", {"proj": "rw"}, "proj")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    # Unbuffered: a buffered file would try its last block again on close, and that ENOSPC would escape from here.
    with filler.open("wb", buffering=0) as handle:
        try:
            while True:
                handle.write(b"\0" * 65536)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


async def test_a_write_to_a_full_disk_is_refused_clearly_and_succeeds_once_space_returns(small_disk):
    service = MemoryService(small_disk / "data", HashingEmbedder())
    try:
        async with connect(service, ALICE) as client:
            first = await client.call_tool("memory_write", {"content": "the deploy runbook", "path": "memory/a.md"})
            before = structured(first)["hash"]
            filler = fill(small_disk)
            refused = await client.call_tool(
                "memory_write", {"content": "a long addition " * 400, "path": "memory/a.md"}
            )
            assert STORAGE_FULL in error(refused)
            kept = structured(await client.call_tool("memory_get", {"path": "memory/a.md"}))
            assert kept["hash"] == before and kept["content"] == "the deploy runbook"
            assert not [p.name for p in (small_disk / "data").rglob("*.tmp")]  # no temporary file left behind

            filler.unlink()  # the operator frees space: no restart
            again = structured(
                await client.call_tool("memory_write", {"content": "a long addition", "path": "memory/a.md"})
            )
            assert again["indexed"] is True
            found = structured(await client.call_tool("memory_search", {"query": "long addition"}))
            assert found["hits"][0]["path"] == "memory/a.md"
    finally:
        service.close()


def test_the_os_and_sqlite_words_for_a_full_disk_are_both_recognised():
    import apsw

    for raised in (OSError(errno.ENOSPC, "No space left on device"), OSError(errno.EDQUOT, "quota"), apsw.FullError()):
        known = recognised(raised)
        assert isinstance(known, StorageFullError) and str(known) == STORAGE_FULL
        answer = answer_for(known)
        assert answer is not None and (answer.status, answer.code, answer.shown) == (507, "insufficient_storage", True)
    assert recognised(OSError(errno.EACCES, "denied")) is None and recognised(ValueError("bug")) is None
