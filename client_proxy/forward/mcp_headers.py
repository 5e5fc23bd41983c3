"""The MCP HTTP header vocabulary, as the MCP Python SDK's client emits it.

A faithful port of the emit side of `mcp.shared.inbound` (SDK 2.3): header names, the `=?base64?...?=` value
codec, and the `x-mcp-header` schema rules that decide which tool arguments are mirrored into `Mcp-Param-*`
headers. Ported rather than imported because laptops install the proxy without the SDK (its import alone costs
most of a second at every launch); `tests/test_mcp_headers.py` checks every function here against the SDK's own.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

PROTOCOL_VERSION_HEADER: Final = "mcp-protocol-version"
METHOD_HEADER: Final = "mcp-method"
NAME_HEADER: Final = "mcp-name"
SESSION_HEADER: Final = "mcp-session-id"
PARAM_HEADER_PREFIX: Final = "Mcp-Param-"
X_MCP_HEADER_KEY: Final = "x-mcp-header"
# The per-request envelope of the `server/discover` generation (2026-07-28 and later) lives in `params._meta`.
PROTOCOL_VERSION_META_KEY: Final = "io.modelcontextprotocol/protocolVersion"

# Method -> the params key whose value the client mirrors into `Mcp-Name`.
NAME_BEARING_METHODS: Final[Mapping[str, str]] = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}

_B64_SENTINEL = re.compile(r"^=\?base64\?(?P<payload>.*)\?=$")
_HEADER_SAFE = re.compile(r"^[\x20-\x7E]*$")
_RFC9110_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_PRIMITIVE_TYPES: Final = frozenset({"string", "integer", "boolean"})
# JSON Schema 2020-12 applicators whose values are schema positions; instance data and `$ref` are never entered.
_SUBSCHEMA_SINGLE: Final = frozenset(
    {
        "items",
        "contains",
        "unevaluatedItems",
        "additionalProperties",
        "propertyNames",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
    }
)
_SUBSCHEMA_LIST: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_SUBSCHEMA_MAP: Final = frozenset({"patternProperties", "dependentSchemas", "$defs", "definitions"})

HeaderMap = dict[tuple[str, ...], str]


def encode_header_value(value: str) -> str:
    """`value` as is when it survives an HTTP field round trip, else wrapped as `=?base64?<utf-8 base64>?=`."""
    if _HEADER_SAFE.fullmatch(value) and value == value.strip() and not _B64_SENTINEL.fullmatch(value):
        return value
    return f"=?base64?{base64.b64encode(value.encode('utf-8')).decode('ascii')}?="


def _schema_positions(root: Any) -> Iterator[tuple[tuple[str, ...] | None, dict[str, Any]]]:
    """Every schema position with its chain of `properties` keys (None once another applicator was crossed)."""
    stack: list[tuple[tuple[str, ...] | None, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for keyword, value in node.items():
            if keyword == "properties" and isinstance(value, dict):
                for name, sub in value.items():
                    stack.append(((*path, name) if path is not None else None, sub))
            elif keyword in _SUBSCHEMA_SINGLE:
                stack.append((None, value))
            elif keyword in _SUBSCHEMA_LIST and isinstance(value, list):
                stack.extend((None, sub) for sub in value)
            elif keyword in _SUBSCHEMA_MAP and isinstance(value, dict):
                stack.extend((None, sub) for sub in value.values())


def find_invalid_x_mcp_header(input_schema: Any) -> str | None:
    """Why the schema's `x-mcp-header` annotations are invalid, or None: a 2026 client drops such a tool."""
    seen: dict[str, str] = {}
    for path, schema in _schema_positions(input_schema):
        if X_MCP_HEADER_KEY not in schema:
            continue
        if not path:
            return f"{X_MCP_HEADER_KEY} found at a schema position not reachable via a pure `properties` chain"
        where = ".".join(path)
        header = schema[X_MCP_HEADER_KEY]
        if not isinstance(header, str):
            return f"property {where!r}: {X_MCP_HEADER_KEY} must be a string, not {type(header).__name__}"
        if not _RFC9110_TOKEN.fullmatch(header):
            return f"property {where!r}: {X_MCP_HEADER_KEY} {header!r} is not an RFC 9110 token"
        kind = schema.get("type")
        if not isinstance(kind, str):
            return (
                f"property {where!r}: {X_MCP_HEADER_KEY} is only permitted on integer/string/boolean properties "
                f"(the type keyword is {type(kind).__name__}, not a string)"
            )
        if kind not in _PRIMITIVE_TYPES:
            return (
                f"property {where!r}: {X_MCP_HEADER_KEY} is only permitted on integer/string/boolean properties "
                f"(got {kind!r})"
            )
        lower = header.lower()
        if lower in seen:
            return f"{X_MCP_HEADER_KEY} {header!r} on property {where!r} duplicates property {seen[lower]!r}"
        seen[lower] = where
    return None


def x_mcp_header_map(input_schema: Any) -> HeaderMap:
    """Property path -> header token, for a schema `find_invalid_x_mcp_header` accepts."""
    return {
        path: token
        for path, schema in _schema_positions(input_schema)
        if path and isinstance(token := schema.get(X_MCP_HEADER_KEY), str)
    }


def mcp_param_headers(header_map: HeaderMap, arguments: Mapping[str, Any]) -> dict[str, str]:
    """The `Mcp-Param-<token>` headers a `tools/call` mirrors from its arguments (absent or null: no header)."""
    headers: dict[str, str] = {}
    for path, token in header_map.items():
        value = _value_at(arguments, path)
        if value is None or (rendered := _render_scalar(value)) is None:
            continue
        headers[f"{PARAM_HEADER_PREFIX}{token}"] = encode_header_value(rendered)
    return headers


def _render_scalar(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, str | int | float):
        return None
    try:
        return str(value)
    except ValueError:  # an int past the interpreter's digit limit
        return None


def _value_at(arguments: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = arguments
    for key in path:
        if not isinstance(node, Mapping):
            return None
        node = node.get(key)
    return node
