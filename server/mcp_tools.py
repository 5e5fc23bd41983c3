"""The MCP surface: seven memory tools, every memory file as a `memory://` resource, and two prompts.

Each handler finds its caller in the HTTP request the channel authenticated (`scope["user"]`), runs the blocking
service call in a worker thread (never abandoned, so a cancelled or interrupted write still finishes), and turns
the service's errors into tool errors an agent can act on (`translate`). Nothing here widens what the caller may
reach: the service works on the index the request names, and checks the grant on every call.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server import MCPServer, ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    CallToolResult,
    ListResourcesResult,
    PaginatedRequestParams,
    Resource,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field

from server.arguments import encode_cursor
from server.index.errors import EngineError
from server.mcp_caller import channel_user
from server.models import DeleteOutput, GetOutput, ListOutput, SearchOutput, StatusOutput, SyncOutput, WriteOutput
from server.service import SERVER_VERSION, CallerContext, MemoryService, PermissionDeniedError

log = logging.getLogger(__name__)

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

SERVER_NAME = "agent-memory"
TIMEZONE_HEADER = "x-memory-timezone"  # the laptop's IANA time zone, sent by the proxy: daily logs use its date
URI_SCHEME = "memory"
RESOURCE_PAGE = 100
# What one tool result may hold: Claude Code refuses results over ~25,000 tokens. JSON with 64-hex-digit hashes
# runs at about two characters a token, so pages and hit lists are cut at MAX_ANSWER_CHARS (memory_get pieces
# are capped by the service at ~40,000 characters of prose, about 10k tokens).
MAX_RESULTS = 50
MAX_LIST_PAGE = 200
MAX_ANSWER_CHARS = 30_000
PROGRESS_INTERVAL = 0.1  # seconds between progress notifications (the last one is always sent)

INSTRUCTIONS = (
    "Long-term memory shared by this project's agents, kept as markdown files (MEMORY.md, memory/*.md, daily "
    "logs memory/YYYY-MM-DD.md). Search it before answering questions about past decisions, conventions or work; "
    "cite hits as path#Lx-Ly. Store durable facts, decisions and progress with memory_write (it appends to "
    "today's log by default)."
)

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)

FilePath = Annotated[str, Field(description="file path inside memory: MEMORY.md or memory/<folders>/<name>.md")]
Day = Annotated[str | None, Field(description="YYYY-MM-DD")]
Hash = Annotated[
    str | None,
    Field(description="sha256 of the file's current content (from memory_get or memory_list); 'absent' for none"),
]


def build_mcp_server(service: MemoryService) -> MCPServer:
    """The MCP server over `service`: tools, resources and prompts, answering for the caller of each request."""
    mcp: MCPServer = MCPServer(
        SERVER_NAME, title="Agent memory", version=SERVER_VERSION, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    @mcp.tool(title="Search memory", annotations=READ_ONLY)
    async def memory_search(
        ctx: Context,
        query: Annotated[str, Field(description="what to look for, in plain words")],
        max_results: Annotated[int, Field(description="hits to return", ge=1, le=MAX_RESULTS)] = 8,
        min_score: Annotated[float, Field(description="drop hits scoring below this, 0-1")] = 0.0,
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
    ) -> Annotated[CallToolResult, SearchOutput]:
        """Search memory (meaning and keywords) for notes, decisions and past work. Returns the best passages
        with a path#Lx-Ly citation, heading, snippet and score; read more around a hit with memory_get."""
        caller = _caller(ctx)
        found = await _run(
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
        )
        return compact(fit_search(found))

    @mcp.tool(title="Read a memory file", annotations=READ_ONLY)
    async def memory_get(
        ctx: Context,
        path: FilePath,
        start_line: Annotated[int | None, Field(description="first line to return, 1-based")] = None,
        end_line: Annotated[int | None, Field(description="last line to return, inclusive")] = None,
    ) -> Annotated[CallToolResult, GetOutput]:
        """Read a memory file, or lines start_line-end_line of it. Long answers stop early and say where to
        continue (next_start_line). A missing file is an empty answer with exists=false. The hash is what
        memory_write needs to replace the file."""
        caller = _caller(ctx)
        output = await _run("memory_get", service.get, caller, path, start_line=start_line, end_line=end_line)
        return CallToolResult(
            content=[TextContent(type="text", text=render_get(output))],
            structured_content=output.model_dump(mode="json"),
        )

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
            Field(description="'append' adds to the end; 'replace' overwrites the file and needs expected_hash"),
        ] = "append",
        topic: Annotated[str | None, Field(description="short title: appends go under '## HH:MM — topic'")] = None,
        expected_hash: Hash = None,
        idempotency_key: Annotated[
            str | None, Field(description="any unique string: a retried call with the same key writes only once")
        ] = None,
    ) -> Annotated[CallToolResult, WriteOutput]:
        """Store a note in memory. By default appends to today's daily log under a '## HH:MM — topic' heading;
        'replace' rewrites a whole file and is refused (with the current hash) if it changed since you read it.
        The text is searchable as soon as this returns."""
        caller = _caller(ctx)
        return await _answer(
            "memory_write",
            service.write,
            caller,
            content,
            path=path,
            mode=mode,
            topic=topic,
            expected_hash=expected_hash,
            idempotency_key=idempotency_key,
            timezone=_header(ctx, TIMEZONE_HEADER),
        )

    @mcp.tool(title="List memory files", annotations=READ_ONLY)
    async def memory_list(
        ctx: Context,
        prefix: Annotated[str | None, Field(description="only paths starting with this, e.g. memory/")] = None,
        date_from: Annotated[str | None, Field(description="only daily logs from this day, YYYY-MM-DD")] = None,
        date_to: Annotated[str | None, Field(description="only daily logs up to this day, YYYY-MM-DD")] = None,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page")] = None,
        limit: Annotated[int, Field(description="files per page", ge=1, le=MAX_LIST_PAGE)] = 100,
    ) -> Annotated[CallToolResult, ListOutput]:
        """List memory files with size, lines, hash and who changed them when, sorted by path."""
        caller = _caller(ctx)
        listed = await _run(
            "memory_list",
            service.list,
            caller,
            prefix=prefix,
            date_from=date_from,
            date_to=date_to,
            cursor=cursor,
            limit=limit,
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
        caller = _caller(ctx)
        return await _answer("memory_delete", service.delete, caller, path, expected_hash=expected_hash)

    @mcp.tool(title="Memory status", annotations=READ_ONLY)
    async def memory_status(ctx: Context) -> Annotated[CallToolResult, StatusOutput]:
        """Which memory you are using and what it holds: embedding model, files and chunks per source, pending
        indexing, last change, search modes available, your caller name and access."""
        caller = _caller(ctx)
        return await _answer("memory_status", service.status, caller)

    @mcp.tool(
        title="Re-index memory",
        annotations=ToolAnnotations(
            read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
        ),
    )
    async def memory_sync(
        ctx: Context,
        force: Annotated[bool, Field(description="re-index every file, not only changed ones")] = False,
    ) -> Annotated[CallToolResult, SyncOutput]:
        """Re-index memory files changed outside memory_write now (usually automatic). Reports progress and can
        be cancelled."""
        caller = _caller(ctx)

        def sync(progress: Callable[[int, int, str], None], cancelled: Callable[[], bool]) -> SyncOutput:
            return service.sync(caller, force=force, progress=progress, cancelled=cancelled)

        with translated("memory_sync", ToolError):
            return compact(await run_with_progress(ctx, sync))

    _add_resources(mcp, service)
    _add_prompts(mcp)
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
        parts: list[str] = []
        start: int | None = None
        while True:
            output = await _run("resources/read", service.get, caller, path, start_line=start, kind=ResourceError)
            if not output.exists:
                raise ResourceNotFoundError(f"no memory file {path!r} in index {index!r}")
            parts.append(output.content)
            if not output.truncated or output.next_start_line is None:
                return "\n".join(parts)
            start = output.next_start_line

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        user = channel_user(ctx.request)
        try:
            if user is None:
                raise PermissionDeniedError("not authenticated")
            caller = CallerContext.from_user(user)
            paths = await anyio.to_thread.run_sync(service.resource_paths, caller)
        except EngineError as exc:
            raise MCPError(code=INVALID_PARAMS, message=str(exc)) from None
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

    # MCPServer lists only resources registered one by one; each caller's files need a handler of their own.
    mcp._lowlevel_server.add_request_handler("resources/list", PaginatedRequestParams, list_resources)


def _page_start(cursor: str | None) -> int:
    if cursor is None or cursor == "":
        return 0
    if not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 9):
        raise MCPError(code=INVALID_PARAMS, message="invalid cursor: pass next_cursor from the previous page")
    return int(cursor)


