"""The proxy's sync loop against the real server side, in process: the `Syncer` (real watcher, real files, real
state file) talks to the inner app's `/sync/*` (real mirror and index, hashing embedder) as the channel would let
it in. Another caller, "bob", pushes and pulls over plain HTTP to play the other laptops and the MCP writes.
The multi-process, several-laptop runs are in tests/e2e/test_sync_e2e.py."""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import random
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from channel.authz import Access, ChannelUser
from client_proxy.sync.api import PushChange, SyncApi, SyncProtocolError, SyncRefusedError
from client_proxy.sync.local_files import (
    MAX_SETTLING_NS,
    SETTLE_EMPTY_NS,
    WRITING_NS,
    LocalFiles,
    sha256_hex,
)
from client_proxy.sync.retry import Retry
from client_proxy.sync.scope import DEFAULT_MAX_FILE_BYTES
from client_proxy.sync.state import StateStore
from client_proxy.sync.syncer import Syncer
from client_proxy.sync.unapplied import RETRY_FIRST
from client_proxy.sync.watcher import Wakeup, Watcher
from server.app import create_inner_app
from server.memory.service import MemoryService
from server.sync.service import SyncService
from syncproto.paths import memory_folders, set_extra_folders
from syncproto.wire import MAX_CHANGES
from tests.fakes.embedder import HashingEmbedder

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

INDEX = "team"
URL = "https://memory.example"
WAIT = 10.0


def h(text: str) -> str:
    return sha256_hex(text.encode())


class Switch(httpx2.AsyncBaseTransport):
    """The app as seen through a network that the test can take down, counting the requests that got through."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.down = False
        self.requests: list[tuple[str, str]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self.down:
            raise httpx2.ConnectError("connection refused", request=request)
        self.requests.append((request.method, request.url.path))
        return await self.inner.handle_async_request(request)


class Rig:
    """One server (the inner app over a real service) and the folders of one laptop."""

    def __init__(self, tmp_path: Path, service: MemoryService) -> None:
        self.app = create_inner_app(service)
        self.project = tmp_path / "project"
        (self.project / "memory").mkdir(parents=True)
        self.state_home = tmp_path / "state"
        self.network = Switch(self.transport("alice"))
        self.bob = httpx2.AsyncClient(transport=self.transport("bob"), base_url="http://memory")

    def transport(self, name: str, access: Access = "rw") -> httpx2.AsyncBaseTransport:
        user = ChannelUser(name, f"SHA256:{name}", {INDEX: access}, INDEX, access)

        async def as_user(scope: Any, receive: Any, send: Any) -> None:
            await self.app({**scope, "user": user}, receive, send)

        return httpx2.ASGITransport(as_user)

    def store(self) -> StateStore:
        return StateStore(self.state_home, URL, INDEX, self.project)

    def saved(self) -> dict[str, Any]:
        return dict(json.loads(self.store().path.read_text()))

    @asynccontextmanager
    async def syncing(
        self,
        *,
        access: Access = "rw",
        max_bytes: int = DEFAULT_MAX_FILE_BYTES,
        exclude: tuple[str, ...] = (),
        clock_ns: Callable[[], int] = time.time_ns,
        clock: Callable[[], float] = time.monotonic,
    ) -> AsyncIterator[Syncer]:
        """The laptop's syncer running (as alice, or a read-only device) until the block ends."""
        transport = self.network if access == "rw" else Switch(self.transport("reader", access))
        wakeup = Wakeup(quiet=0.05, max_delay=0.3)
        files = LocalFiles(self.project, exclude=exclude, max_bytes=max_bytes, clock_ns=clock_ns)
        async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
            syncer = Syncer(
                SyncApi(client),
                files,
                self.store(),
                server_url=URL,
                wakeup=wakeup,
                watcher=Watcher(self.project, wakeup),
                clock=clock,
            )
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(syncer.run)
                yield syncer
                tasks.cancel_scope.cancel()

    # the local files -------------------------------------------------------------------------------------------

    def write(self, relpath: str, text: str) -> None:
        target = self.project / relpath
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, "utf-8")

    def read(self, relpath: str) -> str | None:
        try:
            return (self.project / relpath).read_text("utf-8")
        except FileNotFoundError:
            return None

    # the server, as bob sees it ---------------------------------------------------------------------------------

    async def server(self) -> dict[str, str]:
        """Every live file on the server (path → text)."""
        response = await self.bob.get("/sync/changes", params={"since": 0})
        return {c["path"]: c["content"] for c in response.json()["changes"] if c["hash"] is not None}

    async def revision(self) -> int:
        return int((await self.bob.get("/sync/changes", params={"since": 0})).json()["revision"])

    async def push(self, path: str, content: str | None, base: str | None) -> dict[str, Any]:
        change = {"path": path, "base": base, **({"content": content} if content is not None else {"delete": True})}
        response = await self.bob.post("/sync/push", json={"changes": [change]})
        assert response.status_code == 200, response.text
        return dict(response.json()["results"][0])


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path / "data", HashingEmbedder())
    yield running
    running.close()


@pytest.fixture
async def rig(tmp_path: Path, service: MemoryService) -> AsyncIterator[Rig]:
    made = Rig(tmp_path, service)
    yield made
    await made.bob.aclose()


async def until(check: Callable[[], Any], what: str) -> None:
    """Wait (bounded) until `check()` (sync or async) is true."""
    with anyio.fail_after(WAIT):
        while True:
            result = check()
            if hasattr(result, "__await__"):
                result = await result
            if result:
                return
            await anyio.sleep(0.01)
    raise AssertionError(what)


async def server_has(rig: Rig, path: str, text: str | None) -> bool:
    return (await rig.server()).get(path) == text


