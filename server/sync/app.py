"""The `/sync/changes`, `/sync/push` and `/sync/sessions` endpoints of the inner app (see `docs/sync-protocol.md`
and `server.sync.sessions`).

They run behind the channel: `request.user` is the authenticated caller and the index it named. The blocking work
runs in worker threads (`SyncService`); a long-poll waits on the event loop for a `ChangeFeed` signal, which every
change to the index's mirror fires, whoever made it (a push, an MCP write, a file changed on the server's disk).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from channel.authz import ChannelUser
from server.error_table import answer_for, recognised
from server.errors import InvalidArgumentError, PermissionDeniedError, TooLargeError
from server.memory.service import CallerContext, MemoryService
from server.sync.service import SyncService
from server.sync.sessions import SessionUploads, parse_upload
from syncproto.messages import parse_push, parse_since, parse_wait
from syncproto.wire import CHANGES_PATH, MAX_PUSH_BYTES, PUSH_PATH, SESSIONS_PATH

log = logging.getLogger(__name__)

T = TypeVar("T")

RECHECK_SECONDS = 5.0  # a long-poll looks again this often even without a signal (disk edits, a missed wake-up)
_NO_STORE = {"cache-control": "no-store"}


class ChangeFeed:
    """Per index, an event that is set (and replaced) after every change; safe to fire from any thread."""

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.stopped = False  # the server is shutting down: long-polls answer at once

    def stop(self) -> None:
        """Wake every long-poll for good (call on the event loop)."""
        self.stopped = True
        events, self._events = self._events, {}
        for event in events.values():
            event.set()

    def event(self, index: str) -> asyncio.Event:
        """The event the next change to `index` sets (call on the event loop)."""
        self._loop = asyncio.get_running_loop()
        return self._events.setdefault(index, asyncio.Event())

    def notify(self, index: str) -> None:
        loop = self._loop
        if loop is None:
            return  # nobody has waited yet
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is gone
            loop.call_soon_threadsafe(self._fire, index)

    def _fire(self, index: str) -> None:
        event = self._events.pop(index, None)
        if event is not None:
            event.set()


def sync_routes(service: MemoryService) -> list[Route]:
    """The two routes, wired to `service` (whose mirror changes wake the long-polls)."""
    sync = SyncService(service)
    feed = ChangeFeed()
    service.change_listeners.append(feed.notify)
    service.stopping_listeners.append(feed.stop)

    async def changes(request: Request) -> Response:
        caller = _caller(request)
        since = parse_since(request.query_params.get("since"))
        wait = parse_wait(request.query_params.get("wait"))
        deadline = time.monotonic() + wait
        while True:
            signal = feed.event(caller.index)  # taken before looking, so a change in between is not missed
            answer = await _in_thread(sync.changes, caller, since)
            remaining = deadline - time.monotonic()
            done = answer.changes or answer.reset or answer.more  # more: only transcripts so far, ask again
            if done or remaining <= 0 or feed.stopped:
                return _Json(answer.as_json(), headers=_NO_STORE)
            with anyio.move_on_after(min(remaining, RECHECK_SECONDS)):
                await signal.wait()

    async def push(request: Request) -> Response:
        caller = _caller(request)
        document = await _json_body(request)
        revision, results = await _in_thread(sync.push, caller, parse_push(document))
        return _Json({"revision": revision, "results": [r.as_json() for r in results]}, headers=_NO_STORE)

    uploads = SessionUploads(service)

    async def sessions(request: Request) -> Response:
        caller = _caller(request)
        document = await _json_body(request)
        upload = parse_upload(document, service.settings.scan.max_file_bytes)
        return _Json(await _in_thread(uploads.upload, caller, upload), headers=_NO_STORE)

    return [
        Route(CHANGES_PATH, _answering_errors(changes), methods=["GET"]),
        Route(PUSH_PATH, _answering_errors(push), methods=["POST"]),
        Route(SESSIONS_PATH, _answering_errors(sessions), methods=["POST"]),
    ]


async def _json_body(request: Request) -> object:
    """The parsed JSON body; TooLargeError over MAX_PUSH_BYTES, InvalidArgumentError when it is not JSON."""
    body = await request.body()
    if len(body) > MAX_PUSH_BYTES:
        raise TooLargeError(f"a body may hold at most {MAX_PUSH_BYTES} bytes; send less at once")
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise InvalidArgumentError("the body is not JSON") from None


def _caller(request: Request) -> CallerContext:
    user = request.scope.get("user")
    if not isinstance(user, ChannelUser):
        raise PermissionDeniedError("no authenticated caller")
    return CallerContext.from_user(user)


async def _in_thread(call: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(functools.partial(call, *args))


def _answering_errors(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """The one place sync errors become HTTP answers: the service's messages are written for callers; anything
    else gets a generic answer and a log line without the exception text (it may quote memory)."""

    @functools.wraps(endpoint)
    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as raised:
            exc = recognised(raised)
            if exc is None:
                raise
            answer = answer_for(exc)
            assert answer is not None  # every known error has a row, at the latest its root's
            if answer.shown:
                return _error(answer.status, answer.code, str(exc))
            log.error("sync %s failed: %s", request.url.path, type(exc).__name__)
            return _error(answer.status, answer.code, "the server could not complete this sync request")

    return answered


class _Json(JSONResponse):
    """A JSON answer that a lone surrogate cannot break: a hostile request's path, echoed in a rejection or an error,
    is escaped (\\ud800), as JSON allows, where encoding it as UTF-8 failed and lost the whole answer."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")


def _error(status: int, code: str, message: str) -> _Json:
    return _Json({"error": {"code": code, "message": message}}, status_code=status, headers=_NO_STORE)
