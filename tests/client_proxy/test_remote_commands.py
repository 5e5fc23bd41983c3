"""The terminal commands (`memory-proxy search` and its siblings): what they send to the server's tools, what they
show of the answers, and how a failed call ends."""

from __future__ import annotations

import errno
import io
import itertools
import json
import os
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_proxy.cli import build_parser, main
from client_proxy.errors import ProxyError
from client_proxy.log_escape import escape
from client_proxy.remote import commands, render
from client_proxy.remote.connection import Remote, Target
from client_proxy.remote.mcp_session import McpSession, RemoteCallError
from syncproto.wire import MAX_WRITE_BYTES


def test_a_terminal_search_leaves_the_score_threshold_and_the_hit_count_to_the_server_unless_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It sent min_score 0, so the terminal showed the weak hits the server's measured gate keeps from agents; and
    # max_results 8, so an index's own max_results never applied to the terminal.
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(commands, "_call", lambda _args, _tool, arguments, _human: sent.append(arguments) or 0)
    for argv in (["search", "deploy"], ["search", "--min-score", "0.2", "-n", "3", "deploy"]):
        args = build_parser().parse_args(argv)
        assert args.func(args) == 0
    assert sent[0]["min_score"] is None and sent[0]["max_results"] is None  # None is left out of the call
    assert sent[1]["min_score"] == 0.2 and sent[1]["max_results"] == 3


# -- the MCP session ---------------------------------------------------------------------------------------------------


def forgetful_mcp_server() -> httpx2.MockTransport:
    """An MCP endpoint that opens sessions but knows none of them by the first call (as a server restarting twice
    during one command, or a balancer sending each request to another replica, would)."""
    sessions = itertools.count(1)

    def handle(request: httpx2.Request) -> httpx2.Response:
        message = json.loads(request.content)
        if message.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "x", "version": "1"}}
            return httpx2.Response(
                200,
                json={"jsonrpc": "2.0", "id": message["id"], "result": result},
                headers={"mcp-session-id": f"s{next(sessions)}"},
            )
        if "id" not in message:
            return httpx2.Response(202)
        error = {"code": -32600, "message": "Session not found"}
        return httpx2.Response(404, json={"jsonrpc": "2.0", "id": "server-error", "error": error})

    return httpx2.MockTransport(handle)


@pytest.mark.anyio
async def test_a_session_the_server_ends_again_after_reopening_it_fails_the_call_with_an_error_naming_the_server():
    # The second SessionExpiredError escaped: `memory-proxy search` ended in a traceback instead of a sentence.
    async with httpx2.AsyncClient(transport=forgetful_mcp_server(), base_url="http://memory") as client:
        session = McpSession(client, "https://memory.lan")
        with pytest.raises(
            RemoteCallError, match=r"the memory server at https://memory\.lan ended the MCP session again; try again"
        ):
            await session.call_tool("memory_search", {"query": "deploy"})


# -- rendering ---------------------------------------------------------------------------------------------------------

EVIL = "deploy notes\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\x07\x1b[2J\rall tests passed\u202e"


def test_terminal_control_sequences_in_server_text_are_printed_escaped_and_json_keeps_them_as_sent():
    # A note holding OSC 52 set the clipboard, CSI 2J cleared the screen and CR overwrote the line shown.
    hit = {"score": 0.9, "citation": "memory/a.md#L1-L2", "heading": "h\x1b[31m", "snippet": EVIL + "\nsecond\tline"}
    hit.update(updated_by="lap\x1btop", updated_at="2026-11-27T10:00:00Z", matched_by="keyword")
    found = render.search({"hits": [hit], "search_mode": "hybrid", "notice": "\x1b[2J"})
    shown = render.get(
        {
            "exists": True,
            "path": "memory/a.md",
            "start_line": 1,
            "end_line": 2,
            "total_lines": 2,
            "content": EVIL + "\r\nsecond\tline",
        }
    )
    for text in (found, shown, render.listing([{"path": "a\x9b2J.md", "lines": 1, "size": 2}], 1)):
        assert not any(ch in text for ch in "\x1b\x07\r\x9b\u202e")
    assert "| deploy notes\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07\\x1b[2J\\rall tests passed\\u202e\n" in found
    assert "| second\tline" in found and "by lap\\x1btop" in found and "note: \\x1b[2J" in found
    assert shown.splitlines()[1:] == [
        "1  deploy notes\\x1b]52;c;Y3VybCBldmlsLnNoIHwgc2g=\\x07\\x1b[2J\\rall tests passed\\u202e",
        "2  second\tline",
    ]
    assert json.loads(render.as_json({"content": EVIL})) == {"content": EVIL}


