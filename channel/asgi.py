"""Minimal ASGI types, a bounded body reader and fixed plain answers, so the channel needs no web framework."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio

from channel import constants
from channel.constants import MIN_BODY_RATE

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
Headers = list[tuple[bytes, bytes]]


class BodyTooLarge(Exception):
    """The request body is (or declares to be) larger than the limit: refused before any decryption."""


class ClientGone(Exception):
    """The client disconnected before its request body was complete."""


class BodyTooSlow(Exception):
    """The request body stalled, or came slower than the channel accepts: answer 408 and close."""


async def read_body(scope: Scope, receive: Receive, limit: int, *, idle: float | None = None) -> bytes:
    """The whole request body, refused from Content-Length, or while reading as soon as it passes `limit`; and
    `BodyTooSlow` after a gap of `idle` seconds, or when it takes longer than `idle` plus its size at the
    minimum rate (a slow sender must not hold a connection and its buffers forever)."""
    declared = header(scope, b"content-length")
    if declared is not None and (not declared.isdigit() or len(declared) > 18 or int(declared) > limit):
        raise BodyTooLarge()
    expected = int(declared) if declared is not None else limit
    idle = constants.BODY_IDLE_TIMEOUT if idle is None else idle  # looked up on each call: tests shorten it
    chunks: list[bytes] = []
    size = 0
    try:
        with anyio.fail_after(idle + expected / MIN_BODY_RATE):
            while True:
                with anyio.fail_after(idle):
                    message = await receive()
                if message["type"] == "http.disconnect":
                    raise ClientGone()
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > limit:
                    raise BodyTooLarge()
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
    except TimeoutError:
        raise BodyTooSlow() from None


async def answer(
    send: Send,
    status: int,
    body: bytes,
    extra_headers: Headers | None = None,
    *,
    content_type: bytes = b"text/plain; charset=utf-8",
) -> None:
    """A complete response with fixed headers: the only kind of answer the channel gives outside a tunnel."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                (b"cache-control", b"no-store"),
                *(extra_headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})


def header(scope: Scope, name: bytes) -> bytes | None:
    """The first value of a request header (names in ASGI scopes are lowercase)."""
    for key, value in scope["headers"]:
        if key == name:
            return bytes(value)
    return None
