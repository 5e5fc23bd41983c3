"""Which MCP headers each message carries: what the SDK's client session stamps and its HTTP transport adds.

The SDK's `ClientSession` stamps every message it sends, and its streamable-HTTP transport remembers the last
stamped protocol version for the messages nobody stamps (the client's answers to server requests, the GET stream,
the DELETE). The proxy sees the same messages as JSON, so it can decide the same headers without knowing any
tool:

- `initialize` carries no MCP header, and forgets the remembered version (a `server/discover` probe's value
  must not leak onto the handshake);
- after the handshake, every message carries `MCP-Protocol-Version: <negotiated>`;
- a message of the `server/discover` generation carries its protocol version in `params._meta`; it gets that
  version, `Mcp-Method`, `Mcp-Name` for the name-bearing methods, and, on `tools/call`, the `Mcp-Param-*`
  headers that the tool's last listing (a `tools/list` answer that passed through) declares.
"""

from __future__ import annotations

import logging
from typing import Any

from client_proxy.forward.jsonrpc import Message
from client_proxy.forward.mcp_headers import (
    METHOD_HEADER,
    NAME_BEARING_METHODS,
    NAME_HEADER,
    PROTOCOL_VERSION_HEADER,
    PROTOCOL_VERSION_META_KEY,
    HeaderMap,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)

log = logging.getLogger(__name__)


def envelope_version(message: Message) -> str | None:
    """The protocol version in a `server/discover`-generation message's `_meta` envelope, else None."""
    meta = message.params.get("_meta")
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


class Stamper:
    """The header state of one client connection (one proxy process)."""

    def __init__(self) -> None:
        self.negotiated: str | None = None  # from the initialize answer
        self._remembered: str | None = None  # the transport's cached version
        self._remembered_modern = False
        self._param_maps: dict[str, HeaderMap] = {}

    @property
    def modern(self) -> bool:
        """Whether the last stamped message was of the `server/discover` generation."""
        return self._remembered_modern

    def headers_for(self, message: Message) -> dict[str, str]:
        """The MCP headers for POSTing `message`; updates the remembered version as the SDK transport does."""
        stamped = self._stamp(message)
        if message.method == "initialize":
            self._remembered, self._remembered_modern = None, False
        elif PROTOCOL_VERSION_HEADER in stamped:
            self._remembered = stamped[PROTOCOL_VERSION_HEADER]
            self._remembered_modern = envelope_version(message) is not None
        return {**self.transport_headers(), **stamped}

    def transport_headers(self) -> dict[str, str]:
        """The headers of requests that carry no message: the GET stream and the DELETE."""
        return {PROTOCOL_VERSION_HEADER: self._remembered} if self._remembered else {}

    def _stamp(self, message: Message) -> dict[str, str]:
        method = message.method
        if method is None or method == "initialize":
            return {}
        version = envelope_version(message)
        if version is None:
            return {PROTOCOL_VERSION_HEADER: self.negotiated} if self.negotiated else {}
        headers = {PROTOCOL_VERSION_HEADER: version, METHOD_HEADER: method}
        params = message.params
        key = NAME_BEARING_METHODS.get(method)
        if key is not None and isinstance(name := params.get(key), str):
            headers[NAME_HEADER] = encode_header_value(name)
        if method == "tools/call" and isinstance(name := params.get("name"), str) and name in self._param_maps:
            arguments = params.get("arguments")
            headers.update(mcp_param_headers(self._param_maps[name], arguments if isinstance(arguments, dict) else {}))
        return headers

    def observe(self, request: Message, answer: Message) -> None:
        """Learn from the server's answer to `request`: the negotiated version, and the tools' header maps."""
        result = answer.result
        if result is None:
            return
        if request.method == "initialize":
            version = result.get("protocolVersion")
            self.negotiated = version if isinstance(version, str) else None
        elif request.method == "tools/list" and envelope_version(request) is not None:
            complete = request.params.get("cursor") is None and result.get("nextCursor") is None
            self._absorb(result.get("tools"), complete=complete)

    def _absorb(self, tools: Any, *, complete: bool) -> None:
        """Mirror the SDK's listing rule: valid annotations are cached, invalid ones evict (the client drops the
        tool), and a complete listing forgets tools it no longer names."""
        if not isinstance(tools, list):
            return
        names: set[str] = set()
        for tool in tools:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str):
                continue
            names.add(name)
            schema = tool.get("inputSchema")
            if find_invalid_x_mcp_header(schema) is None:
                self._param_maps[name] = x_mcp_header_map(schema)
            else:
                log.debug("tool %r declares invalid x-mcp-header annotations; no Mcp-Param headers for it", name)
                self._param_maps.pop(name, None)
        if complete:
            self._param_maps = {name: value for name, value in self._param_maps.items() if name in names}
