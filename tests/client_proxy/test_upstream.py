"""The streamable-HTTP side and the forwarder's recovery, in process: a scripted `/mcp` on `httpx2.MockTransport`
answers as the SDK's server does (JSON, SSE, 202, 404 for a lost session), or fails as a network does."""

from __future__ import annotations

import json
from collections.abc import Callable

import anyio
import anyio.lowlevel
import httpx2
import pytest

from client_proxy.forward import upstream as upstream_module
from client_proxy.forward.forwarder import Forwarder
from client_proxy.forward.jsonrpc import Message, parse
from client_proxy.forward.upstream import Failure, SessionExpiredError, Upstream

pytestmark = pytest.mark.anyio

URL = "https://memory.lan"
SESSION_LOST = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": "Session not found"}}


def request(method: str, request_id: int | str | None = None, **params) -> Message:
    data = {"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})}
    if request_id is not None:
        data["id"] = request_id
    return parse(json.dumps(data).encode())


def sse(*messages: dict) -> httpx2.Response:
    body = "".join(f"event: message\ndata: {json.dumps(message)}\n\n" for message in messages)
    return httpx2.Response(200, headers={"content-type": "text/event-stream"}, text=body)


def result(request_id, value=None) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "result": value or {}}


def upstream(handler: Callable[[httpx2.Request], httpx2.Response]) -> Upstream:
    return Upstream(httpx2.AsyncClient(transport=httpx2.MockTransport(handler), base_url="http://memory"))


async def collect(up: Upstream, message: Message, headers=None) -> tuple[Failure | None, list[dict]]:
    delivered: list[dict] = []

    async def deliver(answer: Message) -> None:
        delivered.append(answer.data)

    failure = await up.post(message, headers or {}, deliver)
    return failure, delivered


async def test_an_sse_answer_delivers_progress_then_the_response_and_a_json_answer_is_delivered_whole():
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}}
    up = upstream(
        lambda r: (
            sse(progress, result(1, {"ok": True})) if b'"id": 1' in r.content else httpx2.Response(200, json=result(2))
        )
    )
    assert await collect(up, request("tools/call", 1)) == (None, [progress, result(1, {"ok": True})])
    assert await collect(up, request("tools/list", 2)) == (None, [result(2)])


async def test_initialize_opens_the_session_whose_id_every_later_message_carries():
    seen: list[httpx2.Request] = []

    def handler(sent: httpx2.Request) -> httpx2.Response:
        seen.append(sent)
        if b"initialize" in sent.content:
            return httpx2.Response(200, json=result(1), headers={"mcp-session-id": "s-1"})
        return httpx2.Response(202)

    up = upstream(handler)
    await collect(up, request("initialize", 1))
    await collect(up, request("notifications/initialized"), {"mcp-protocol-version": "2025-11-25"})
    assert "mcp-session-id" not in seen[0].headers and up.session_id == "s-1"
    assert seen[1].headers["mcp-session-id"] == "s-1" and seen[1].headers["mcp-protocol-version"] == "2025-11-25"
    assert seen[1].headers["accept"] == "application/json, text/event-stream"
    assert seen[1].headers["content-type"] == "application/json"
    assert seen[1].content == request("notifications/initialized").raw  # the client's bytes, as they came


