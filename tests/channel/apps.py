"""Inner apps for the channel tests: a Starlette app that knows nothing about the channel, and its state."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass, field

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from channel.asgi import Receive, Scope, Send
from channel.authz import Caller, CallerTable, ChannelUser
from channel.keys import PrivateKey

WAIT = 10.0  # the longest any inner route waits for the test to move on


@dataclass
class AppState:
    """What the inner app did, for the test to check; events cross from the server thread to the test."""

    count: int = 0
    provider_key: str = "sk-provider-CANARY-0000"
    release: threading.Event = field(default_factory=threading.Event)
    disconnected: threading.Event = field(default_factory=threading.Event)


def user_json(user: ChannelUser) -> dict[str, object]:
    return {
        "name": user.name,
        "fingerprint": user.fingerprint,
        "grants": dict(user.grants),
        "index": user.index,
        "access": user.access,
        "can_write": user.index is not None and user.grants.get(user.index) == "rw",
    }


def inner_app(state: AppState) -> Starlette:
    async def echo(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "headers": dict(request.headers),
                "body": body.decode("utf-8", "replace"),
                "user": user_json(request.user),
            }
        )

    async def count(request: Request) -> JSONResponse:
        state.count += 1
        return JSONResponse({"count": state.count})

    async def boom(request: Request) -> Response:
        raise RuntimeError(f"upstream refused key {state.provider_key}")

    async def download(request: Request) -> Response:
        size = int(request.query_params["size"])
        return Response(bytes(range(256)) * (size // 256) + bytes(size % 256), media_type="application/octet-stream")

    async def stall(request: Request) -> Response:
        await anyio.to_thread.run_sync(state.release.wait, WAIT)
        return Response(b"late")

    async def upload(request: Request) -> JSONResponse:
        body = await request.body()
        return JSONResponse({"size": len(body), "sha256": hashlib.sha256(body).hexdigest()})

    return Starlette(
        routes=[
            Route("/echo", echo, methods=["GET", "POST", "PUT", "DELETE"]),
            Route("/echo/{rest:path}", echo, methods=["GET", "POST"]),
            Route("/count", count, methods=["POST"]),
            Route("/boom", boom),
            Route("/download", download),
            Route("/upload", upload, methods=["POST"]),
            Route("/stall", stall),
            Route("/events", Events(state)),
            Route("/hold", Hold(state)),
        ]
    )


class Events:
    """Server-sent events: one event, then a second only once the test has seen the first (proves liveness)."""

    def __init__(self, state: AppState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-store")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: first\n\n", "more_body": True})
        released = await anyio.to_thread.run_sync(self.state.release.wait, WAIT)
        body = b"data: second\n\n" if released else b"data: timeout\n\n"
        await send({"type": "http.response.body", "body": body, "more_body": False})


class Hold:
    """A stream that stays open until the client goes away, and records that it did."""

    def __init__(self, state: AppState) -> None:
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"data: open\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        self.state.disconnected.set()


def caller(name: str, key: PrivateKey, **grants: str) -> Caller:
    return Caller(name, (key.public,), grants)


def table(*callers: Caller) -> CallerTable:
    return CallerTable(callers)
