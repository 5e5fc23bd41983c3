"""The proxy's MCP header rules: `client_proxy.forward.mcp_headers` agrees with the SDK it was taken from, and
`Stamper` stamps each message as the SDK's client session and transport would."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from mcp.shared import inbound

from client_proxy.forward import mcp_headers
from client_proxy.forward.jsonrpc import Message
from client_proxy.forward.stamping import Stamper

SCHEMAS = [
    None,
    {},
    {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}},
    {"properties": {"a": {"type": "object", "properties": {"b": {"type": "integer", "x-mcp-header": "B"}}}}},
    {"properties": {"a": {"type": "boolean", "x-mcp-header": "Flag"}, "c": {"type": "string"}}},
    {"x-mcp-header": "Root", "type": "string"},
    {"properties": {"a": {"type": "number", "x-mcp-header": "N"}}},
    {"properties": {"a": {"type": ["string", "null"], "x-mcp-header": "T"}}},
    {"properties": {"a": {"type": "string", "x-mcp-header": "bad token"}}},
    {"properties": {"a": {"type": "string", "x-mcp-header": 7}}},
    {"properties": {"a": {"type": "string", "x-mcp-header": "Dup"}, "b": {"type": "string", "x-mcp-header": "dup"}}},
    {"properties": {"a": {"anyOf": [{"type": "string", "x-mcp-header": "Nested"}]}}},
    {"$defs": {"x": {"type": "string", "x-mcp-header": "Def"}}, "properties": {"a": {"$ref": "#/$defs/x"}}},
    {"properties": {"a": {"type": "string", "default": {"x-mcp-header": "Data"}}}},
    {"items": {"properties": {"a": {"type": "string", "x-mcp-header": "Item"}}}},
]
ARGUMENTS = [
    {},
    {"region": "eu-west"},
    {"region": " padded "},
    {"region": "Île"},
    {"region": None},
    {"a": {"b": 42}},
    {"a": {"b": 10**5000}},
    {"a": True},
    {"a": 1.5},
    {"a": [1]},
    {"a": "=?base64?Zm9v?="},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=12,
)


@given(st.text())
def test_header_values_are_encoded_as_the_sdk_encodes_them(value):
    assert mcp_headers.encode_header_value(value) == inbound.encode_header_value(value)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_x_mcp_header_annotations_are_judged_and_mapped_as_the_sdk_does(schema):
    assert mcp_headers.find_invalid_x_mcp_header(schema) == inbound.find_invalid_x_mcp_header(schema)
    if inbound.find_invalid_x_mcp_header(schema) is None:
        assert mcp_headers.x_mcp_header_map(schema) == inbound.x_mcp_header_map(schema)


@given(json_values)
def test_any_schema_is_judged_as_the_sdk_judges_it(schema):
    assert mcp_headers.find_invalid_x_mcp_header(schema) == inbound.find_invalid_x_mcp_header(schema)
    assert mcp_headers.x_mcp_header_map(schema) == inbound.x_mcp_header_map(schema)


@pytest.mark.parametrize("arguments", ARGUMENTS)
@pytest.mark.parametrize("schema", [schema for schema in SCHEMAS if inbound.find_invalid_x_mcp_header(schema) is None])
def test_param_headers_are_mirrored_from_arguments_as_the_sdk_does(schema, arguments):
    header_map = inbound.x_mcp_header_map(schema)
    assert mcp_headers.mcp_param_headers(header_map, arguments) == inbound.mcp_param_headers(header_map, arguments)


def test_the_header_names_and_name_bearing_methods_are_the_sdks():
    assert mcp_headers.PROTOCOL_VERSION_HEADER == inbound.MCP_PROTOCOL_VERSION_HEADER
    assert mcp_headers.METHOD_HEADER == inbound.MCP_METHOD_HEADER
    assert mcp_headers.NAME_HEADER == inbound.MCP_NAME_HEADER
    assert mcp_headers.PARAM_HEADER_PREFIX == inbound.MCP_PARAM_HEADER_PREFIX
    assert dict(mcp_headers.NAME_BEARING_METHODS) == dict(inbound.NAME_BEARING_METHODS)


# -- Stamper -------------------------------------------------------------------------------------------------------

MODERN = "2026-07-28"
ENVELOPE = {"_meta": {mcp_headers.PROTOCOL_VERSION_META_KEY: MODERN, "io.modelcontextprotocol/clientCapabilities": {}}}


def message(**data) -> Message:
    data = {"jsonrpc": "2.0", **data}
    return Message(json.dumps(data).encode(), data)


def answer(request_id, result) -> Message:
    return message(id=request_id, result=result)


def test_initialize_carries_no_mcp_header_and_every_message_after_it_the_negotiated_version():
    stamper = Stamper()
    initialize = message(id=1, method="initialize", params={"protocolVersion": "2025-11-25"})
    assert stamper.headers_for(initialize) == {}
    stamper.observe(initialize, answer(1, {"protocolVersion": "2025-06-18"}))
    assert stamper.headers_for(message(method="notifications/initialized")) == {"mcp-protocol-version": "2025-06-18"}
    call = message(id=2, method="tools/call", params={"name": "echo", "arguments": {}})
    assert stamper.headers_for(call) == {"mcp-protocol-version": "2025-06-18"}  # no Mcp-Method before 2026
    assert stamper.headers_for(message(id=7, result={})) == {"mcp-protocol-version": "2025-06-18"}
    assert stamper.transport_headers() == {"mcp-protocol-version": "2025-06-18"}
    assert not stamper.modern


def test_a_discover_probe_is_stamped_at_its_version_which_does_not_leak_onto_the_initialize_after_it():
    stamper = Stamper()
    probe = message(id=1, method="server/discover", params=ENVELOPE)
    assert stamper.headers_for(probe) == {"mcp-protocol-version": MODERN, "mcp-method": "server/discover"}
    assert stamper.modern
    assert stamper.headers_for(message(id=2, method="initialize", params={})) == {}
    assert stamper.transport_headers() == {} and not stamper.modern


def test_a_2026_call_carries_method_name_and_the_param_headers_of_the_tools_last_listing():
    stamper = Stamper()
    schema = {"type": "object", "properties": {"region": {"type": "string", "x-mcp-header": "Region"}}}
    listing = message(id=1, method="tools/list", params=ENVELOPE)
    stamper.headers_for(listing)
    stamper.observe(listing, answer(1, {"tools": [{"name": "place", "inputSchema": schema}]}))
    call = message(id=2, method="tools/call", params={**ENVELOPE, "name": "place", "arguments": {"region": "Île"}})
    assert stamper.headers_for(call) == {
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": "place",
        "Mcp-Param-Region": "=?base64?w45sZQ==?=",
    }
    unlisted = message(id=3, method="tools/call", params={**ENVELOPE, "name": "other", "arguments": {"region": "x"}})
    assert "Mcp-Param-Region" not in stamper.headers_for(unlisted)
    read = message(id=4, method="resources/read", params={**ENVELOPE, "uri": "memory://MEMORY.md"})
    assert stamper.headers_for(read)["mcp-name"] == "memory://MEMORY.md"


def test_a_listing_page_adds_tools_an_invalid_annotation_evicts_and_a_complete_listing_forgets_the_rest():
    stamper = Stamper()
    valid = {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}
    invalid = {"properties": {"a": {"type": "object", "x-mcp-header": "A"}}}

    def listing(tools, cursor=None, next_cursor=None):
        params = {**ENVELOPE, **({"cursor": cursor} if cursor else {})}
        request = message(id=1, method="tools/list", params=params)
        result = {"tools": tools, **({"nextCursor": next_cursor} if next_cursor else {})}
        stamper.observe(request, answer(1, result))

    def params_for(name):
        call = message(id=2, method="tools/call", params={**ENVELOPE, "name": name, "arguments": {"a": "v"}})
        return {key: value for key, value in stamper.headers_for(call).items() if key.startswith("Mcp-Param-")}

    listing([{"name": "one", "inputSchema": valid}], next_cursor="2")
    listing([{"name": "two", "inputSchema": valid}], cursor="2")
    assert params_for("one") == params_for("two") == {"Mcp-Param-A": "v"}
    listing([{"name": "one", "inputSchema": invalid}], cursor="3")
    assert params_for("one") == {}
    listing([{"name": "three", "inputSchema": valid}])
    assert params_for("two") == {} and params_for("three") == {"Mcp-Param-A": "v"}


def test_a_legacy_tools_listing_teaches_no_param_headers():
    stamper = Stamper()
    schema = {"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}
    request = message(id=1, method="tools/list")
    stamper.observe(request, answer(1, {"tools": [{"name": "one", "inputSchema": schema}]}))
    call = message(id=2, method="tools/call", params={**ENVELOPE, "name": "one", "arguments": {"a": "v"}})
    assert "Mcp-Param-A" not in stamper.headers_for(call)