async def server_is(rig: Rig, files: dict[str, str]) -> bool:
    return await rig.server() == files


async def caught_up(rig: Rig, syncer: Syncer) -> bool:
    """Whether the syncer has pulled (and applied) every change the server holds."""
    return syncer.state.revision >= await rig.revision()


async def a_push_pass_after_now(syncer: Syncer) -> None:
    """Wait for a complete scan-and-push that started after this call."""
    seen = syncer.push_passes
    syncer.request_scan()
    await until(lambda: syncer.push_passes > seen, "one more push pass")
    if syncer.push_passes == seen + 1:  # that pass may have begun before the call: ask for one more
        syncer.request_scan()
        await until(lambda: syncer.push_passes > seen + 1, "another push pass")


async def test_a_fresh_folder_pushes_its_files_and_pulls_the_servers(rig):
    await rig.push("memory/bob.md", "# Bob\nfrom bob\n", None)
    rig.write("MEMORY.md", "# Project\n")
    rig.write("memory/a.md", "alice\n")
    async with rig.syncing():
        await until(lambda: rig.read("memory/bob.md") == "# Bob\nfrom bob\n", "bob's file here")
        await until(lambda: server_has(rig, "memory/a.md", "alice\n"), "alice's file on the server")
        assert (await rig.server())["MEMORY.md"] == "# Project\n"
    saved = rig.saved()
    assert set(saved["files"]) == {"MEMORY.md", "memory/a.md", "memory/bob.md"}
    assert saved["files"]["memory/a.md"]["base"] == h("alice\n")
    assert saved["revision"] == await rig.revision()


async def test_a_local_edit_is_pushed_and_a_server_change_written_here_without_echo(rig):
    rig.write("memory/a.md", "one\n")
    async with rig.syncing() as syncer:
        await until(lambda: server_has(rig, "memory/a.md", "one\n"), "the first version on the server")
        rig.write("memory/a.md", "one\ntwo\n")
        await until(lambda: server_has(rig, "memory/a.md", "one\ntwo\n"), "the edit on the server")

        result = await rig.push("memory/a.md", "zero\none\ntwo\n", h("one\ntwo\n"))
        assert result["status"] == "applied"
        await until(lambda: rig.read("memory/a.md") == "zero\none\ntwo\n", "bob's edit here")
        revision = await rig.revision()
        await a_push_pass_after_now(syncer)
        assert await rig.revision() == revision  # our own write was not pushed back


def since_saved(path: Path, after: list[int]) -> Callable[[], int]:
    """The proxy's clock in the tests of half-saved files: `after[0]` ns after `path`'s last save, so that a push
    pass sees the save that recent however slow the machine, and moving the save moves the clock with it."""

    def now() -> int:
        try:
            return path.stat().st_mtime_ns + after[0]
        except FileNotFoundError:
            return time.time_ns()

    return now


SETTLED = 2 * MAX_SETTLING_NS  # long after the save: nothing waits


@asynccontextmanager
async def syncing_on_a_save_clock(rig: Rig, relpath: str, text: str) -> AsyncIterator[tuple[Syncer, list[int]]]:
    """`text` saved at `relpath` and synced; then the syncer and the `after` of its clock (`since_saved`)."""
    after = [SETTLED]
    rig.write(relpath, text)
    async with rig.syncing(clock_ns=since_saved(rig.project / relpath, after)) as syncer:
        await until(lambda: server_has(rig, relpath, text), f"{relpath} on the server")
        yield syncer, after


@pytest.mark.parametrize(
    ("text", "settles"),
    [("", SETTLE_EMPTY_NS), ("# Log\n\nfirst entry\nsecond entry\n", WRITING_NS)],
    ids=["emptied", "rewritten"],
)
async def test_a_file_found_just_after_a_save_is_pushed_once_it_has_settled(rig, text, settles):
    # An in-place save truncates, then writes, and a long write shows page by page: a scan in between reads a part,
    # whose push would delete the rest on the server (and a merge with another laptop's edit would keep that).
    async with syncing_on_a_save_clock(rig, "memory/log.md", "# Log\n\nfirst entry\n") as (syncer, after):
        revision = await rig.revision()
        after[0] = 1_000_000
        rig.write("memory/log.md", text)
        await a_push_pass_after_now(syncer)
        after[0] = WRITING_NS - 1_000_000
        await a_push_pass_after_now(syncer)
        assert await rig.revision() == revision
        assert (await rig.server())["memory/log.md"] == "# Log\n\nfirst entry\n"

        after[0] = settles  # it has settled: looked at again without a new save, and pushed
        await until(lambda: server_has(rig, "memory/log.md", text), "the settled file on the server")


async def test_a_file_saved_back_while_it_waited_waits_again_at_its_next_save(rig):
    path = rig.project / "memory/log.md"
    async with syncing_on_a_save_clock(rig, "memory/log.md", "# Log\n") as (syncer, after):
        after[0] = 1_000_000
        rig.write("memory/log.md", "# Log\nhalf")
        first = path.stat().st_mtime_ns
        await a_push_pass_after_now(syncer)  # it waits
        rig.write("memory/log.md", "# Log\n")  # and is saved back as it was: nothing to push
        await a_push_pass_after_now(syncer)
        rig.write("memory/log.md", "# Log\nlater")  # a save long after: a new wait, not the end of the old one
        os.utime(path, ns=(first + 2 * MAX_SETTLING_NS, first + 2 * MAX_SETTLING_NS))
        await a_push_pass_after_now(syncer)
        assert (await rig.server())["memory/log.md"] == "# Log\n"


