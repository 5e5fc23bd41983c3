"""The client side: an httpx2 transport that carries every request through the channel.

    transport = ChannelTransport("https://memory.example", client_key=key, server_key=pinned)
    async with httpx2.AsyncClient(transport=transport, base_url="http://memory") as client:
        await client.post("/mcp", json=..., headers={INDEX_HEADER: "notes"})

The client's own URL only supplies the inner path and query; the request is sealed into one frame and posted
to `<url>/v1/tunnel`. The response is verified frame by frame as it streams, so SSE arrives live and a stream
cut before its FINAL frame raises `FrameError`. The transport handshakes on first use, again shortly before the
session expires, and once after a 401 (each step of a handshake bounded by `HANDSHAKE_TIMEOUT`, however long the
caller lets its own requests wait); requests waiting on a handshake that fails get its error. It re-sends a request
only after a 401, which the server gives only for requests it never opened. Outer answers are read as they came:
one with a content coding is refused unread.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any

import anyio
import httpx2

from channel.client_session import ClientSession
from channel.client_stamps import StampFile
from channel.codec import InnerHead, InnerRequest, pack_request, unpack_head
from channel.constants import (
    CLOCK_OFF,
    CONTENT_CODING,
    CONTENT_TYPE,
    HANDSHAKE_PATH,
    KIND_BODY,
    MAX_BODY,
    SERVER_KEY_HEADER,
    SERVER_TIME_HEADER,
    SESSION_HEADER,
    TUNNEL_PATH,
    WELCOME_LEN,
)
from channel.errors import (
    ChannelError,
    ClockOff,
    FrameError,
    HandshakeError,
    HandshakeRefused,
    ProtocolError,
    ServerKeyMismatch,
    TunnelRefused,
)
from channel.framing import ResponseReader, seal_request
from channel.handshake import consume_response, create_initiation
from channel.keys import PrivateKey, PublicKey
from channel.request_ids import new_request_id
from channel.timestamps import stray_above

log = logging.getLogger("channel.client")

CONNECTION_RETRIES = 2  # a connection that broke before any answer: sent again this many times
MAX_BUSY_RETRIES = 20  # a 429 from a busy caller limit: waited out this many times before giving up
MAX_RETRY_WAIT = 5.0  # seconds, whatever Retry-After says
MAX_REFUSAL = 4096  # bytes of a refusal body worth reading before closing
# Seconds each step of a handshake (connecting, sending msg1, waiting for msg2) may take, whatever the caller allows
# its own requests (a tool may stream for minutes): one small message each way, so a server that accepts connections
# but never answers is given up on soon.
HANDSHAKE_TIMEOUT = 30.0
# Connection-level headers describe the hop to the server, not the inner request.
_HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"transfer-encoding", b"te", b"upgrade", b"proxy-connection"})
_OUTER_HEADERS = {"content-type": CONTENT_TYPE, "accept-encoding": CONTENT_CODING}


class ChannelTransport(httpx2.AsyncBaseTransport):
    """Send httpx2 requests through the channel to the server at `url`, whose key must be `server_key`."""

    def __init__(
        self,
        url: str | httpx2.URL,
        *,
        client_key: PrivateKey,
        server_key: PublicKey,
        transport: httpx2.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.time,
        random: Callable[[int], bytes] = os.urandom,
        stamps: StampFile | None = None,
    ) -> None:
        base = str(url).rstrip("/")
        self._handshake_url = httpx2.URL(base + HANDSHAKE_PATH)
        self._tunnel_url = httpx2.URL(base + TUNNEL_PATH)
        self._key = client_key
        self._server = server_key
        self._outer = transport if transport is not None else httpx2.AsyncHTTPTransport()
        self._clock = clock
        self._random = random
        self._lock = anyio.Lock()
        self._session: ClientSession | None = None
        # How many handshakes have ended (in a session or an error), and the error of the last one if it failed:
        # the requests that waited on it get that error rather than each waiting out a handshake of its own.
        self._handshakes_ended = 0
        self._failure: tuple[Exception, TracebackType | None] | None = None
        self._last_timestamp = 0
        self._last_request_stamp = 0
        self._stamps = stamps  # the device's newest accepted timestamp, shared by its processes
        # How far this device's clock was ahead of the server's at the last handshake (seconds, the network's
        # one-way delay included), from the server time in msg2; None before one succeeded.
        self.clock_offset: float | None = None

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await _read_request_body(request)
        # The caller's timeouts apply to each outer request (handshake and tunnel) made on its behalf.
        extensions = {"timeout": request.extensions["timeout"]} if "timeout" in request.extensions else {}
        inner = pack_request(
            InnerRequest(
                new_request_id(self._request_stamp(), self._random),
                request.method,
                request.url.raw_path,
                [(name.lower(), value) for name, value in request.headers.raw if name.lower() not in _HOP_BY_HOP],
                body,
            )
        )
        stale: ClientSession | None = None
        busy = 0
        while True:
            session = await self._current(stale, extensions)
            counter = session.next_counter()
            frame = seal_request(session.send_key, session.id, counter, inner)
            outer = await self._post(
                httpx2.Request(
                    "POST",
                    self._tunnel_url,
                    headers={**_OUTER_HEADERS, SESSION_HEADER: session.header},
                    content=frame,
                    extensions=extensions,
                )
            )
            if outer.status_code == 401 and stale is None:  # never opened: safe to send again in a new session
                await outer.aclose()
                log.info("session %s refused by the server; handshaking again", session.tag)
                stale = session
                continue
            if outer.status_code == 429 and busy < MAX_BUSY_RETRIES:  # never opened: wait as told, send again
                await outer.aclose()
                busy += 1
                await anyio.sleep(_retry_after(outer.headers.get("retry-after")))
                continue
            if outer.status_code != 200:
                await outer.aclose()
                raise TunnelRefused(outer.status_code)
            stream = FrameStream(outer, ResponseReader(session.receive_key, session.id, counter))
            head = await stream.read_head()
            return httpx2.Response(head.status, headers=head.headers, stream=stream)

    async def _post(self, request: httpx2.Request) -> httpx2.Response:
        """Send one outer request, again (at most twice more) when the connection broke before an answer: a server
        shedding connections under a flood may close a new one before reading it. Safe for tunnel requests too: a
        request the server did open is refused the second time by its request id, never run twice. An answer with a
        content coding is refused before its body is read (`_check_coding`)."""
        for attempt in range(CONNECTION_RETRIES + 1):
            try:
                response = await self._outer.handle_async_request(request)
            except (httpx2.ConnectError, httpx2.ReadError, httpx2.WriteError, httpx2.RemoteProtocolError):
                if attempt == CONNECTION_RETRIES:
                    raise
                log.info("connection to the server broke before an answer; sending again")
            else:
                await _check_coding(response)
                return response
        raise AssertionError("unreachable")

    async def connect(self) -> None:
        """Handshake now rather than on the first request: checks the pinned key and this device's authorization
        (raising `ServerKeyMismatch` or `HandshakeRefused`), and replaces the current session."""
        async with self._lock:
            await self._renew()

    async def aclose(self) -> None:
        await self._outer.aclose()

    async def _current(self, stale: ClientSession | None, extensions: dict[str, Any]) -> ClientSession:
        """A usable session: the current one, or a new one if it is missing, `stale`, or close to expiry."""
        session = self._session
        if session is None or session is stale or not session.usable(self._clock()):
            ended = self._handshakes_ended
            async with self._lock:  # one handshake at a time; the others wait for its session, or its error
                session = self._session
                if session is None or session is stale or not session.usable(self._clock()):
                    if self._failure is not None and self._handshakes_ended != ended:
                        error, traceback = self._failure  # the handshake this request waited on failed
                        raise error.with_traceback(traceback)
                    session = await self._renew(extensions)
        session.last_used = self._clock()
        return session

    async def _renew(self, extensions: dict[str, Any] | None = None) -> ClientSession:
        """Handshake (the lock held) and keep the outcome for the requests waiting on it: the new session, or the
        error. Not a cancellation: that belongs to its caller, and a waiting request then handshakes itself."""
        try:
            session = await self._handshake(extensions)
        except Exception as error:
            self._failure = (error, error.__traceback__)
            self._handshakes_ended += 1
            raise
        self._session, self._failure = session, None
        self._handshakes_ended += 1
        return session

    async def _handshake(self, extensions: dict[str, Any] | None = None) -> ClientSession:
        """Handshake, trying once more after a 403: another transport of this device key (the proxy runs
        several) may have just handshaked with a later timestamp, which makes ours look replayed."""
        for attempt in range(2):
            # The timestamp must grow with every handshake of this key, even if the clock stalls or steps back.
            timestamp = max(int(self._clock() * 1e9), self._last_timestamp + 1, self._stamp_floor())
            self._last_timestamp = timestamp
            message, initiator = create_initiation(self._key, self._server, timestamp, self._random)
            sent_at = self._clock()
            request = httpx2.Request(
                "POST",
                self._handshake_url,
                headers=_OUTER_HEADERS,
                content=message,
                extensions={"timeout": _handshake_timeouts((extensions or {}).get("timeout"))},
            )
            response = await self._post(request)
            try:
                # One bound for the whole answer: each read's own timeout would let a server (or something between)
                # that drips a byte at a time hold the handshake for hours.
                with anyio.move_on_after(HANDSHAKE_TIMEOUT) as reading:
                    body = await _read_at_most(response, max(WELCOME_LEN, MAX_REFUSAL))
            finally:
                await response.aclose()
            if reading.cancelled_caught:
                raise httpx2.ReadTimeout(
                    f"the server's handshake answer did not finish within {HANDSHAKE_TIMEOUT:g} s",
                    request=request,
                )
            if response.status_code == 200:
                welcome, keys = consume_response(initiator, body)
                session = ClientSession.start(welcome, keys, sent_at)
                self.clock_offset = sent_at - welcome.server_time_ms / 1000
                if self._stamps is not None:
                    self._stamps.accepted(timestamp)
                log.info("handshake ok session=%s", session.tag)
                return session
            self._check_server_key(response.headers.get(SERVER_KEY_HEADER))
            if response.status_code == 403 and body == CLOCK_OFF:
                raise ClockOff(_clock_offset(timestamp, response.headers.get(SERVER_TIME_HEADER)))
            if response.status_code != 403 or attempt:
                break
        raise HandshakeRefused(response.status_code, self._key.public.fingerprint)

    def _request_stamp(self) -> int:
        """When a request id is made: the clock (ns), always growing, so the server can tell an old id from a new
        one it has not seen (`channel.request_ids`)."""
        self._last_request_stamp = max(int(self._clock() * 1e9), self._last_request_stamp + 1)
        return self._last_request_stamp

    def _stamp_floor(self) -> int:
        """Just above the newest timestamp any process of this device had accepted; 0 without one, or when it is
        more than two clock windows ahead of this clock (a stray file: the server ignores such a one too)."""
        newest = self._stamps.newest() if self._stamps is not None else 0
        if newest > stray_above(self._clock()):
            return 0
        return newest + 1 if newest else 0

    def _check_server_key(self, presented: str | None) -> None:
        """After a refusal: if the server names a key other than the pinned one, that is the error to report."""
        if presented is None:
            return
        try:
            key = PublicKey.parse(presented)
        except ChannelError:
            return
        if not hmac.compare_digest(key.raw, self._server.raw):
            raise ServerKeyMismatch(self._server.fingerprint, key.fingerprint)


class FrameStream(httpx2.AsyncByteStream):
    """The inner response body: decrypted BODY frames of one outer response, verified as they arrive."""

    def __init__(self, outer: httpx2.Response, reader: ResponseReader) -> None:
        self._outer = outer
        self._chunks = _raw_chunks(outer)
        self._reader = reader
        self._frames: deque[tuple[int, bytes]] = deque()

    async def read_head(self) -> InnerHead:
        """Read up to the HEAD frame (the reader accepts nothing else first); close the outer response on error."""
        try:
            while not self._frames:
                if not await self._pull():
                    raise FrameError()
            return unpack_head(self._frames.popleft()[1])
        except BaseException:
            await self.aclose()
            raise

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            while True:
                while self._frames:
                    kind, data = self._frames.popleft()
                    if kind == KIND_BODY and data:
                        yield data
                if not await self._pull():
                    return
        finally:
            await self.aclose()

    async def _pull(self) -> bool:
        """Feed the next outer chunk to the reader; False at the end, which must come after the FINAL frame."""
        try:
            chunk = await self._chunks.__anext__()
        except StopAsyncIteration:
            self._reader.finish()
            return False
        self._frames.extend(self._reader.feed(chunk))
        return True

    async def aclose(self) -> None:
        closer = getattr(self._chunks, "aclose", None)
        if closer is not None:
            await closer()
        await self._outer.aclose()


async def _read_request_body(request: httpx2.Request) -> bytes:
    """The whole request body, refused as soon as it passes what one frame can carry."""
    if not isinstance(request.stream, httpx2.AsyncByteStream):
        raise ChannelError("the channel transport is asynchronous: use httpx2.AsyncClient")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream:
        size += len(chunk)
        if size > MAX_BODY:
            raise ChannelError(f"cannot tunnel a request body over {MAX_BODY} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _raw_chunks(response: httpx2.Response) -> AsyncIterator[bytes]:
    """The outer body exactly as it came (no content decoding), from the outer transport's own stream."""
    if not isinstance(response.stream, httpx2.AsyncByteStream):
        raise ChannelError("the channel needs an asynchronous outer transport")
    return response.stream.__aiter__()


