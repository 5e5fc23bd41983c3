"""The history tools: `memory_history` lists the versions of a file (or the recent changes of the whole memory, or
the files deleted now) and `memory_restore` brings a version back as a new one. `memory_get` reads a version
(`server.mcp.tools`). The work is `server.memory.history.HistoryService`'s, run in a worker thread like every tool.
"""

from __future__ import annotations

from typing import Annotated

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from server.mcp.answers import compact
from server.mcp.calls import in_thread, tool_caller
from server.memory.history import MAX_HISTORY_LIMIT, HistoryService
from server.memory.results import HistoryOutput, RestoreOutput

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
RESTORING = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)


def add_history_tools(mcp: MCPServer, history: HistoryService) -> None:
    @mcp.tool(title="Memory history", annotations=READ_ONLY)
    async def memory_history(
        ctx: Context,
        path: Annotated[
            str | None,
            Field(description="the file (default: the recent changes of every file); with deleted, a path prefix"),
        ] = None,
        deleted: Annotated[
            bool,
            Field(
                description="list the files deleted now (each with restore_version) instead of versions", strict=True
            ),
        ] = False,
        before: Annotated[int | None, Field(description="next_before of the previous page", ge=1, strict=True)] = None,
        limit: Annotated[int, Field(description="versions per page", ge=1, le=MAX_HISTORY_LIMIT, strict=True)] = 20,
    ) -> Annotated[CallToolResult, HistoryOutput]:
        """List past versions of a memory file, newest first: who changed it, when and how (write, push from a
        laptop, merge, conflict copy, delete, restore). Without path, the recent changes of all memory; with
        deleted=true, the deleted files. Read a version with memory_get(version=...); bring one back with
        memory_restore."""
        caller = tool_caller(ctx)
        listed = await in_thread(
            "memory_history", history.history, caller, path=path, deleted=deleted, before=before, limit=limit
        )
        return compact(listed)

    @mcp.tool(title="Restore a memory file", annotations=RESTORING)
    async def memory_restore(
        ctx: Context,
        path: Annotated[str, Field(description="file path inside memory: MEMORY.md or memory/<folders>/<name>.md")],
        version: Annotated[int, Field(description="the version to bring back, from memory_history", ge=1, strict=True)],
    ) -> Annotated[CallToolResult, RestoreOutput]:
        """Bring back a past version of a memory file (or a deleted file: its restore_version) as a new version.
        It reaches every synced laptop, and is itself undone by restoring the version before it."""
        caller = tool_caller(ctx)
        return compact(await in_thread("memory_restore", history.restore, caller, path, version))
