"""Strict arguments: an argument a tool does not know is refused with its name and the ones the tool takes,
before anything runs, and every listed input schema says so (`additionalProperties: false`). A prompt refuses an
unknown or a missing argument the same way."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, Prompt, PromptArgument

from server.mcp.strict import closed_listing, prompt_refusal, refusal, unknown_arguments
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import channel_user, connect, server_log, structured

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

ALICE = channel_user("alice", {"notes": "rw"}, "notes")
TWO_SECTIONS = "# Memory\n\n## Deploy\nBlue-green behind HAProxy.\n\n## Database\nSQLite with WAL.\n"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
SCHEMA = {"type": "object", "properties": {"path": {}, "start_line": {}, "end_line": {}}, "required": ["path"]}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path, HashingEmbedder())
    yield running
    running.close()


async def test_a_replace_with_an_unknown_argument_is_refused_and_the_file_keeps_both_sections(service):
    async with connect(service, ALICE) as client:
        first = {"path": "MEMORY.md", "content": TWO_SECTIONS, "mode": "replace", "expected_hash": "absent"}
        written = structured(await client.call_tool("memory_write", first))
        narrower = {**first, "content": "Rolling deploys now.", "expected_hash": written["hash"], "section": "Deploy"}
        with pytest.raises(MCPError) as refused:
            await client.call_tool("memory_write", narrower)
        kept = structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
    assert refused.value.error.code == INVALID_PARAMS
    assert "memory_write does not take the argument 'section'" in refused.value.error.message
    assert "heading" in refused.value.error.message and "expected_hash" in refused.value.error.message
    assert kept["content"] == TWO_SECTIONS.rstrip("\n")


async def test_the_issues_replace_of_one_section_by_heading_now_replaces_only_that_section(service):
    async with connect(service, ALICE) as client:
        first = {"path": "MEMORY.md", "content": TWO_SECTIONS, "mode": "replace", "expected_hash": "absent"}
        structured(await client.call_tool("memory_write", first))
        deploy = structured(await client.call_tool("memory_get", {"path": "MEMORY.md", "heading": "Deploy"}))
        narrower = {
            **first,
            "content": "Rolling deploys now.",
            "expected_hash": deploy["section_hash"],
            "heading": "Deploy",
        }
        structured(await client.call_tool("memory_write", narrower))
        kept = structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
    assert kept["content"] == TWO_SECTIONS.replace("Blue-green behind HAProxy.", "Rolling deploys now.").rstrip("\n")


async def test_a_read_with_an_unknown_argument_is_refused_naming_the_arguments_it_takes(service):
    async with connect(service, ALICE) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("memory_get", {"path": "MEMORY.md", "section": "Deploy", "verbose": True})
    assert refused.value.error.message == (
        "memory_get does not take the arguments 'section', 'verbose'; it takes: path, start_line, end_line, heading,"
        " version, start_char"
    )


async def test_every_listed_input_schema_refuses_additional_properties(service):
    async with connect(service, ALICE) as client:
        tools = (await client.list_tools()).tools
    assert tools and all(tool.input_schema.get("additionalProperties") is False for tool in tools)
    assert all(tool.input_schema.get("properties") for tool in tools if tool.name != "memory_status")


async def test_known_arguments_still_work_and_a_tool_without_arguments_takes_none(service):
    async with connect(service, ALICE) as client:
        assert (
            structured(await client.call_tool("memory_get", {"path": "MEMORY.md", "start_line": 1}))["exists"] is False
        )
        with pytest.raises(MCPError) as refused:
            await client.call_tool("memory_status", {"index": "someone-elses"})
    assert refused.value.error.message == "memory_status does not take the argument 'index'; it takes: no arguments"


def test_unknown_arguments_are_listed_sorted_and_the_refusal_names_every_accepted_one():
    assert unknown_arguments(SCHEMA, {"path": "a.md", "zeta": 1, "alpha": 2}) == ["alpha", "zeta"]
    assert unknown_arguments(SCHEMA, {"path": "a.md"}) == []
    assert refusal("memory_get", ["alpha"], SCHEMA) == (
        "memory_get does not take the argument 'alpha'; it takes: path, start_line, end_line"
    )


def test_a_closed_listing_keeps_every_other_field_of_each_tool():
    listing = {"tools": [{"name": "t", "title": "T", "inputSchema": SCHEMA}], "nextCursor": "2"}
    assert closed_listing(listing) == {
        "tools": [{"name": "t", "title": "T", "inputSchema": {**SCHEMA, "additionalProperties": False}}],
        "nextCursor": "2",
    }


# prompts ---------------------------------------------------------------------------------------------------

PROMPT_REFUSALS = [  # (prompt, arguments, the refusal)
    (
        "remember",
        {"note": "x", "topic_": "deploys"},
        "remember does not take the argument 'topic_'; it takes: note, topic",
    ),
    ("recall", {}, "recall needs the argument 'question'; it takes: question"),
    (
        "recall",
        {"token": "x", "tone": "y"},
        "recall does not take the arguments 'token', 'tone' and needs the argument 'question'; it takes: question",
    ),
    ("forget", {"note": "x"}, "no prompt 'forget'; prompts: recall, remember"),
]


@pytest.mark.parametrize(("prompt", "arguments", "refused"), PROMPT_REFUSALS)
async def test_a_prompt_refuses_an_unknown_or_missing_argument_as_invalid_params_naming_them(
    service, prompt, arguments, refused
):
    async with connect(service, ALICE) as client:
        with pytest.raises(MCPError) as caught:
            await client.get_prompt(prompt, arguments)
        kept = await client.get_prompt("remember", {"note": "the CI cache key includes the lockfile"})
    assert caught.value.error.code == INVALID_PARAMS
    assert caught.value.error.message == refused
    assert "the CI cache key includes the lockfile" in kept.messages[0].content.text


async def test_a_refused_prompt_logs_no_error_and_its_secret_argument_appears_nowhere(service):
    messages = []
    with server_log("warning") as log:  # the server's default level
        async with connect(service, ALICE) as client:
            for prompt, arguments in [
                ("remember", {"note": "x", "topic_": TOKEN}),
                ("recall", {"question": "q", TOKEN: "x"}),
                (TOKEN, {}),
            ]:
                with pytest.raises(MCPError) as caught:
                    await client.get_prompt(prompt, arguments)
                messages.append(caught.value.error.message)
    assert [message.count("[redacted:github-token]") for message in messages] == [0, 1, 1]
    assert all(TOKEN not in message for message in messages), messages
    assert "ERROR" not in log.getvalue() and TOKEN not in log.getvalue(), log.getvalue()


def test_a_prompt_refusal_names_the_unknown_arguments_sorted_then_the_missing_ones():
    prompt = Prompt(
        name="p",
        arguments=[PromptArgument(name="b", required=True), PromptArgument(name="a", required=False)],
    )
    assert prompt_refusal(prompt, {"b": "x"}) is None
    assert prompt_refusal(prompt, {"b": "x", "z": "1", "y": "2"}) == (
        "p does not take the arguments 'y', 'z'; it takes: b, a"
    )
    assert prompt_refusal(prompt, {"a": "x"}) == "p needs the argument 'b'; it takes: b, a"
    assert prompt_refusal(Prompt(name="q"), {"a": "x"}) == "q does not take the argument 'a'; it takes: no arguments"
