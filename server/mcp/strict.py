"""Strict tool arguments: a tool refuses an argument it does not know, naming it and the ones it takes.

MCPServer validates arguments with pydantic models that ignore unknown fields, so a client newer or older than the
server could ask for something narrower (`heading=Deploy` on memory_write's replace, before headings were an
argument) and silently get something wider (the whole file replaced). Here every `tools/call` is checked against
the tool's input schema before the tool runs, and every listed input schema says `additionalProperties: false`,
so clients know up front.
Public (if provisional) SDK surface only: `MCPServer.middleware` and `MCPServer.list_tools()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS


def accepted(schema: Mapping[str, Any]) -> list[str]:
    """The argument names an input schema declares, in declaration order."""
    return list(schema.get("properties") or {})


def unknown_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    known = set(accepted(schema))
    return sorted(name for name in arguments if name not in known)


def refusal(tool: str, unknown: list[str], schema: Mapping[str, Any]) -> str:
    names = ", ".join(repr(name) for name in unknown)
    what = "argument" if len(unknown) == 1 else "arguments"
    return f"{tool} does not take the {what} {names}; it takes: {', '.join(accepted(schema)) or 'no arguments'}"


def closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with `additionalProperties: false`."""
    return {**schema, "additionalProperties": False}


def closed_listing(listing: Mapping[str, Any]) -> dict[str, Any]:
    """A `tools/list` answer whose every input schema is closed."""
    tools = [{**tool, "inputSchema": closed(tool.get("inputSchema") or {})} for tool in listing.get("tools", [])]
    return {**listing, "tools": tools}


def install(mcp: MCPServer) -> None:
    """Refuse unknown arguments on every tool of `mcp`, and say so in its listed schemas."""
    schemas: dict[str, dict[str, Any]] = {}

    async def schema_of(name: object) -> dict[str, Any] | None:
        if not schemas:
            schemas.update({tool.name: dict(tool.input_schema) for tool in await mcp.list_tools()})
        return schemas.get(name) if isinstance(name, str) else None

    async def strict_arguments(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.params is not None:
            name, arguments = ctx.params.get("name"), ctx.params.get("arguments") or {}
            schema = await schema_of(name)
            if schema is not None and isinstance(arguments, Mapping):
                unknown = unknown_arguments(schema, arguments)
                if unknown:
                    raise MCPError(code=INVALID_PARAMS, message=refusal(str(name), unknown, schema))
        answer = await call_next(ctx)
        if ctx.method != "tools/list" or answer is None:
            return answer
        listing = answer if isinstance(answer, dict) else answer.model_dump(by_alias=True, mode="json")
        return closed_listing(listing)

    mcp.middleware.append(strict_arguments)
