"""Session transcripts on the server: `/sync/sessions` uploads into the caller's own folder, search by source,
read-only through the tools, never pulled by laptops. In process: the inner app with the caller the channel would
have authenticated, the real mirror and index (hashing embedder)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest

from channel.authz import Access, ChannelUser
from server.index.errors import InvalidArgumentError
from server.memory.service import CallerContext, MemoryService
from tests.inner_app import inner_clients
from tests.waits import long_poll_waiting, set_within

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

INDEX = "team"
DAY = "2026-11-23"
SESSION = "3f2a9c1e-0b7d-4e55-9a61-2c8f0d4b7e10"


@pytest.fixture
def service(hashing_service: MemoryService) -> MemoryService:
    return hashing_service


def user(name: str, access: Access = "rw") -> ChannelUser:
    return ChannelUser(name, f"SHA256:{name}", {INDEX: access}, INDEX, access)


def caller(name: str) -> CallerContext:
    return CallerContext.from_user(user(name))


@pytest.fixture
async def laptops(service: MemoryService) -> AsyncIterator[dict[str, httpx2.AsyncClient]]:
    async with inner_clients(service, user("alice"), user("bob"), user("reader", "r")) as clients:
        yield clients


def transcript(title: str, *lines: str, part: int = 1) -> str:
    head = f"# Session {title} ({DAY})" + (f" (part {part})" if part > 1 else "")
    return "\n\n".join([head, *lines]) + "\n"


async def upload(client: httpx2.AsyncClient, count: int, *parts: tuple[int, str], session: str = SESSION) -> Any:
    body = {"session": session, "day": DAY, "count": count, "parts": [{"number": n, "content": c} for n, c in parts]}
    response = await client.post("/sync/sessions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def paths(service: MemoryService, query: str, sources: list[str] | None = None) -> list[str]:
    return [hit.path for hit in service.search(caller("bob"), query, sources=sources).hits]


async def test_uploaded_parts_land_in_the_callers_folder_and_are_searchable_as_sessions(laptops, service):
    first = transcript("flaky login test", "## 2026-11-23 10:02 UTC · user", "Why does the login test flake?")
    second = transcript(
        "flaky login test", "## 2026-11-23 10:40 UTC · assistant", "The retry loop races the token refresh.", part=2
    )
    answer = await upload(laptops["alice"], 2, (1, first), (2, second))
    expected = [f"sessions/alice/{DAY}-{SESSION}.md", f"sessions/alice/{DAY}-{SESSION}.2.md"]
    assert [r["path"] for r in answer["results"]] == expected and answer["removed"] == []
    assert paths(service, "retry loop races the token refresh", ["sessions"])[0] == expected[1]
    assert paths(service, "retry loop races the token refresh", ["memory"]) == []
    [hit] = [h for h in service.search(caller("bob"), "token refresh race", sources=["sessions"]).hits][:1]
    assert hit.source == "sessions" and "10:40 UTC" in hit.heading
    status = service.status(caller("bob"))
    assert status.files.get("sessions") == 2 and status.chunks.get("sessions", 0) >= 2
    got = service.get(caller("bob"), expected[0])
    assert got.exists and got.content == first.rstrip("\n") and got.updated_by == "alice"
    listed = {f.path: f.source for f in service.list(caller("bob")).files}
    assert listed == {expected[0]: "sessions", expected[1]: "sessions"}


async def test_a_shorter_upload_replaces_parts_and_drops_those_past_the_count(laptops, service):
    await upload(laptops["alice"], 3, *((n, transcript("t", f"part {n} text", part=n)) for n in (1, 2, 3)))
    answer = await upload(laptops["alice"], 2, (2, transcript("t", "part two rewritten", part=2)))
    assert answer["removed"] == [f"sessions/alice/{DAY}-{SESSION}.3.md"]
    files = sorted(f.path for f in service.list(caller("alice")).files)
    assert files == [f"sessions/alice/{DAY}-{SESSION}.2.md", f"sessions/alice/{DAY}-{SESSION}.md"]
    assert "part two rewritten" in service.get(caller("alice"), files[0]).content


async def test_parts_past_a_smaller_count_are_dropped_even_when_the_stored_parts_have_a_gap(laptops, service):
    await upload(laptops["alice"], 5, (1, transcript("t", "part one text")), (5, transcript("t", "wombat", part=5)))
    answer = await upload(laptops["alice"], 1)
    assert answer["removed"] == [f"sessions/alice/{DAY}-{SESSION}.5.md"]
    assert [f.path for f in service.list(caller("alice")).files] == [f"sessions/alice/{DAY}-{SESSION}.md"]
    assert f"sessions/alice/{DAY}-{SESSION}.5.md" not in paths(service, "wombat", ["sessions"])


async def test_two_laptops_keep_their_transcripts_apart_and_both_are_searchable(laptops, service):
    await upload(laptops["alice"], 1, (1, transcript("a", "Alice asked about the kafka consumer lag.")))
    await upload(laptops["bob"], 1, (1, transcript("b", "Bob asked about the nginx buffering of streams.")))
    assert paths(service, "kafka consumer lag", ["sessions"])[0].startswith("sessions/alice/")
    assert paths(service, "nginx buffering streams", ["sessions"])[0].startswith("sessions/bob/")


async def test_transcripts_are_never_pulled_by_laptops_and_never_written_through_the_tools(laptops, service):
    await upload(laptops["alice"], 1, (1, transcript("t", "secret plans")))
    pulled = (await laptops["bob"].get("/sync/changes", params={"since": 0})).json()
    assert pulled["changes"] == [] and pulled["next"] == pulled["revision"] == 1
    path = f"sessions/alice/{DAY}-{SESSION}.md"
    with pytest.raises(InvalidArgumentError, match="read-only"):
        service.write(caller("alice"), "edited", path=path, mode="replace", expected_hash="absent")
    with pytest.raises(InvalidArgumentError, match="read-only"):
        service.delete(caller("alice"), path)
    response = await laptops["alice"].post(
        "/sync/push", json={"changes": [{"path": path, "base": None, "content": "forged\n"}]}
    )
    [result] = response.json()["results"]
    assert result["status"] == "rejected" and "read-only" in result["message"]
    assert service.get(caller("bob"), path).content == "# Session t (2026-11-23)\n\nsecret plans"


async def test_a_long_poll_is_not_answered_by_transcript_uploads_alone(laptops, service):
    answers: list[dict[str, Any]] = []

    async def poll() -> None:
        response = await laptops["bob"].get("/sync/changes", params={"since": 0, "wait": 1.5})
        answers.append(response.json())

    started = anyio.current_time()
    with long_poll_waiting() as waiting:
        async with anyio.create_task_group() as group:
            group.start_soon(poll)
            await set_within(waiting, "the long-poll")
            await upload(laptops["alice"], 1, (1, transcript("t", "noise for the poll")))
    assert answers[0]["changes"] == [] and anyio.current_time() - started >= 1.5


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"session": "../etc", "day": DAY, "count": 1, "parts": []}, "session must be"),
        ({"session": SESSION, "day": "2026-13-40", "count": 1, "parts": []}, "day must be"),
        ({"session": SESSION, "day": DAY, "count": 0, "parts": []}, "count must be"),
        ({"session": SESSION, "day": DAY, "count": 1, "parts": [{"number": 2, "content": "x"}]}, "from 1 to count"),
        (
            {"session": SESSION, "day": DAY, "count": 2, "parts": [{"number": 1, "content": "x"}] * 2},
            "appears twice",
        ),
        ({"session": SESSION, "day": DAY, "count": 1, "parts": [{"number": 1, "content": " "}]}, "non-empty"),
        ({"session": SESSION, "day": DAY, "count": 1, "parts": [], "path": "memory/x.md"}, "unknown field"),
        ([1, 2], "the body must be"),
    ],
)
async def test_a_malformed_upload_is_refused_whole(laptops, service, body, message):
    response = await laptops["alice"].post("/sync/sessions", json=body)
    assert response.status_code == 400 and message in response.json()["error"]["message"]
    assert service.list(caller("alice")).files == []


async def test_an_oversized_part_is_refused_and_a_read_only_caller_may_not_upload(laptops, service):
    huge = "x" * (service.settings.scan.max_file_bytes + 1)
    body = {"session": SESSION, "day": DAY, "count": 1, "parts": [{"number": 1, "content": huge}]}
    response = await laptops["alice"].post("/sync/sessions", json=body)
    assert response.status_code == 400 and "split it into more parts" in response.text
    body["parts"] = [{"number": 1, "content": "fine"}]
    response = await laptops["reader"].post("/sync/sessions", json=body)
    assert response.status_code == 403
    assert service.list(caller("alice")).files == []


def stored(service: MemoryService) -> dict[str, str]:
    me = caller("alice")
    return {f.path: service.get(me, f.path).content for f in service.list(me).files}


@pytest.mark.parametrize(("bad", "message"), [("bad\x00part", "NUL"), ("bad\ud800part", "lone surrogates")])
async def test_an_upload_refused_for_one_part_changes_none_of_the_others(laptops, service, bad, message):
    await upload(laptops["alice"], 2, (1, transcript("old", "zebra giraffe")), (2, transcript("old", "two", part=2)))
    before = stored(service)
    parts = [{"number": 1, "content": transcript("new", "kangaroo koala")}, {"number": 2, "content": bad}]
    body = json.dumps({"session": SESSION, "day": DAY, "count": 2, "parts": parts})  # escapes the surrogate
    response = await laptops["alice"].post(
        "/sync/sessions", content=body.encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 400 and "parts[1].content" in response.text and message in response.text
    assert stored(service) == before
    assert paths(service, "kangaroo koala", ["sessions"]) == []


async def test_a_part_that_redaction_takes_over_the_cap_is_refused_by_name_before_anything_is_stored(laptops, service):
    service.redact_writes = True
    cap = service.settings.scan.max_file_bytes
    await upload(laptops["alice"], 2, (1, transcript("old", "one")), (2, transcript("old", "two", part=2)))
    before = stored(service)
    grows = "# two\npassword=abc\n" + "y" * (cap - 25)  # within the cap as sent, over it once redacted
    body = {"session": SESSION, "day": DAY, "count": 2, "parts": [
        {"number": 1, "content": transcript("new", "one")}, {"number": 2, "content": grows},
    ]}  # fmt: skip
    response = await laptops["alice"].post("/sync/sessions", json=body)
    assert response.status_code == 400 and "parts[1] (part 2)" in response.text and "redacted" in response.text
    assert stored(service) == before


async def test_a_session_id_holding_a_secret_is_refused_without_echoing_it_and_nothing_is_stored(laptops, service):
    service.redact_writes = True
    secret = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"  # a GitHub token's shape fits a session id's characters
    body = {"session": secret, "day": DAY, "count": 1, "parts": [{"number": 1, "content": transcript("t", "one")}]}
    response = await laptops["alice"].post("/sync/sessions", json=body)
    assert response.status_code == 400 and "github-token" in response.text and secret not in response.text
    assert service.list(caller("alice")).files == []


async def test_memory_list_pages_through_transcripts_with_the_cursor_it_hands_out(laptops, service):
    await upload(laptops["alice"], 3, *((n, transcript("t", f"part {n} text", part=n)) for n in (1, 2, 3)))
    service.write(caller("alice"), "a note", path="memory/a.md")
    shown: list[str] = []
    cursor = None
    for _ in range(4):
        page = service.list(caller("alice"), limit=2, cursor=cursor)
        shown += [f.path for f in page.files]
        if (cursor := page.next_cursor) is None:
            break
    assert shown == sorted(f.path for f in service.list(caller("alice")).files) and len(shown) == 4
    assert shown[1].startswith("sessions/") and cursor is None  # the first page ended on a transcript
