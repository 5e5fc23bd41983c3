"""The client side of the sync wire protocol (`docs/sync-protocol.md`): JSON calls over the channel's client.

Answers are checked strictly before anyone acts on them: a malformed answer raises `SyncProtocolError`, an HTTP
refusal `SyncRefusedError` (with the server's code and message); transport and channel errors pass through unchanged
(`client_proxy.forward.upstream.describe` names them for the user).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Final

import httpx2

from channel.errors import ChannelError
from client_proxy.errors import ProxyError
from client_proxy.forward.upstream import describe
from client_proxy.sync.pull_limits import CEILING_ANSWER_BYTES, announced, over_size
from syncproto.errors import MessageRefused, PathRefused
from syncproto.messages import Change, Changes, PushChange, PushResult, answer_list, parse_push_answer, push_body
from syncproto.paths import memory_folders, set_extra_folders
from syncproto.wire import CHANGES_PATH, PUSH_BATCH_BYTES, PUSH_PATH, SESSIONS_PATH

log = logging.getLogger(__name__)

__all__ = [
    "EXPECTED_FAILURES",
    "PUSH_BATCH_BYTES",
    "Change",
    "Changes",
    "PushChange",
    "PushResult",
    "SyncApi",
    "SyncProtocolError",
    "SyncRefusedError",
    "describe_failure",
]

MAX_ERROR_BODY: Final = 64 * 1024


class SyncRefusedError(ProxyError):
    """The server answered a sync call with an error status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"the server refused the sync request (HTTP {status} {code}): {message}")
        self.status = status
        self.code = code


class SyncProtocolError(ProxyError):
    """The server's answer does not follow the sync protocol."""


EXPECTED_FAILURES: Final = (httpx2.HTTPError, ChannelError, SyncRefusedError, SyncProtocolError, OSError)


def describe_failure(exc: Exception, server_url: str) -> str:
    """The one place a failed sync step becomes words for the user; never memory text."""
    if isinstance(exc, httpx2.HTTPError | ChannelError):
        return describe(exc, server_url)
    if isinstance(exc, SyncRefusedError) and exc.status == 404:
        return f"the memory server at {server_url} does not offer file sync (HTTP 404); is it up to date?"
    if isinstance(exc, SyncRefusedError | SyncProtocolError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.filename or 'a local file'}: {exc.strerror or type(exc).__name__}"
    return f"internal error ({type(exc).__name__}); see the log"


def adopt_memory_folders(document: dict[str, Any]) -> None:
    """Sync the extra memory folders the server announces (`extra_paths` in a changes answer; an older server sends
    none), under the same path rules as `memory/`."""
    folders = document.get("extra_paths")
    if folders is None:
        return
    if not isinstance(folders, list) or not all(isinstance(folder, str) for folder in folders):
        raise SyncProtocolError("malformed changes answer from the server (extra_paths is not a list of names)")
    if tuple(folders) == memory_folders()[1:]:
        return
    try:
        set_extra_folders(folders)
    except PathRefused as exc:
        raise SyncProtocolError(f"the server announced extra folders this laptop cannot sync ({exc})") from None
    log.info("sync: memory folders are %s", ", ".join(f"{folder}/" for folder in memory_folders()))


class SyncApi:
    """`GET /sync/changes` and `POST /sync/push` on the inner app, through `client` (the channel's)."""

    def __init__(self, client: httpx2.AsyncClient) -> None:
        self._client = client

    async def changes(self, since: int, wait: int) -> Changes:
        """Changes after revision `since`, long-polling up to `wait` seconds for one."""
        timeout = httpx2.Timeout(30.0, read=wait + 30.0)
        params = {"since": since, "wait": wait}
        async with self._client.stream("GET", CHANGES_PATH, params=params, timeout=timeout) as response:
            body = b""
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > CEILING_ANSWER_BYTES:
                    raise SyncProtocolError(f"the server's changes answer is larger than {CEILING_ANSWER_BYTES} bytes")
        document = _answer(httpx2.Response(response.status_code, headers=response.headers, content=body))
        adopt_memory_folders(document)
        try:
            limits = announced(document)
            count = len(answer_list(document, "changes"))
            if count > limits.max_changes:
                raise SyncProtocolError(
                    f"the server sent {count} changes in one answer; at most {limits.max_changes} are accepted"
                )
            changes = Changes.from_json(document)
        except MessageRefused as exc:
            raise SyncProtocolError(f"malformed changes answer from the server ({exc})") from None
        changes.changes = [c for c in changes.changes if not over_size(c.path, c.content, limits)]
        return changes

    async def push(self, batch: Sequence[PushChange]) -> tuple[int, list[PushResult]]:
        """Send `batch`: the index's revision after it, and one result per change, in order."""
        body = push_body(batch)
        response = await self._client.post(PUSH_PATH, content=body, headers={"content-type": "application/json"})
        document = _answer(response)
        try:
            revision, results = parse_push_answer(document)
        except MessageRefused as exc:
            raise SyncProtocolError(f"malformed push answer from the server ({exc})") from None
        if [result.path for result in results] != [change.path for change in batch]:
            raise SyncProtocolError("the server's push answer does not match the changes sent")
        return revision, results

    async def upload_session(self, session: str, day: str, count: int, parts: Sequence[tuple[int, str]]) -> None:
        """Store parts of one session transcript (the rest of its `count` parts are as last sent)."""
        body = {"session": session, "day": day, "count": count}
        body["parts"] = [{"number": number, "content": content} for number, content in parts]
        content = json.dumps(body, ensure_ascii=False).encode("utf-8")
        response = await self._client.post(SESSIONS_PATH, content=content, headers={"content-type": "application/json"})
        document = _answer(response)
        try:
            stored = answer_list(document, "results")
        except MessageRefused as exc:
            raise SyncProtocolError(f"malformed sessions answer from the server ({exc})") from None
        if len(stored) != len(parts):
            raise SyncProtocolError("the server's sessions answer does not match the parts sent")


def _answer(response: httpx2.Response) -> dict[str, Any]:
    if response.status_code != 200:
        code, message = _error(response)
        raise SyncRefusedError(response.status_code, code, message)
    try:
        document = _json(response.content)
    except ValueError:
        raise SyncProtocolError("the server's sync answer is not JSON") from None
    if not isinstance(document, dict):
        raise SyncProtocolError("the server's sync answer is not a JSON object")
    return document


def _json(content: bytes) -> Any:
    """The JSON value of an answer's body; ValueError for one that is not JSON or is nested deeper than the parser's
    stack (its RecursionError would otherwise escape as an unexpected failure)."""
    try:
        return json.loads(content)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _error(response: httpx2.Response) -> tuple[str, str]:
    """The protocol's `{"error": {"code", "message"}}`, or the channel's `{"error": "reason"}`, or the status."""
    try:
        error = _json(response.content[:MAX_ERROR_BODY]).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str):
        return error["code"], _printable(error["message"])
    if isinstance(error, str):
        return "refused", _printable(error)
    return "refused", response.reason_phrase or "no reason given"


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text[:500])
