"""Every error leaving the MCP layer is redacted: a secret a caller passes in an argument (or as an argument's name)
never comes back in the answer, nor reaches the server's log, and a validation report names the argument and what
is wrong with it but not the value."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolResult, ImageContent, TextContent

from server.mcp.boundary import public, public_data, public_result, without_inputs
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import channel_user, connect, error, server_log, structured

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

ALICE = channel_user("alice", {"alice-notes": "rw"}, "alice-notes")
GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
AWS = "AKIA" + "Q3R7T2Y8U4I9O1P5"
OPENAI = "sk-" + "Zx81Kq02Lm93Nb74Vc65Xz56Aq47Sw38De29"
# Enough of each to find it again, even in pydantic's shortened repr of a long value ('ghp_A1b2C3d4E5...Q7r8').
TRACES = (GITHUB, AWS, OPENAI, GITHUB[:14], GITHUB[-12:], AWS[4:], OPENAI[3:15])

MISUSED = [  # (tool, arguments, what the error still names)
    ("memory_search", {"query": "x", "tags": [GITHUB + "x"]}, "tags"),
    ("memory_list", {"tags": ["#" + OPENAI + "Q" * 10]}, "tags"),
    ("memory_get", {"path": "memory/a.md", "heading": AWS}, "no heading"),
    ("memory_get", {"path": "memory/a.md", "start_line": AWS}, "start_line"),
    ("memory_write", {"content": "x", "mode": GITHUB}, "mode"),
    ("memory_search", {"query": "x", "scope": OPENAI}, "scope"),
    ("memory_write", {"content": {"token": GITHUB}}, "content"),
]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path, HashingEmbedder())
    yield running
    running.close()


def _leaks(text: str) -> list[str]:
    return [trace for trace in TRACES if trace in text]


async def test_a_secret_in_a_tag_a_heading_a_mistyped_argument_or_an_argument_name_never_comes_back_nor_is_logged(
    service,
):
    answers: list[tuple[str, str]] = []
    with server_log("info") as log:
        async with connect(service, ALICE) as client:
            structured(await client.call_tool("memory_write", {"content": "# Notes\n\nhello", "path": "memory/a.md"}))
            for tool, arguments, named in MISUSED:
                answers.append((named, error(await client.call_tool(tool, arguments))))
            with pytest.raises(MCPError) as refused:
                await client.call_tool("memory_get", {"path": "memory/a.md", GITHUB: 1})
    for named, message in answers:
        assert not _leaks(message), message
        assert named in message, message  # still says what is wrong
    assert refused.value.error.code == INVALID_PARAMS and not _leaks(refused.value.error.message)
    assert "memory_get does not take the argument '[redacted:github-token]'" in refused.value.error.message
    assert not _leaks(log.getvalue()), log.getvalue()


async def test_a_resource_error_and_its_data_are_redacted(service):
    async with connect(service, ALICE) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource(f"memory://alice-notes/memory/{GITHUB}.md")
    assert not _leaks(refused.value.error.message) and not _leaks(str(refused.value.error.data))
    assert "[redacted:github-token]" in refused.value.error.message


def test_a_validation_report_keeps_each_argument_and_what_is_wrong_but_not_the_values():
    report = (
        "Error executing tool memory_get: 3 validation errors for memory_getArguments\n"
        "start_line\n"
        "  Input should be a valid integer [type=int_type, input_value='q\\nz]', input_type=str]\n"
        "    For further information visit https://errors.pydantic.dev/2.14/v/int_type\n"
        "tags.1\n"
        "  Input should be a valid string [type=string_type, input_value={'k': 'ghp_A1b2C3d4E5...Q7r8'}, "
        "input_type=dict]\n"
        "  Value error, not whole [type=value_error, input_value={}, input_type=dict]"
    )
    assert without_inputs(report) == (
        "Error executing tool memory_get: invalid arguments: start_line: Input should be a valid integer; "
        "tags.1: Input should be a valid string; Value error, not whole"
    )


def test_a_report_in_a_shape_not_recognised_keeps_only_its_prefix_and_other_messages_are_unchanged():
    odd = "Error executing tool memory_get: 1 validation error for memory_getArguments\nstart_line\n  no bracket here"
    assert without_inputs(odd) == "Error executing tool memory_get: invalid arguments"
    dangling = "Error executing tool memory_get: 1 validation error for memory_getArguments\nstart_line"
    assert without_inputs(dangling) == "Error executing tool memory_get: invalid arguments"
    plain = "Error executing tool memory_get: start_line must be a whole number from 1"
    assert without_inputs(plain) == plain


def test_every_shape_of_error_answer_is_made_public():
    assert public(f"no heading {AWS!r}") == "no heading '[redacted:aws-key]'"
    assert public_data({"uri": f"memory://x/{GITHUB}.md", "n": 1, "more": [OPENAI]}) == {
        "uri": "memory://x/[redacted:github-token].md",
        "n": 1,
        "more": ["[redacted:openai-key]"],
    }
    image = ImageContent(type="image", data="AAAA", mime_type="image/png")
    failed = CallToolResult(content=[TextContent(type="text", text=f"bad tag {GITHUB}"), image], is_error=True)
    made_public = public_result(failed)
    assert isinstance(made_public, CallToolResult)
    assert made_public.content == [TextContent(type="text", text="bad tag [redacted:github-token]"), image]
    as_mapping: dict[str, Any] = {"content": [{"type": "text", "text": GITHUB}], "isError": True}
    assert public_result(as_mapping) == {
        "content": [{"type": "text", "text": "[redacted:github-token]"}],
        "isError": True,
    }
    succeeded = CallToolResult(content=[TextContent(type="text", text=f"memory text {GITHUB}")])
    assert public_result(succeeded) is succeeded  # the caller's own memory, redacted when it was written
