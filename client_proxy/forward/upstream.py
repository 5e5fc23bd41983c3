"""The server's `/mcp`, spoken as MCP streamable HTTP exactly as the SDK's client transport speaks it.

Each message is one POST (`Accept: application/json, text/event-stream`) whose answer is a JSON body or an SSE
stream carrying the request's progress, the server's own requests and finally the response; after `initialize`
every request carries `Mcp-Session-Id`; a GET stream carries what the server sends outside any request; a
DELETE ends the session. Messages pass as their original bytes (see `client_proxy.forward.jsonrpc`).

Where it departs from the SDK's transport, on purpose: a 404 on a request that carried the session id raises
`SessionExpiredError` (the SDK reports "Session terminated") so the forwarder can open a new session and retry; a
GET stream the server refuses is not retried; SSE events may be as large as the server's own message limit.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Final

import anyio
import httpx2

from channel.errors import ChannelError, FrameError, HandshakeRefused, ProtocolError
from client_proxy.forward.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_UNAVAILABLE,
    Message,
    NotJsonRpcError,
    RequestId,
    parse,
    with_id,
)
from client_proxy.forward.mcp_headers import SESSION_HEADER

log = logging.getLogger(__name__)

MCP_PATH: Final = "/mcp"
ACCEPT: Final = "application/json, text/event-stream"
LAST_EVENT_ID: Final = "last-event-id"
MAX_EVENT: Final = 16 * 1024 * 1024  # above the server's largest message (a memory file, JSON-escaped)
MAX_ERROR_BODY: Final = 64 * 1024
GET_RETRIES: Final = 2  # consecutive failed GET streams before giving up, as the SDK
RECONNECT_DELAY: Final = 1.0  # seconds, unless the server's SSE `retry` says otherwise

Deliver = Callable[[Message], Awaitable[None]]


class SessionExpiredError(Exception):
    """The server no longer knows the MCP session this message carried: it restarted, or the session idled out."""


@dataclass(frozen=True)
class Failure:
    """Why a request got no answer from the server: the JSON-RPC error the client should receive instead."""

    code: int
    message: str


class Upstream:
    """One MCP client connection to the server, over an `httpx2.AsyncClient` (in practice, the channel's)."""

    def __init__(self, client: httpx2.AsyncClient, path: str = MCP_PATH) -> None:
        self._client = client
        self._path = path
        self.session_id: str | None = None

    def _headers(self, mcp_headers: Mapping[str, str]) -> dict[str, str]:
        headers = {"accept": ACCEPT, "content-type": "application/json"}
        if self.session_id:
            headers[SESSION_HEADER] = self.session_id
        headers.update(mcp_headers)
        return headers

    async def post(self, message: Message, mcp_headers: Mapping[str, str], deliver: Deliver) -> Failure | None:
        """POST one message and deliver whatever the server answers on it, ending with the request's response.

        Returns None when done (answered, or accepted for a notification or response), a `Failure` when a request
        got no answer. Raises `SessionExpiredError`, or the transport's and channel's own errors (see `describe`).
        """
        carried_session = self.session_id is not None
        request_id = message.id if message.is_request else None
        async with self._client.stream("POST", self._path, content=message.raw, headers=self._headers(mcp_headers)) as (
            response
        ):
            status = response.status_code
            if status >= 300:
                body = await _read_at_most(response, MAX_ERROR_BODY)
                # "Session not found" answers no request (id null); a 404 that answers this one is the server's
                # METHOD_NOT_FOUND at the 2026 generation, whatever session id went with it.
                if status == 404 and carried_session and not _answers(body, request_id):
                    raise SessionExpiredError()
                return await _refusal(response, body, request_id, deliver)
            if message.method == "initialize" and (session := response.headers.get(SESSION_HEADER)):
                self.session_id = session
                log.info("MCP session opened")
            if request_id is None:
                return None
            if status == 202:
                return Failure(INVALID_REQUEST, "the server answered a request with 202 Accepted")
            content_type = response.headers.get("content-type", "").lower()
            if content_type.startswith("application/json"):
                return await _json_answer(response, deliver)
            if content_type.startswith("text/event-stream"):
                return await _stream_answer(response, request_id, deliver)
            return Failure(INVALID_REQUEST, f"Unexpected content type: {content_type.partition(';')[0]}")

    async def listen(self, mcp_headers: Callable[[], Mapping[str, str]], deliver: Deliver) -> None:
        """Hold the GET stream of the current session open, delivering the server's own messages, until the session
        ends, the server says it offers none, or it fails `GET_RETRIES` times in a row."""
        failures = 0
        delay = RECONNECT_DELAY
        last_event: str | None = None
        while self.session_id and failures < GET_RETRIES:
            headers = {"cache-control": "no-store", **self._headers(mcp_headers())}
            if last_event:
                headers[LAST_EVENT_ID] = last_event
            try:
                async with self._client.stream("GET", self._path, headers=headers) as response:
                    if response.status_code in (404, 405):
                        log.debug("no GET stream (HTTP %d)", response.status_code)
                        return
                    if response.status_code != 200:
                        log.debug("GET stream refused: HTTP %d", response.status_code)
                        failures += 1
                    else:
                        log.debug("GET stream open")
                        async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT):
                            last_event = event.id or last_event
                            delay = event.retry / 1000 if event.retry is not None else delay
                            if event.event == "message" and event.data:
                                await _deliver_event(event.data, deliver)
                        failures = 0
            except (httpx2.HTTPError, ChannelError) as exc:
                failures += 1
                log.debug("GET stream failed: %s", type(exc).__name__)
            await anyio.sleep(delay)

    async def terminate(self, mcp_headers: Mapping[str, str]) -> None:
        """DELETE the session, so the server frees it now rather than when it idles out."""
        if not self.session_id:
            return
        try:
            response = await self._client.delete(self._path, headers=self._headers(mcp_headers))
        except (httpx2.HTTPError, ChannelError) as exc:
            log.info("could not end the MCP session: %s", type(exc).__name__)
            return
        if response.status_code not in (200, 204, 405):
            log.info("ending the MCP session: HTTP %d", response.status_code)
        self.session_id = None