async def _check_coding(response: httpx2.Response) -> None:
    """Refuse (and close) an outer answer with a content coding: the channel asked for none (ciphertext does not
    compress), so something between the ends added it; its body is never decoded, nor read."""
    codings = {
        part.strip().lower() for value in response.headers.get_list("content-encoding") for part in value.split(",")
    }
    if codings <= {"", CONTENT_CODING}:
        return
    await response.aclose()
    raise ProtocolError(
        f"the server's answer came with a Content-Encoding (HTTP {response.status_code}), which the channel never "
        "asks for and does not decode: something between this device and the server (a proxy) rewrote it. Make it "
        "pass the channel's answers unchanged."
    )


async def _read_at_most(response: httpx2.Response, limit: int) -> bytes:
    """The body of a small answer; more than `limit` bytes is a broken or hostile answer."""
    data = bytearray()
    async for chunk in _raw_chunks(response):
        data += chunk
        if len(data) > limit:
            raise HandshakeError()
    return bytes(data)


def _handshake_timeouts(caller: dict[str, float | None] | None) -> dict[str, float]:
    """The caller's timeouts for one outer request, none longer than `HANDSHAKE_TIMEOUT` and none unbounded."""
    limits = caller or {}
    bounded: dict[str, float] = {}
    for step in ("connect", "read", "write", "pool"):
        value = limits.get(step)
        bounded[step] = HANDSHAKE_TIMEOUT if value is None else min(value, HANDSHAKE_TIMEOUT)
    return bounded


def _clock_offset(timestamp_ns: int, server_ms: str | None) -> float | None:
    """How far this device's clock (at msg1) is ahead of the server's, in seconds, when the server said its time."""
    if server_ms is None or not server_ms.isdigit() or len(server_ms) > 16:
        return None
    return timestamp_ns / 1e9 - int(server_ms) / 1000


def _retry_after(value: str | None) -> float:
    """Seconds to wait after a 429: the server's Retry-After, within reason (1 when absent or not a number)."""
    try:
        seconds = float(value) if value is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.05), MAX_RETRY_WAIT) if seconds == seconds else 1.0