async def test_files_saved_just_before_the_proxy_starts_are_pushed_in_its_first_pass(rig):
    # What is there when the proxy starts was not being saved during one of its scans: it is not held back.
    after = [1_000_000]  # every pass comes a millisecond after the last save
    rig.write("memory/log.md", "# Log\n")
    rig.write("memory/empty.md", "")
    async with rig.syncing(clock_ns=since_saved(rig.project / "memory/log.md", after)) as syncer:
        await until(lambda: syncer.push_passes >= 1, "the first push pass")
        assert await rig.server() == {"memory/log.md": "# Log\n", "memory/empty.md": ""}


async def test_an_empty_file_waits_longer_than_a_rewritten_one_before_it_is_pushed(rig):
    async with syncing_on_a_save_clock(rig, "memory/log.md", "# Log\n") as (syncer, after):
        after[0] = WRITING_NS  # a rewritten file would be pushed now
        rig.write("memory/log.md", "")
        await a_push_pass_after_now(syncer)
        assert (await rig.server())["memory/log.md"] == "# Log\n"


async def test_a_file_written_without_a_pause_is_still_pushed_after_a_while(rig):
    path = rig.project / "memory/stream.md"
    async with syncing_on_a_save_clock(rig, "memory/stream.md", "line 1\n") as (syncer, after):
        after[0] = 1_000_000  # every pass from now on comes a millisecond after a save
        rig.write("memory/stream.md", "line 1\nline 2\n")
        first = path.stat().st_mtime_ns
        for written in (0, MAX_SETTLING_NS // 2, MAX_SETTLING_NS - 5_000_000):  # saved again before each pass
            os.utime(path, ns=(first + written, first + written))
            await a_push_pass_after_now(syncer)
            assert (await rig.server())["memory/stream.md"] == "line 1\n"
        os.utime(path, ns=(first + MAX_SETTLING_NS, first + MAX_SETTLING_NS))
        await until(lambda: server_has(rig, "memory/stream.md", "line 1\nline 2\n"), "the file pushed as it is")


async def test_a_file_edited_here_and_on_the_server_while_offline_merges_on_both_sides(rig):
    rig.write("memory/log.md", "# Log\n\nmiddle\n\nend\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/log.md", "# Log\n\nmiddle\n\nend\n"), "the file on the server")
    rig.write("memory/log.md", "# Log\n\nmiddle\n\nend\nalice's line\n")
    await rig.push("memory/log.md", "# Log\nbob's line\n\nmiddle\n\nend\n", h("# Log\n\nmiddle\n\nend\n"))
    merged = "# Log\nbob's line\n\nmiddle\n\nend\nalice's line\n"
    async with rig.syncing():
        await until(lambda: rig.read("memory/log.md") == merged, "the merged text here")
        assert (await rig.server())["memory/log.md"] == merged
    assert rig.saved()["files"]["memory/log.md"]["base"] == h(merged)


async def test_a_real_conflict_keeps_both_versions_and_is_remembered(rig):
    rig.write("memory/x.md", "the answer is 41\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/x.md", "the answer is 41\n"), "the file on the server")
    rig.write("memory/x.md", "the answer is 42 (alice)\n")
    await rig.push("memory/x.md", "the answer is 43 (bob)\n", h("the answer is 41\n"))
    async with rig.syncing():
        await until(lambda: rig.read("memory/x.md") == "the answer is 43 (bob)\n", "the server's text here")
        [copy] = list((rig.project / "memory").glob("x.conflict-alice-*.md"))
        assert copy.read_text() == "the answer is 42 (alice)\n"
        server = await rig.server()
        assert server[f"memory/{copy.name}"] == "the answer is 42 (alice)\n"
    saved = rig.saved()
    assert saved["conflicts"][-1]["path"] == "memory/x.md"
    assert saved["files"][f"memory/{copy.name}"]["base"] == h("the answer is 42 (alice)\n")


async def test_deletes_go_both_ways_and_a_delete_of_a_file_edited_elsewhere_gives_way(rig):
    for name in ("mine", "theirs", "edited"):
        rig.write(f"memory/{name}.md", f"{name}\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/edited.md", "edited\n"), "the files on the server")
        (rig.project / "memory" / "mine.md").unlink()
        await until(lambda: server_has(rig, "memory/mine.md", None), "the delete on the server")
        await rig.push("memory/theirs.md", None, h("theirs\n"))
        await until(lambda: rig.read("memory/theirs.md") is None, "bob's delete here")
    (rig.project / "memory" / "edited.md").unlink()
    await rig.push("memory/edited.md", "edited by bob\n", h("edited\n"))
    async with rig.syncing():
        await until(lambda: rig.read("memory/edited.md") == "edited by bob\n", "bob's edit restored here")
    assert (await rig.server())["memory/edited.md"] == "edited by bob\n"