@settings(max_examples=300, deadline=None)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(st.characters(exclude_categories=())),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.text(st.characters(exclude_categories=()), max_size=8), inner, max_size=4)
        ),
        max_leaves=12,
    )
)
def test_json_output_parses_back_to_the_same_values_and_holds_no_character_the_terminal_would_run(value: Any):
    # --json wrote C1 controls (U+009B, CSI) and bidi overrides raw: JSON itself escapes only U+0000-U+001F.
    text = render.as_json(value)
    assert json.loads(text) == value
    assert all(escape(ch) == ch for ch in text if ch != "\n")


# -- the commands, run in process against a scripted server --------------------------------------------------------

Answer = Callable[[str, dict[str, Any]], dict[str, Any]]


def scripted_mcp_server(answer: Answer, calls: list[dict[str, Any]]) -> httpx2.MockTransport:
    """An MCP endpoint whose tool results are `answer(tool, arguments)`, whatever their shape: a buggy or hostile
    server, behind a channel that authenticated it."""

    def handle(request: httpx2.Request) -> httpx2.Response:
        if request.method != "POST":
            return httpx2.Response(204)
        message = json.loads(request.content)
        if message.get("method") == "initialize":
            result = {"protocolVersion": "2025-11-25", "capabilities": {}, "serverInfo": {"name": "x", "version": "1"}}
            answered = {"jsonrpc": "2.0", "id": message["id"], "result": result}
            return httpx2.Response(200, json=answered, headers={"mcp-session-id": "s1"})
        if "id" not in message:
            return httpx2.Response(202)
        calls.append(message["params"])
        structured = answer(message["params"]["name"], message["params"]["arguments"])
        result = {"content": [{"type": "text", "text": "answer"}], "structuredContent": structured}
        return httpx2.Response(200, json={"jsonrpc": "2.0", "id": message["id"], "result": result})

    return httpx2.MockTransport(handle)


class Ran:
    def __init__(self, status: int, out: str, err: str, calls: list[dict[str, Any]]) -> None:
        self.status, self.out, self.err, self.calls = status, out, err, calls


Terminal = Callable[..., Ran]


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Any) -> Terminal:
    """`memory-proxy ARGV...` in process (`cli.main`), its `Remote` talking to `scripted_mcp_server(answer)`."""
    monkeypatch.setenv("MEMORY_PROXY_HOME", str(tmp_path / "home"))

    def run(answer: Answer | dict[str, Any], *argv: str) -> Ran:
        calls: list[dict[str, Any]] = []
        transport = scripted_mcp_server(answer if callable(answer) else lambda _tool, _args: answer, calls)

        @asynccontextmanager
        async def connect(_settings: Any) -> AsyncIterator[Remote]:
            async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
                remote = Remote(client, Target("https://memory.lan", "team", "laptop"))
                try:
                    yield remote
                finally:
                    await remote.close()

        monkeypatch.setattr(commands, "connect", connect)
        status = main(list(argv))
        out, err = capsys.readouterr()
        return Ran(status, out, err, calls)

    return run


WRITTEN = {"mode": "append", "path": "memory/a.md", "start_line": 1, "end_line": 1, "lines": 1, "hash": "0" * 64}
GOT = {"exists": True, "path": "memory/a.md", "start_line": 1, "end_line": 1, "total_lines": 1, "content": "hello"}


