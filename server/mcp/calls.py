"""Running the blocking memory service from async MCP handlers: worker threads, errors, progress, cancellation.

The event loop never waits on the service: every call runs in a worker thread, and that thread is never
abandoned, so a cancelled call returns only once the service is done with it (a write is never left half done,
and shutdown waits for it). `translated` is the one place service errors become MCP errors.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from server.error_table import recognised
from server.mcp.caller import channel_user
from server.memory.caller import CallerContext

log = logging.getLogger(__name__)

T = TypeVar("T")

PROGRESS_INTERVAL = 0.1  # seconds between progress notifications (the last one is always sent)
Progress = Callable[[int, int, str], None]


async def in_thread(
    what: str, call: Callable[..., T], *args: Any, kind: type[Exception] = ToolError, **kwargs: Any
) -> T:
    """`call(*args, **kwargs)` in a worker thread, its errors translated to `kind`."""
    with translated(what, kind):
        return await anyio.to_thread.run_sync(functools.partial(call, *args, **kwargs))


@contextmanager
def translated(what: str, kind: type[Exception]) -> Iterator[None]:
    """The one place service errors become MCP errors: the service's own messages are written for callers and
    hold no library exception text, but may echo the caller's arguments or name what a file holds (its headings),
    so `server.mcp.boundary` redacts them on the way out (only the error's type is logged here). Anything else is
    left to the SDK, which answers with a generic message and logs the traceback."""
    try:
        yield
    except Exception as exc:
        known = recognised(exc)  # every one has a row in server.error_table.ERROR_TABLE: its message is for callers
        if known is None:
            raise
        log.info("%s refused: %s", what, type(known).__name__)
        raise kind(str(known)) from None


async def run_with_progress(ctx: Context, job: Callable[[Progress, Callable[[], bool]], T]) -> T:
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

    failure: Exception | None = None
    async with anyio.create_task_group() as watching:
        watching.start_soon(watch)
        async with anyio.create_task_group() as forwarding:  # ends once every notification has gone out
            forwarding.start_soon(forward)
            with send:
                try:
                    result = await anyio.to_thread.run_sync(job, progress, stop.is_set)
                except Exception as exc:  # raised out here: inside, a task group would wrap it in an ExceptionGroup
                    failure = exc
        watching.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result


def tool_caller(
    ctx: Context, refused: type[Exception] = ToolError, unknown: type[Exception] = ToolError
) -> CallerContext:
    """The caller of a tool call (or resource read), as the channel authenticated it: `refused` when there is
    none, `unknown` when its grants do not make a caller."""
    user = channel_user(ctx.request_context.request)
    if user is None:
        raise refused("not authenticated: this server is reached through memory-proxy")
    with translated("caller", unknown):
        return CallerContext.from_user(user)