@pytest.mark.parametrize(
    ("before", "after", "inside"), [("memory/Notes.md", "memory/notes.md", ""), ("memory/Work", "memory/work", "/a.md")]
)
async def test_a_name_changed_only_in_case_while_sync_was_off_moves_the_file_on_the_server(rig, before, after, inside):
    rig.write(before + inside, "important notes\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, before + inside, "important notes\n"), "the file on the server")
    (rig.project / before).rename(rig.project / after)  # a file, or the folder holding it
    async with rig.syncing() as syncer:
        await until(lambda: server_is(rig, {after + inside: "important notes\n"}), "the new name only")
        await until(lambda: caught_up(rig, syncer), "the server's changes pulled")
    assert rig.saved()["rejected"] == {} and rig.saved()["unapplied"] == {}
    assert rig.read(after + inside) == "important notes\n"


async def test_a_name_refused_as_the_same_file_as_another_is_pushed_once_that_name_is_deleted(rig):
    await rig.push("memory/Notes.md", "bob's\n", None)
    rig.write("memory/notes.md", "alice's\n")  # the same file as bob's on a Mac: refused
    async with rig.syncing() as syncer:
        await until(lambda: "memory/notes.md" in syncer.state.rejected, "the refusal")
        await rig.push("memory/Notes.md", None, h("bob's\n"))
        await until(lambda: caught_up(rig, syncer), "bob's delete pulled")
        await a_push_pass_after_now(syncer)
        await until(lambda: server_is(rig, {"memory/notes.md": "alice's\n"}), "alice's file on the server")
    assert rig.saved()["rejected"] == {} and rig.saved()["unapplied"] == {}


async def test_a_stored_refusal_as_the_same_file_as_a_name_gone_since_is_pushed_at_the_next_start(rig):
    # What a proxy that pushed creates before deletes left after `Notes.md` was renamed `notes.md` while it was off:
    # the old name deleted on the server, the new one refused as colliding with it, and remembered as refused.
    await rig.push("memory/Notes.md", "notes\n", None)
    refused = await rig.push("memory/notes.md", "notes\n", None)
    assert refused["status"] == "rejected"
    await rig.push("memory/Notes.md", None, h("notes\n"))
    rig.write("memory/notes.md", "notes\n")
    state = rig.store().fresh()
    state.revision = await rig.revision()
    state.rejected["memory/notes.md"] = {"hash": h("notes\n"), "message": refused["message"], "at": "t"}
    rig.store().save(state)
    async with rig.syncing():
        await until(lambda: server_is(rig, {"memory/notes.md": "notes\n"}), "the file on the server again")
    assert rig.saved()["rejected"] == {}


async def test_a_rejected_file_is_remembered_and_not_pushed_again_until_it_changes(rig, caplog):
    rig.write("memory/huge.md", "x" * (DEFAULT_MAX_FILE_BYTES + 10))  # this laptop allows more than the server
    async with rig.syncing(max_bytes=4 * DEFAULT_MAX_FILE_BYTES) as syncer:
        await until(lambda: "memory/huge.md" in syncer.state.rejected, "the rejection")
        pushes = rig.network.requests.count(("POST", "/sync/push"))
        await a_push_pass_after_now(syncer)
        assert rig.network.requests.count(("POST", "/sync/push")) == pushes
        rig.write("memory/huge.md", "small now\n")
        await until(lambda: server_has(rig, "memory/huge.md", "small now\n"), "the fixed file on the server")
        await until(lambda: "memory/huge.md" not in syncer.state.rejected, "the rejection forgotten")
    assert caplog.text.count("the server rejected this version") == 1


async def test_a_file_with_a_long_name_is_pulled_and_the_pulls_after_it_go_on(rig):
    long = "memory/" + "a" * 234 + ".md"  # 237 bytes: a temporary name beside it must still fit in 255
    await rig.push(long, "long\n", None)
    async with rig.syncing() as syncer:
        await until(lambda: rig.read(long) == "long\n", "the long-named file here")
        await rig.push("memory/later.md", "later\n", None)
        await until(lambda: rig.read("memory/later.md") == "later\n", "the next change here")
        assert syncer.state.last_error is None


async def test_a_pulled_file_the_disk_refuses_costs_that_file_only(rig, monkeypatch, caplog):
    real_link = os.link

    def link(source: Any, target: Any, *args: Any, **kwargs: Any) -> None:
        if str(target).endswith("refused.md"):
            raise OSError(errno.EDQUOT, "Disk quota exceeded", str(target))
        real_link(source, target, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    await rig.push("memory/refused.md", "refused\n", None)
    async with rig.syncing() as syncer:
        await until(lambda: syncer.pulls >= 1, "a first pull")
        await rig.push("memory/later.md", "later\n", None)
        await until(lambda: rig.read("memory/later.md") == "later\n", "the next change here")
        revision = await rig.revision()
        await until(lambda: syncer.state.revision == revision, "every change pulled")
        assert syncer.state.last_error is None
    assert rig.read("memory/refused.md") is None
    assert "memory/refused.md: not applying the server's change: cannot be written (Disk quota exceeded)" in caplog.text


async def test_a_known_file_that_cannot_be_read_is_kept_and_the_others_sync(rig, monkeypatch):
    rig.write("memory/priv/a.md", "a\n")
    rig.write("memory/b.md", "b\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/priv/a.md", "a\n"), "a on the server")
        await until(lambda: server_has(rig, "memory/b.md", "b\n"), "b on the server")
    _deny(monkeypatch, rig.project / "memory" / "priv")  # what `chmod 000 memory/priv` does to a non-root user
    rig.write("memory/b.md", "b edited\n")
    await rig.push("memory/priv/a.md", "a by bob\n", h("a\n"))
    await rig.push("memory/c.md", "c\n", None)
    async with rig.syncing() as syncer:
        await until(lambda: rig.read("memory/c.md") == "c\n", "bob's new file here")
        await until(lambda: server_has(rig, "memory/b.md", "b edited\n"), "the local edit on the server")
        await a_push_pass_after_now(syncer)
        assert syncer.state.last_error is None
    assert (await rig.server())["memory/priv/a.md"] == "a by bob\n"  # never pushed as deleted
    assert rig.read("memory/priv/a.md") == "a\n"


def _deny(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """`folder` cannot be listed and nothing in it looked at (root ignores permissions, so chmod cannot show it)."""
    real_lstat, real_scandir = os.lstat, os.scandir

    def lstat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        if str(path).startswith(f"{folder}/"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_lstat(path, *args, **kwargs)

    def scandir(path: Any = ".") -> Any:
        if str(path) == str(folder):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "scandir", scandir)


async def a_pull_begun_after_now(rig: Rig, name: str) -> None:
    """Wait until a pull that began after this call has been answered: bob writes two files, the second once the
    first is here (the pull that brought the first may have begun before the call; a long poll ends at once)."""
    first, second = f"memory/{name}-1.md", f"memory/{name}-2.md"
    await rig.push(first, "one\n", None)
    await until(lambda: rig.read(first) == "one\n", f"{first} pulled")
    await rig.push(second, "two\n", None)
    await until(lambda: rig.read(second) == "two\n", f"{second} pulled")


def _unwritable(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Nothing can be created in `folder`, as after `chmod a-w` for a non-root user (root ignores permissions)."""
    real_open = os.open

    def open_(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & os.O_CREAT and str(path).startswith(f"{folder}/"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)


async def test_a_pulled_edit_the_disk_refused_is_written_at_the_next_start_once_the_folder_is_writable(
    rig, monkeypatch
):
    rig.write("memory/locked/a.md", "one\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/locked/a.md", "one\n"), "the file on the server")
    await rig.push("memory/locked/a.md", "one\ntwo\n", h("one\n"))
    with monkeypatch.context() as patch:
        _unwritable(patch, rig.project / "memory" / "locked")
        async with rig.syncing() as syncer:
            revision = await rig.revision()
            await until(lambda: syncer.state.revision == revision, "bob's edit pulled")
        assert rig.read("memory/locked/a.md") == "one\n"
    # the user has made the folder writable again
    async with rig.syncing():
        await until(lambda: rig.read("memory/locked/a.md") == "one\ntwo\n", "bob's edit written at last")
    assert rig.saved()["unapplied"] == {}


async def test_a_pulled_edit_the_disk_refused_is_written_while_syncing_once_the_folder_is_writable_again(
    rig, monkeypatch
):
    clock = [0.0]
    rig.write("memory/locked/a.md", "one\n")
    async with rig.syncing(clock=lambda: clock[0]) as syncer:
        await until(lambda: server_has(rig, "memory/locked/a.md", "one\n"), "the file on the server")
        with monkeypatch.context() as patch:
            _unwritable(patch, rig.project / "memory" / "locked")
            await rig.push("memory/locked/a.md", "one\ntwo\n", h("one\n"))
            revision = await rig.revision()
            await until(lambda: syncer.state.revision == revision, "bob's edit pulled")
            await a_pull_begun_after_now(rig, "before")  # the retry's time is set
            assert rig.read("memory/locked/a.md") == "one\n"
        # the user has made the folder writable again; a minute later:
        clock[0] += RETRY_FIRST
        await rig.push("memory/wake.md", "wake\n", None)  # ends the long poll under way
        await until(lambda: rig.read("memory/locked/a.md") == "one\ntwo\n", "bob's edit written at the retry")
        assert syncer.state.unapplied == {}


async def test_a_pulled_file_the_disk_always_refuses_blocks_no_other_and_is_retried_ever_less_often(
    rig, monkeypatch, caplog
):
    _unwritable(monkeypatch, rig.project / "memory" / "locked")
    clock = [0.0]
    since: list[int] = []
    forward = rig.network.handle_async_request

    async def recording(request: httpx2.Request) -> httpx2.Response:
        if request.url.path == "/sync/changes":
            since.append(int(request.url.params["since"]))
        return await forward(request)

    def retries() -> int:  # the pulls that went back to an older revision
        return sum(later < earlier for earlier, later in itertools.pairwise(since))

    monkeypatch.setattr(rig.network, "handle_async_request", recording)
    await rig.push("memory/locked/a.md", "a\n", None)
    async with rig.syncing(clock=lambda: clock[0]) as syncer:
        await until(lambda: "memory/locked/a.md" in syncer.state.unapplied, "the change left unapplied")
        await a_pull_begun_after_now(rig, "others")  # other files are pulled and written
        assert retries() == 0  # none before its time

        clock[0] += RETRY_FIRST
        await rig.push("memory/wake.md", "wake\n", None)
        await until(lambda: retries() == 1, "the first retry")
        await until(lambda: "memory/locked/a.md" in syncer.state.unapplied, "the change left again")
        await a_pull_begun_after_now(rig, "after")
        clock[0] += RETRY_FIRST  # the retry brought nothing: the next one waits twice as long
        await a_pull_begun_after_now(rig, "later")
        assert retries() == 1
        clock[0] += RETRY_FIRST
        await rig.push("memory/wake.md", "wake again\n", h("wake\n"))
        await until(lambda: retries() == 2, "the second retry")
        await until(lambda: "memory/locked/a.md" in syncer.state.unapplied, "the change left again")

    assert rig.read("memory/locked/a.md") is None
    saved = rig.saved()
    saved_message = saved["unapplied"]["memory/locked/a.md"]["message"]
    assert saved_message == "cannot be written (Permission denied)"
    assert saved["revision"] == await rig.revision()
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "locked" in r.getMessage()]
    assert warned == ["sync: memory/locked/a.md: not applying the server's change: " + saved_message]


async def test_a_read_only_device_pulls_but_stops_pushing(rig):
    rig.write("memory/local.md", "local only\n")
    async with rig.syncing(access="r") as syncer:
        await until(lambda: syncer.state.read_only, "the 403 noticed")
        await rig.push("memory/shared.md", "from bob\n", None)
        await until(lambda: rig.read("memory/shared.md") == "from bob\n", "bob's file here")
    assert "memory/local.md" not in await rig.server()
    assert rig.saved()["read_only"] is True


async def test_changes_made_while_the_server_is_unreachable_are_pushed_when_it_returns(rig):
    rig.network.down = True
    rig.write("memory/offline.md", "written offline\n")
    async with rig.syncing() as syncer:
        await until(lambda: syncer.state.last_error is not None, "the failure recorded")
        assert "cannot reach the memory server" in syncer.state.last_error["message"]
        rig.write("memory/offline.md", "written offline, then edited\n")
        rig.network.down = False
        await until(lambda: server_has(rig, "memory/offline.md", "written offline, then edited\n"), "the push")


async def test_what_changed_while_the_proxy_was_not_running_is_pushed_at_the_next_start(rig):
    rig.write("memory/edit.md", "before\n")
    rig.write("memory/delete.md", "doomed\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/delete.md", "doomed\n"), "the files on the server")
    rig.write("memory/edit.md", "after\n")
    (rig.project / "memory" / "delete.md").unlink()
    rig.write("memory/new.md", "new\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/new.md", "new\n"), "the new file on the server")
        server = await rig.server()
        assert server["memory/edit.md"] == "after\n" and "memory/delete.md" not in server


async def test_a_file_of_an_extra_folder_deleted_while_the_proxy_was_off_is_deleted_on_the_server(rig, monkeypatch):
    set_extra_folders(["notes"])  # the server's MEMORY_EXTRA_PATHS (this process plays both sides)
    monkeypatch.setattr(StateStore, "load", _as_a_fresh_process(StateStore.load))
    try:
        rig.write("notes/n.md", "note\n")
        rig.write("memory/b.md", "b\n")
        async with rig.syncing():
            await until(lambda: server_has(rig, "notes/n.md", "note\n"), "the note on the server")
            await until(lambda: server_has(rig, "memory/b.md", "b\n"), "b on the server")
        (rig.project / "memory" / "b.md").unlink()
        (rig.project / "notes" / "n.md").unlink()
        async with rig.syncing():
            await until(lambda: server_has(rig, "notes/n.md", None), "the note deleted on the server")
            await until(lambda: server_has(rig, "memory/b.md", None), "b deleted on the server")
        assert not list(rig.state_home.glob("*.corrupt-*"))
        assert rig.read("memory/b.md") is None and rig.read("notes/n.md") is None
    finally:
        set_extra_folders(())


def _as_a_fresh_process(load: Callable[[StateStore], Any]) -> Callable[[StateStore], Any]:
    """`StateStore.load` as a new `memory-proxy` runs it: before its first pull announced the extra folders."""

    def fresh_load(store: StateStore) -> Any:
        announced = memory_folders()[1:]
        set_extra_folders(())
        try:
            return load(store)
        finally:
            set_extra_folders(announced)

    return fresh_load


async def test_after_a_corrupt_state_file_sync_starts_over_and_nothing_is_lost(rig):
    rig.write("memory/log.md", "# Log\nfirst\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/log.md", "# Log\nfirst\n"), "the file on the server")
    rig.store().path.write_text("{ corrupt")
    rig.write("memory/log.md", "# Log\nfirst\nalice\n")
    await rig.push("memory/log.md", "# Log\nfirst\nbob\n", h("# Log\nfirst\n"))
    async with rig.syncing():
        await until(lambda: "alice" in (rig.read("memory/log.md") or "") and "bob" in rig.read("memory/log.md"), "both")
    assert list(rig.state_home.glob("*.corrupt-*"))
    assert (await rig.server())["memory/log.md"] == rig.read("memory/log.md")


async def test_a_saved_path_the_rules_now_refuse_costs_only_its_own_entry_and_offline_deletes_still_go(rig, caplog):
    rig.write("memory/kept.md", "kept\n")
    rig.write("memory/gone.md", "deleted while the proxy was off\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/gone.md", "deleted while the proxy was off\n"), "the files there")
    state = rig.saved()  # as an older proxy saved it, under the path rules of its day (':' was allowed then)
    state["files"]["memory/10:30 standup.md"] = {"base": h("old\n"), "revision": 1, "size": None, "mtime_ns": None}
    rig.store().path.write_text(json.dumps(state))
    rig.write("memory/10:30 standup.md", "old\n")
    (rig.project / "memory" / "gone.md").unlink()  # only its base says it was deleted here, not never pulled
    with caplog.at_level(logging.WARNING):
        async with rig.syncing() as syncer:
            await until(lambda: caught_up(rig, syncer), "the first pull")
            await until(lambda: server_is(rig, {"memory/kept.md": "kept\n"}), "the delete pushed")
    assert rig.read("memory/gone.md") is None
    assert rig.read("memory/10:30 standup.md") == "old\n"  # refused like any unknown name: neither pushed nor lost
    assert "memory/10:30 standup.md" not in rig.saved()["files"]
    assert not list(rig.state_home.glob("*.corrupt-*"))
    assert "dropped 1 entries naming paths the current path rules refuse" in caplog.text


async def test_a_server_restored_from_an_older_backup_gets_this_laptops_files_again(rig):
    rig.write("memory/kept.md", "kept\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/kept.md", "kept\n"), "the file on the server")
    state = rig.saved()
    state["revision"] = 10_000  # ahead of the server: what a laptop sees after the server's data was restored
    state["files"]["memory/lost.md"] = {"base": h("lost\n"), "revision": 9_999, "size": None, "mtime_ns": None}
    rig.store().path.write_text(json.dumps(state))
    rig.write("memory/lost.md", "lost\n")  # clean by its base, but the server never heard of it
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/lost.md", "lost\n"), "the file pushed again")
    assert rig.saved()["revision"] < 10_000


async def test_a_file_agreed_after_the_backup_the_server_was_restored_from_replaces_the_restored_version(rig):
    older = "# Notes\n\nuse postgres 15\ndeploy on fridays\n"
    newer = "# Notes\n\nuse postgres 16\ndeploy on fridays\n"
    rig.write("memory/notes.md", older)
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/notes.md", older), "the file on the server")
    # After the backup (which holds `older`), this laptop agreed `newer` with the server; then the server was
    # restored. The laptop's file is unchanged since.
    state = rig.saved()
    state["revision"] = 10_000
    state["files"]["memory/notes.md"] = {"base": h(newer), "revision": 9_999, "size": None, "mtime_ns": None}
    rig.store().path.write_text(json.dumps(state))
    rig.write("memory/notes.md", newer)
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/notes.md", newer), "the newer version on the server, once")
    assert rig.read("memory/notes.md") == newer


async def test_a_server_version_newer_than_the_laptops_after_a_restore_is_merged_with_it_not_replaced(rig):
    rig.write("memory/notes.md", "a\nb\nc\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/notes.md", "a\nb\nc\n"), "the file on the server")
    await rig.push("memory/notes.md", "a\nb\nc\nadded on the restored server\n", h("a\nb\nc\n"))
    state = rig.saved()
    state["revision"] = 10_000  # ahead of the server; its own version of the file older than the server's
    state["files"]["memory/notes.md"] = {"base": h("a\nB\nc\n"), "revision": 1, "size": None, "mtime_ns": None}
    rig.store().path.write_text(json.dumps(state))
    rig.write("memory/notes.md", "a\nB\nc\n")

    def merged(text: str | None) -> bool:
        return text is not None and "B\n" in text and "added on the restored server\n" in text

    async with rig.syncing():
        await until(lambda: merged(rig.read("memory/notes.md")), "the two versions merged here")
    assert merged((await rig.server())["memory/notes.md"])


async def test_a_reset_listing_interrupted_after_its_first_page_is_finished_at_the_next_start(rig, monkeypatch):
    changes = SyncService.changes

    def one_per_page(self: SyncService, caller: Any, since: int) -> Any:  # alice's pulls only
        return changes(self, caller, since, limit=1 if caller.name == "alice" else MAX_CHANGES)

    monkeypatch.setattr(SyncService, "changes", one_per_page)
    rig.write("memory/a.md", "a\n")
    rig.write("memory/b.md", "b\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/b.md", "b\n"), "the files on the server")
    state = rig.saved()
    state["revision"] = 10_000  # ahead of the server: it was restored from a backup
    state["files"]["memory/lost.md"] = {"base": h("lost\n"), "revision": 9_999, "size": None, "mtime_ns": None}
    rig.store().path.write_text(json.dumps(state))
    rig.write("memory/lost.md", "lost\n")  # clean by its base, but the restored server never heard of it

    forward = rig.network.handle_async_request

    async def then_offline(request: httpx2.Request) -> httpx2.Response:
        response = await forward(request)
        rig.network.down = request.url.path == "/sync/changes"  # the proxy stops before the listing's next page
        return response

    monkeypatch.setattr(rig.network, "handle_async_request", then_offline)
    async with rig.syncing() as syncer:
        await until(lambda: syncer.pulls == 1, "the listing's first page")
    assert rig.saved()["reset_listed"] == ["memory/a.md"]

    monkeypatch.setattr(rig.network, "handle_async_request", forward)
    rig.network.down = False
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/lost.md", "lost\n"), "the file pushed again")
    assert rig.saved()["reset_listed"] is None


async def test_many_files_are_pushed_in_batches_of_at_most_a_hundred(rig):
    for number in range(150):
        rig.write(f"memory/n{number:03}.md", f"note {number}\n")
    async with rig.syncing():
        await until(lambda: server_has(rig, "memory/n149.md", "note 149\n"), "the last file on the server")
    assert rig.network.requests.count(("POST", "/sync/push")) == 2


async def test_excluded_paths_are_neither_pushed_nor_pulled(rig):
    rig.write("memory/private/diary.md", "secret\n")
    await rig.push("memory/private/theirs.md", "theirs\n", None)
    await rig.push("memory/public.md", "public\n", None)
    async with rig.syncing(exclude=("memory/private/**",)):
        await until(lambda: rig.read("memory/public.md") == "public\n", "the public file here")
    assert rig.read("memory/private/theirs.md") is None
    assert "memory/private/diary.md" not in await rig.server()


async def test_stopping_flushes_the_state_and_stops_the_watcher(rig):
    rig.write("memory/a.md", "a\n")
    async with rig.syncing() as syncer:
        await until(lambda: server_has(rig, "memory/a.md", "a\n"), "the file on the server")
        await rig.push("memory/b.md", "b\n", None)
        await until(lambda: rig.read("memory/b.md") == "b\n", "bob's file here")
        watcher = syncer._watcher
    assert rig.saved()["revision"] == await rig.revision()
    assert watcher is not None and not watcher._observer.is_alive()


async def test_a_server_without_sync_or_with_a_malformed_answer_is_reported_and_retried(rig):
    answers = [(404, b'{"error": "not found"}'), (200, b'{"revision": "x"}')]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        status, body = answers[0] if len(rig.network.requests) < 3 else answers[1]
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})

    rig.network.inner = httpx2.ASGITransport(app)
    async with rig.syncing() as syncer:
        await until(lambda: syncer.state.last_error is not None, "the first failure")
        assert "does not offer file sync (HTTP 404)" in syncer.state.last_error["message"]
        await until(lambda: "malformed" in syncer.state.last_error["message"], "the malformed answer noticed")


NESTED_TOO_DEEP = b"[" * 100_000 + b"]" * 100_000


def answering(status: int, body: bytes) -> httpx2.ASGITransport:
    """A server that answers every request with `status` and `body`."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send(
            {"type": "http.response.start", "status": status, "headers": [(b"content-type", b"application/json")]}
        )
        await send({"type": "http.response.body", "body": body})

    return httpx2.ASGITransport(app)


async def test_an_answer_nested_thousands_deep_is_refused_as_not_json_by_every_sync_call():
    async with httpx2.AsyncClient(transport=answering(200, NESTED_TOO_DEEP), base_url="http://memory") as client:
        api = SyncApi(client)
        calls = [
            lambda: api.changes(0, 0),
            lambda: api.push([PushChange("memory/a.md", None, "a\n")]),
            lambda: api.upload_session("s", "2026-11-23", 1, [(1, "text")]),
        ]
        for call in calls:
            with pytest.raises(SyncProtocolError, match=r"^the server's sync answer is not JSON$"):
                await call()
    refusal = b'{"error": ' + b"[" * 60_000  # within the part of an error answer that is read
    async with httpx2.AsyncClient(transport=answering(503, refusal), base_url="http://memory") as client:
        with pytest.raises(SyncRefusedError, match=r"HTTP 503 refused\): Service Unavailable$"):
            await SyncApi(client).changes(0, 0)


async def test_a_server_answer_nested_thousands_deep_is_reported_and_retried_as_an_expected_failure(rig, caplog):
    rig.network.inner = answering(200, NESTED_TOO_DEEP)
    with caplog.at_level(logging.INFO):
        async with rig.syncing() as syncer:
            await until(lambda: syncer.state.last_error is not None, "the failure recorded")
            assert syncer.state.last_error["message"] == "pull: the server's sync answer is not JSON"
    assert "failed unexpectedly" not in caplog.text and "Traceback" not in caplog.text


def test_backoff_doubles_from_one_second_to_thirty_with_jitter_and_a_success_starts_it_over():
    retry = Retry(random.Random(7))
    delays = [retry.next_delay() for _ in range(8)]
    for delay, step in zip(delays, [1, 2, 4, 8, 16, 30, 30, 30], strict=True):
        assert step / 2 <= delay <= step
    assert len(set(delays)) == len(delays)  # jittered
    retry.succeeded()
    assert retry.next_delay() <= 1.0


async def test_a_success_ends_every_pause_at_once():
    retry = Retry()
    for _ in range(5):
        retry.next_delay()  # the next pause would be 16 to 32 seconds
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(retry.pause)
            await anyio.wait_all_tasks_blocked()
            retry.succeeded()


async def test_a_second_proxy_on_the_same_folder_waits_and_takes_over_when_the_first_stops(rig, monkeypatch):
    monkeypatch.setattr("client_proxy.sync.syncer.LOCK_RETRY", 0.05)
    rig.write("memory/a.md", "a\n")
    syncers: dict[str, Syncer] = {}
    stop = {"first": anyio.Event(), "second": anyio.Event()}

    async def proxy(name: str) -> None:
        async with rig.syncing() as syncer:
            syncers[name] = syncer
            await stop[name].wait()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(proxy, "first")
        await until(lambda: "first" in syncers and syncers["first"].push_passes > 0, "the first proxy syncing")
        tasks.start_soon(proxy, "second")
        await until(lambda: "second" in syncers, "the second proxy started")
        rig.write("memory/b.md", "b\n")
        await until(lambda: server_has(rig, "memory/b.md", "b\n"), "b.md pushed by the first proxy")
        await a_push_pass_after_now(syncers["first"])
        assert syncers["second"].push_passes == 0 and syncers["second"].pulls == 0  # it forwards only
        stop["first"].set()
        await until(lambda: syncers["second"].push_passes > 0, "the second proxy taking over")
        rig.write("memory/c.md", "c\n")
        await until(lambda: server_has(rig, "memory/c.md", "c\n"), "c.md pushed by the second proxy")
        stop["second"].set()


async def test_a_first_sync_of_many_files_logs_its_progress_with_rate_and_time_left(rig, caplog, monkeypatch):
    changes = SyncService.changes

    def in_small_pages(self: SyncService, caller: Any, since: int) -> Any:  # alice's pulls only
        return changes(self, caller, since, limit=40 if caller.name == "alice" else MAX_CHANGES)

    monkeypatch.setattr(SyncService, "changes", in_small_pages)
    theirs = [{"path": f"memory/b{n:03}.md", "base": None, "content": f"bob {n}\n"} for n in range(100)]
    assert (await rig.bob.post("/sync/push", json={"changes": theirs})).status_code == 200
    for number in range(150):
        rig.write(f"memory/a{number:03}.md", f"note {number}\n")
    caplog.set_level(logging.INFO, logger="client_proxy.sync.syncer")

    async with rig.syncing() as syncer:
        await until(lambda: server_has(rig, "memory/a149.md", "note 149\n"), "the last file on the server")
        await until(lambda: syncer.state.revision == 250, "every change pulled")
    assert rig.read("memory/b099.md") == "bob 99\n"

    lines = [record.getMessage() for record in caplog.records if ": pu" in record.getMessage()]
    pushing = [line for line in lines if line.startswith("sync: pushing: ")]
    assert pushing[0].startswith("sync: pushing: 100/150 files (66%)")
    assert pushing[-1].startswith("sync: pushing: 150/150 files (100%)")
    pulling = [line for line in lines if line.startswith("sync: pulling: ")]
    assert len(pulling) >= 2 and pulling[0].startswith("sync: pulling: 40/")
    assert re.match(r"sync: pulling: (\d+)/\1 revisions \(100%\)", pulling[-1])
