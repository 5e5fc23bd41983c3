"""A minimal MCP client over `client_proxy.forward.upstream.Upstream`: initialize, call a tool, end the session.

The MCP SDK is not installed on laptops (its import alone costs most of a second), so this speaks the few
JSON-RPC messages it needs itself, through the same upstream transport the stdio forwarder uses.
"""

from __future__ import annotations

import itertools
import json
from typing import Any, Final

import anyio
import httpx2

from channel.errors import ChannelError
from client_proxy.errors import ProxyError
from client_proxy.forward.forwarder import INITIALIZED
from client_proxy.forward.jsonrpc import Message, RequestId
from client_proxy.forward.mcp_headers import PROTOCOL_VERSION_HEADER
from client_proxy.forward.upstream import SessionExpiredError, Upstream, describe

PROTOCOL_VERSION: Final = "2025-11-25"
CLIENT_INFO: Final = {"name": "memory-proxy", "version": "0.1.0"}


class RemoteCallError(ProxyError):
    """The server could not be reached, refused the call, or answered something that is not an answer."""


class RemoteToolError(ProxyError):
    """The tool ran and said no (a bad argument, a missing grant, a stale hash): its message is for the user."""


class McpSession:
    """One MCP session with the server's `/mcp`, opened on the first call and reopened once if it expired."""

    def __init__(self, client: httpx2.AsyncClient, server_url: str) -> None:
        self._upstream = Upstream(client)
        self._server_url = server_url
        self._ids = itertools.count(1)
        self._version: str | None = None
        self._opening = anyio.Lock()  # the memory browser calls from several requests at once

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """The tool's structured result; `RemoteToolError` with the tool's own message when it refused, and
        `ProxyError` before anything is sent when an argument is not UTF-8 text."""
        sent = {k: v for k, v in arguments.items() if v is not None}
        _check_text(sent)
        params = {"name": name, "arguments": sent}
        try:
            result = await self._call(params)
        except SessionExpiredError:  # lost again right after it was opened: a retry loop could go on forever
            raise RemoteCallError(
                f"the memory server at {self._server_url} ended the MCP session again; try again"
            ) from None
        if result.get("isError"):
            raise RemoteToolError(_text(result) or f"{name} failed")
        structured = result.get("structuredContent")
        if not isinstance(structured, dict):
            raise RemoteCallError(f"the server's answer to {name} holds no structured result")
        return structured

    async def _call(self, params: dict[str, Any]) -> dict[str, Any]:
        """`tools/call` in the open session, sent once more in a new one when the server no longer knows it."""
        await self._ensure_open(None)
        session = self._upstream.session_id
        try:
            return await self._request("tools/call", params)
        except SessionExpiredError:  # the server restarted or the session idled out: it never ran the call
            await self._ensure_open(session)
            return await self._request("tools/call", params)

    async def close(self) -> None:
        """End the session on the server (best effort: it idles out anyway)."""
        if self._version is not None:
            await self._upstream.terminate(self._headers())

    async def _ensure_open(self, expired: str | None) -> None:
        """Open a session if none is open, or if `expired` is still the current one (others may have reopened)."""
        async with self._opening:
            if self._version is None or (expired is not None and self._upstream.session_id == expired):
                await self._open()

    async def _open(self) -> None:
        self._upstream.session_id = None
        self._version = None
        params = {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": CLIENT_INFO}
        result = await self._request("initialize", params)
        version = result.get("protocolVersion")
        self._version = version if isinstance(version, str) else PROTOCOL_VERSION
        await self._send(INITIALIZED)

    def _headers(self) -> dict[str, str]:
        return {PROTOCOL_VERSION_HEADER: self._version} if self._version else {}

    async def _request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        request_id: RequestId = next(self._ids)
        data = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        raw = json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        answers: list[Message] = []

        async def deliver(message: Message) -> None:
            if message.answers(request_id):
                answers.append(message)  # progress, logs and server requests are of no use here

        failure = await self._send(Message(raw, data), deliver)
        if failure is not None:
            raise RemoteCallError(failure)
        if not answers:
            raise RemoteCallError(f"the memory server at {self._server_url} did not answer {method}")
        error = answers[0].data.get("error")
        if isinstance(error, dict):
            raise RemoteToolError(str(error.get("message") or "the server refused the request"))
        result = answers[0].result
        if result is None:
            raise RemoteCallError(f"the server's answer to {method} is malformed")
        return result

    async def _send(self, message: Message, deliver: Any = None) -> str | None:
        """POST one message; the reason it got no answer, or None. Transport and channel errors become
        `RemoteCallError` naming the server (never a key or a body)."""

        async def ignore(_: Message) -> None:
            return None

        headers = {} if message.method == "initialize" else self._headers()
        try:
            failure = await self._upstream.post(message, headers, deliver or ignore)
        except (httpx2.HTTPError, ChannelError) as exc:
            raise RemoteCallError(describe(exc, self._server_url)) from None
        return failure.message if failure is not None else None


def _check_text(arguments: dict[str, Any]) -> None:
    """`ProxyError` naming the first argument UTF-8 cannot encode: a lone surrogate, as Python gives a byte of
    argv that is not UTF-8 (`memory-proxy search $'caf\\xe9'`), where the request's encoding would fail."""
    for key, value in arguments.items():
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ProxyError(f"{key} is not UTF-8 text; give it in UTF-8") from None


def _text(result: dict[str, Any]) -> str:
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    return "\n".join(str(block.get("text", "")) for block in blocks if isinstance(block, dict)).strip()
