"""The server's `/sync/changes` and `/sync/push`, in process: the inner app with the caller the channel would have
authenticated, the real mirror and index (hashing embedder), and the protocol's table of push rules."""

from __future__ import annotations

import datetime as dt
import functools
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from channel.authz import Access, ChannelUser
from server.errors import StorageFullError
from server.index.embeddings.base import InputKind, Vectors
from server.index.engine_settings import EngineSettings
from server.index.scan import ScanConfig
from server.memory.service import CallerContext, MemoryService
from server.mirror.mirror import sha256_hex
from server.sync import service as sync_service
from server.sync.service import SyncService
from syncproto.messages import PushChange
from syncproto.wire import MAX_FILE_BYTES, MAX_PUSH_BYTES, MAX_PUSH_CHANGES
from tests.fakes.embedder import HashingEmbedder
from tests.inner_app import inner_clients
from tests.mcp_support import plant
from tests.postgres_support import ON_SERVER_DISK
from tests.waits import long_poll_waiting, set_within

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("backend")]  # on SQLite and on PostgreSQL

INDEX = "team"
WAIT = 10.0


@pytest.fixture
def service(hashing_service: MemoryService) -> MemoryService:
    return hashing_service


def user(name: str, access: Access = "rw", index: str | None = INDEX) -> ChannelUser:
    return ChannelUser(name, f"SHA256:{name}", {INDEX: access}, index, access if index else None)


@pytest.fixture
async def laptops(service: MemoryService) -> AsyncIterator[dict[str, httpx2.AsyncClient]]:
    """Clients of the inner app as alice, bob (both rw) and reader (r), as the channel would let them in."""
    async with inner_clients(
        service, user("alice"), user("bob"), user("reader", "r"), user("lost", index=None)
    ) as clients:
        yield clients


