"""The untrusted network for the channel tests: an outer transport that records every message and lets a
test rewrite, drop, delay, swap or replay them, as a hostile TLS-terminating proxy could."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import httpx2

_FRAMING = (b"content-length", b"transfer-encoding")


@dataclass
class Outer:
    """One outer request as it crossed the network."""

    url: httpx2.URL
    headers: list[tuple[bytes, bytes]]
    content: bytes

    @property
    def path(self) -> str:
        return self.url.path

    def to(self, path: str, content: bytes | None = None, headers: list[tuple[bytes, bytes]] | None = None) -> Outer:
        """The same message sent somewhere else, or with other content or headers."""
        return Outer(
            self.url.copy_with(path=path),
            self.headers if headers is None else headers,
            self.content if content is None else content,
        )


@dataclass
class Answer:
    status: int
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""

    def comparable(self) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Everything but the Date header, which only says when."""
        return self.status, [(k.lower(), v) for k, v in self.headers if k.lower() != b"date"], self.body


Forward = Callable[[Outer], Awaitable[Answer]]
Handler = Callable[[Outer, Forward], Awaitable[Answer]]


class Relay(httpx2.AsyncBaseTransport):
    """Passes messages through untouched (streaming) unless `handler` is set; then buffers and lets it decide.

    A relay outlives the clients that use it (tests replay what it saw after they close), so closing a client
    leaves it open; the `make_relay` fixture shuts every relay down at the end of the test.
    """

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler = handler
        self.seen: list[Outer] = []
        self._upstream = httpx2.AsyncHTTPTransport()

    def paths(self) -> list[str]:
        return [outer.path for outer in self.seen]

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        outer = Outer(request.url, list(request.headers.raw), await request.aread())
        self.seen.append(outer)
        if self.handler is None:
            return await self._upstream.handle_async_request(request)
        answer = await self.handler(outer, self.forward)
        return httpx2.Response(answer.status, headers=answer.headers, content=answer.body)

    async def forward(self, outer: Outer) -> Answer:
        """Deliver `outer` to the server and read the whole answer."""
        headers = [(k, v) for k, v in outer.headers if k.lower() not in _FRAMING]
        response = await self._upstream.handle_async_request(
            httpx2.Request("POST", outer.url, headers=headers, content=outer.content)
        )
        try:
            body = await response.aread()
        finally:
            await response.aclose()
        return Answer(
            response.status_code, [(k, v) for k, v in response.headers.raw if k.lower() not in _FRAMING], body
        )

    async def aclose(self) -> None:
        """Called by the client transport on close: the relay stays usable for the test."""

    async def shutdown(self) -> None:
        await self._upstream.aclose()