# prompts --------------------------------------------------------------------------------------------------


def _add_prompts(mcp: MCPServer) -> None:
    @mcp.prompt(title="Remember", description="Store a note in today's memory log.")
    def remember(
        note: Annotated[str, Field(description="what to remember")],
        topic: Annotated[str, Field(description="a short title for the entry")] = "",
    ) -> str:
        heading = f' with topic "{topic}"' if topic else " with a short topic you choose"
        return (
            f"Store the note below in memory with the memory_write tool (mode append, no path: today's daily "
            f"log){heading}. Keep it as written; fix only obvious typos. Then confirm in one line where it went.\n\n"
            f"{note}"
        )

    @mcp.prompt(title="Recall", description="Search memory and summarise what it says.")
    def recall(question: Annotated[str, Field(description="what you want to know")]) -> str:
        return (
            "Search memory with the memory_search tool for the question below (try a second phrasing if the first "
            "finds little; read around the best hits with memory_get). Then answer from what memory says, citing "
            "each fact as path#Lx-Ly, and say plainly when memory holds nothing on it.\n\n"
            f"Question: {question}"
        )


# running service calls ------------------------------------------------------------------------------------


def _caller(ctx: Context) -> CallerContext:
    user = channel_user(ctx.request_context.request)
    if user is None:
        raise ToolError("not authenticated: this server is reached through memory-proxy")
    with translated("caller", ToolError):
        return CallerContext.from_user(user)