async def test_a_404_on_a_lost_session_is_session_expired_but_a_404_answering_the_request_is_its_error():
    unknown = {"jsonrpc": "2.0", "id": 5, "error": {"code": -32601, "message": "Method not found"}}

    def handler(sent: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(404, json=unknown if b"no/such" in sent.content else SESSION_LOST)

    up = upstream(handler)
    up.session_id = "gone"
    with pytest.raises(SessionExpiredError):
        await collect(up, request("tools/list", 4))
    assert await collect(up, request("no/such", 5)) == (None, [unknown])
    up.session_id = None  # without a session id sent, there is no session to lose: the error is the answer
    assert await collect(up, request("tools/list", 6)) == (None, [{**SESSION_LOST, "id": 6}])


async def test_answers_that_are_no_answer_become_failures_naming_what_happened():
    answers = {
        "accepted": httpx2.Response(202),
        "cut": sse({"jsonrpc": "2.0", "method": "notifications/progress", "params": {}}),
        "text": httpx2.Response(200, text="hello", headers={"content-type": "text/plain"}),
        "refused": httpx2.Response(403, json={"error": "index not granted to this caller"}),
        "moved": httpx2.Response(307, headers={"location": "/elsewhere"}),
    }
    up = upstream(lambda sent: answers[json.loads(sent.content)["method"]])
    failures = {name: (await collect(up, request(name, 1)))[0] for name in answers}
    assert failures == {
        "accepted": Failure(-32600, "the server answered a request with 202 Accepted"),
        "cut": Failure(-32000, "the server ended the answer's stream without an answer"),
        "text": Failure(-32600, "Unexpected content type: text/plain"),
        "refused": Failure(-32603, "the server refused the request (HTTP 403: index not granted to this caller)"),
        "moved": Failure(-32600, "the server redirected the request (HTTP 307); not followed"),
    }


# -- the forwarder's recovery ----------------------------------------------------------------------------------------


MISSING_SESSION = {"jsonrpc": "2.0", "id": "server-error", "error": {"code": -32600, "message": "Missing session ID"}}


class Script:
    """A server that loses its sessions on `restart()`, can be `down` or refuse new sessions, and answers 400 to a
    message without a session id, as the SDK's does; it records what it was sent."""

    def __init__(self) -> None:
        self.sessions = 0
        self.live: str | None = None
        self.down = False
        self.refusing = False
        self.sent: list[tuple[str | None, dict]] = []

    def restart(self) -> None:
        self.live = None

    def __call__(self, sent: httpx2.Request) -> httpx2.Response:
        if self.down:
            raise httpx2.ConnectError("All connection attempts failed", request=sent)
        if sent.method != "POST":
            return httpx2.Response(405)
        message = json.loads(sent.content)
        session = sent.headers.get("mcp-session-id")
        self.sent.append((session, message))
        if message.get("method") == "initialize":
            if self.refusing:
                return httpx2.Response(503)
            self.sessions += 1
            self.live = f"s-{self.sessions}"
            answer = result(message["id"], {"protocolVersion": "2025-11-25"})
            return httpx2.Response(200, json=answer, headers={"mcp-session-id": self.live})
        if session is None:
            return httpx2.Response(400, json=MISSING_SESSION)
        if session != self.live:
            return httpx2.Response(404, json=SESSION_LOST)
        if "id" not in message:
            return httpx2.Response(202)
        return sse(result(message["id"], {"echo": message.get("params")}))


async def forward(script: Script, *lines: bytes) -> list[dict]:
    written: list[dict] = []

    async def write(line: bytes) -> None:
        written.append(json.loads(line))

    async def answered(requests: int) -> None:
        while len(written) < requests:
            await anyio.lowlevel.checkpoint()

    async def feed():  # a client that waits for each answer before it sends on
        requests = 0
        for line in lines:
            if line in (b"restart", b"down", b"up", b"refuse", b"accept"):
                script.restart() if line == b"restart" else None
                script.down = line == b"down" or (script.down and line != b"up")
                script.refusing = line == b"refuse" or (script.refusing and line != b"accept")
            else:
                requests += parse(line).is_request
                yield line
                await answered(requests)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(script), base_url="http://memory")
    with anyio.fail_after(5):
        await Forwarder(Upstream(client), write, URL).run(feed())
    return written


INITIALIZE = request("initialize", 1, protocolVersion="2025-11-25", capabilities={}).raw
INITIALIZED = request("notifications/initialized").raw


async def test_a_lost_session_is_reopened_with_the_clients_initialize_and_the_request_sent_once_more():
    script = Script()
    written = await forward(
        script, INITIALIZE, INITIALIZED, request("tools/list", 2).raw, b"restart", request("tools/list", 3).raw
    )
    assert [answer["id"] for answer in written] == [1, 2, 3] and all("result" in answer for answer in written)
    methods = [(session, message.get("method"), message.get("id")) for session, message in script.sent]
    assert methods == [
        (None, "initialize", 1),
        ("s-1", "notifications/initialized", None),
        ("s-1", "tools/list", 2),
        ("s-1", "tools/list", 3),  # refused: the session is gone
        (None, "initialize", "memory-proxy-reopen-1"),  # the client's own initialize, under the proxy's id
        ("s-2", "notifications/initialized", None),
        ("s-2", "tools/list", 3),  # once more, in the new session
    ]
    assert script.sent[4][1]["params"] == json.loads(INITIALIZE)["params"]


