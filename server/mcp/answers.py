"""What the MCP tools answer: structured content beside compact text, cut to fit one tool result.

Claude Code refuses tool results over about 25,000 tokens. JSON full of 64-hex-digit hashes runs at about two
characters a token, so hit lists and list pages are cut at MAX_ANSWER_CHARS, saying so (a notice, or a cursor
that continues after the last entry shown). memory_get pieces are capped by the service (~40,000 characters of
prose, about 10,000 tokens) and read as plain text with a header line.
"""

from __future__ import annotations

import json
from typing import TypeVar

from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel

from server.memory.arguments import encode_cursor
from server.memory.results import GetOutput, ListOutput, SearchOutput

M = TypeVar("M", bound=BaseModel)

MAX_ANSWER_CHARS = 30_000


def fit_search(output: SearchOutput) -> SearchOutput:
    """The best hits that fit one tool result; the notice says how many were left out."""
    kept = _within_budget(output.hits)
    if len(kept) == len(output.hits):
        return output
    left_out = f"{len(output.hits) - len(kept)} lower-ranked hits left out to fit one answer; ask for fewer"
    notice = "; ".join(part for part in (output.notice, left_out) if part)
    return output.model_copy(update={"hits": kept, "notice": notice})


def fit_list(output: ListOutput) -> ListOutput:
    """A page that fits one tool result: a long page ends early, its cursor continuing after the last entry."""
    kept = _within_budget(output.files)
    if len(kept) == len(output.files):
        return output
    return output.model_copy(update={"files": kept, "next_cursor": encode_cursor(kept[-1].path)})


def _within_budget(items: list[M]) -> list[M]:
    used = 0
    for count, item in enumerate(items):
        used += len(item.model_dump_json()) + 1
        if used > MAX_ANSWER_CHARS and count > 0:
            return items[:count]
    return items


def compact(output: BaseModel) -> CallToolResult:
    """The output as structured content, and as compact JSON text for clients that read only text (the SDK's
    default text is indented, which costs an agent tokens for nothing)."""
    data = output.model_dump(mode="json")
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def render_get(output: GetOutput) -> str:
    """memory_get as text an agent reads easily: one header line, the lines themselves, where to continue."""
    if not output.exists:
        return f"{output.path} does not exist (empty)."
    where = output.path if output.heading is None else f"{output.path} section {output.heading!r}"
    hashes = f"hash {output.hash}" if output.heading is None else f"section_hash {output.section_hash}"
    head = (
        f"{where} lines {output.start_line}-{output.end_line} of {output.total_lines} ({hashes})"
        if output.total_lines
        else f"{output.path} is empty (hash {output.hash})"
    )
    text = f"{head}\n\n{output.content}"
    if output.truncated and output.next_start_char is not None:
        text += (
            f"\n\n[truncated inside line {output.end_line}: call memory_get with start_line={output.end_line} and "
            f"start_char={output.next_start_char} to read on from its character {output.next_start_char}]"
        )
    elif output.truncated and output.next_start_line is not None:
        text += (
            f"\n\n[truncated: call memory_get with start_line={output.next_start_line} to read on from "
            f"line {output.next_start_line}]"
        )
    return text


def get_answer(output: GetOutput) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=render_get(output))], structured_content=output.model_dump(mode="json")
    )
