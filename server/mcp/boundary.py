"""The one way out for error text: every error the MCP layer answers with is redacted on its way to the client.

Error messages are written for callers, but many echo what the caller sent (a tag, a heading, the name of an
argument) or name what a file holds (its headings), and the SDK's argument validation quotes the rejected values
(`input_value='ghp_…'`). An agent that pastes a token into the wrong argument must not get it back in a tool result
its client logs or shows. So every error leaving here, a tool error result or a protocol error (`MCPError`: strict
refusals, resource and listing errors, the SDK's own params validation), passes `public`: a validation report
keeps the argument names and what was wrong, without the values, and every message goes through the same rules
as `memory_write` content (`redaction.redact`). The SDK logs each tool error verbatim at INFO before it gets
here; `server.observe.logs` holds that logger at WARNING.
Public (if provisional) SDK surface only: `MCPServer.middleware`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent

from redaction import redact

# How the SDK words a tool's argument validation failure: its prefix, then pydantic's report.
_VALIDATION = re.compile(r"(Error executing tool [^\s:]+): \d+ validation errors? for \S+\n(.*)", re.DOTALL)
_DETAIL = " [type="  # pydantic's bracket after each message: the error type, the input value and its type
_LINK = "    For further information visit "


def public(message: str) -> str:
    """`message` as it may leave the server: a validation report without the values it quotes, secrets redacted."""
    return redact(without_inputs(message)).text


def without_inputs(message: str) -> str:
    """The SDK's argument validation report as `<prefix>: invalid arguments: <loc>: <what is wrong>; ...`, without
    the input values pydantic quotes; any other message unchanged. A report in a shape not recognised keeps only
    its prefix (nothing it quotes can leave)."""
    found = _VALIDATION.fullmatch(message)
    if found is None:
        return message
    prefix, report = found.groups()
    problems: list[str] = []
    where: str | None = None
    for line in report.split("\n"):
        if line.startswith(_LINK):
            continue
        if line.startswith("  ") and not line.startswith("   ") and _DETAIL in line:
            what = line[2:].split(_DETAIL, 1)[0]
            problems.append(f"{where}: {what}" if where else what)
            where = None
        elif line and not line.startswith(" ") and where is None:
            where = line
        else:
            return f"{prefix}: invalid arguments"
    if not problems or where is not None:
        return f"{prefix}: invalid arguments"
    return f"{prefix}: invalid arguments: {'; '.join(problems)}"


def public_data(data: Any) -> Any:
    """An error's `data` with every string in it made `public`."""
    if isinstance(data, str):
        return public(data)
    if isinstance(data, Mapping):
        return {key: public_data(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [public_data(value) for value in data]
    return data


def public_result(answer: HandlerResult) -> HandlerResult:
    """A `tools/call` answer with the text of an error result made `public` (a successful result is left alone: it
    is the caller's memory, redacted when it was written)."""
    if isinstance(answer, CallToolResult):
        if not answer.is_error:
            return answer
        content = [
            block.model_copy(update={"text": public(block.text)}) if isinstance(block, TextContent) else block
            for block in answer.content
        ]
        return answer.model_copy(update={"content": content})
    if isinstance(answer, Mapping) and answer.get("isError"):
        blocks = answer.get("content") or []
        return {**answer, "content": [public_data(block) for block in blocks]}
    return answer


def install(mcp: MCPServer) -> None:
    """Make every error `mcp` answers with `public`; outermost of the server's own middleware, so it also sees the
    refusals of the others."""

    async def public_errors(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        try:
            answer = await call_next(ctx)
        except MCPError as exc:
            message, data = public(exc.error.message), public_data(exc.error.data)
            if message == exc.error.message and data == exc.error.data:
                raise
            raise MCPError(code=exc.error.code, message=message, data=data) from None
        return public_result(answer) if ctx.method == "tools/call" else answer

    mcp.middleware.insert(0, public_errors)
