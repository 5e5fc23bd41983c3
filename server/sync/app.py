"""The `/sync/changes`, `/sync/push` and `/sync/sessions` endpoints of the inner app (see `docs/sync-protocol.md`
and `server.sync.sessions`).

They run behind the channel: `request.user` is the authenticated caller and the index it named. The blocking work
runs in worker threads (`SyncService`); a long-poll waits on the event loop for a `ChangeFeed` signal, which every
change to the index's mirror fires, whoever made it (a push, an MCP write, a file changed on the server's disk).

A body is read only after the caller's write grant is checked, and parsed only when it holds no more JSON items than
a push or an upload can (`MAX_BODY_ITEMS`): json.loads holds the interpreter throughout, and 8 MiB of `[],[],...`
took it seconds, during which no other caller was answered.
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
from server.error_table import INTERNAL, answer_for, recognised
from server.errors import InvalidArgumentError, PermissionDeniedError, TooLargeError
from server.memory.caller import authorise
from server.memory.service import CallerContext, MemoryService
from server.sync.service import SyncService
from server.sync.sessions import SessionUploads, parse_upload
from syncproto.messages import parse_push, parse_since, parse_wait
from syncproto.wire import (
    CHANGES_PATH,
    MAX_PARTS_PER_UPLOAD,
    MAX_PUSH_BYTES,
    MAX_PUSH_CHANGES,
    PUSH_PATH,
    SESSIONS_PATH,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

RECHECK_SECONDS = 5.0  # a long-poll looks again this often even without a signal (disk edits, a missed wake-up)
# A change of a push or a part of an upload is an object of at most 4 fields: its brace, 4 keys, 4 values and the
# commas between them are 13 items (`_json_items`), rounded up.
_ITEMS_PER_ENTRY = 16
# The most JSON items a push or upload body may hold, ten times what the largest valid one does: a body past it is
# refused before json.loads, which would spend seconds on millions of tiny values holding the interpreter.
MAX_BODY_ITEMS = 10 * _ITEMS_PER_ENTRY * max(MAX_PUSH_CHANGES, MAX_PARTS_PER_UPLOAD)
_NO_STORE = {"cache-control": "no-store"}
GENERIC_FAILURE = "the server could not complete this sync request"


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
        caller = _caller(request, write=True)
        document = await _json_body(request)
        revision, results = await _in_thread(sync.push, caller, parse_push(document))
        return _Json({"revision": revision, "results": [r.as_json() for r in results]}, headers=_NO_STORE)

    uploads = SessionUploads(service)

    async def sessions(request: Request) -> Response:
        caller = _caller(request, write=True)
        document = await _json_body(request)
        upload = parse_upload(document, service.settings.scan.max_file_bytes)
        return _Json(await _in_thread(uploads.upload, caller, upload), headers=_NO_STORE)

    return [
        Route(CHANGES_PATH, _answering_errors(changes), methods=["GET"]),
        Route(PUSH_PATH, _answering_errors(push), methods=["POST"]),
        Route(SESSIONS_PATH, _answering_errors(sessions), methods=["POST"]),
    ]


async def _json_body(request: Request) -> object:
    """The parsed JSON body; TooLargeError over MAX_PUSH_BYTES, InvalidArgumentError when it is not JSON or holds
    more than MAX_BODY_ITEMS items. Decoded, counted and parsed in a worker thread."""
    body = await request.body()
    if len(body) > MAX_PUSH_BYTES:
        raise TooLargeError(f"a body may hold at most {MAX_PUSH_BYTES} bytes; send less at once")
    return await _in_thread(_parsed, body)


def _parsed(body: bytes) -> object:
    try:
        text = body.decode(json.detect_encoding(body), "surrogatepass")  # as json.loads decodes bytes
    except UnicodeDecodeError:
        raise InvalidArgumentError("the body is not JSON") from None
    if _json_items(text, MAX_BODY_ITEMS) > MAX_BODY_ITEMS:
        raise InvalidArgumentError(
            f"the body holds more than {MAX_BODY_ITEMS} JSON values; a push holds at most {MAX_PUSH_CHANGES} "
            f"changes and an upload {MAX_PARTS_PER_UPLOAD} parts"
        )
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidArgumentError("the body is not JSON") from None


def _json_items(text: str, bound: int) -> int:
    """About how many values and keys the JSON `text` holds: its strings, plus the commas and opening brackets
    outside them (every value after the first of an array or object follows a comma). Strings end where json.loads
    ends them, so what they hold never counts. Linear: a few passes of C string methods, never a Python step per
    value (past `bound` strings, their count is the answer)."""
    if "\\" in text:  # escapes paired from the left, as json.loads pairs them: each `"` left delimits a string
        text = text.replace("\\\\", "").replace('\\"', "")
    strings = text.count('"') // 2
    if strings > bound:
        return strings
    outside = "".join(text.split('"')[::2])
    return strings + outside.count(",") + outside.count("[") + outside.count("{")


def _caller(request: Request, *, write: bool = False) -> CallerContext:
    """The authenticated caller; with `write`, PermissionDeniedError unless it may write (checked before the body
    is read: a caller that may only read costs no parse)."""
    user = request.scope.get("user")
    if not isinstance(user, ChannelUser):
        raise PermissionDeniedError("no authenticated caller")
    caller = CallerContext.from_user(user)
    if write:
        authorise(caller, write=True)
    return caller


async def _in_thread(call: Callable[..., T], *args: Any) -> T:
    return await anyio.to_thread.run_sync(functools.partial(call, *args))


def _answering_errors(endpoint: Callable[[Request], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
    """The one place sync errors become HTTP answers: the service's messages are written for callers; anything
    else gets a generic answer and a log line without the exception text (it may quote memory), and a bug (an
    error nobody raised on purpose) a generic `internal` answer too, in the protocol's shape, its traceback to
    the log."""

    @functools.wraps(endpoint)
    async def answered(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as raised:
            exc = recognised(raised)
            if exc is None:
                log.exception("sync %s failed", request.url.path)
                return _error(INTERNAL.status, INTERNAL.code, GENERIC_FAILURE)
            answer = answer_for(exc)
            assert answer is not None  # every known error has a row, at the latest its root's
            if answer.shown:
                return _error(answer.status, answer.code, str(exc))
            log.error("sync %s failed: %s", request.url.path, type(exc).__name__)
            return _error(answer.status, answer.code, GENERIC_FAILURE)

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
