"""The stdio forwarder: every JSON-RPC message from the MCP client to the server's `/mcp`, and back, untouched.

It knows no tool. It reads each message only to route it: a request is POSTed in its own task (answers, progress
and server requests stream back as they come); notifications and responses are POSTed one after another by one
background sender, and a request goes out only once those read before it have (so `notifications/initialized`
lands before the requests that follow it, while a slow server never holds up the reading of later lines); the
per-message MCP headers are stamped as the SDK's client would (`client_proxy.forward.stamping`). What it adds of
its own:

- a request the server cannot answer (down, unreachable, refusing the channel) gets a JSON-RPC error naming the
  server and the problem; the next request tries again, so the proxy recovers when the server returns;
- when the server no longer knows the MCP session (it restarted, or the session idled out: HTTP 404 on a request
  that carried the session id), the client's original `initialize` is sent again (under an id of the proxy's own,
  its answer kept here), then `notifications/initialized`, and the failed message is sent once more. The server
  never ran it, so this is the one retry; nothing the server may have executed is ever sent twice. A message that
  arrives while the session is lost waits for the new one (at most `REOPEN_WAIT`), or opens it itself when the
  last attempt failed, so it never goes out without a session;
- a line too large to forward (`client_proxy.forward.stdio`) is answered with an error under the id read from its
  first bytes (null when they show none), so the client's call ends;
- a request whose MCP headers cannot be computed (a lone surrogate in a tool name cannot be encoded) is answered
  with an error of its own; the other messages are not affected;
- a `notifications/cancelled` for a request of the `server/discover` generation closes that request's stream
  instead of being posted (the 2026 HTTP wire cancels that way), as the SDK's transport does.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final

import anyio
import anyio.abc
import httpx2
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from channel.errors import ChannelError
from client_proxy.forward.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    SERVER_UNAVAILABLE,
    Message,
    NotJsonRpcError,
    RequestId,
    error_line,
    parse,
    with_id,
)
from client_proxy.forward.stamping import Stamper
from client_proxy.forward.stdio import OversizedLine, StdoutClosedError
from client_proxy.forward.upstream import Deliver, Failure, SessionExpiredError, Upstream, describe

log = logging.getLogger(__name__)

CLOSE_TIMEOUT: Final = 2.0  # seconds to end the MCP session on the way out
REOPEN_WAIT: Final = 30.0  # seconds a message waits for a lost MCP session to be opened again
OUTBOX: Final = 64  # notifications and responses waiting for the sender before reading stdin waits too
INITIALIZED: Final = Message(
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
)
# Messages that belong to the session they were sent in: pointless to re-send in a new one.
_SESSION_BOUND: Final = frozenset({"notifications/cancelled"})

Write = Callable[[bytes], Awaitable[None]]
Lines = AsyncIterator[bytes | None]
Outgoing = tuple[Message, dict[str, str]]  # a notification or response, with its MCP headers


@dataclass(frozen=True)
class _InFlight:
    scope: anyio.CancelScope
    modern: bool  # sent as a `server/discover`-generation message: cancelled by closing its stream


class Forwarder:
    """One MCP client connection (this process's stdin and stdout) forwarded to the server."""

    def __init__(self, upstream: Upstream, write: Write, server_url: str) -> None:
        self._upstream = upstream
        self._write = write
        self._server_url = server_url
        self._stamper = Stamper()
        self._initialize: Message | None = None  # the client's own, kept to open a new session
        self._in_flight: dict[RequestId, _InFlight] = {}
        self._reopen_lock = anyio.Lock()
        self._session_lost = False  # the server dropped our session; the next message must open a new one first
        self._reopen_ids = itertools.count(1)
        self._listener = anyio.CancelScope()
        self._tasks: anyio.abc.TaskGroup | None = None
        self._outbox: MemoryObjectSendStream[Outgoing] | None = None  # to the sender of notifications and responses
        self._queued = 0  # notifications and responses handed to the sender so far
        self._sent = 0  # of which the sender is done with (delivered or not)
        self._sender_progress = anyio.Event()  # set (and replaced) each time the sender is done with one

    async def run(self, lines: Lines) -> None:
        """Forward until stdin ends (or the caller cancels), then end the MCP session."""
        self._outbox, outgoing = anyio.create_memory_object_stream[Outgoing](OUTBOX)
        try:
            with self._outbox, outgoing:
                async with anyio.create_task_group() as tasks:
                    self._tasks = tasks
                    tasks.start_soon(self._send_in_order, outgoing)
                    async for line in lines:
                        await self._accept(line)
                    log.info("stdin closed: shutting down")
                    self._outbox.close()
                    with anyio.move_on_after(CLOSE_TIMEOUT):  # what was read before the end still goes out
                        await self._after_queued(self._queued)
                    tasks.cancel_scope.cancel()
        finally:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await self._upstream.terminate(self._stamper.transport_headers())

    async def _accept(self, line: bytes | None) -> None:
        if line is None or isinstance(line, OversizedLine):
            request_id = line.request_id if line is not None else None
            await self._out(error_line(request_id, INVALID_REQUEST, "message too large"))
            return
        try:
            message = parse(line)
        except NotJsonRpcError as exc:
            await self._out(error_line(None, exc.code, str(exc)))
            return
        log.debug("client -> %s", _name(message))
        if message.is_request:
            await self._start_request(message)
        elif not self._cancelled_here(message) and (headers := self._headers_for(message)) is not None:
            assert self._outbox is not None
            await self._outbox.send((message, headers))
            self._queued += 1

    async def _send_in_order(self, outgoing: MemoryObjectReceiveStream[Outgoing]) -> None:
        """POST the notifications and responses one at a time, in the order they were read."""
        async for message, headers in outgoing:
            try:
                await self._forward(message, headers)
                if message.method == "notifications/initialized":
                    self._start_listening()
            finally:
                self._sent += 1
                self._sender_progress.set()
                self._sender_progress = anyio.Event()

    async def _after_queued(self, count: int) -> None:
        """Return once the sender is done with the first `count` notifications and responses."""
        while self._sent < count:
            await self._sender_progress.wait()

    def _headers_for(self, message: Message) -> dict[str, str] | None:
        """The message's MCP headers, stamped in arrival order as the SDK transport does; None when they cannot be
        computed from what the client sent (the stamper's state is then as before)."""
        try:
            return self._stamper.headers_for(message)
        except Exception:  # one malformed message must not end the connection
            log.warning("cannot compute the MCP headers of %s: not sent", _name(message), exc_info=True)
            return None

    async def _start_request(self, message: Message) -> None:
        assert self._tasks is not None and message.id is not None
        headers = self._headers_for(message)
        if headers is None:
            await self._out(
                error_line(message.id, INVALID_REQUEST, "Invalid Request: its MCP headers cannot be encoded")
            )
            return
        if message.method == "initialize":
            self._initialize = message
        superseded = self._in_flight.get(message.id)
        if superseded is not None:  # a reused id: its older stream must not answer for the new request
            superseded.scope.cancel()
        entry = _InFlight(anyio.CancelScope(), self._stamper.modern)
        self._in_flight[message.id] = entry
        self._tasks.start_soon(self._request, message, headers, entry, self._queued)

    async def _request(self, message: Message, headers: dict[str, str], entry: _InFlight, after: int) -> None:
        """Forward one request, once the `after` notifications and responses read before it have gone out."""
        assert message.id is not None
        try:
            with entry.scope:
                await self._after_queued(after)
                failure = await self._forward(message, headers)
                if failure is not None:
                    log.warning("%s failed: %s", _name(message), failure.message)
                    await self._out(error_line(message.id, failure.code, failure.message))
        finally:
            if self._in_flight.get(message.id) is entry:
                del self._in_flight[message.id]

    def _cancelled_here(self, message: Message) -> bool:
        """Whether a `notifications/cancelled` is carried out by closing the request's stream rather than posted."""
        if message.method != "notifications/cancelled":
            return False
        target = message.params.get("requestId")
        entry = self._in_flight.get(target) if isinstance(target, str | int) else None
        if entry is None:
            return self._stamper.modern  # at 2026 a late cancel must not reach the wire
        if entry.modern:
            entry.scope.cancel()
        return entry.modern

    async def _forward(self, message: Message, headers: dict[str, str]) -> Failure | None:
        """POST one message, recovering an expired session once; a `Failure` when a request got no answer."""
        deliver = self._deliverer(message)
        try:
            failure = await self._session_ready(message)
            if failure is not None:
                return failure
            sent_in = self._upstream.session_id
            try:
                return await self._upstream.post(message, headers, deliver)
            except SessionExpiredError:
                if not _needs_session(message):
                    return None
                failure = await self._reopen(sent_in, for_initialize=message.method == "initialize")
                if failure is not None:
                    return failure
                return await self._upstream.post(message, headers, deliver)
        except SessionExpiredError:
            return Failure(INVALID_REQUEST, "Session terminated")
        except (httpx2.HTTPError, ChannelError) as exc:
            failure = Failure(SERVER_UNAVAILABLE, describe(exc, self._server_url))
        except Exception:
            log.exception("forwarding %s failed", _name(message))
            failure = Failure(INTERNAL_ERROR, "memory-proxy failed to forward the message; see its log")
        if not message.is_request:
            log.warning("%s not delivered: %s", _name(message), failure.message)
        return failure

    async def _session_ready(self, message: Message) -> Failure | None:
        """While the session is lost, wait for the task opening a new one (or open it, when the last attempt
        failed), so that `message` goes in the new session rather than in none; a `Failure` after `REOPEN_WAIT`."""
        if not self._session_lost or message.method == "initialize" or not _needs_session(message):
            return None
        with anyio.move_on_after(REOPEN_WAIT):
            return await self._reopen(None, for_initialize=False)
        return Failure(SERVER_UNAVAILABLE, "timed out waiting for the server to open a new MCP session")

    async def _reopen(self, stale: str | None, *, for_initialize: bool) -> Failure | None:
        """Open a new MCP session with the client's own `initialize`, unless another task already has."""
        async with self._reopen_lock:
            if self._upstream.session_id != stale or (stale is None and not self._session_lost):
                return None
            self._upstream.session_id = None
            self._listener.cancel()
            if for_initialize or self._initialize is None:
                return None  # the message itself opens the session
            self._session_lost = True
            log.info("the server no longer knows our MCP session (restarted, or idle too long): opening a new one")
            request = with_id(self._initialize, f"memory-proxy-reopen-{next(self._reopen_ids)}")
            answer: Message | None = None

            async def keep_answer(message: Message) -> None:
                nonlocal answer
                if message.is_response:
                    answer = message
                else:
                    await self._out_message(message)

            failure = await self._upstream.post(request, self._stamper.headers_for(request), keep_answer)
            if failure is None and (answer is None or answer.result is None):
                failure = Failure(SERVER_UNAVAILABLE, "the server refused to open a new MCP session")
            if failure is not None:
                return failure
            assert answer is not None
            self._stamper.observe(request, answer)
            await self._upstream.post(INITIALIZED, self._stamper.headers_for(INITIALIZED), self._out_message)
            self._session_lost = False
            self._start_listening()
            return None

    def _start_listening(self) -> None:
        """Open the session's GET stream (for what the server sends outside any request), replacing any other."""
        assert self._tasks is not None
        self._listener.cancel()
        self._listener = anyio.CancelScope()
        self._tasks.start_soon(self._listen, self._listener)

    async def _listen(self, scope: anyio.CancelScope) -> None:
        with scope:
            await self._upstream.listen(self._stamper.transport_headers, self._out_message)

    def _deliverer(self, request: Message) -> Deliver:
        """Deliver the server's messages to the client, learning from the answer to `request` on the way."""

        async def deliver(message: Message) -> None:
            if request.id is not None and message.answers(request.id):
                self._stamper.observe(request, message)
            await self._out_message(message)

        return deliver

    async def _out_message(self, message: Message) -> None:
        log.debug("client <- %s", _name(message))
        await self._out(message.line())

    async def _out(self, line: bytes) -> None:
        try:
            await self._write(line)
        except StdoutClosedError:
            log.info("stdout closed: shutting down")
            if self._tasks is not None:
                self._tasks.cancel_scope.cancel()


def _needs_session(message: Message) -> bool:
    """Whether the message is worth sending in a new session: not a response or a notification bound to the old."""
    return not (message.is_response or message.method in _SESSION_BOUND)


def _name(message: Message) -> str:
    """A message as the log may name it: kind, method and id, never its content."""
    if message.is_response:
        return f"response id={message.id!r}" + (" (error)" if "error" in message.data else "")
    if message.is_request:
        return f"{message.method} id={message.id!r}"
    return str(message.method)
