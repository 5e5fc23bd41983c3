"""Turns the inner app's ASGI response into sealed frames on the outer response.

A response that the inner app completes in one small body message goes out as one write with a Content-Length
(head, body and end frames together), so small requests cost one round of I/O. A streaming response (no
Content-Length, a body in several parts, e.g. SSE) and a body larger than one frame are flushed frame by
frame as they are sealed, so the client verifies one frame while the server seals the next.
Before every write the session and the caller's key are checked again: a revoked caller gets no more bytes.
"""

from __future__ import annotations

from collections.abc import Callable

from channel.asgi import Message, Send
from channel.codec import InnerHead, pack_head
from channel.constants import CONTENT_TYPE, KIND_BODY, KIND_END, KIND_HEAD, MAX_CHUNK
from channel.errors import ChannelError
from channel.framing import seal_response
from channel.session import Session

_OUTER_HEADERS = [(b"content-type", CONTENT_TYPE.encode()), (b"cache-control", b"no-store")]


class Revoked(ChannelError):
    """The caller's key or session went away while its response was being sent."""


class ResponseSealer:
    """The `send` the inner app is given, for one tunnelled request.

    `keep_alive` is called before each write: it returns False once the session or key is gone (and otherwise
    marks the session as in use, so an open stream keeps an otherwise idle session alive).
    """

    def __init__(self, send: Send, session: Session, request_counter: int, keep_alive: Callable[[], bool]) -> None:
        self._send = send
        self._session = session
        self._request_counter = request_counter
        self._keep_alive = keep_alive
        self._pending: list[bytes] = []
        self._seq = 0
        self.status = 0
        self.inner_started = False
        self.outer_started = False
        self.complete = False
        self.streaming = False
        self.body_bytes = 0

    def _frame(self, kind: int, plaintext: bytes) -> None:
        session = self._session
        counter = session.next_send_counter()
        frame = seal_response(session.send_key, session.id, counter, kind, self._request_counter, self._seq, plaintext)
        self._seq += 1
        self._pending.append(frame)

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            if self.inner_started:
                raise ChannelError("the inner app started its response twice")
            self.inner_started = True
            self.status = int(message["status"])
            headers = [(bytes(k).lower(), bytes(v)) for k, v in message.get("headers", [])]
            self._frame(KIND_HEAD, pack_head(InnerHead(self.status, headers)))
            if not any(name == b"content-length" for name, _ in headers):
                self.streaming = True
                await self._flush(final=False)  # the client sees the head (e.g. of an SSE stream) at once
        elif kind == "http.response.body":
            if not self.inner_started or self.complete:
                raise ChannelError("the inner app sent a body outside a response")
            body = bytes(message.get("body", b""))
            more = bool(message.get("more_body", False))
            self.body_bytes += len(body)
            if more or len(body) > MAX_CHUNK:
                self.streaming = self.streaming or bool(body)
            for start in range(0, len(body), MAX_CHUNK):
                self._frame(KIND_BODY, body[start : start + MAX_CHUNK])
                if self.streaming and start + MAX_CHUNK < len(body):
                    await self._flush(final=False)
            if not more:
                self._frame(KIND_END, b"")
                self.complete = True
                await self._flush(final=True)
            elif body:
                await self._flush(final=False)
        # Other messages (trailers, pathsend) are not offered in the inner scope's extensions.

    async def _flush(self, *, final: bool) -> None:
        if not self._keep_alive():
            self._pending.clear()
            raise Revoked()
        data = b"".join(self._pending)
        self._pending.clear()
        if not self.outer_started:
            self.outer_started = True
            headers = list(_OUTER_HEADERS)
            if final and not self.streaming:
                headers.append((b"content-length", str(len(data)).encode()))
            else:
                headers.append((b"x-accel-buffering", b"no"))  # ask buffering proxies to pass chunks through
            await self._send({"type": "http.response.start", "status": 200, "headers": headers})
        await self._send({"type": "http.response.body", "body": data, "more_body": not final})

    async def cut(self) -> None:
        """End the outer response without the FINAL frame: the client reports a truncated stream."""
        self._pending.clear()
        if not self.outer_started:
            self.outer_started = True
            await self._send({"type": "http.response.start", "status": 200, "headers": list(_OUTER_HEADERS)})
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def error(self, status: int, body: bytes) -> bool:
        """A sealed inner error response, when nothing of the inner response was sent yet. It runs on error paths,
        so it never raises `Revoked`: a caller revoked meanwhile has its stream cut instead (and gets False)."""
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        try:
            await self.send({"type": "http.response.start", "status": status, "headers": head})
            await self.send({"type": "http.response.body", "body": body, "more_body": False})
        except Revoked:
            await self.cut()
            return False
        return True