async def _json_answer(response: httpx2.Response, deliver: Deliver) -> Failure | None:
    """A JSON answer delivered; one larger than the largest message the server sends (MAX_EVENT, as on a stream)
    is a failure, not read whole into memory."""
    body = await _read_at_most(response, MAX_EVENT + 1)
    if len(body) > MAX_EVENT:
        return Failure(PARSE_ERROR, f"the server's JSON answer is larger than {MAX_EVENT // 2**20} MiB")
    try:
        message = parse(body)
    except NotJsonRpcError:
        return Failure(PARSE_ERROR, "the server's JSON answer is not a JSON-RPC message")
    await deliver(message)
    return None


async def _stream_answer(response: httpx2.Response, request_id: RequestId, deliver: Deliver) -> Failure | None:
    """Deliver the stream's messages as they arrive; done at the first response, which answers this request."""
    async for event in httpx2.EventSource(response, max_event_size=MAX_EVENT):
        if event.event != "message" or not event.data:
            continue  # a priming event for resumption, or an unknown event type
        try:
            message = parse(event.data.encode("utf-8"))
        except NotJsonRpcError:
            return Failure(PARSE_ERROR, "the server sent a malformed message on the answer's stream")
        if message.is_response:
            await deliver(message if message.answers(request_id) else with_id(message, request_id))
            return None
        await deliver(message)
    return Failure(SERVER_UNAVAILABLE, "the server ended the answer's stream without an answer")


async def _deliver_event(data: str, deliver: Deliver) -> None:
    try:
        message = parse(data.encode("utf-8"))
    except NotJsonRpcError:
        log.warning("dropped a malformed message from the server's GET stream")
        return
    await deliver(message)


def _answers(body: bytes, request_id: RequestId | None) -> bool:
    try:
        return request_id is not None and parse(body).answers(request_id)
    except NotJsonRpcError:
        return False


async def _refusal(
    response: httpx2.Response, body: bytes, request_id: RequestId | None, deliver: Deliver
) -> Failure | None:
    """An HTTP-level refusal: the server's JSON-RPC error when the body holds one, else one named from the status."""
    status = response.status_code
    if request_id is None:
        log.warning("the server refused a notification or response: HTTP %d", status)
        return None
    if response.headers.get("content-type", "").lower().startswith("application/json"):
        try:
            answer = parse(body)
        except NotJsonRpcError:
            answer = None
        if answer is not None and answer.is_response and "error" in answer.data:
            await deliver(with_id(answer, request_id))
            return None
    if 300 <= status < 400:
        return Failure(INVALID_REQUEST, f"the server redirected the request (HTTP {status}); not followed")
    if status == 404:
        return Failure(METHOD_NOT_FOUND, "Not Found")
    return Failure(INTERNAL_ERROR, f"the server refused the request (HTTP {status}{_reason(body)})")


def _reason(body: bytes) -> str:
    """The channel's and the server's generic refusals are `{"error": "<short reason>"}`: worth showing."""
    try:
        document = json.loads(body)
    except ValueError:
        return ""
    reason = document.get("error") if isinstance(document, dict) else None
    if isinstance(reason, str) and len(reason) <= 200 and reason.isprintable():
        return f": {reason}"
    return ""


async def _read_at_most(response: httpx2.Response, limit: int) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) > limit:
            break
    return bytes(data[:limit])


def describe(error: Exception, server_url: str) -> str:
    """What went wrong between us and the server, for the user: the one place transport and channel errors are
    translated. Names the server and the problem; never a key, a session id or a message body."""
    where = f"the memory server at {server_url}"
    if isinstance(error, HandshakeRefused) or (
        isinstance(error, ChannelError) and not isinstance(error, ProtocolError)
    ):
        return str(error)  # refused handshake, changed server key, refused tunnel: written for the user
    if isinstance(error, FrameError):
        return f"the answer from {where} was cut off or failed authentication; it may or may not have run"
    if isinstance(error, ProtocolError):
        return f"the channel handshake with {where} failed: its answer was corrupt or forged"
    if isinstance(error, httpx2.ConnectTimeout):
        return f"cannot reach {where}: connecting timed out"
    if isinstance(error, httpx2.ConnectError):
        return f"cannot reach {where}: {_os_reason(error)}; is it running?"
    if isinstance(error, httpx2.TimeoutException):
        return f"{where} did not answer in time ({type(error).__name__})"
    if isinstance(error, httpx2.SSEError):
        return f"{where} sent an unreadable event stream: {error}"
    if isinstance(error, httpx2.TransportError):
        return f"the connection to {where} failed ({type(error).__name__}); the request may or may not have run"
    return f"talking to {where} failed ({type(error).__name__})"


def _os_reason(error: BaseException) -> str:
    """The operating system's reason under a connect error (`connection refused`), else the error's own text."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, OSError) and cause.errno:
            return os.strerror(cause.errno).lower()
        cause = cause.__cause__ or cause.__context__
    return (str(error).strip() or type(error).__name__).lower()