async def push(client: httpx2.AsyncClient, *changes: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.post("/sync/push", json={"changes": list(changes)})
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


async def pull(client: httpx2.AsyncClient, since: int = 0, **params: Any) -> dict[str, Any]:
    response = await client.get("/sync/changes", params={"since": since, **params})
    assert response.status_code == 200, response.text
    return dict(response.json())


def h(text: str) -> str:
    return sha256_hex(text.encode())


def caller(name: str) -> CallerContext:
    return CallerContext.from_user(user(name))


LOG = "memory/2026-11-23.md"
LIMITS = {"max_file_bytes": 2 * 1024 * 1024, "max_changes": 500}
BASE = "# 2026-11-23\n\n## 09:00 — start\nkick-off\n"


async def test_a_pushed_file_is_applied_listed_with_its_content_and_searchable_when_the_push_returns(laptops, service):
    [result] = await push(
        laptops["alice"], {"path": "memory/deploy.md", "base": None, "content": "Blue-green deploy.\n"}
    )
    assert result == {"path": "memory/deploy.md", "status": "applied", "hash": h("Blue-green deploy.\n"), "revision": 1}
    answer = await pull(laptops["bob"])
    assert (answer["revision"], answer["next"], answer["more"], answer["reset"]) == (1, 1, False, False)
    [change] = answer["changes"]
    assert change["content"] == "Blue-green deploy.\n" and change["updated_by"] == "alice"
    hits = service.search(caller("bob"), "blue-green deploy").hits
    assert hits and hits[0].path == "memory/deploy.md"


async def test_two_laptops_appending_to_the_same_daily_log_both_keep_their_entries(laptops):
    await push(laptops["alice"], {"path": LOG, "base": None, "content": BASE})
    alice = BASE + "\n## 10:00 — alice\nalice's line\n"
    bob = BASE + "\n## 10:01 — bob\nbob's line\n"
    [first] = await push(laptops["alice"], {"path": LOG, "base": h(BASE), "content": alice})
    [second] = await push(laptops["bob"], {"path": LOG, "base": h(BASE), "content": bob})
    assert first["status"] == "applied"
    assert second["status"] == "merged"
    assert second["content"] == BASE + "\n## 10:00 — alice\nalice's line\n\n## 10:01 — bob\nbob's line\n"
    assert second["hash"] == h(second["content"])
    [again] = await push(laptops["bob"], {"path": LOG, "base": h(BASE), "content": bob})  # a retried push
    assert again["status"] in ("unchanged", "merged") and again["hash"] == second["hash"]


async def test_two_laptops_creating_the_same_daily_log_keep_the_title_once_and_both_entries(laptops):
    alice = "# 2026-11-23\n\n## 10:00 — a\nfrom alice\n"
    bob = "# 2026-11-23\n\n## 10:02 — b\nfrom bob\n"
    await push(laptops["alice"], {"path": LOG, "base": None, "content": alice})
    [result] = await push(laptops["bob"], {"path": LOG, "base": None, "content": bob})
    assert result["status"] == "merged"
    assert result["content"].count("# 2026-11-23\n") == 1
    assert "from alice" in result["content"] and "from bob" in result["content"]


async def test_an_old_copy_pushed_with_no_base_by_a_laptop_that_lost_its_sync_state_gives_it_the_newer_text(laptops):
    old = "# Notes\n\nuse postgres 15\ndeploy on fridays\nowner: bob\n"
    new = old.replace("postgres 15", "postgres 16")
    await push(laptops["alice"], {"path": "memory/notes.md", "base": None, "content": old})
    await push(laptops["bob"], {"path": "memory/notes.md", "base": h(old), "content": new})

    [result] = await push(laptops["alice"], {"path": "memory/notes.md", "base": None, "content": old})

    assert (result["status"], result["content"], result["hash"]) == ("merged", new, h(new))
    [change] = (await pull(laptops["bob"]))["changes"]
    assert (change["path"], change["content"]) == ("memory/notes.md", new)


async def test_a_text_pushed_with_no_base_that_only_another_path_held_is_merged_as_unrelated(laptops):
    old = "# Notes\n\nuse postgres 15\n"
    new = "# Notes\n\nuse postgres 16\n"
    await push(laptops["alice"], {"path": "memory/notes.md", "base": None, "content": old})
    await push(laptops["bob"], {"path": "memory/notes.md", "base": h(old), "content": new})
    await push(laptops["bob"], {"path": "memory/copy.md", "base": None, "content": new})

    [result] = await push(laptops["alice"], {"path": "memory/copy.md", "base": None, "content": old})

    assert (result["status"], result["content"]) == ("merged", "# Notes\n\nuse postgres 16\nuse postgres 15\n")


async def test_conflicting_replaces_keep_the_servers_text_and_a_conflict_copy_with_the_other(laptops, service):
    service.clock = lambda: dt.datetime(2026, 11, 23, 10, 15, tzinfo=dt.UTC)
    await push(laptops["alice"], {"path": "memory/db.md", "base": None, "content": "We use SQLite.\n"})
    await push(laptops["alice"], {"path": "memory/db.md", "base": h("We use SQLite.\n"), "content": "Postgres.\n"})
    [result] = await push(
        laptops["bob"], {"path": "memory/db.md", "base": h("We use SQLite.\n"), "content": "DuckDB.\n"}
    )
    assert result["status"] == "conflict"
    assert (result["hash"], result["content"]) == (h("Postgres.\n"), "Postgres.\n")
    assert result["conflict_path"] == "memory/db.conflict-bob-20261123T101500Z.md"
    changes = {c["path"]: c for c in (await pull(laptops["alice"]))["changes"]}
    assert changes["memory/db.md"]["content"] == "Postgres.\n"
    assert changes[result["conflict_path"]]["content"] == "DuckDB.\n"
    assert changes[result["conflict_path"]]["revision"] == result["conflict_revision"]
    await push(laptops["bob"], {"path": "MEMORY.md", "base": None, "content": "x\n"})
    await push(laptops["alice"], {"path": "MEMORY.md", "base": h("x\n"), "content": "alice\n"})
    [other] = await push(laptops["bob"], {"path": "MEMORY.md", "base": h("x\n"), "content": "bob\n"})
    assert other["conflict_path"] == "memory/MEMORY.conflict-bob-20261123T101500Z.md"  # root files' copies
    [same_second] = await push(laptops["bob"], {"path": "MEMORY.md", "base": h("x\n"), "content": "bob 2\n"})
    assert same_second["conflict_path"] == "memory/MEMORY.conflict-bob-20261123T101500Z-2.md"


async def test_a_push_retried_after_a_merge_of_neighbouring_lines_gets_the_merge_again_and_writes_nothing(laptops):
    base = "a\nb\nc\n"
    await push(laptops["alice"], {"path": "memory/n.md", "base": None, "content": base})
    await push(laptops["alice"], {"path": "memory/n.md", "base": h(base), "content": "A\nb\nc\n"})
    bob = {"path": "memory/n.md", "base": h(base), "content": "a\nB\nc\n"}
    [first] = await push(laptops["bob"], bob)
    assert (first["status"], first["content"]) == ("merged", "A\nB\nc\n")
    revision = (await pull(laptops["alice"]))["revision"]
    [again] = await push(laptops["bob"], bob)  # the answer was lost: merging again would meet its own merge
    assert {k: again[k] for k in ("status", "hash", "revision", "content")} == {
        k: first[k] for k in ("status", "hash", "revision", "content")
    }
    answer = await pull(laptops["alice"])
    assert answer["revision"] == revision and [c["path"] for c in answer["changes"]] == ["memory/n.md"]


async def test_a_push_retried_after_a_conflict_names_the_same_copy_and_makes_no_other(laptops, service):
    service.clock = lambda: dt.datetime(2026, 11, 23, 10, 15, tzinfo=dt.UTC)
    await push(laptops["alice"], {"path": "memory/db.md", "base": None, "content": "SQLite.\n"})
    await push(laptops["alice"], {"path": "memory/db.md", "base": h("SQLite.\n"), "content": "Postgres.\n"})
    bob = {"path": "memory/db.md", "base": h("SQLite.\n"), "content": "DuckDB.\n"}
    [first] = await push(laptops["bob"], bob)
    [again] = await push(laptops["bob"], bob)
    assert again == first and first["conflict_path"] == "memory/db.conflict-bob-20261123T101500Z.md"
    assert sorted(c["path"] for c in (await pull(laptops["alice"]))["changes"]) == [
        "memory/db.conflict-bob-20261123T101500Z.md",
        "memory/db.md",
    ]
    await push(laptops["alice"], {"path": first["conflict_path"], "base": h("DuckDB.\n"), "delete": True})
    [after_cleanup] = await push(laptops["bob"], bob)  # the copy was dealt with: the text is kept again, not lost
    assert after_cleanup["conflict_path"] == first["conflict_path"]
    assert after_cleanup["conflict_revision"] > first["conflict_revision"]
    copy = {c["path"]: c for c in (await pull(laptops["alice"]))["changes"]}[first["conflict_path"]]
    assert copy["content"] == "DuckDB.\n"


async def test_a_delete_with_the_current_base_leaves_a_tombstone_and_a_stale_delete_keeps_the_newer_text(laptops):
    await push(laptops["alice"], {"path": "memory/a.md", "base": None, "content": "one\n"})
    await push(laptops["alice"], {"path": "memory/b.md", "base": None, "content": "two\n"})
    await push(laptops["alice"], {"path": "memory/b.md", "base": h("two\n"), "content": "two, edited\n"})
    gone, kept = await push(
        laptops["bob"],
        {"path": "memory/a.md", "base": h("one\n"), "delete": True},
        {"path": "memory/b.md", "base": h("two\n"), "delete": True},
    )
    assert (gone["status"], gone["hash"]) == ("deleted", None)
    assert (kept["status"], kept["content"]) == ("kept", "two, edited\n")
    answer = await pull(laptops["alice"], since=3)
    assert [(c["path"], c["hash"], "content" in c) for c in answer["changes"]] == [("memory/a.md", None, False)]
    [again] = await push(laptops["bob"], {"path": "memory/a.md", "base": h("one\n"), "delete": True})
    assert again["status"] == "deleted"


async def test_an_edit_of_a_file_deleted_on_the_server_brings_it_back(laptops):
    await push(laptops["alice"], {"path": "memory/a.md", "base": None, "content": "one\n"})
    await push(laptops["alice"], {"path": "memory/a.md", "base": h("one\n"), "delete": True})
    [result] = await push(laptops["bob"], {"path": "memory/a.md", "base": h("one\n"), "content": "one, edited\n"})
    assert (result["status"], result["hash"]) == ("applied", h("one, edited\n"))


async def test_a_merge_base_the_server_no_longer_knows_ends_in_a_conflict_copy_not_a_loss(laptops):
    await push(laptops["alice"], {"path": "memory/a.md", "base": None, "content": "server\n"})
    [result] = await push(laptops["bob"], {"path": "memory/a.md", "base": "0" * 64, "content": "laptop\n"})
    assert result["status"] == "conflict" and result["content"] == "server\n"
    assert (await pull(laptops["alice"], since=1))["changes"][0]["content"] == "laptop\n"


async def test_a_bad_path_or_text_is_rejected_alone_and_the_rest_of_the_push_is_applied(laptops):
    results = await push(
        laptops["alice"],
        {"path": "memory/../etc/passwd.md", "base": None, "content": "x"},
        {"path": "notes.txt", "base": None, "content": "x"},
        {"path": "memory/nul.md", "base": None, "content": "a\x00b"},
        {"path": "memory/fine.md", "base": None, "content": "fine\n"},
    )
    assert [r["status"] for r in results] == ["rejected", "rejected", "rejected", "applied"]
    assert all(r["message"] for r in results[:3])
    assert [c["path"] for c in (await pull(laptops["bob"]))["changes"]] == ["memory/fine.md"]


async def test_a_pushed_path_that_is_no_unicode_text_is_rejected_alone_and_the_answer_still_arrives(laptops):
    changes = [
        {"path": "memory/\ud800.md", "base": None, "content": "x"},  # a lone surrogate: no client of ours sends it
        {"path": "memory/ok.md", "base": None, "content": "ok\n"},
    ]
    response = await laptops["alice"].post("/sync/push", content=json.dumps({"changes": changes}).encode())
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [(r["path"], r["status"]) for r in results] == [
        ("memory/\ud800.md", "rejected"),
        ("memory/ok.md", "applied"),
    ]
    refused = await laptops["alice"].post("/sync/sessions", content=b'{"\\ud800": 1}')
    assert refused.status_code == 400 and "unknown field" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", '{"changes"'),
        (b'{"changes": {}}', "must be a list"),
        (b'{"changes": [{"path": "memory/a.md", "base": "xyz", "content": ""}]}', "sha256"),
        (b'{"changes": [{"path": "memory/a.md", "base": null}]}', "content must be a string"),
        (b'{"changes": [{"path": "memory/a.md", "base": null, "delete": true, "content": ""}]}', "one or the other"),
        (b'{"changes": [{"path": "memory/a.md", "base": null, "content": "", "mode": 1}]}', "unknown field"),
        (
            json.dumps({"changes": [{"path": "memory/a.md", "base": None, "content": ""}] * 2}).encode(),
            "appears twice",
        ),
        (
            json.dumps(
                {"changes": [{"path": f"memory/{n}.md", "base": None, "content": ""} for n in range(101)]}
            ).encode(),
            f"at most {MAX_PUSH_CHANGES}",
        ),
    ],
)
async def test_a_malformed_push_is_refused_whole_with_a_clear_message(laptops, body, message):
    response = await laptops["alice"].post("/sync/push", content=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_request"
    assert message in response.json()["error"]["message"]
    assert (await pull(laptops["bob"]))["changes"] == []


async def test_a_push_over_the_size_limit_is_refused_with_413(laptops):
    big = json.dumps({"changes": [{"path": "memory/a.md", "base": None, "content": "x" * MAX_PUSH_BYTES}]})
    response = await laptops["alice"].post("/sync/push", content=big.encode())
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"


# 8 MiB of `[]`: json.loads takes seconds over it, holding the interpreter, so no other caller is answered meanwhile.
TINY_VALUES = b'{"changes":[' + b"[]," * ((MAX_PUSH_BYTES - 20) // 3) + b"[]]}"


@pytest.fixture
def parsed_lengths(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every text json.loads is given during the test (the real json.loads parses it)."""
    lengths: list[int] = []
    loads = json.loads

    def observed(text: str | bytes, *args: Any, **kwargs: Any) -> Any:
        lengths.append(len(text))
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", observed)
    return lengths


@pytest.mark.parametrize("endpoint", ["/sync/push", "/sync/sessions"])
async def test_a_read_only_callers_body_of_millions_of_tiny_values_is_refused_with_403_unparsed(
    laptops, parsed_lengths, endpoint
):
    response = await laptops["reader"].post(endpoint, content=TINY_VALUES)
    assert response.status_code == 403 and "only read" in response.json()["error"]["message"]
    assert max(parsed_lengths) < len(TINY_VALUES) // 2  # only the answer was parsed


async def test_a_body_of_millions_of_tiny_values_is_refused_fast_unparsed_and_a_push_of_long_texts_is_not(
    laptops, parsed_lengths
):
    started = time.perf_counter()
    response = await laptops["alice"].post("/sync/push", content=TINY_VALUES)
    elapsed = time.perf_counter() - started
    assert response.status_code == 400 and "JSON values" in response.json()["error"]["message"]
    assert max(parsed_lengths) < len(TINY_VALUES) // 2
    assert elapsed < 1.5  # json.loads of it alone took 2 s; the refusal, tens of milliseconds
    awkward = 'a, [b], {c: "d"}, \\"e\\" \\\\, "[{,\n' * 5_000  # text a body's count must not take for values
    changes = [{"path": f"memory/{n}.md", "base": None, "content": f"{n}: {awkward}"} for n in range(3)]
    assert [r["status"] for r in await push(laptops["alice"], *changes)] == ["applied"] * 3


@pytest.mark.parametrize("query", [{"since": "-1"}, {"since": "x"}, {"wait": "31"}, {"wait": "nan"}, {"wait": "x"}])
async def test_bad_pull_parameters_are_refused(laptops, query):
    response = await laptops["alice"].get("/sync/changes", params=query)
    assert response.status_code == 400 and response.json()["error"]["code"] == "bad_request"


async def test_a_read_only_caller_may_pull_but_not_push_and_a_caller_without_an_index_may_do_neither(laptops):
    await push(laptops["alice"], {"path": "memory/a.md", "base": None, "content": "one\n"})
    refused = await laptops["reader"].post(
        "/sync/push", json={"changes": [{"path": "memory/a.md", "base": None, "content": "mine"}]}
    )
    assert refused.status_code == 403 and "only read" in refused.json()["error"]["message"]
    assert [c["path"] for c in (await pull(laptops["reader"]))["changes"]] == ["memory/a.md"]
    for call in (laptops["lost"].get("/sync/changes"), laptops["lost"].post("/sync/push", json={"changes": []})):
        assert (await call).status_code == 403


async def long_poll_while(client: httpx2.AsyncClient, action: Callable[[], Awaitable[object]]) -> dict[str, Any]:
    """Bob's answer to a long-poll (from revision 0) that `action` runs during; well before the poll's own end."""
    answers: list[dict[str, Any]] = []

    async def wait_for_change() -> None:
        answers.append(await pull(client, since=0, wait=WAIT))

    with anyio.fail_after(WAIT / 2), long_poll_waiting() as waiting:
        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_change)
            await set_within(waiting, "the long-poll")
            await action()
    return answers[0]


async def test_a_long_poll_returns_as_soon_as_another_laptop_writes_and_otherwise_after_the_wait(laptops, service):
    def write() -> object:
        return service.write(caller("alice"), "an MCP write", path="memory/x.md")

    answers = [await long_poll_while(laptops["bob"], lambda: anyio.to_thread.run_sync(write))]
    assert [c["path"] for c in answers[0]["changes"]] == ["memory/x.md"]
    started = anyio.current_time()
    quiet = await pull(laptops["bob"], since=answers[0]["next"], wait=0.3)
    assert quiet["changes"] == [] and quiet["next"] == answers[0]["next"]
    assert anyio.current_time() - started >= 0.3


async def test_idle_long_polls_share_one_look_at_the_servers_disk_a_second(laptops, service, monkeypatch):
    mirror = service.open_index(caller("reader")).mirror
    walks: list[float] = []
    walk = mirror.reconcile_all

    def counted() -> Any:
        walks.append(time.monotonic())
        return walk()

    monkeypatch.setattr(mirror, "reconcile_all", counted)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as group:
            for _ in range(16):  # each looks when it starts and when its wait ends: 32 walks of every file before
                group.start_soon(functools.partial(pull, laptops["reader"], wait=2))
    assert 1 <= len(walks) <= 3


async def test_a_push_being_scanned_for_secrets_does_not_hold_up_another_laptops_pull(laptops, service, monkeypatch):
    assert service.redact_writes
    scanning, release = threading.Event(), threading.Event()
    scan = sync_service.refuse_secrets

    def slow_scan(path: str, text: str) -> None:  # a scan of a few MiB takes seconds
        scanning.set()
        release.wait(WAIT)
        scan(path, text)

    monkeypatch.setattr(sync_service, "refuse_secrets", slow_scan)
    token = "ghp_" + "Zx8Yw7Vu6Ts5" * 3  # built here so no key-shaped literal sits in the repo
    results: list[dict[str, Any]] = []
    pulled = anyio.Event()

    async def pushing() -> None:
        secret = {"path": "memory/keys.md", "base": None, "content": f"token {token}\n"}
        results.extend(await push(laptops["alice"], secret, {"path": "memory/ok.md", "base": None, "content": "ok\n"}))

    async def pulling() -> None:
        await pull(laptops["bob"])
        pulled.set()

    with anyio.fail_after(2 * WAIT):
        async with anyio.create_task_group() as group:
            group.start_soon(pushing)
            await set_within(scanning, "the secret scan")
            group.start_soon(pulling)
            with anyio.move_on_after(WAIT / 2):
                await pulled.wait()
            answered_during_the_scan = pulled.is_set()
            release.set()
    assert answered_during_the_scan
    assert [r["status"] for r in results] == ["rejected", "applied"]
    assert "github-token" in results[0]["message"] and token not in results[0]["message"]


class SlowEmbedder(HashingEmbedder):
    """Documents take a while to embed, so a file is written well before it is searchable."""

    def embed(self, texts: Sequence[str], *, kind: InputKind = "document") -> Vectors:
        if kind == "document":
            time.sleep(0.5)
        return super().embed(texts, kind=kind)


async def test_a_long_poll_woken_by_a_push_finds_the_pushed_file_already_searchable(tmp_path: Path) -> None:
    slow = MemoryService(tmp_path / "slow", SlowEmbedder())
    woken: list[list[str]] = []
    try:
        async with inner_clients(slow, user("alice"), user("bob")) as clients:

            async def wait_then_search() -> None:
                answer = await pull(clients["bob"], since=0, wait=WAIT)
                hits = await anyio.to_thread.run_sync(lambda: slow.search(caller("bob"), "canary deploy").hits)
                woken.append([c["path"] for c in answer["changes"]] + [hit.path for hit in hits])

            with anyio.fail_after(WAIT / 2), long_poll_waiting() as waiting:
                async with anyio.create_task_group() as group:
                    group.start_soon(wait_then_search)
                    await set_within(waiting, "the long-poll")
                    canary = {"path": "memory/canary.md", "base": None, "content": "Canary deploy first.\n"}
                    await push(clients["alice"], canary)
        assert woken == [["memory/canary.md", "memory/canary.md"]]
    finally:
        slow.close()


async def test_a_long_poll_answers_at_once_when_the_server_starts_stopping(laptops, service):
    async def stopping() -> None:
        service.stopping()  # what the server's uvicorn calls as its shutdown begins

    answer = await long_poll_while(laptops["bob"], stopping)
    nothing = {"revision": 0, "next": 0, "more": False, "reset": False, "changes": []}
    assert answer == {**nothing, "limits": LIMITS, "extra_paths": []}
    started = anyio.current_time()
    await pull(laptops["bob"], since=0, wait=WAIT)  # and every later one, until the process is gone
    assert anyio.current_time() - started < 1.0


async def test_a_long_answer_comes_in_pages_that_together_hold_every_change(laptops, service):
    for start in range(0, 150, 50):
        await push(
            laptops["alice"],
            *({"path": f"memory/n{i:03}.md", "base": None, "content": f"note {i}\n"} for i in range(start, start + 50)),
        )
    sync = SyncService(service)
    seen: list[str] = []
    since, pages = 0, 0
    while True:
        answer = sync.changes(caller("bob"), since, limit=40)
        seen += [str(c["path"]) for c in answer.changes]
        since, pages = answer.next, pages + 1
        if not answer.more:
            break
    assert pages == 4 and sorted(seen) == [f"memory/n{i:03}.md" for i in range(150)] and since == 150


async def test_a_file_larger_than_laptops_write_is_left_out_of_pull_answers_and_the_changes_after_it_arrive(
    tmp_path: Path,
) -> None:
    raised = EngineSettings(scan=ScanConfig(max_file_bytes=2 * MAX_FILE_BYTES))  # an operator raised the file cap
    service = MemoryService(tmp_path / "raised", HashingEmbedder(), raised)
    try:
        big = "- build log: step finished, artefact uploaded\n" * (MAX_FILE_BYTES // 40)
        assert MAX_FILE_BYTES < len(big) < 2 * MAX_FILE_BYTES
        # Into the file store as the server's own tools would (indexing 2 MiB here would only slow the test).
        service.open_index(caller("alice"), write=True).mirror.write("memory/big.md", big, caller="alice")
        async with inner_clients(service, user("alice"), user("bob")) as clients:
            await push(clients["alice"], {"path": "memory/after.md", "base": None, "content": "a small note\n"})

            answer = await pull(clients["bob"])

        assert [c["path"] for c in answer["changes"]] == ["memory/after.md"]
        assert (answer["next"], answer["revision"], answer["more"]) == (2, 2, False)
    finally:
        service.close()


async def test_a_laptop_ahead_of_the_server_gets_the_full_listing_marked_reset(laptops):
    await push(laptops["alice"], {"path": "memory/a.md", "base": None, "content": "one\n"})
    answer = await pull(laptops["bob"], since=99)
    assert answer["reset"] is True and [c["path"] for c in answer["changes"]] == ["memory/a.md"]


@ON_SERVER_DISK
async def test_a_file_edited_on_the_servers_disk_reaches_the_laptops(laptops, tmp_path):
    plant(tmp_path / "data", INDEX, "memory/by-hand.md", "edited on the server\n")
    [change] = (await pull(laptops["bob"]))["changes"]
    assert (change["path"], change["content"], change["updated_by"]) == (
        "memory/by-hand.md",
        "edited on the server\n",
        "(disk)",
    )


async def test_memory_status_shows_each_callers_last_pull_and_push(laptops, service):
    await push(laptops["alice"], {"path": "memory/a.md", "base": None, "content": "one\n"})
    await pull(laptops["bob"])
    status = service.status(caller("alice"))
    by_caller = {entry.caller: entry for entry in status.sync}
    assert status.revision == 1
    assert by_caller["alice"].pushed_revision == 1 and by_caller["alice"].last_pull_at is None
    assert by_caller["bob"].pulled_revision == 1 and by_caller["bob"].last_push_at is None
    assert by_caller["bob"].last_pull_at is not None


async def test_a_server_bug_in_a_sync_call_is_answered_in_the_protocols_shape_without_its_text(
    laptops, monkeypatch, caplog
):
    def broken(self: SyncService, *args: Any) -> None:
        raise RuntimeError("a bug whose text quotes memory: the staging password")

    monkeypatch.setattr(SyncService, "changes", broken)
    with caplog.at_level("ERROR", logger="server.sync.app"):
        response = await laptops["alice"].get("/sync/changes", params={"since": 0})
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "internal", "message": "the server could not complete this sync request"}
    }
    assert "password" not in response.text
    assert any(record.exc_info for record in caplog.records)  # the traceback, for whoever fixes the bug


def test_a_push_that_fails_part_way_leaves_the_changes_it_stored_indexed(service, monkeypatch):
    sync = SyncService(service)
    applied = sync._apply

    def full_at_second(mirror: Any, caller: str, path: str, change: PushChange) -> Any:
        if path == "memory/second.md":
            raise StorageFullError("the server's disk is full")
        return applied(mirror, caller, path, change)

    monkeypatch.setattr(sync, "_apply", full_at_second)
    changes = [
        PushChange("memory/first.md", None, "stored before the failure\n"),
        PushChange("memory/second.md", None, "x\n"),
    ]
    with pytest.raises(StorageFullError):
        sync.push(CallerContext("alice", "SHA256:alice", {INDEX: "rw"}, INDEX, "rw"), changes)
    assert "memory/first.md" in service.indexes.get(INDEX).index.indexed_files()
