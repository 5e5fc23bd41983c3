"""The terminal commands (`memory-proxy search` and its siblings): what they send to the server's tools, what they
show of the answers, and how a failed call ends."""

from __future__ import annotations

import itertools
import json
from typing import Any

import httpx2
import pytest

from client_proxy.cli import build_parser
from client_proxy.remote import commands, render
from client_proxy.remote.mcp_session import McpSession, RemoteCallError


def test_a_terminal_search_leaves_the_score_threshold_to_the_server_unless_one_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It sent min_score 0, so the terminal showed the weak hits the server's measured gate keeps from agents.
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(commands, "_call", lambda _args, _tool, arguments, _human: sent.append(arguments) or 0)
    for argv in (["search", "deploy"], ["search", "--min-score", "0.2", "deploy"]):
        args = build_parser().parse_args(argv)
        assert args.func(args) == 0
    assert sent[0]["min_score"] is None  # None is left out of the call (`McpSession.call_tool`)
    assert sent[1]["min_score"] == 0.2


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
    assert json.loads(commands._dump({"content": EVIL})) == {"content": EVIL}
