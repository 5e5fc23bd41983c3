"""The MCP surface: the memory tools, every memory file as a `memory://` resource, and two prompts
(`server.mcp.prompts`); the history tools are in `server.mcp.history_tools`.

Each handler finds its caller in the HTTP request the channel authenticated (`scope["user"]`), runs the blocking
service call in a worker thread (never abandoned, so a cancelled or interrupted write still finishes), and turns
the service's errors into tool errors an agent can act on (`server.mcp.calls`), every error redacted on its way
out (`server.mcp.boundary`). Nothing here widens what the caller may reach: the service works on the index the
request names, and checks the grant on every call.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio.to_thread
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ListResourcesResult,
    PaginatedRequestParams,
    Resource,
    ToolAnnotations,
)
from pydantic import Field

from server.error_table import KNOWN_ERRORS, answer_for
from server.mcp import boundary, strict
from server.mcp.answers import compact, fit_list, fit_search, get_answer
from server.mcp.arguments import CategoryFilter, FilePath, Hash, Heading, MmrLambda, RecencyHalfLife, Rerank, TagFilter
from server.mcp.caller import channel_user
from server.mcp.calls import Progress, in_thread, run_with_progress, tool_caller, translated
from server.mcp.history_tools import add_history_tools
from server.mcp.prompts import add_prompts
from server.memory.history import HistoryService
from server.memory.results import (
    DeleteOutput,
    GetOutput,
    ListOutput,
    SearchOutput,
    StatusOutput,
    SyncOutput,
    WriteOutput,
)
from server.memory.service import SERVER_VERSION, CallerContext, MemoryService, PermissionDeniedError

log = logging.getLogger(__name__)

SERVER_NAME = "agent-memory"
TIMEZONE_HEADER = "x-memory-timezone"  # the laptop's IANA time zone, sent by the proxy: daily logs use its date
URI_SCHEME = "memory"
RESOURCE_PAGE = 100
MAX_RESULTS = 50  # hits, and list entries per page, that fit one tool result (see server.mcp.answers)
MAX_LIST_PAGE = 200

INSTRUCTIONS = (
    "Long-term memory shared by this project's agents, kept as markdown files (MEMORY.md, memory/*.md, daily "
    "logs memory/YYYY-MM-DD.md). Search it before answering questions about past decisions, conventions or work; "
    "cite hits as path#Lx-Ly. Store durable facts, decisions and progress with memory_write (it appends to "
    "today's log by default)."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)


def build_mcp_server(service: MemoryService) -> MCPServer:
    """The MCP server over `service`: tools, resources and prompts, answering for the caller of each request."""
    mcp: MCPServer = MCPServer(
        SERVER_NAME, title="Agent memory", version=SERVER_VERSION, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @mcp.tool(title="Search memory", annotations=READ_ONLY)
    async def memory_search(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                description='what to look for, in plain words; naming a month or a year ("in October 2023") puts'
                " the daily logs of that time first"
            ),
        ],
        max_results: Annotated[
            int | None,
            Field(
                description="hits to return (default: the server's, 8 unless configured)",
                ge=1,
                le=MAX_RESULTS,
                strict=True,
            ),
        ] = None,
        min_score: Annotated[
            float | None,
            Field(
                description="drop hits scoring below this, 0-1 (default: none, but an empty answer when even the best"
                " hit is under the server's measured threshold); 0 shows the closest matches anyway",
                strict=True,
            ),
        ] = None,
        sources: Annotated[
            list[Literal["memory", "sessions"]] | None, Field(description="only these sources (default: all)")
        ] = None,
        path: Annotated[str | None, Field(description="only files under this path prefix, e.g. memory/")] = None,
        date_from: Annotated[str | None, Field(description="only daily logs from this day, YYYY-MM-DD")] = None,
        date_to: Annotated[str | None, Field(description="only daily logs up to this day, YYYY-MM-DD")] = None,
        scope: Annotated[
            Literal["index", "all"],
            Field(description="'index': this project's memory; 'all': also every other memory you may read"),
        ] = "index",
        tags: TagFilter = None,
        category: CategoryFilter = None,
        mmr_lambda: MmrLambda = None,
        recency_half_life_days: RecencyHalfLife = None,
        rerank: Rerank = None,
    ) -> Annotated[CallToolResult, SearchOutput]:
        """Search memory (meaning and keywords) for notes, decisions and past work. Returns the best passages
        with a path#Lx-Ly citation, heading, snippet and score; read more around a hit with memory_get."""
        caller = tool_caller(ctx)
        found = await in_thread(
            "memory_search",
            service.search,
            caller,
            query,
            max_results=max_results,
            min_score=min_score,
            sources=list(sources) if sources is not None else None,
            path=path,
            date_from=date_from,
            date_to=date_to,
            scope=scope,
            tags=tags,
            category=category,
            mmr_lambda=mmr_lambda,
            recency_half_life_days=recency_half_life_days,
            rerank=rerank,
        )
        return compact(fit_search(found))

    @mcp.tool(title="Read a memory file", annotations=READ_ONLY)
    async def memory_get(
        ctx: Context,
        path: FilePath,
        start_line: Annotated[
            int | None,
            Field(
                description="first line to return, 1-based; with heading, a line inside the section, which also picks"
                " one of several sections of the same name",
                strict=True,
            ),
        ] = None,
        end_line: Annotated[int | None, Field(description="last line to return, inclusive", strict=True)] = None,
        heading: Heading = None,
        version: Annotated[
            int | None, Field(description="a past version, from memory_history", ge=1, strict=True)
        ] = None,
        start_char: Annotated[
            int | None,
            Field(
                description="with start_line: begin at this character of that line, 1-based (next_start_char of an"
                " answer that stopped inside a long line)",
                strict=True,
            ),
        ] = None,
    ) -> Annotated[CallToolResult, GetOutput]:
        """Read a memory file, lines start_line-end_line of it, or one section by heading (with its line range
        and section_hash); with version, a past version. Long answers stop early and say where to continue
        (next_start_line; in a long line, next_start_char). A missing file is exists=false. hash (or
        section_hash) is what memory_write needs to replace the file (or section)."""
        caller = tool_caller(ctx)
        return get_answer(
            await in_thread(
                "memory_get", service.get, caller, path, start_line=start_line, end_line=end_line, heading=heading,
                version=version, start_char=start_char,
            )
        )  # fmt: skip

    @mcp.tool(
        title="Write to memory",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
        ),
    )
    async def memory_write(
        ctx: Context,
        content: Annotated[str, Field(description="markdown text to store")],
        path: Annotated[
            str | None, Field(description="target file (default: today's daily log memory/YYYY-MM-DD.md)")
        ] = None,
        mode: Annotated[
            Literal["append", "replace"],
            Field(
                description="'append' adds to the end (of the section, with heading); 'replace' overwrites the file"
                " (the section, with heading) and needs expected_hash"
            ),
        ] = "append",
        topic: Annotated[
            str | None,
            Field(
                description="short title: appends go under '## HH:MM — topic' ('## HH:MM — topic (2)' when the file"
                " already has that heading)"
            ),
        ] = None,
        heading: Annotated[
            str | None,
            Field(
                description="write to this section only (named as in memory_get; with no path, in today's daily log)."
                " An append goes at the end of its own text, before its subsections; a missing heading is created"
                " one level below its parent (## under a file's # title). In a daily log, or with a topic, the text"
                " goes under a new '### HH:MM — topic' after its subsections. replace keeps the heading line"
                " unless content starts with a heading. expected_hash is then the section's section_hash"
            ),
        ] = None,
        expected_hash: Hash = None,
        idempotency_key: Annotated[
            str | None, Field(description="any unique string: a retried call with the same key writes only once")
        ] = None,
        tags: Annotated[
            list[str] | None,
            Field(
                description="tags for what you write, e.g. ['database', 'postgres'] (lower case a-z 0-9 _ . -). In a"
                " daily log they label the new entry ('## HH:MM — topic [tags: ...]'); elsewhere they are added to"
                " the file's front matter",
                max_length=16,
            ),
        ] = None,
        category: Annotated[
            str | None,
            Field(description="one word, stored like tags: decision, pattern, preference, fact, convention, lesson"),
        ] = None,
    ) -> Annotated[CallToolResult, WriteOutput]:
        """Store a note in memory. By default appends to today's daily log under a '## HH:MM — topic' heading;
        with heading, under that section. 'replace' rewrites a whole file (or one section) and is refused (with
        the current hash) if it changed since you read it. Searchable as soon as this returns."""
        caller = tool_caller(ctx)
        written = await in_thread(
            "memory_write",
            service.write,
            caller,
            content,
            path=path,
            mode=mode,
            topic=topic,
            heading=heading,
            expected_hash=expected_hash,
            idempotency_key=idempotency_key,
            timezone=_header(ctx, TIMEZONE_HEADER),
            tags=tags,
            category=category,
        )
        return compact(written)

    @mcp.tool(title="List memory files", annotations=READ_ONLY)
    async def memory_list(
        ctx: Context,
        prefix: Annotated[str | None, Field(description="only paths starting with this, e.g. memory/")] = None,
        date_from: Annotated[str | None, Field(description="only daily logs from this day, YYYY-MM-DD")] = None,
        date_to: Annotated[str | None, Field(description="only daily logs up to this day, YYYY-MM-DD")] = None,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
        limit: Annotated[int, Field(description="files per page", ge=1, le=MAX_LIST_PAGE, strict=True)] = 100,
        tags: TagFilter = None,
        category: CategoryFilter = None,
    ) -> Annotated[CallToolResult, ListOutput]:
        """List memory files with size, lines, hash and who changed them when, sorted by path."""
        caller = tool_caller(ctx)
        listed = await in_thread(
            "memory_list",
            service.list,
            caller,
            prefix=prefix,
            date_from=date_from,
            date_to=date_to,
            cursor=cursor,
            limit=limit,
            tags=tags,
            category=category,
        )
        return compact(fit_list(listed))

    @mcp.tool(
        title="Delete a memory file",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def memory_delete(
        ctx: Context, path: FilePath, expected_hash: Hash = None
    ) -> Annotated[CallToolResult, DeleteOutput]:
        """Delete a memory file everywhere (every synced laptop loses it too). With expected_hash, only if the
        file is still that version."""
        caller = tool_caller(ctx)
        return compact(await in_thread("memory_delete", service.delete, caller, path, expected_hash=expected_hash))

    @mcp.tool(title="Memory status", annotations=READ_ONLY)
    async def memory_status(ctx: Context) -> Annotated[CallToolResult, StatusOutput]:
        """Which memory you are using and what it holds: embedding model, files and chunks per source, pending
        indexing, last change, search modes available, your caller name and access."""
        caller = tool_caller(ctx)
        return compact(await in_thread("memory_status", service.status, caller))

    @mcp.tool(
        title="Re-index memory",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def memory_sync(
        ctx: Context,
        force: Annotated[bool, Field(description="re-index every file, not only changed ones", strict=True)] = False,
        source: Annotated[
            Literal["memory", "sessions"] | None, Field(description="only this source's files (default: all)")
        ] = None,
        path: Annotated[str | None, Field(description="only this file, or files under this folder")] = None,
    ) -> Annotated[CallToolResult, SyncOutput]:
        """Re-index memory files changed outside memory_write now (usually automatic), optionally only one
        source or path. Reports progress and can be cancelled."""
        caller = tool_caller(ctx)

        def sync(progress: Progress, cancelled: Callable[[], bool]) -> SyncOutput:
            return service.sync(caller, force=force, progress=progress, cancelled=cancelled, source=source, path=path)

        with translated("memory_sync", ToolError):
            return compact(await run_with_progress(ctx, sync))

    _add_resources(mcp, service)
    add_prompts(mcp)
    add_history_tools(mcp, HistoryService(service))
    strict.install(mcp)
    boundary.install(mcp)  # outermost: it redacts the others' refusals too
    return mcp


# resources ------------------------------------------------------------------------------------------------


def _add_resources(mcp: MCPServer, service: MemoryService) -> None:
    @mcp.resource(
        f"{URI_SCHEME}://{{index}}/{{+path}}",
        name="memory-file",
        title="Memory file",
        description="A markdown memory file of the index this connection uses.",
        mime_type="text/markdown",
    )
    async def read_memory_file(index: str, path: str, ctx: Context) -> str:
        caller = _resource_caller(ctx)
        if index != caller.index:  # the same answer as a missing file: other indexes are not visible here
            raise ResourceNotFoundError(f"no memory file {path!r} in index {index!r}")
        # The whole file in one read, exactly: memory_get's pages cut long lines and join lines with "\n".
        found = await in_thread("resources/read", service.read, caller, path, kind=ResourceNotFoundError)
        if found is None:
            raise ResourceNotFoundError(f"no memory file {path!r} in index {index!r}")
        return found.text

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        user = channel_user(ctx.request)
        try:
            if user is None:
                raise PermissionDeniedError("not authenticated")
            caller = CallerContext.from_user(user)
            paths = await anyio.to_thread.run_sync(service.resource_paths, caller)
        except KNOWN_ERRORS as exc:
            answer = answer_for(exc)
            assert answer is not None  # every known error has a row, at the latest its root's
            raise MCPError(code=answer.mcp_code, message=str(exc)) from None
        start = _page_start(params.cursor if params is not None else None)
        page = paths[start : start + RESOURCE_PAGE]
        following = start + RESOURCE_PAGE
        return ListResourcesResult(
            resources=[
                Resource(
                    uri=f"{URI_SCHEME}://{caller.index}/{path}",
                    name=path,
                    title=f"{caller.index}: {path}",
                    mime_type="text/markdown",
                )
                for path in page
            ],
            next_cursor=str(following) if following < len(paths) else None,
        )

    async def listing_memory_files(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """MCPServer lists only resources registered one by one; each caller's files need a listing of their own.
        The SDK's own handling runs first (initialisation gate, params validation), then its empty answer is
        replaced. Public (if provisional) SDK surface: `MCPServer.middleware`."""
        answer = await call_next(ctx)
        if ctx.method != "resources/list":
            return answer
        params = PaginatedRequestParams.model_validate(ctx.params) if ctx.params is not None else None
        return await list_resources(ctx, params)

    mcp.middleware.append(listing_memory_files)


def _page_start(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 9):
        raise MCPError(code=INVALID_PARAMS, message="invalid cursor: pass next_cursor from the previous page")
    return int(cursor)


# running service calls ------------------------------------------------------------------------------------


def _resource_caller(ctx: Context) -> CallerContext:
    return tool_caller(ctx, ResourceError, ResourceNotFoundError)


def _header(ctx: Context, name: str) -> str | None:
    headers = getattr(ctx.request_context.request, "headers", None)
    value = headers.get(name) if headers is not None else None
    return str(value) if value is not None else None