class EndlessStdin(io.RawIOBase):
    """`yes "a line of notes"` on stdin; the test fails once the reader took more than a megabyte."""

    def __init__(self) -> None:
        self.taken = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.taken > 1024 * 1024:
            raise AssertionError("stdin was read past a megabyte")
        line = b"a line of notes\n"
        size = len(buffer)
        buffer[:size] = (line * (size // len(line) + 1))[:size]
        self.taken += size
        return size


def stdin_of(raw: io.RawIOBase | io.BytesIO) -> io.TextIOWrapper:
    """A stdin as Python opens it on a pipe (a byte it cannot decode becomes a surrogate escape)."""
    buffered = raw if isinstance(raw, io.BytesIO) else io.BufferedReader(raw)
    return io.TextIOWrapper(buffered, encoding="utf-8", errors="surrogateescape")


def test_an_endless_pipe_into_write_is_read_one_byte_past_the_cap_and_refused_naming_it(terminal, monkeypatch):
    # `yes | memory-proxy write` grew to 7.7 GB in 6 s: all of stdin was read before the server could refuse it.
    endless = EndlessStdin()
    monkeypatch.setattr(sys, "stdin", stdin_of(endless))
    ran = terminal(WRITTEN, "write")
    assert ran.status == 2 and ran.calls == []
    assert ran.err == (
        f"memory-proxy: error: stdin holds more than {MAX_WRITE_BYTES // 1024} KiB, the most one write takes; "
        "split it into parts\n"
    )
    assert endless.taken <= MAX_WRITE_BYTES + 64 * 1024


def test_stdin_of_exactly_the_cap_is_written_whole(terminal, monkeypatch):
    monkeypatch.setattr(sys, "stdin", stdin_of(io.BytesIO(b"x" * MAX_WRITE_BYTES)))
    ran = terminal(WRITTEN, "write")
    assert ran.status == 0, ran.err
    assert ran.calls[0]["arguments"]["content"] == "x" * MAX_WRITE_BYTES


def test_stdin_that_is_not_utf8_is_refused_before_anything_is_sent(terminal, monkeypatch):
    # A Latin-1 file piped in ended in a UnicodeEncodeError traceback from the request's encoding.
    monkeypatch.setattr(sys, "stdin", stdin_of(io.BytesIO("café note\n".encode("latin-1"))))
    ran = terminal(WRITTEN, "write")
    assert ran.status == 2 and ran.calls == []
    assert ran.err.startswith("memory-proxy: error: stdin is not UTF-8 text (at byte 4)")


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["search", "caf\udce9"], "query"),
        (["write", "caf\udce9 note"], "content"),
        (["get", "memory/caf\udce9.md"], "path"),
        (["list", "--prefix", "memory/caf\udce9"], "prefix"),
    ],
)
def test_an_argument_that_is_not_utf8_is_named_and_nothing_is_sent(terminal, argv, named):
    # Python gives an argv byte that is not UTF-8 as a lone surrogate, which the request's encoding failed on.
    ran = terminal(WRITTEN, *argv)
    assert ran.status == 2 and ran.calls == []
    assert ran.err == f"memory-proxy: error: {named} is not UTF-8 text; give it in UTF-8\n"


@pytest.mark.anyio
async def test_the_mcp_session_refuses_an_argument_utf8_cannot_encode_with_a_proxy_error():
    calls: list[dict[str, Any]] = []
    transport = scripted_mcp_server(lambda _tool, _args: GOT, calls)
    async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
        with pytest.raises(ProxyError, match=r"^heading is not UTF-8 text"):
            await McpSession(client, "https://memory.lan").call_tool("memory_get", {"heading": ["\ud800"]})
    assert calls == []


def test_write_with_stdin_closed_has_nothing_to_write(terminal, monkeypatch):
    # `memory-proxy write <&-`: Python gives no sys.stdin at all, and `.read` ended in an AttributeError traceback.
    monkeypatch.setattr(sys, "stdin", None)
    ran = terminal(WRITTEN, "write")
    assert ran.status == 2 and ran.calls == []
    assert ran.err == "memory-proxy: error: nothing to write: give the text as an argument or on stdin\n"


class FailingStdin(io.RawIOBase):
    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        raise OSError(errno.EIO, os.strerror(errno.EIO))


def test_an_error_of_the_system_that_names_no_file_is_said_without_an_empty_name(terminal, monkeypatch):
    # It printed "memory-proxy: error: : Input/output error".
    monkeypatch.setattr(sys, "stdin", stdin_of(FailingStdin()))
    ran = terminal(WRITTEN, "write")
    assert (ran.status, ran.err) == (1, f"memory-proxy: error: {os.strerror(errno.EIO)}\n")


def test_json_output_escapes_the_characters_a_terminal_would_run_and_keeps_the_other_text(terminal):
    note = "deploy \u009b2J\u009b31mRED \u202egnp.exe\x7f, café 日本 ok"
    ran = terminal({**GOT, "content": note}, "get", "--json", "memory/a.md")
    assert ran.status == 0
    assert not any(ch in ran.out for ch in "\u009b\u202e\x7f")
    assert "\\u009b2J" in ran.out and "\\u202egnp.exe" in ran.out and "café 日本 ok" in ran.out
    assert json.loads(ran.out) == {**GOT, "content": note}


