"""Findings 6, 11 and the proxy side of 8: a server that lies. Behind a real channel (the laptop pinned its key, so
this is a compromised or buggy server, not a network attacker) it sends a file far over the cap, twenty thousand
files in one answer, names that break the rules or collide with a local file, and a conflict copy whose name
holds a forged log line. The real `memory-proxy` process writes none of it and its log stays one line a record."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from channel.authz import Caller, CallerTable
from client_proxy.config import render_config, write_config
from tests.channel.conftest import serve_channel
from tests.proxy_support import PROXY, init_proxy_home
from tests.sync_support import eventually

pytestmark = pytest.mark.anyio

FORGED = "2026-01-01 00:00:00,000 memory-proxy[1] INFO client_proxy.sync: all good, nothing to see"
LOG_RECORD = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} memory-proxy\[\d+\] [A-Z]+ ")


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def change(path: str, content: str, revision: int) -> dict[str, Any]:
    return {"path": path, "revision": revision, "hash": digest(content), "content": content}


class Liar:
    """The inner app of a lying server: `/sync/changes` answers `pulled` once, `/sync/push` answers `pushed`."""

    def __init__(self, pulled: list[dict[str, Any]], pushed: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
        self.pulled, self.pushed, self.served = pulled, pushed, 0

    def app(self) -> Starlette:
        async def changes(request: Request) -> JSONResponse:
            since = int(request.query_params["since"])
            if since >= 100:  # after the one lying answer: nothing new
                return JSONResponse({"revision": 100, "next": 100, "more": False, "reset": False, "changes": []})
            self.served += 1
            body = {"revision": 100, "next": 100, "more": False, "reset": False, "changes": self.pulled}
            return JSONResponse({**body, "limits": {"max_file_bytes": 10**12, "max_changes": 10**9}})

        async def push(request: Request) -> JSONResponse:
            sent = (await request.json())["changes"]
            return JSONResponse({"revision": 100, "results": [self.pushed(item) for item in sent]})

        return Starlette(routes=[Route("/sync/changes", changes), Route("/sync/push", push, methods=["POST"])])


@contextmanager
def laptop_against(liar: Liar, tmp_path: Path, files: dict[str, str]) -> Iterator[tuple[Path, Path]]:
    """A real `memory-proxy run` with `files` in its project, pinned to a channel server whose app is `liar`."""
    home, project, log = tmp_path / "home", tmp_path / "project", tmp_path / "proxy.log"
    project.mkdir()
    for rel, text in files.items():
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text(text)
    device = init_proxy_home(home)
    with serve_channel(liar.app(), CallerTable([Caller("laptop", (device,), {"team": "rw"})])) as server:
        write_config(home, render_config(server.url, server.server_key, "laptop", "team"))
        env = {
            **os.environ,
            "MEMORY_PROXY_HOME": str(home),
            "MEMORY_PROXY_STATE_HOME": str(tmp_path / "state"),
            "MEMORY_PROXY_LOG_LEVEL": "DEBUG",
        }
        argv = [str(PROXY), "run", "--project", str(project), "--log-file", str(log)]
        process = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
        )
        try:
            yield project, log
        finally:
            assert process.stdin is not None
            process.stdin.close()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


async def test_a_file_far_over_the_cap_and_bad_or_colliding_names_are_not_written(tmp_path):
    pulled = [
        change("memory/huge.md", "x" * (3 * 1024 * 1024), 1),  # over the 2 MiB cap, whatever the server announces
        change("memory/../../escape.md", "out of the folder\n", 2),
        change("memory/Notes.md", "would overwrite notes.md on a Mac\n", 3),
        change("memory/fine.md", "an honest file\n", 4),
    ]
    liar = Liar(pulled, lambda item: {"path": item["path"], "status": "unchanged", "hash": item["hash"], "revision": 1})
    with laptop_against(liar, tmp_path, {"memory/notes.md": "mine\n"}) as (project, log):
        await eventually(lambda: (project / "memory" / "fine.md").exists(), "the honest file", within=60)
    assert not (project / "memory" / "huge.md").exists()
    assert not (tmp_path / "escape.md").exists()
    assert not (project / "memory" / "Notes.md").exists() and text(project / "memory" / "notes.md") == "mine\n"
    assert "over the cap" in text(log) and "same file as memory/notes.md" in text(log)


async def test_an_answer_of_60_mb_is_not_read_to_its_end(tmp_path):
    pulled = [change("memory/huge.md", "x" * (60 * 1024 * 1024), 1)]  # the old proxy wrote it, then a traceback
    liar = Liar(pulled, lambda item: {"path": item["path"], "status": "unchanged", "hash": item["hash"], "revision": 1})
    with laptop_against(liar, tmp_path, {}) as (project, log):
        await eventually(lambda: "changes answer is larger than" in text(log), "the refusal in the log", within=60)
    assert not (project / "memory").exists()


async def test_twenty_thousand_files_in_one_answer_are_refused_whole(tmp_path):
    pulled = [change(f"memory/spam/{n:05}.md", f"spam {n}\n", n + 1) for n in range(20_000)]
    liar = Liar(pulled, lambda item: {"path": item["path"], "status": "unchanged", "hash": item["hash"], "revision": 1})
    with laptop_against(liar, tmp_path, {}) as (project, log):
        await eventually(lambda: "20000 changes in one answer" in text(log), "the refusal in the log", within=60)
    assert not (project / "memory" / "spam").exists()


async def test_a_conflict_copy_named_with_a_forged_log_line_is_neither_written_nor_logged_as_is(tmp_path):
    def conflict(item: dict[str, Any]) -> dict[str, Any]:
        server_text = "the server's version\n"
        return {
            "path": item["path"],
            "status": "conflict",
            "hash": digest(server_text),
            "revision": 7,
            "content": server_text,
            "conflict_path": f"memory/copy.md\n{FORGED}\n",
            "conflict_revision": 8,
        }

    liar = Liar([], conflict)
    with laptop_against(liar, tmp_path, {"memory/notes.md": "mine\n"}) as (project, log):
        await eventually(lambda: "conflict copy" in text(log), "the proxy's warning", within=60)
    assert text(project / "memory" / "notes.md") == "mine\n"  # nothing lost
    assert sorted(p.name for p in (project / "memory").iterdir()) == ["notes.md"]
    lines = text(log).splitlines()
    assert lines and all(LOG_RECORD.match(line) or line.startswith("  ") for line in lines)
    assert not any(line.startswith(FORGED) for line in lines)