async def test_while_the_server_is_down_each_request_gets_an_error_and_the_next_one_after_it_returns_works():
    script = Script()
    written = await forward(
        script,
        INITIALIZE,
        INITIALIZED,
        b"down",
        request("tools/list", 2).raw,
        request("notifications/roots/list_changed").raw,
        b"up",
        request("tools/list", 3).raw,
    )
    assert written[1] == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {
            "code": -32000,
            "message": "cannot reach the memory server at https://memory.lan: all connection attempts failed; "
            "is it running?",
        },
    }
    assert [answer["id"] for answer in written] == [1, 2, 3] and "result" in written[2]  # nothing for the notification


class SlowReopen(Script):
    """A Script whose initialize after a restart is held until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.reopening = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, sent: httpx2.Request) -> httpx2.Response:  # type: ignore[override]
        if self.sessions and self.live is None and b'"method":"initialize"' in sent.content:
            self.reopening.set()
            await self.release.wait()
        return super().__call__(sent)


async def test_a_request_arriving_while_the_lost_session_is_reopened_waits_and_goes_in_the_new_session():
    script = SlowReopen()
    written: list[dict] = []

    async def write(line: bytes) -> None:
        written.append(json.loads(line))

    async def answered(count: int) -> None:
        while len(written) < count:
            await anyio.lowlevel.checkpoint()

    async def feed():
        yield INITIALIZE
        await answered(1)
        yield INITIALIZED
        script.restart()
        yield request("tools/list", 2).raw  # refused: it triggers the reopen, which the server holds
        await script.reopening.wait()
        yield request("tools/list", 3).raw  # arrives during the reopen
        await anyio.wait_all_tasks_blocked()
        script.release.set()
        await answered(3)

    client = httpx2.AsyncClient(transport=httpx2.MockTransport(script), base_url="http://memory")
    with anyio.fail_after(5):
        await Forwarder(Upstream(client), write, URL).run(feed())

    assert sorted(answer["id"] for answer in written) == [1, 2, 3] and all("result" in answer for answer in written)
    assert [session for session, message in script.sent if message.get("id") == 3] == ["s-2"]  # once, never without


async def test_after_a_failed_reopen_the_next_request_opens_the_session_again():
    script = Script()
    written = await forward(
        script,
        INITIALIZE,
        INITIALIZED,
        b"restart",
        b"refuse",
        request("tools/list", 2).raw,
        b"accept",
        request("tools/list", 3).raw,
    )
    assert written[1]["id"] == 2 and written[1]["error"]["message"] == "the server refused the request (HTTP 503)"
    assert written[2] == result(3, {"echo": None})
    assert (None, "initialize", "memory-proxy-reopen-2") in [(s, m.get("method"), m.get("id")) for s, m in script.sent]


async def test_a_request_whose_mcp_headers_cannot_be_encoded_gets_its_own_error_and_the_next_one_is_forwarded():
    lone_surrogate = (
        b'{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"\\ud800",'
        b'"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}'
    )
    script = Script()
    written = await forward(script, INITIALIZE, INITIALIZED, lone_surrogate, request("tools/list", 3).raw)
    assert written[1] == {
        "jsonrpc": "2.0",
        "id": 2,
        "error": {"code": -32600, "message": "Invalid Request: its MCP headers cannot be encoded"},
    }
    assert written[2] == result(3, {"echo": None})
    assert [message.get("id") for _, message in script.sent if "id" in message] == [1, 3]  # id 2 never sent


async def test_a_json_answer_larger_than_any_message_of_the_server_is_a_failure_not_read_whole(monkeypatch):
    monkeypatch.setattr(upstream_module, "MAX_EVENT", 2**20)
    big = result(1, {"text": "x" * 2**20})
    up = upstream(lambda sent: httpx2.Response(200, json=big))
    assert await collect(up, request("tools/call", 1)) == (
        Failure(-32700, "the server's JSON answer is larger than 1 MiB"),
        [],
    )
    small = result(2, {"text": "x" * 100})
    assert await collect(upstream(lambda sent: httpx2.Response(200, json=small)), request("tools/call", 2)) == (
        None,
        [small],
    )