def test_get_of_a_missing_file_exits_1_in_words_and_in_json(terminal):
    # It exited 0: a script could not tell a missing file from one that is there.
    missing = {"exists": False, "path": "memory/nowhere.md"}
    shown = terminal(missing, "get", "memory/nowhere.md")
    assert (shown.status, shown.out) == (1, "memory/nowhere.md: no such file\n")
    as_json = terminal(missing, "get", "--json", "memory/nowhere.md")
    assert as_json.status == 1 and json.loads(as_json.out) == missing
    assert terminal(GOT, "get", "memory/a.md").status == 0


def list_pages(total: int, cursors: Iterator[str | None], size: int = commands.LIST_PAGE) -> Answer:
    """memory_list answers of `size` files each, naming the next of `cursors` (None: the last page); the test fails
    when more than 20 are asked for."""
    pages = itertools.count()

    def answer(_tool: str, _arguments: dict[str, Any]) -> dict[str, Any]:
        page = next(pages)
        if page >= 20:
            raise AssertionError("the list was followed past 20 pages")
        files = [{"path": f"memory/p{page}-{n}.md", "lines": 1, "size": 1} for n in range(size)]
        return {"files": files, "total": total, "next_cursor": next(cursors)}

    return answer


@pytest.mark.parametrize(
    ("total", "cursors", "calls", "reason"),
    [
        (5000, itertools.repeat("again"), 2, "it named a page it had sent already"),
        (5, itertools.repeat("again"), 1, "the 5 files it counted fit in 1 page of 200, and it named one more"),
        (450, (f"c{n}" for n in itertools.count()), 3, "the 450 files it counted fit in 3 pages of 200"),
    ],
)
def test_a_list_that_never_ends_is_stopped_with_an_error(terminal, total, cursors, calls, reason):
    # It followed next_cursor for as long as the server sent one, holding every page: 270 MB after 20 s.
    ran = terminal(list_pages(total, cursors), "list")
    assert ran.status == 2 and len(ran.calls) == calls
    assert ran.err.startswith("memory-proxy: error: the server's list of files does not end: ") and reason in ran.err


def test_a_list_of_several_pages_is_followed_to_its_end(terminal):
    cursors = iter(["c1", "c2", None])
    ran = terminal(list_pages(450, cursors, size=150), "list")
    assert ran.status == 0 and len(ran.calls) == 3
    assert [call["arguments"].get("cursor") for call in ran.calls] == [None, "c1", "c2"]
    assert ran.out.splitlines()[-1] == "450 files"


CANARY = "canary-8d1f"  # in every malformed answer: never echoed


@pytest.mark.parametrize(
    ("argv", "answer"),
    [
        (["search", "deploy"], {"hits": [{"score": "0.9", "citation": CANARY, "snippet": "x"}]}),
        (["search", "deploy"], {"hits": [CANARY]}),
        (["get", "memory/a.md"], {**GOT, "start_line": CANARY}),
        (["write", "x"], {"mode": CANARY}),
        (["list"], {"files": [{"path": 3, "lines": 1, "size": CANARY}], "total": 1}),
        (["list"], {"files": CANARY, "total": 1}),
        (["list"], {"files": [{"path": CANARY}] * (commands.LIST_PAGE + 1), "total": 1}),
        (["list"], {"files": [], "total": CANARY}),
        (["history"], {"versions": [{"version": 1, "path": CANARY}]}),
        (["restore", "memory/a.md", "3"], {"changed": True, "path": CANARY, "restored_version": 3, "hash": 5}),
    ],
)
def test_a_malformed_answer_ends_in_one_line_that_does_not_echo_it(terminal, argv, answer):
    # A string score ended in "ValueError: Unknown format code 'f'", a number as a path in "TypeError: object of
    # type 'int' has no len()": tracebacks, quoting the server's data.
    ran = terminal(answer, *argv)
    assert ran.status == 2
    assert ran.err == f"memory-proxy: error: the server's answer to memory_{argv[0]} was malformed\n"


def test_output_into_a_reader_that_stopped_ends_quietly_with_the_status_of_sigpipe(terminal, monkeypatch):
    # `memory-proxy get ... | head` printed "memory-proxy: error: : Broken pipe" and exited 1.
    reader, writer = os.pipe()
    os.close(reader)
    stdout = open(writer, "w", encoding="utf-8")  # noqa: SIM115 - closed below, after main has left it
    monkeypatch.setattr(sys, "stdout", stdout)
    ran = terminal(GOT, "get", "--json", "memory/a.md")
    stdout.close()  # what is left in its buffer goes to /dev/null now, as it would at exit
    assert (ran.status, ran.err) == (141, "")
