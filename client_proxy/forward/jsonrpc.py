"""JSON-RPC messages as the forwarder sees them: kept as the exact bytes that came in, read only for routing.

The forwarder never rewrites what the client or the server says; it only needs each message's kind, id and
method, and it writes the few answers of its own (errors when the server cannot be reached) with `error_line`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

# JSON-RPC and MCP error codes the forwarder answers with.
PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
METHOD_NOT_FOUND: Final = -32601
INTERNAL_ERROR: Final = -32603
SERVER_UNAVAILABLE: Final = -32000  # the SDK's CONNECTION_CLOSED: the server could not be reached or cut us off

RequestId = str | int


class NotJsonRpcError(ValueError):
    """A line that is not one JSON-RPC 2.0 message object."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Message:
    """One JSON-RPC message: its bytes exactly as received (one line, no line ending) and the parsed object."""

    raw: bytes
    data: dict[str, Any]

    @property
    def method(self) -> str | None:
        method = self.data.get("method")
        return method if isinstance(method, str) else None

    @property
    def id(self) -> RequestId | None:
        value = self.data.get("id")
        return value if isinstance(value, str | int) and not isinstance(value, bool) else None

    @property
    def params(self) -> dict[str, Any]:
        params = self.data.get("params")
        return params if isinstance(params, dict) else {}

    @property
    def is_request(self) -> bool:
        return self.method is not None and "id" in self.data

    @property
    def is_notification(self) -> bool:
        return self.method is not None and "id" not in self.data

    @property
    def is_response(self) -> bool:
        return self.method is None and ("result" in self.data or "error" in self.data)

    def answers(self, request_id: RequestId) -> bool:
        """Whether this is the response (result or error) to the request `request_id`."""
        value = self.data.get("id")
        return self.is_response and type(value) is type(request_id) and value == request_id

    @property
    def result(self) -> dict[str, Any] | None:
        result = self.data.get("result")
        return result if isinstance(result, dict) else None

    def line(self) -> bytes:
        """The message as one line for a newline-delimited stream: the original bytes unless they span lines."""
        if b"\n" in self.raw or b"\r" in self.raw:
            return json.dumps(self.data, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        return self.raw


def parse(raw: bytes) -> Message:
    """Parse one message; raise `NotJsonRpcError` (with the JSON-RPC error code to answer) when it is not one."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise NotJsonRpcError(PARSE_ERROR, "Parse error") from None
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
        raise NotJsonRpcError(INVALID_REQUEST, "Invalid Request: expected one JSON-RPC 2.0 message object")
    message = Message(raw, data)
    if not (message.is_request or message.is_notification or message.is_response):
        raise NotJsonRpcError(INVALID_REQUEST, "Invalid Request: neither a request, a notification nor a response")
    if "id" in data and message.id is None and not (message.is_response and data["id"] is None):
        raise NotJsonRpcError(INVALID_REQUEST, "Invalid Request: an id must be a string or an integer")
    return message


def error_line(request_id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
    """A JSON-RPC error response, as one line."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}, separators=(",", ":")).encode("utf-8")


def with_id(message: Message, request_id: RequestId) -> Message:
    """The same message under another id: the proxy's own copy of a request it re-sends (see `Forwarder`)."""
    data = {**message.data, "id": request_id}
    return Message(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode("utf-8"), data)
