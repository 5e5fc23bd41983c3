"""`memory-proxy search`, `get`, `write` and `list` as real processes against a real server (channel, MCP, sync,
the hashing embedder): the same operations and results as the MCP tools, readable by default, JSON on request."""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from syncproto.wire import MAX_WRITE_BYTES
from tests.conftest import REPO
from tests.mcp_support import structured
from tests.sync_support import Laptop
from tests.ui_support import Team, team

TEAM = "team"
CALLERS = {"alice": {TEAM: "rw"}, "bob": {TEAM: "r"}}
RUN_TIMEOUT = 60.0


@pytest.fixture
def crew(tmp_path: Path) -> Iterator[Team]:
    with team(tmp_path, CALLERS) as running:
        yield running


def memory_proxy(laptop: Laptop, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The laptop's `memory-proxy` console script, as a user runs it in a terminal."""
    params = laptop.params()
    return subprocess.run(
        [params.command, *args],
        env={**params.env, "MEMORY_PROXY_LOG_LEVEL": "WARNING"} if params.env else None,
        cwd=params.cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )


def this_checkout(*args: str) -> list[str]:
    """`memory-proxy ARGS` as this checkout's code, run from REPO (the console script imports the installed one)."""
    return [sys.executable, "-c", "import sys; from client_proxy.cli import main; sys.exit(main())", *args]


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_note_written_from_the_terminal_is_searched_listed_and_read_back_with_line_numbers(crew):
    laptops = crew.laptops
    alice, bob = laptops["alice"], laptops["bob"]
    note = "We deploy with blue-green switches behind HAProxy; the staging host is kestrel."
    written = ok(memory_proxy(alice, "write", "--path", "memory/deploy.md", "--topic", "deploys", note))
    assert written.startswith("appended to memory/deploy.md#L")

    found = ok(memory_proxy(bob, "search", "blue-green deploy HAProxy"))
    assert "(hybrid search)" in found.splitlines()[0]
    assert "memory/deploy.md#L" in found
    assert "by alice" in found
    assert "HAProxy" in found

    listed = ok(memory_proxy(bob, "list", "--prefix", "memory/"))
    assert listed.splitlines()[0].startswith("memory/deploy.md")
    assert listed.splitlines()[-1] == "1 file"

    read = ok(memory_proxy(bob, "get", "memory/deploy.md"))
    numbered = [line for line in read.splitlines()[1:] if note in line]
    assert numbered and numbered[0].split()[0].isdigit()
    missing = memory_proxy(bob, "get", "memory/nowhere.md")
    assert (missing.returncode, missing.stdout) == (1, "memory/nowhere.md: no such file\n")


@pytest.mark.anyio
async def test_json_output_is_exactly_what_the_mcp_tools_answer(crew):
    laptops = crew.laptops
    alice = laptops["alice"]
    ok(memory_proxy(alice, "write", "--path", "memory/cats.md", stdin="# Cats\n\nThe office cat is called Biscuit.\n"))
    arguments = {"query": "office cat name", "max_results": 8}  # min_score: the server's measured gate
    async with alice.running() as client:
        searched = structured(await client.call_tool("memory_search", arguments))
        got = structured(await client.call_tool("memory_get", {"path": "memory/cats.md"}))
        listed = structured(await client.call_tool("memory_list", {"limit": 200}))
    assert json.loads(ok(memory_proxy(alice, "search", "--json", "office cat name"))) == searched
    assert json.loads(ok(memory_proxy(alice, "get", "--json", "memory/cats.md"))) == got
    assert json.loads(ok(memory_proxy(alice, "list", "--json"))) == {"files": listed["files"], "total": listed["total"]}


def test_a_refused_write_says_why_and_changes_nothing(crew):
    server, laptops = crew.server, crew.laptops
    alice, bob = laptops["alice"], laptops["bob"]
    ok(memory_proxy(alice, "write", "--path", "memory/plan.md", "step one"))
    before = server.text(TEAM, "memory/plan.md")

    stale = memory_proxy(
        alice, "write", "--path", "memory/plan.md", "--mode", "replace", "--expected-hash", "0" * 64, "x"
    )
    assert stale.returncode == 2
    assert stale.stderr.startswith("memory-proxy: error: ") and "hash" in stale.stderr
    read_only = memory_proxy(bob, "write", "--path", "memory/plan.md", "bob was here")
    assert read_only.returncode == 2 and "memory-proxy: error: " in read_only.stderr
    empty = memory_proxy(alice, "write", stdin="   \n")
    assert empty.returncode == 2 and "nothing to write" in empty.stderr
    assert server.text(TEAM, "memory/plan.md") == before


def test_a_stopped_server_is_named_in_a_short_error(crew):
    server, laptops = crew.server, crew.laptops
    server.stop()
    done = memory_proxy(laptops["alice"], "search", "anything")
    assert done.returncode == 2
    assert f"cannot reach the memory server at {server.url}" in done.stderr
    assert "Traceback" not in done.stderr


def test_an_overwrite_is_undone_from_the_terminal_with_history_and_restore(crew):
    alice = crew.laptops["alice"]
    ok(memory_proxy(alice, "write", "--path", "memory/plan.md", stdin="# Plan\n\nShip on Friday.\n"))
    current = json.loads(ok(memory_proxy(alice, "get", "memory/plan.md", "--json")))["hash"]
    ok(
        memory_proxy(
            alice, "write", "--path", "memory/plan.md", "--mode", "replace", "--expected-hash", current, "oops"
        )
    )

    versions = json.loads(ok(memory_proxy(alice, "history", "memory/plan.md", "--json")))["versions"]
    assert [entry["change"] for entry in versions] == ["write", "write"]
    shown = ok(memory_proxy(alice, "history", "memory/plan.md"))
    assert shown.splitlines()[1].split()[:3] == [str(versions[1]["version"]), "write", "memory/plan.md"]

    restored = ok(memory_proxy(alice, "restore", "memory/plan.md", str(versions[1]["version"])))
    assert restored.startswith(f"restored memory/plan.md to version {versions[1]['version']} as new version")
    assert "Ship on Friday." in ok(memory_proxy(alice, "get", "memory/plan.md"))
    again = ok(memory_proxy(alice, "restore", "memory/plan.md", str(versions[1]["version"])))
    assert again.endswith("nothing changed\n")
    refused = memory_proxy(crew.laptops["bob"], "restore", "memory/plan.md", str(versions[0]["version"]))
    assert refused.returncode != 0 and "Ship on Friday." in ok(memory_proxy(alice, "get", "memory/plan.md"))


def test_a_line_longer_than_one_answer_is_printed_to_its_end_by_following_each_continuation(crew):
    alice = crew.laptops["alice"]
    long_line = "".join(f"{n:07d}|" for n in range(12_500))  # 100,000 characters: three answers' worth
    ok(memory_proxy(alice, "write", "--path", "memory/blob.md", stdin=f"before\n{long_line}\nafter\n"))
    hint = re.compile(r"\(--start (\d+)(?: --start-char (\d+))?\)$")
    printed: dict[int, str] = {}  # line number -> its text, joined across answers
    arguments: list[str] = []
    for _ in range(10):
        out = ok(memory_proxy(alice, "get", "memory/blob.md", *arguments)).splitlines()
        follow = hint.search(out[-1])
        inside = follow is not None and follow.group(2) is not None
        for row in out[1 : -1 if follow else None]:
            number, _, text = row.partition("  ")
            printed[int(number)] = printed.get(int(number), "") + text
        if follow is None:
            break
        arguments = ["--start", follow.group(1), *(["--start-char", follow.group(2)] if inside else [])]
    assert long_line in printed.values()
    assert list(printed.values())[-1] == "after"


def test_an_endless_pipe_into_write_is_refused_at_the_write_cap_without_reading_it_all(tmp_path):
    # `yes | memory-proxy write` grew to 7.7 GB in 6 s: stdin was read to its end before anything was sent.
    def at_most_a_gigabyte() -> None:  # before the fix, a MemoryError instead of the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    yes = subprocess.Popen(["yes", "a line of notes"], stdout=subprocess.PIPE)
    try:
        done = subprocess.run(
            this_checkout("write"),
            stdin=yes.stdout,
            capture_output=True,
            text=True,
            cwd=REPO,
            env={**os.environ, "MEMORY_PROXY_HOME": str(tmp_path / "home")},
            preexec_fn=at_most_a_gigabyte,
            timeout=RUN_TIMEOUT,
            check=False,
        )
    finally:
        yes.kill()
        yes.wait()
        assert yes.stdout is not None
        yes.stdout.close()
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"memory-proxy: error: stdin holds more than {MAX_WRITE_BYTES // 1024} KiB, the most one write takes; "
        "split it into parts\n"
    )


def test_output_into_a_reader_that_already_stopped_ends_quietly_with_the_status_of_sigpipe(crew):
    # `memory-proxy get --json ... | head` printed "memory-proxy: error: : Broken pipe" and exited 1.
    alice = crew.laptops["alice"]
    ok(memory_proxy(alice, "write", "--path", "memory/notes.md", "a note to read"))
    reader, writer = os.pipe()
    os.close(reader)  # `| head -c 1` that has had its byte
    try:
        done = subprocess.run(
            this_checkout("get", "--json", "memory/notes.md"),
            stdout=writer,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env={**(alice.params().env or {}), "MEMORY_PROXY_LOG_LEVEL": "WARNING"},
            timeout=RUN_TIMEOUT,
            check=False,
        )
    finally:
        os.close(writer)
    assert (done.returncode, done.stderr) == (141, b"")
