"""Strict arguments: a tool or prompt refuses an argument it does not know, naming it and the ones it takes.

MCPServer validates arguments with pydantic models that ignore unknown fields, so a client newer or older than the
server could ask for something narrower (`heading=Deploy` on memory_write's replace, before headings were an
argument) and silently get something wider (the whole file replaced). Here every `tools/call` is checked against
the tool's input schema before the tool runs, and every listed input schema says `additionalProperties: false`,
so clients know up front. Every `prompts/get` is checked against the prompt's declared arguments the same way
(a missing required one too): the SDK would answer an internal error, and log the values it was given.
Refusals are `INVALID_PARAMS`, redacted on the way out like every error (`server.mcp.boundary`).
Public (if provisional) SDK surface only: `MCPServer.middleware`, `MCPServer.list_tools()` and
`MCPServer.list_prompts()`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, Prompt


def accepted(schema: Mapping[str, Any]) -> list[str]:
    """The argument names an input schema declares, in declaration order."""
    return list(schema.get("properties") or {})


def unknown_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> list[str]:
    known = set(accepted(schema))
    return sorted(name for name in arguments if name not in known)


def refusal(tool: str, unknown: list[str], schema: Mapping[str, Any]) -> str:
    return _refusal(tool, accepted(schema), unknown=unknown)


def prompt_refusal(prompt: Prompt, arguments: Mapping[str, Any]) -> str | None:
    """Why `arguments` do not fit what `prompt` declares (unknown names, missing required ones); None if they do."""
    declared = prompt.arguments or []
    names = [argument.name for argument in declared]
    unknown = sorted(name for name in arguments if name not in names)
    missing = [argument.name for argument in declared if argument.required and argument.name not in arguments]
    return _refusal(prompt.name, names, unknown=unknown, missing=missing) if unknown or missing else None


def _refusal(what: str, takes: list[str], *, unknown: list[str], missing: list[str] | None = None) -> str:
    wrong = [f"does not take the {_arguments(unknown)}"] if unknown else []
    wrong += [f"needs the {_arguments(missing)}"] if missing else []
    return f"{what} {' and '.join(wrong)}; it takes: {', '.join(takes) or 'no arguments'}"


def _arguments(names: list[str]) -> str:
    return f"{'argument' if len(names) == 1 else 'arguments'} {', '.join(repr(name) for name in names)}"


def closed(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with `additionalProperties: false`."""
    return {**schema, "additionalProperties": False}


def closed_listing(listing: Mapping[str, Any]) -> dict[str, Any]:
    """A `tools/list` answer whose every input schema is closed."""
    tools = [{**tool, "inputSchema": closed(tool.get("inputSchema") or {})} for tool in listing.get("tools", [])]
    return {**listing, "tools": tools}


def install(mcp: MCPServer) -> None:
    """Refuse unknown arguments on every tool of `mcp`, and say so in its listed schemas; refuse unknown and missing
    arguments, and unknown names, on every prompt."""
    schemas: dict[str, dict[str, Any]] = {}
    prompts: dict[str, Prompt] = {}

    async def schema_of(name: object) -> dict[str, Any] | None:
        if not schemas:
            schemas.update({tool.name: dict(tool.input_schema) for tool in await mcp.list_tools()})
        return schemas.get(name) if isinstance(name, str) else None

    async def check_prompt(name: object, arguments: object) -> None:
        if not prompts:
            prompts.update({prompt.name: prompt for prompt in await mcp.list_prompts()})
        if not isinstance(name, str) or not isinstance(arguments, Mapping):
            return  # not a request the SDK will take: its own params validation answers
        prompt = prompts.get(name)
        if prompt is None:
            raise MCPError(code=INVALID_PARAMS, message=f"no prompt {name!r}; prompts: {', '.join(sorted(prompts))}")
        refused = prompt_refusal(prompt, arguments)
        if refused is not None:
            raise MCPError(code=INVALID_PARAMS, message=refused)

    async def strict_arguments(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if ctx.method == "tools/call" and ctx.params is not None:
            name, arguments = ctx.params.get("name"), ctx.params.get("arguments") or {}
            schema = await schema_of(name)
            if schema is not None and isinstance(arguments, Mapping):
                unknown = unknown_arguments(schema, arguments)
                if unknown:
                    raise MCPError(code=INVALID_PARAMS, message=refusal(str(name), unknown, schema))
        if ctx.method == "prompts/get" and ctx.params is not None:
            await check_prompt(ctx.params.get("name"), ctx.params.get("arguments") or {})
        answer = await call_next(ctx)
        if ctx.method != "tools/list" or answer is None:
            return answer
        listing = answer if isinstance(answer, dict) else answer.model_dump(by_alias=True, mode="json")
        return closed_listing(listing)

    mcp.middleware.append(strict_arguments)
