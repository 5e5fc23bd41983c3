"""Section-level memory through the SDK's MCP client: memory_get of one section by heading, memory_write replacing
one section guarded by its hash, and appending under a heading (created when missing, in a daily log too)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.memory.service import CallerContext, MemoryService
from server.sync.service import SyncService
from syncproto.messages import PushChange
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import channel_user, connect, error, structured, text

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

ALICE = channel_user("alice", {"notes": "rw"}, "notes")
MEMORY = (
    "# Project memory\n\n"
    "## Deploy\nBlue-green behind HAProxy.\n\n### Rollback\nSwitch the backend back.\n\n"
    "## Decisions\n- SQLite with WAL.\n"
)
NOON = dt.datetime(2026, 11, 25, 11, 5, tzinfo=dt.UTC)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    running = MemoryService(tmp_path, HashingEmbedder(), clock=lambda: NOON)
    yield running
    running.close()


async def put(client, path: str = "MEMORY.md", content: str = MEMORY) -> dict:
    arguments = {"path": path, "content": content, "mode": "replace", "expected_hash": "absent"}
    return structured(await client.call_tool("memory_write", arguments))


async def get(client, heading: str, **more: object) -> dict:
    return structured(await client.call_tool("memory_get", {"path": "MEMORY.md", "heading": heading, **more}))


async def whole(client) -> str:
    return str(structured(await client.call_tool("memory_get", {"path": "MEMORY.md"}))["content"])


async def test_two_saves_of_one_topic_in_one_minute_are_each_read_by_the_heading_the_save_made(service):
    async with connect(service, ALICE) as client:
        for note in ("first", "second"):
            await client.call_tool("memory_write", {"content": f"{note} note", "topic": "deploy"})
        log = {"path": "memory/2026-11-25.md"}
        first = structured(await client.call_tool("memory_get", {**log, "heading": "11:05 — deploy"}))
        second = structured(await client.call_tool("memory_get", {**log, "heading": "11:05 — deploy (2)"}))
    assert first["content"] == "## 11:05 — deploy\n\nfirst note"
    assert second["content"] == "## 11:05 — deploy (2)\n\nsecond note"


async def test_get_by_heading_returns_the_section_with_its_subsections_line_range_and_hash(service):
    async with connect(service, ALICE) as client:
        await put(client)
        section = await get(client, "deploy")
        answer = await client.call_tool("memory_get", {"path": "MEMORY.md", "heading": "Deploy"})
    assert section["content"] == "## Deploy\nBlue-green behind HAProxy.\n\n### Rollback\nSwitch the backend back."
    assert (section["start_line"], section["end_line"], section["total_lines"]) == (3, 7, 10)
    assert section["heading"] == "Project memory > Deploy" and len(section["section_hash"]) == 64
    assert section["section_hash"] != section["hash"]
    assert text(answer).startswith("MEMORY.md section 'Project memory > Deploy' lines 3-7 of 10 (section_hash ")


async def test_get_of_a_missing_or_ambiguous_heading_is_an_error_naming_the_headings(service):
    async with connect(service, ALICE) as client:
        await put(client, content="# A\n## Notes\na\n# B\n## Notes\nb\n")
        missing = error(await client.call_tool("memory_get", {"path": "MEMORY.md", "heading": "Gotchas"}))
        ambiguous = error(await client.call_tool("memory_get", {"path": "MEMORY.md", "heading": "notes"}))
        chosen = await get(client, "B > Notes")
    assert "no heading 'Gotchas' in MEMORY.md; its headings are: 'A', 'A > Notes', 'B', 'B > Notes'" in missing
    assert "'A > Notes' (line 2), 'B > Notes' (line 5)" in ambiguous
    assert chosen["content"] == "## Notes\nb"


async def test_a_section_replace_with_its_hash_changes_only_that_section(service):
    async with connect(service, ALICE) as client:
        await put(client)
        deploy = await get(client, "Deploy")
        arguments = {"path": "MEMORY.md", "heading": "Deploy", "mode": "replace"}
        written = structured(
            await client.call_tool(
                "memory_write",
                {
                    **arguments,
                    "content": "Rolling deploys, one pod at a time.",
                    "expected_hash": deploy["section_hash"],
                },
            )
        )
        after = await whole(client)
        again = await get(client, "Deploy")
    assert after == MEMORY.replace(
        "Blue-green behind HAProxy.\n\n### Rollback\nSwitch the backend back.\n",
        "Rolling deploys, one pod at a time.\n",
    ).rstrip("\n")
    assert (written["start_line"], written["end_line"], written["heading"]) == (3, 4, "Project memory > Deploy")
    assert written["section_hash"] == again["section_hash"]


async def test_a_section_replace_with_a_stale_or_whole_file_hash_is_refused_and_changes_nothing(service):
    async with connect(service, ALICE) as client:
        file_hash = (await put(client))["hash"]
        deploy = await get(client, "Deploy")
        replace = {"path": "MEMORY.md", "heading": "Deploy", "mode": "replace", "content": "Rolling."}
        with_file_hash = error(await client.call_tool("memory_write", {**replace, "expected_hash": file_hash}))
        await client.call_tool(
            "memory_write", {"path": "MEMORY.md", "heading": "Deploy", "content": "Canary first."}
        )  # someone else's append
        stale = error(await client.call_tool("memory_write", {**replace, "expected_hash": deploy["section_hash"]}))
        created = error(await client.call_tool("memory_write", {**replace, "expected_hash": "absent"}))
        missing = error(
            await client.call_tool("memory_write", {**replace, "heading": "Gotchas", "expected_hash": file_hash})
        )
        after = await whole(client)
    assert "that is the whole file's hash: a section replace takes the section_hash from memory_get" in with_file_hash
    assert "section 'Deploy' of MEMORY.md has changed: expected_hash does not match; its current hash is" in stale
    assert "MEMORY.md already has a section 'Deploy'" in created
    assert "MEMORY.md has no section 'Gotchas'; pass 'absent' as expected_hash to create it" in missing
    assert "Rolling." not in after and "Canary first." in after and "## Decisions\n- SQLite with WAL." in after


async def test_replace_with_absent_creates_a_missing_section_and_replace_needs_a_section_hash(service):
    async with connect(service, ALICE) as client:
        await put(client)
        created = structured(
            await client.call_tool(
                "memory_write",
                {
                    "path": "MEMORY.md",
                    "heading": "Gotchas",
                    "mode": "replace",
                    "content": "CI is flaky.",
                    "expected_hash": "absent",
                },
            )
        )
        unguarded = error(
            await client.call_tool(
                "memory_write", {"path": "MEMORY.md", "heading": "Deploy", "mode": "replace", "content": "x"}
            )
        )
        after = await whole(client)
    assert after == MEMORY + "\n## Gotchas\n\nCI is flaky."
    assert created["heading"] == "Project memory > Gotchas"
    assert "replace needs expected_hash: the section's hash (section_hash from memory_get with heading)" in unguarded


async def test_an_append_under_a_heading_goes_before_its_subsections_and_a_missing_one_is_created_below_the_title(
    service,
):
    async with connect(service, ALICE) as client:
        await put(client)
        under = structured(
            await client.call_tool("memory_write", {"path": "MEMORY.md", "heading": "Deploy", "content": "Canary."})
        )
        new = structured(
            await client.call_tool("memory_write", {"path": "MEMORY.md", "heading": "Gotchas", "content": "Flaky CI."})
        )
        after = await whole(client)
    assert "## Deploy\nBlue-green behind HAProxy.\n\nCanary.\n\n### Rollback\n" in after
    assert after.endswith("## Decisions\n- SQLite with WAL.\n\n## Gotchas\n\nFlaky CI.")
    assert (under["start_line"], under["end_line"]) == (6, 6)
    assert new["heading"] == "Project memory > Gotchas"


async def test_a_heading_without_a_path_goes_to_todays_daily_log_as_a_timed_entry(service):
    async with connect(service, ALICE) as client:
        first = structured(
            await client.call_tool("memory_write", {"heading": "Decisions", "content": "Use uv.", "topic": "tooling"})
        )
        structured(await client.call_tool("memory_write", {"content": "Lunch."}))
        second = structured(await client.call_tool("memory_write", {"heading": "decisions", "content": "Drop Py3.10."}))
        log = structured(await client.call_tool("memory_get", {"path": first["path"]}))
    assert first["path"] == "memory/2026-11-25.md" and second["heading"] == "2026-11-25 > Decisions"
    assert log["content"] == (
        "# 2026-11-25\n\n## Decisions\n\n### 11:05 — tooling\n\nUse uv.\n\n### 11:05\n\nDrop Py3.10.\n\n"
        "## 11:05\n\nLunch."
    )


async def test_a_retried_section_write_with_the_same_key_writes_once(service):
    async with connect(service, ALICE) as client:
        await put(client)
        call = {"path": "MEMORY.md", "heading": "Decisions", "content": "- uv.", "idempotency_key": "k1"}
        first = structured(await client.call_tool("memory_write", call))
        again = structured(await client.call_tool("memory_write", call))
        other = error(await client.call_tool("memory_write", {**call, "heading": "Deploy"}))
        after = await whole(client)
    assert after.count("- uv.") == 1 and again["replayed"] is True and again["hash"] == first["hash"]
    assert "idempotency_key was already used for a different write" in other


async def test_an_append_under_a_heading_with_expected_hash_is_guarded_by_the_sections_hash(service):
    async with connect(service, ALICE) as client:
        file_hash = (await put(client))["hash"]
        decisions = await get(client, "Decisions")
        append = {"path": "MEMORY.md", "heading": "Decisions", "content": "- uv."}
        refused = error(await client.call_tool("memory_write", {**append, "expected_hash": file_hash}))
        written = structured(
            await client.call_tool("memory_write", {**append, "expected_hash": decisions["section_hash"]})
        )
        stale = error(await client.call_tool("memory_write", {**append, "expected_hash": decisions["section_hash"]}))
        after = await whole(client)
    assert "that is the whole file's hash" in refused and "has changed" in stale
    assert after.count("- uv.") == 1 and written["heading"] == "Project memory > Decisions"


async def test_a_write_into_a_file_ending_in_an_open_code_fence_is_a_clear_error_that_writes_nothing(service):
    async with connect(service, ALICE) as client:
        base = (await put(client))["hash"]
        cut_short = "# Notes\n\n```sh\nmake deploy"
        _, [pushed] = SyncService(service).push(
            CallerContext.from_user(ALICE), [PushChange("MEMORY.md", base, cut_short)]
        )
        assert pushed.status == "applied"  # a laptop's file: the fence rule is memory_write's
        for append in ({"heading": "Decisions"}, {}, {"topic": "deploy"}):  # under a heading, or at the end
            refused = error(await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "x", **append}))
            assert "never closed" in refused and "Close the fence" in refused
        assert await whole(client) == cut_short


async def test_a_write_whose_content_leaves_a_code_fence_open_is_refused_and_one_that_closes_it_is_written(service):
    async with connect(service, ALICE) as client:
        await put(client)
        unclosed = [
            {"content": "Snippet:\n```python\nprint('hi')", "topic": "snippet"},  # today's daily log
            {"path": "MEMORY.md", "content": "~~~\nunclosed"},
            {"path": "MEMORY.md", "content": "~~~\nunclosed", "heading": "Deploy"},
            {"path": "MEMORY.md", "content": "```\nunclosed", "heading": "New"},
        ]
        for arguments in unclosed:
            refused = error(await client.call_tool("memory_write", arguments))
            assert "never closes it" in refused and "nothing was written" in refused
        assert await whole(client) == MEMORY.rstrip("\n")
        assert structured(await client.call_tool("memory_list", {}))["total"] == 1
        closed = "~~~\nunclosed\n~~~"
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": "```sh\nmake\n```", "topic": "t"})
        await client.call_tool("memory_write", {"path": "MEMORY.md", "content": closed, "heading": "Deploy"})
        labelled = {"content": "Chose Postgres", "topic": "queue", "tags": ["database"], "category": "decision"}
        await client.call_tool("memory_write", {"content": "```python\nprint('hi')\n```", "topic": "snippet"})
        entry = structured(await client.call_tool("memory_write", labelled))
        listed = structured(await client.call_tool("memory_list", {"tags": ["database"]}))
    assert entry["start_line"] > 3 and [f["path"] for f in listed["files"]] == [entry["path"]]
