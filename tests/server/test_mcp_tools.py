"""The MCP tools, resources and prompts through the SDK's `Client`, in process, with the caller injected at
`scope["user"]` as the channel does. Both protocol generations where the difference could matter."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError

from server.errors import ConflictError, PermissionDeniedError, UnsafePathError
from server.index.errors import EmbeddingError, EngineError, InvalidArgumentError
from server.mcp.answers import MAX_ANSWER_CHARS, render_get
from server.mcp.calls import translated
from server.memory.results import GetOutput
from server.memory.service import MAX_GET_CHARS, MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import (
    MODES,
    WAIT,
    GatedEmbedder,
    SyncSpy,
    channel_user,
    connect,
    error,
    plant,
    structured,
    text,
)
from tests.postgres_support import ON_SERVER_DISK

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

ALICE = channel_user("alice", {"alice-notes": "rw", "team": "r"}, "alice-notes")
BOB = channel_user("bob", {"bob-notes": "rw"}, "bob-notes")
READER = channel_user("reader", {"alice-notes": "r"}, "alice-notes")
TOOLS = [
    "memory_search", "memory_get", "memory_write", "memory_list", "memory_delete", "memory_status", "memory_sync",
    "memory_history", "memory_restore",
]  # fmt: skip


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path, HashingEmbedder())
    yield running
    running.close()


# the surface ----------------------------------------------------------------------------------------------


async def test_every_tool_has_a_title_a_description_typed_output_and_all_four_hints(service):
    async with connect(service, ALICE) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(TOOLS)
    for tool in tools.values():
        assert tool.title and tool.description and len(tool.description) < 400, tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
        hints = tool.annotations
        assert hints is not None, tool.name
        for hint in ("read_only_hint", "destructive_hint", "idempotent_hint", "open_world_hint"):
            assert isinstance(getattr(hints, hint), bool), (tool.name, hint)
        assert hints.open_world_hint is False
    read_only = {name for name, tool in tools.items() if tool.annotations and tool.annotations.read_only_hint}
    assert read_only == {"memory_search", "memory_get", "memory_list", "memory_status", "memory_history"}
    assert tools["memory_delete"].annotations.destructive_hint is True
    assert tools["memory_write"].annotations.idempotent_hint is False
    assert set(tools["memory_search"].input_schema["properties"]["scope"]["enum"]) == {"index", "all"}


@pytest.mark.parametrize("mode", MODES)
async def test_write_then_search_finds_the_new_text_within_the_same_second(service, mode):
    async with connect(service, ALICE, mode=mode) as client:
        started = time.monotonic()
        written = structured(await client.call_tool("memory_write", {"content": "Webhooks are deduplicated by id"}))
        found = structured(await client.call_tool("memory_search", {"query": "webhooks deduplicated"}))
        elapsed = time.monotonic() - started
    assert written["indexed"] is True and written["replayed"] is False
    assert elapsed < 1.0
    assert found["hits"][0]["path"] == written["path"]
    assert "deduplicated" in found["hits"][0]["snippet"]
    assert found["hits"][0]["index"] == "alice-notes" and found["hits"][0]["updated_by"] == "alice"
    assert found["search_mode"] == "hybrid" and found["indexes"] == ["alice-notes"]


async def test_an_agent_is_told_plainly_when_nothing_relevant_is_in_memory_and_may_ask_for_order_options(service):
    async with connect(service, ALICE) as client:
        await client.call_tool("memory_write", {"content": "Webhooks are deduplicated by id"})
        written = structured(await client.call_tool("memory_write", {"content": "Webhook retries back off slowly"}))
        strict = structured(await client.call_tool("memory_search", {"query": "webhooks garden", "min_score": 0.99}))
        ordered = structured(
            await client.call_tool(
                "memory_search",
                {"query": "webhooks", "mmr_lambda": 0.5, "recency_half_life_days": 7, "rerank": True, "min_score": 0},
            )
        )
    assert strict["hits"] == [] and strict["notice"].startswith("nothing relevant: no passage scored min_score 0.99")
    assert len(ordered["hits"]) == 2 and {hit["path"] for hit in ordered["hits"]} == {written["path"]}
    assert "reranking is not configured on this server" in ordered["notice"]


async def test_append_goes_to_the_daily_log_of_the_callers_own_date_under_a_topic_heading(tmp_path):
    late_evening_utc = dt.datetime(2026, 3, 1, 23, 30, tzinfo=dt.UTC)
    service = MemoryService(tmp_path, HashingEmbedder(), clock=lambda: late_evening_utc)
    try:
        async with connect(service, ALICE, timezone="Asia/Tokyo") as client:
            tokyo = structured(await client.call_tool("memory_write", {"content": "first", "topic": "deploy"}))
            got = structured(await client.call_tool("memory_get", {"path": tokyo["path"]}))
        async with connect(service, ALICE, timezone="America/New_York") as client:
            new_york = structured(await client.call_tool("memory_write", {"content": "second"}))
    finally:
        service.close()
    assert tokyo["path"] == "memory/2026-03-02.md"
    assert got["content"].splitlines()[:5] == ["# 2026-03-02", "", "## 08:30 — deploy", "", "first"]
    assert new_york["path"] == "memory/2026-03-01.md"


async def test_a_retried_write_with_the_same_idempotency_key_writes_once(service):
    note = {"content": "Release 1.4 shipped", "topic": "release", "idempotency_key": "call-7f3a"}
    async with connect(service, ALICE) as client:
        first = structured(await client.call_tool("memory_write", note))
        again = structured(await client.call_tool("memory_write", note))
        content = structured(await client.call_tool("memory_get", {"path": first["path"]}))["content"]
        reused = error(await client.call_tool("memory_write", {**note, "content": "something else"}))
    assert again["replayed"] is True and again["hash"] == first["hash"]
    assert content.count("Release 1.4 shipped") == 1
    assert "idempotency_key" in reused


async def test_replace_with_a_stale_hash_is_refused_with_the_current_hash_and_loses_nothing(service):
    async with connect(service, ALICE) as client:
        created = structured(
            await client.call_tool(
                "memory_write",
                {"path": "MEMORY.md", "mode": "replace", "content": "v1\n", "expected_hash": "absent"},
            )
        )
        appended = structured(await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "v2 line"}))
        refused = await client.call_tool(
            "memory_write",
            {"path": "MEMORY.md", "mode": "replace", "content": "overwrite", "expected_hash": created["hash"]},
        )
        after = structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
        replaced = structured(
            await client.call_tool(
                "memory_write",
                {"path": "MEMORY.md", "mode": "replace", "content": "v3\n", "expected_hash": appended["hash"]},
            )
        )
        missing_hash = error(
            await client.call_tool("memory_write", {"path": "MEMORY.md", "mode": "replace", "content": "x"})
        )
    message = error(refused)
    assert "changed" in message and appended["hash"] in message
    assert after["hash"] == appended["hash"] and "v1" in after["content"] and "v2 line" in after["content"]
    assert replaced["lines"] == 1 and "expected_hash" in missing_hash


async def test_get_returns_a_line_range_with_total_lines_and_hash(service):
    lines = "\n".join(f"line {n}" for n in range(1, 21)) + "\n"
    async with connect(service, ALICE) as client:
        written = structured(
            await client.call_tool(
                "memory_write",
                {"path": "memory/notes.md", "mode": "replace", "content": lines, "expected_hash": "absent"},
            )
        )
        result = await client.call_tool("memory_get", {"path": "memory/notes.md", "start_line": 5, "end_line": 7})
        missing = await client.call_tool("memory_get", {"path": "memory/none.md"})
    got = structured(result)
    assert got["content"] == "line 5\nline 6\nline 7"
    assert (got["start_line"], got["end_line"], got["total_lines"]) == (5, 7, 20)
    assert got["hash"] == written["hash"] and got["truncated"] is False
    assert text(result).startswith("memory/notes.md lines 5-7 of 20")  # what the agent reads: plain lines
    assert structured(missing)["exists"] is False and structured(missing)["content"] == ""


async def test_a_long_file_is_returned_in_capped_pieces_that_say_where_to_continue(service):
    paragraph = "word " * 40
    body = "\n".join(f"{n}: {paragraph}" for n in range(1, 801)) + "\n"  # ~165 kB, far past one tool result
    async with connect(service, ALICE) as client:
        await client.call_tool(
            "memory_write", {"path": "memory/big.md", "mode": "replace", "content": body, "expected_hash": "absent"}
        )
        pieces: list[str] = []
        start: int | None = None
        for _ in range(50):
            arguments: dict[str, Any] = {"path": "memory/big.md"}
            if start is not None:
                arguments["start_line"] = start
            result = await client.call_tool("memory_get", arguments)
            got = structured(result)
            assert len(text(result)) < MAX_GET_CHARS + 500  # well under Claude Code's ~25k-token limit
            pieces.append(got["content"])
            if not got["truncated"]:
                break
            assert f"start_line={got['next_start_line']}" in text(result)
            start = got["next_start_line"]
    assert len(pieces) > 3
    assert "\n".join(pieces) + "\n" == body


async def test_a_line_longer_than_an_answer_is_read_to_its_end_from_the_character_each_answer_names(service):
    line = ("minified,json😀é" * 6_250)[:100_000]  # 😀 crosses JSON as a surrogate pair: no cut may split it
    async with connect(service, ALICE) as client:
        await client.call_tool(
            "memory_write", {"path": "memory/blob.md", "mode": "replace", "content": line, "expected_hash": "absent"}
        )
        first = await client.call_tool("memory_get", {"path": "memory/blob.md"})
        got = structured(first)
        pieces = [got["content"]]
        for _ in range(5):
            if got["next_start_char"] is None:
                break
            arguments = {"path": "memory/blob.md", "start_line": got["end_line"], "start_char": got["next_start_char"]}
            result = await client.call_tool("memory_get", arguments)
            assert len(text(result)) < MAX_GET_CHARS + 500
            got = structured(result)
            pieces.append(got["content"])
        refused = await client.call_tool("memory_get", {"path": "memory/blob.md", "start_line": 1, "start_char": "9"})
    assert len(pieces) == 3 and "".join(pieces) == line
    assert (got["truncated"], got["next_start_line"], got["next_start_char"]) == (False, None, None)
    assert "start_char" in error(refused)
    assert text(first).endswith(
        "call memory_get with start_line=1 and start_char=40001 to read on from its character 40001]"
    )


@ON_SERVER_DISK
async def test_no_list_page_or_hit_list_outgrows_one_tool_result(service, tmp_path):
    paragraph = " ".join(f"deployment pipeline step{i} rollback canary strategy" for i in range(60))
    folder = "memory/projects/a-fairly-long-project-name/with-a-deep-folder"
    for n in range(200):
        plant(tmp_path, "alice-notes", f"{folder}/area-{n:03}-notes-about-things.md", f"# Area {n}\n\n{paragraph}\n")
    async with connect(service, ALICE) as client:
        await client.call_tool("memory_sync", {})
        pages, seen = 0, []
        arguments: dict[str, Any] = {"limit": 200}
        while True:
            result = await client.call_tool("memory_list", arguments)
            assert len(text(result)) < MAX_ANSWER_CHARS + 500
            page = structured(result)
            seen += [f["path"] for f in page["files"]]
            pages += 1
            if page["next_cursor"] is None:
                break
            arguments["cursor"] = page["next_cursor"]
        result = await client.call_tool("memory_search", {"query": "deployment rollback canary", "max_results": 50})
    assert pages >= 2 and len(seen) == len(set(seen)) == 200  # cut short, and every file still listed once
    assert len(text(result)) < MAX_ANSWER_CHARS + 500
    found = structured(result)
    assert found["hits"] and (len(found["hits"]) == 50 or "left out" in found["notice"])


async def test_list_pages_with_a_cursor_and_filters_by_prefix_and_date(service):
    async with connect(service, ALICE) as client:
        for day in range(1, 8):
            await client.call_tool("memory_write", {"path": f"memory/2026-05-0{day}.md", "content": f"day {day}"})
        await client.call_tool("memory_write", {"path": "memory/projects/api.md", "content": "api notes"})
        first = structured(await client.call_tool("memory_list", {"limit": 3}))
        second = structured(await client.call_tool("memory_list", {"limit": 3, "cursor": first["next_cursor"]}))
        week = structured(await client.call_tool("memory_list", {"date_from": "2026-05-03", "date_to": "2026-05-04"}))
        projects = structured(await client.call_tool("memory_list", {"prefix": "memory/projects/"}))
        bad_cursor = error(await client.call_tool("memory_list", {"cursor": "not-a-cursor"}))
    assert first["total"] == 8 and len(first["files"]) == 3
    assert [f["path"] for f in second["files"]] == [
        "memory/2026-05-04.md",
        "memory/2026-05-05.md",
        "memory/2026-05-06.md",
    ]
    assert [f["path"] for f in week["files"]] == ["memory/2026-05-03.md", "memory/2026-05-04.md"]
    assert [f["path"] for f in projects["files"]] == ["memory/projects/api.md"]
    entry = projects["files"][0]
    assert entry["updated_by"] == "alice" and entry["lines"] == 1 and len(entry["hash"]) == 64
    assert "cursor" in bad_cursor


async def test_delete_removes_a_file_from_get_list_and_search_and_refuses_a_stale_hash(service):
    async with connect(service, ALICE) as client:
        written = structured(
            await client.call_tool("memory_write", {"path": "memory/tmp.md", "content": "ephemeral zebra"})
        )
        stale = error(await client.call_tool("memory_delete", {"path": "memory/tmp.md", "expected_hash": "0" * 64}))
        deleted = structured(await client.call_tool("memory_delete", {"path": "memory/tmp.md"}))
        again = structured(await client.call_tool("memory_delete", {"path": "memory/tmp.md"}))
        listed = structured(await client.call_tool("memory_list", {}))
        found = structured(await client.call_tool("memory_search", {"query": "ephemeral zebra"}))
        got = structured(await client.call_tool("memory_get", {"path": "memory/tmp.md"}))
    assert written["hash"] in stale
    assert deleted == {"path": "memory/tmp.md", "deleted": True, "previous_hash": written["hash"]}
    assert again["deleted"] is False
    assert listed["files"] == [] and found["hits"] == [] and got["exists"] is False


async def test_status_names_the_model_counts_caller_index_and_version(service):
    async with connect(service, ALICE) as client:
        await client.call_tool("memory_write", {"content": "something to count"})
        status = structured(await client.call_tool("memory_status", {}))
    assert (status["caller"], status["index"], status["access"]) == ("alice", "alice-notes", "rw")
    assert (status["provider"], status["model"], status["dimensions"]) == ("test", "hashing-v1", 64)
    assert status["files"] == {"memory": 1} and status["chunks"]["memory"] >= 1
    assert status["pending_files"] == 0 and status["database_bytes"] > 0
    assert "hybrid" in status["search_modes"] and status["server_version"]
    assert status["last_change_at"] is not None


@pytest.mark.parametrize("mode", MODES)
@ON_SERVER_DISK
async def test_sync_indexes_files_changed_on_disk_and_reports_progress(service, tmp_path, mode):
    for n in range(5):
        plant(tmp_path, "alice-notes", f"memory/planted-{n}.md", f"# Planted {n}\n\nthe quokka number {n}\n")
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        updates.append((done, total, message))

    async with connect(service, ALICE, mode=mode) as client:
        before = structured(await client.call_tool("memory_status", {}))
        report = structured(await client.call_tool("memory_sync", {}, progress_callback=on_progress))
        forced = structured(await client.call_tool("memory_sync", {"force": True}))
        found = structured(await client.call_tool("memory_search", {"query": "quokka number 3"}))
    assert before["pending_files"] == 5
    assert report["files_indexed"] == 5 and report["cancelled"] is False
    assert forced["files_seen"] == 5
    assert updates and updates[-1][:2] == (5, 5)
    assert found["hits"][0]["path"] == "memory/planted-3.md"


@pytest.mark.parametrize("mode", MODES)
@ON_SERVER_DISK
async def test_cancelling_a_long_sync_reaches_the_service(tmp_path, mode):
    embedder = GatedEmbedder()
    service = MemoryService(tmp_path, embedder)
    spy = SyncSpy(service)
    for n in range(6):
        plant(tmp_path, "alice-notes", f"memory/slow-{n}.md", f"# Slow {n}\n\ntext {n}\n")
    try:
        async with connect(service, ALICE, mode=mode) as client:
            await client.call_tool("memory_status", {})  # opens the index before the gate closes
            embedder.gate.clear()
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as watcher:
                    # Held in the first file until the server has seen the cancellation. (In process at
                    # 2026-07-28 the handler runs in the client's own task, so the cancelled call returns
                    # only once the service has stopped.)
                    watcher.start_soon(spy.release_when_cancelled, embedder.gate)
                    async with anyio.create_task_group() as group:
                        group.start_soon(client.call_tool, "memory_sync", {})
                        await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                        group.cancel_scope.cancel()  # the client gives up on the call
                outcome = await spy.outcome()
    finally:
        embedder.gate.set()
        service.close()
    assert outcome.cancelled is True and outcome.files_indexed == 1  # it stopped after the file in hand


# errors ---------------------------------------------------------------------------------------------------


BAD_ARGUMENTS = [
    ("memory_get", {"path": "../bob-notes/files/MEMORY.md"}, "'..'"),
    ("memory_get", {"path": "/etc/passwd"}, "relative"),
    ("memory_get", {"path": "memory/%2e%2e/%2e%2e/x.md"}, "percent"),
    ("memory_get", {"path": "notes.txt"}, "memory file"),
    ("memory_get", {"path": "memory/.hidden.md"}, "hidden"),
    ("memory_get", {"path": "memory\\..\\x.md"}, "'\\\\'"),
    ("memory_get", {"path": "memory/a.md", "start_line": 0}, "start_line"),
    ("memory_get", {"path": "memory/a.md", "start_line": 9, "end_line": 3}, "start_line"),
    ("memory_get", {}, "path"),
    ("memory_search", {"query": ""}, "query"),
    ("memory_search", {"query": "x", "max_results": 0}, "max_results"),
    ("memory_search", {"query": "x", "max_results": 51}, "max_results"),
    ("memory_search", {"query": "x", "max_results": "lots"}, "max_results"),
    ("memory_search", {"query": "x", "min_score": 2}, "min_score"),
    ("memory_search", {"query": "x", "mmr_lambda": 1.5}, "mmr_lambda"),
    ("memory_search", {"query": "x", "recency_half_life_days": -1}, "recency_half_life_days"),
    ("memory_search", {"query": "x", "rerank": "sometimes"}, "rerank"),
    ("memory_search", {"query": "x", "date_from": "yesterday"}, "date_from"),
    ("memory_search", {"query": "x", "scope": "everything"}, "scope"),
    ("memory_search", {"query": "x", "sources": ["email"]}, "sources"),
    ("memory_search", {"query": "x", "path": "../"}, "'..'"),
    ("memory_write", {"content": ""}, "content"),
    ("memory_write", {"content": "x", "mode": "overwrite"}, "mode"),
    ("memory_write", {"content": "x", "path": "memory/a.txt"}, "memory file"),
    ("memory_write", {"content": "x", "mode": "replace", "path": "MEMORY.md", "expected_hash": "abc"}, "sha256"),
    ("memory_write", {"content": "x", "idempotency_key": ""}, "idempotency_key"),
    ("memory_write", {"content": "x", "topic": "deploy \ud800"}, "topic is not valid Unicode"),
    ("memory_list", {"limit": 0}, "limit"),
    ("memory_list", {"limit": 201}, "limit"),
    ("memory_list", {"date_from": "2026-13-01"}, "date_from"),
    ("memory_list", {"prefix": "/abs"}, "relative"),
    ("memory_delete", {"path": "memory/../MEMORY.md"}, "'..'"),
    ("memory_sync", {"force": "maybe"}, "force"),
    ("memory_sync", {"path": "../../etc"}, "relative path"),  # refusals of the service, not of the arguments' types
    ("memory_sync", {"path": "memory/a\x00b.md"}, "path"),
]


@pytest.mark.parametrize(("tool", "arguments", "named"), BAD_ARGUMENTS)
async def test_bad_arguments_are_tool_errors_that_say_what_is_wrong(service, tool, arguments, named):
    async with connect(service, ALICE) as client:
        message = error(await client.call_tool(tool, arguments))
    assert named.lower() in message.lower()
    assert "Traceback" not in message


async def test_a_read_only_caller_can_read_and_search_but_not_write_delete_or_replace(service):
    async with connect(service, ALICE) as client:
        written = structured(await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "shared fact"}))
    async with connect(service, READER) as client:
        assert structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))["exists"] is True
        assert structured(await client.call_tool("memory_search", {"query": "shared fact"}))["hits"]
        assert structured(await client.call_tool("memory_status", {}))["access"] == "r"
        refusals = [
            await client.call_tool("memory_write", {"content": "sneaky"}),
            await client.call_tool(
                "memory_write",
                {"path": "MEMORY.md", "mode": "replace", "content": "x", "expected_hash": written["hash"]},
            ),
            await client.call_tool("memory_delete", {"path": "MEMORY.md"}),
            await client.call_tool("memory_sync", {"force": True}),
        ]
    for refusal in refusals:
        assert "only read" in error(refusal)
    async with connect(service, ALICE) as client:
        assert structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))["hash"] == written["hash"]
        assert structured(await client.call_tool("memory_list", {}))["total"] == 1


async def test_a_request_naming_no_index_is_refused_by_every_tool(service):
    nowhere = channel_user("alice", {"alice-notes": "rw"}, None)
    async with connect(service, nowhere) as client:
        for tool, arguments in [("memory_search", {"query": "x"}), ("memory_status", {}), ("memory_list", {})]:
            assert "no index selected" in error(await client.call_tool(tool, arguments))


MISTYPED = [  # (tool, arguments, what the error says): pydantic's lax mode took each of these before
    ("memory_get", {"path": "memory/a.md", "start_line": True}, "start_line: Input should be a valid integer"),
    ("memory_get", {"path": "memory/a.md", "end_line": "2"}, "end_line: Input should be a valid integer"),
    ("memory_get", {"path": "memory/a.md", "version": 1.0}, "version: Input should be a valid integer"),
    ("memory_search", {"query": "x", "max_results": True}, "max_results: Input should be a valid integer"),
    ("memory_search", {"query": "x", "min_score": True}, "min_score: Input should be a valid number"),
    ("memory_search", {"query": "x", "mmr_lambda": "0.5"}, "mmr_lambda: Input should be a valid number"),
    ("memory_search", {"query": "x", "recency_half_life_days": False}, "recency_half_life_days: Input should be"),
    ("memory_search", {"query": "x", "rerank": 1}, "rerank: Input should be a valid boolean"),
    ("memory_sync", {"force": "yes"}, "force: Input should be a valid boolean"),
    ("memory_list", {"limit": "1"}, "limit: Input should be a valid integer"),
    ("memory_history", {"deleted": "off"}, "deleted: Input should be a valid boolean"),
    ("memory_history", {"limit": 2.0}, "limit: Input should be a valid integer"),
    ("memory_history", {"before": True}, "before: Input should be a valid integer"),
    ("memory_restore", {"path": "memory/a.md", "version": True}, "version: Input should be a valid integer"),
]


@pytest.mark.parametrize(("tool", "arguments", "said"), MISTYPED)
async def test_a_number_or_flag_of_another_json_type_is_refused_saying_which_argument(service, tool, arguments, said):
    async with connect(service, ALICE) as client:
        structured(await client.call_tool("memory_write", {"content": "alpha", "path": "memory/a.md"}))
        result = await client.call_tool(tool, arguments)
    message = error(result)
    assert message.startswith(f"Error executing tool {tool}: invalid arguments: ") and said in message


async def test_a_number_argument_still_takes_a_json_integer_and_the_schemas_keep_their_types(service):
    async with connect(service, ALICE) as client:
        found = structured(
            await client.call_tool(
                "memory_search", {"query": "x", "min_score": 0, "mmr_lambda": 1, "recency_half_life_days": 7}
            )
        )
        tools = {tool.name: tool.input_schema["properties"] for tool in (await client.list_tools()).tools}
    assert found["hits"] == []
    assert tools["memory_get"]["start_line"]["anyOf"] == [{"type": "integer"}, {"type": "null"}]
    assert tools["memory_search"]["min_score"]["anyOf"] == [{"type": "number"}, {"type": "null"}]
    assert tools["memory_search"]["max_results"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 50}
    assert tools["memory_sync"]["force"]["type"] == "boolean"
    assert tools["memory_list"]["limit"]["type"] == "integer"
    assert tools["memory_history"]["limit"]["type"] == "integer"
    assert all("strict" not in str(properties) for properties in tools.values())


def test_every_service_error_becomes_a_tool_error_with_its_own_message():
    kinds = [EngineError, *_subclasses(EngineError)]
    assert {ConflictError, PermissionDeniedError, UnsafePathError, InvalidArgumentError, EmbeddingError} <= set(kinds)
    for kind in kinds:
        failure = kind("the message", "abc") if issubclass(kind, ConflictError) else kind("the message")
        with pytest.raises(ToolError, match=r"^the message$"), translated("test", ToolError):
            raise failure
    for other in (ValueError("x"), OSError(2, "y"), RuntimeError("z")):  # not ours: left to the SDK's generic answer
        with pytest.raises(type(other)), translated("test", ToolError):
            raise other


def _subclasses(cls: type) -> list[type]:
    found = cls.__subclasses__()
    return found + [deeper for sub in found for deeper in _subclasses(sub)]


async def test_an_unexpected_failure_answers_generically_and_keeps_its_text_on_the_server(service):
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("library detail sk-canary-0123")

    service.status = broken  # type: ignore[method-assign]
    async with connect(service, ALICE) as client:
        message = error(await client.call_tool("memory_status", {}))
    assert message == "Error executing tool memory_status"


# isolation ------------------------------------------------------------------------------------------------


async def test_two_callers_cannot_reach_each_others_files_by_any_argument(service, tmp_path):
    async with connect(service, BOB) as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "bob secret pelican"})
        await client.call_tool("memory_write", {"path": "memory/plans.md", "content": "bob plans pelican"})
    bob_files = tmp_path / "indexes" / "bob-notes" / "files"
    tricks = [
        "../../bob-notes/files/MEMORY.md",
        "memory/../../../bob-notes/files/MEMORY.md",
        str(bob_files / "MEMORY.md"),
        "%2e%2e/%2e%2e/bob-notes/files/MEMORY.md",
        "..%2F..%2Fbob-notes%2Ffiles%2FMEMORY.md",
        "memory/..\\..\\bob-notes\\files\\MEMORY.md",
        "file:///" + str(bob_files / "MEMORY.md"),
        "memory://bob-notes/MEMORY.md",
        "\u2024\u2024/bob-notes/files/MEMORY.md",
    ]
    async with connect(service, ALICE) as client:
        for trick in tricks:
            for tool, arguments in [
                ("memory_get", {"path": trick}),
                ("memory_delete", {"path": trick}),
                ("memory_write", {"path": trick, "content": "overwrite"}),
                ("memory_list", {"prefix": trick}),
                ("memory_search", {"query": "pelican", "path": trick}),
            ]:
                result = await client.call_tool(tool, arguments)
                assert "pelican" not in text(result), (tool, trick)
                if tool == "memory_get" and not result.is_error:
                    assert structured(result)["exists"] is False
        alone = structured(await client.call_tool("memory_search", {"query": "bob secret pelican", "scope": "all"}))
        listed = structured(await client.call_tool("memory_list", {}))
        same_name = structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
        resources = await client.list_resources()
    assert alone["hits"] == [] and set(alone["indexes"]) <= {"alice-notes", "team"}
    assert listed["files"] == [] and same_name["exists"] is False and resources.resources == []
    async with connect(service, BOB) as client:
        bob_view = structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
    assert bob_view["content"] == "bob secret pelican"  # nothing was overwritten or deleted


@ON_SERVER_DISK
async def test_a_symlink_planted_in_the_mirror_is_never_followed(service, tmp_path):
    async with connect(service, BOB) as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "bob secret pelican"})
    async with connect(service, ALICE) as client:
        await client.call_tool("memory_write", {"path": "memory/own.md", "content": "alice owns this"})
    alice_files = tmp_path / "indexes" / "alice-notes" / "files"
    bob_file = tmp_path / "indexes" / "bob-notes" / "files" / "MEMORY.md"
    (alice_files / "memory" / "link.md").symlink_to(bob_file)
    (alice_files / "memory" / "linked-dir").symlink_to(bob_file.parent, target_is_directory=True)
    (alice_files / "MEMORY.md").symlink_to(bob_file)
    async with connect(service, ALICE) as client:
        results = [
            await client.call_tool("memory_get", {"path": "memory/link.md"}),
            await client.call_tool("memory_get", {"path": "memory/linked-dir/MEMORY.md"}),
            await client.call_tool("memory_get", {"path": "MEMORY.md"}),
            await client.call_tool("memory_write", {"path": "memory/link.md", "content": "through the link"}),
            await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "through the link"}),
            await client.call_tool("memory_delete", {"path": "memory/link.md"}),
            await client.call_tool("memory_list", {}),
            await client.call_tool("memory_sync", {"force": True}),
            await client.call_tool("memory_search", {"query": "bob secret pelican"}),
        ]
        resources = await client.list_resources()
    for result in results:
        assert "pelican" not in text(result)
        assert "through the link" not in bob_file.read_text("utf-8")
    assert [r.name for r in resources.resources] == ["memory/own.md"]
    assert bob_file.read_text("utf-8") == "bob secret pelican\n"


async def test_search_scope_all_adds_the_callers_other_readable_indexes_labelled_by_index(service):
    team_writer = channel_user("carol", {"team": "rw"}, "team")
    async with connect(service, team_writer) as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "the team uses pnpm workspaces"})
    async with connect(service, ALICE) as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "alice prefers pnpm too"})
        own = structured(await client.call_tool("memory_search", {"query": "pnpm"}))
        both = structured(await client.call_tool("memory_search", {"query": "pnpm", "scope": "all"}))
    assert {hit["index"] for hit in own["hits"]} == {"alice-notes"}
    assert {hit["index"] for hit in both["hits"]} == {"alice-notes", "team"}
    assert sorted(both["indexes"]) == ["alice-notes", "team"]


# resources and prompts ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_memory_files_are_resources_listed_in_pages_and_readable(service, mode):
    async with connect(service, ALICE, mode=mode) as client:
        for n in range(105):
            await client.call_tool("memory_write", {"path": f"memory/topics/t{n:03}.md", "content": f"topic {n}"})
        first = await client.list_resources()
        second = await client.list_resources(cursor=first.next_cursor)
        read = await client.read_resource("memory://alice-notes/memory/topics/t042.md")
        with pytest.raises(MCPError):
            await client.list_resources(cursor="bogus")
    assert len(first.resources) == 100 and len(second.resources) == 5 and second.next_cursor is None
    assert str(first.resources[0].uri) == "memory://alice-notes/memory/topics/t000.md"
    assert first.resources[0].mime_type == "text/markdown"
    assert read.contents[0].text == "topic 42\n"  # the file, exactly


async def test_a_resource_uri_reaches_only_the_callers_own_index(service):
    async with connect(service, BOB) as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "bob secret pelican"})
    async with connect(service, ALICE) as client:
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "alice notes"})
        uris = [
            "memory://bob-notes/MEMORY.md",
            "memory://alice-notes/../bob-notes/MEMORY.md",
            "memory://alice-notes/memory/../../bob-notes/files/MEMORY.md",
            "memory://alice-notes/%2E%2E/%2E%2E/bob-notes/files/MEMORY.md",
            "memory://alice-notes/memory%2F..%2F..%2F..%2Fbob-notes%2Ffiles%2FMEMORY.md",
            "memory://alice-notes//etc/passwd",
            "memory://alice-notes/memory/none.md",
            "memory://alice-notes/notes.txt",
        ]
        for uri in uris:
            with pytest.raises(MCPError) as refused:
                await client.read_resource(uri)
            assert "pelican" not in str(refused.value), uri
        own = await client.read_resource("memory://alice-notes/MEMORY.md")
    assert own.contents[0].text == "alice notes\n"


async def test_a_resource_is_the_whole_file_exactly_with_a_line_over_the_get_limit_and_crlf_line_ends(service):
    long_line = "".join(f"{n:06d}," for n in range(MAX_GET_CHARS // 7 + 1000))
    assert len(long_line) > MAX_GET_CHARS
    original = f"# Data\r\n{long_line}\r\nlast line\r\n"
    async with connect(service, ALICE) as client:
        written = {"path": "memory/data.md", "content": original, "mode": "replace", "expected_hash": "absent"}
        structured(await client.call_tool("memory_write", written))
        read = await client.read_resource("memory://alice-notes/memory/data.md")
    assert read.contents[0].text == original


async def test_remember_and_recall_prompts_point_the_agent_at_the_tools(service):
    async with connect(service, ALICE) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
        remember = await client.get_prompt("remember", {"note": "the CI cache key includes the lockfile"})
        recall = await client.get_prompt("recall", {"question": "how is CI cached?"})
    assert set(prompts) == {"remember", "recall"}
    assert [a.name for a in prompts["remember"].arguments or []] == ["note", "topic"]
    remembered = remember.messages[0].content.text
    assert "memory_write" in remembered and "the CI cache key includes the lockfile" in remembered
    recalled = recall.messages[0].content.text
    assert "memory_search" in recalled and "how is CI cached?" in recalled and "path#L" in recalled


# running off the event loop -------------------------------------------------------------------------------


async def test_a_search_answers_while_another_callers_sync_is_held_in_the_embedder(tmp_path):
    embedder = GatedEmbedder()
    service = MemoryService(tmp_path, embedder)
    for n in range(3):
        plant(tmp_path, "alice-notes", f"memory/held-{n}.md", f"held {n}\n")
    try:
        async with connect(service, BOB) as bob:
            await bob.call_tool("memory_write", {"content": "bob keeps answering"})
            async with connect(service, ALICE) as alice, anyio.create_task_group() as group:
                await alice.call_tool("memory_status", {})
                embedder.gate.clear()
                group.start_soon(alice.call_tool, "memory_sync", {})
                await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                with anyio.fail_after(WAIT):
                    found = structured(await bob.call_tool("memory_search", {"query": "keeps answering"}))
                embedder.gate.set()
    finally:
        embedder.gate.set()
        service.close()
    assert found["hits"]


async def test_a_search_on_the_same_index_answers_while_a_sync_is_held(tmp_path):
    embedder = GatedEmbedder()
    service = MemoryService(tmp_path, embedder, rescan_interval=0.0)
    try:
        async with connect(service, ALICE) as alice, connect(service, READER) as reader:
            await alice.call_tool("memory_write", {"content": "already indexed"})
            for n in range(3):
                plant(tmp_path, "alice-notes", f"memory/held-{n}.md", f"held {n}\n")
            embedder.gate.clear()
            async with anyio.create_task_group() as group:
                group.start_soon(alice.call_tool, "memory_sync", {})
                await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                with anyio.move_on_after(2.0) as waited:
                    await reader.call_tool("memory_search", {"query": "already indexed"})
                embedder.gate.set()
    finally:
        embedder.gate.set()
        service.close()
    assert not waited.cancelled_caught


async def test_a_write_whose_call_is_cancelled_still_finishes_on_disk_and_in_the_index(tmp_path):
    embedder = GatedEmbedder()
    service = MemoryService(tmp_path, embedder)
    try:
        async with connect(service, ALICE) as client:
            await client.call_tool("memory_status", {})
            embedder.gate.clear()
            with anyio.fail_after(WAIT):
                async with anyio.create_task_group() as group:
                    group.start_soon(client.call_tool, "memory_write", {"path": "MEMORY.md", "content": "kept anyway"})
                    await anyio.to_thread.run_sync(embedder.entered.wait, WAIT)
                    group.cancel_scope.cancel()
                embedder.gate.set()
                got = structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))
                found: dict[str, Any] = {"hits": []}
                while not found["hits"]:  # the write indexes in its own thread once the gate opens; search never waits
                    found = structured(await client.call_tool("memory_search", {"query": "kept anyway"}))
    finally:
        embedder.gate.set()
        service.close()
    assert got["content"] == "kept anyway" and found["hits"]


def test_the_readable_form_of_get_says_where_to_continue():
    piece = GetOutput(
        path="memory/big.md",
        exists=True,
        content="a\nb",
        start_line=1,
        end_line=2,
        total_lines=9,
        hash="f" * 64,
        truncated=True,
        next_start_line=3,
        updated_by="alice",
        updated_at=None,
    )
    rendered = render_get(piece)
    assert rendered.startswith("memory/big.md lines 1-2 of 9") and "start_line=3" in rendered
