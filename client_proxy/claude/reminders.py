"""When the agent is reminded to save what it learned, and in what words; pure (the hooks in `hooks.py` do I/O).

A `Stop` hook runs at the end of every turn, not of the session, so reminding every time would nag. The rule:
remind once the agent has changed files `EDITS_BEFORE_REMINDER` times since it last saved to memory (a
`memory_write` call, or an edit of `MEMORY.md` or `memory/...`) or was last reminded. Claude Code sets
`stop_hook_active` when the agent is already going on because of a Stop hook; then we never remind, so a reminder
cannot loop (https://code.claude.com/docs/en/hooks#stop-and-subagentstop-input).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from typing import Any, Final

EDITS_BEFORE_REMINDER: Final = 3
EDIT_TOOLS: Final = frozenset({"Edit", "MultiEdit", "Write", "NotebookEdit"})
SAVE_TOOL_SUFFIX: Final = "memory_write"  # the MCP tool, as Claude Code names it: mcp__<server>__memory_write

STOP_REMINDER: Final = (
    "Before you finish: if this work taught you something worth keeping (a decision and its reason, a convention, "
    "a gotcha, a command that works), save it now with the memory server's memory_write tool (one short entry; "
    "long-term facts under a heading of MEMORY.md). If there is nothing new, just stop."
)
COMPACT_REMINDER: Final = (
    "The conversation was just compacted. If the summary above holds decisions, lessons or open threads that are "
    "not in memory yet, save them now with memory_write, before they fade from later summaries."
)
PRE_COMPACT_NOTE: Final = (
    "memory-proxy: compacting; the agent will be reminded to save what the summary keeps, and the project memory "
    "is loaded again after it."
)


@dataclass(frozen=True)
class Tally:
    """Where the transcript was read up to, and the file edits since the last save or reminder."""

    offset: int = 0
    edits: int = 0


def count(lines: list[bytes], edits: int) -> int:
    """`edits` carried on through whole transcript lines: each file edit adds one, a save to memory resets to 0."""
    for line in lines:
        for name, tool_input in _tool_uses(line):
            if name.endswith(SAVE_TOOL_SUFFIX) or (name in EDIT_TOOLS and _is_memory_file(tool_input)):
                edits = 0
            elif name in EDIT_TOOLS:
                edits += 1
    return edits


def stop_answer(payload: dict[str, Any], edits: int) -> tuple[dict[str, str] | None, int]:
    """What a Stop hook prints (None: nothing, the agent stops) and the edit count to keep afterwards."""
    if payload.get("stop_hook_active") is True or edits < EDITS_BEFORE_REMINDER:
        return None, edits
    return {"decision": "block", "reason": STOP_REMINDER}, 0


def session_start_extra(payload: dict[str, Any]) -> str:
    """What the SessionStart hook adds to the project's memory: the reminder after a compaction, else nothing."""
    return f"\n{COMPACT_REMINDER}\n" if payload.get("source") == "compact" else ""


def _tool_uses(line: bytes) -> list[tuple[str, object]]:
    try:
        entry = json.loads(line)
    except (ValueError, RecursionError):
        return []
    message = entry.get("message") if isinstance(entry, dict) else None
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [
        (block["name"], block.get("input"))
        for block in content
        if isinstance(block, dict) and block.get("type") == "tool_use" and isinstance(block.get("name"), str)
    ]


def _is_memory_file(tool_input: object) -> bool:
    path = tool_input.get("file_path") if isinstance(tool_input, dict) else None
    if not isinstance(path, str):
        return False
    return posixpath.basename(path).lower() == "memory.md" or "/memory/" in path.replace("\\", "/")