def _resource_caller(ctx: Context) -> CallerContext:
    user = channel_user(ctx.request_context.request)
    if user is None:
        raise ResourceError("not authenticated: this server is reached through memory-proxy")
    with translated("caller", ResourceNotFoundError):
        return CallerContext.from_user(user)


def _header(ctx: Context, name: str) -> str | None:
    headers = getattr(ctx.request_context.request, "headers", None)
    value = headers.get(name) if headers is not None else None
    return str(value) if value is not None else None


async def _run(what: str, call: Callable[..., T], *args: Any, kind: type[Exception] = ToolError, **kwargs: Any) -> T:
    """`call(*args, **kwargs)` in a worker thread, its errors translated. The thread is never abandoned: a
    cancelled call returns only after the service has finished (a write is never left half done)."""
    with translated(what, kind):
        return await anyio.to_thread.run_sync(functools.partial(call, *args, **kwargs))


async def _answer(what: str, call: Callable[..., BaseModel], *args: Any, **kwargs: Any) -> CallToolResult:
    return compact(await _run(what, call, *args, **kwargs))


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


@contextmanager
def translated(what: str, kind: type[Exception]) -> Iterator[None]:
    """The one place service errors become MCP errors: the service's own messages are written for callers and
    never hold secrets, memory text or library exception text; anything else is left to the SDK, which answers
    with a generic message and logs the traceback."""
    try:
        yield
    except EngineError as exc:
        log.info("%s refused: %s", what, type(exc).__name__)
        raise kind(str(exc)) from None


async def run_with_progress(ctx: Context, job: Callable[[Callable[[int, int, str], None], Callable[[], bool]], T]) -> T:
    """Run `job(progress, cancelled)` in a worker thread, forwarding `progress` as MCP progress notifications
    and turning the request's cancellation into `cancelled() == True`, then waiting for the job to stop."""
    stop = threading.Event()
    send, receive = anyio.create_memory_object_stream[tuple[int, int, str]](math.inf)
    last_sent = [0.0]

    def progress(done: int, total: int, message: str) -> None:  # in the worker thread
        now = time.monotonic()
        if done < total and now - last_sent[0] < PROGRESS_INTERVAL:
            return
        last_sent[0] = now
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the request is over: no audience
            anyio.from_thread.run_sync(send.send_nowait, (done, total, message))

    async def forward() -> None:
        async with receive:
            async for done, total, message in receive:
                with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):  # the client went away
                    await ctx.report_progress(done, total, message or None)

    async def watch() -> None:
        try:
            await anyio.sleep_forever()
        finally:  # cancelled: by the client (or the server shutting down), or below once the job is done
            stop.set()

    async with anyio.create_task_group() as watching:
        watching.start_soon(watch)
        async with anyio.create_task_group() as forwarding:  # ends once every notification has gone out
            forwarding.start_soon(forward)
            with send:
                result = await anyio.to_thread.run_sync(job, progress, stop.is_set)
        watching.cancel_scope.cancel()
    return result


def render_get(output: GetOutput) -> str:
    """memory_get as text an agent reads easily: one header line, the lines themselves, where to continue."""
    if not output.exists:
        return f"{output.path} does not exist (empty)."
    head = (
        f"{output.path} lines {output.start_line}-{output.end_line} of {output.total_lines} (hash {output.hash})"
        if output.total_lines
        else f"{output.path} is empty (hash {output.hash})"
    )
    text = f"{head}\n\n{output.content}"
    if output.truncated and output.next_start_line is not None:
        text += (
            f"\n\n[truncated: call memory_get with start_line={output.next_start_line} to read on from "
            f"line {output.next_start_line}]"
        )
    return text
