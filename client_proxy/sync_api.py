"""The client side of the sync wire protocol (`docs/sync-protocol.md`): JSON calls over the channel's client.

Answers are checked strictly before anyone acts on them: a malformed answer raises `SyncProtocolError`, an HTTP
refusal `SyncRefused` (with the server's code and message); transport and channel errors pass through unchanged
(`client_proxy.upstream.describe` names them for the user).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import httpx2

from channel.errors import ChannelError
from client_proxy.errors import ProxyError
from client_proxy.pull_limits import CEILING_ANSWER_BYTES, announced, over_size
from client_proxy.upstream import describe

CHANGES_PATH: Final = "/sync/changes"
PUSH_PATH: Final = "/sync/push"
SESSIONS_PATH: Final = "/sync/sessions"
MAX_PUSH_CHANGES: Final = 100
MAX_PUSH_BYTES: Final = 4 * 1024 * 1024  # half the server's cap: headroom for JSON escapes we do not count
MAX_ERROR_BODY: Final = 64 * 1024
STATUSES: Final = frozenset({"applied", "merged", "unchanged", "conflict", "deleted", "kept", "rejected"})
_HASH = re.compile(r"^[0-9a-f]{64}$")


class SyncRefused(ProxyError):
    """The server answered a sync call with an error status."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"the server refused the sync request (HTTP {status} {code}): {message}")
        self.status = status
        self.code = code


class SyncProtocolError(ProxyError):
    """The server's answer does not follow the sync protocol."""


@dataclass(frozen=True)
class Change:
    """One path's latest state in a pull answer; `hash` None is a deletion."""

    path: str
    revision: int
    hash: str | None
    content: str | None


@dataclass(frozen=True)
class Changes:
    revision: int
    next: int
    more: bool
    reset: bool
    changes: list[Change]


@dataclass(frozen=True)
class PushChange:
    """A change to send: `content` None is a deletion; `hash` is the pushed content's (None for a deletion)."""

    path: str
    base: str | None
    content: str | None
    hash: str | None

    def as_json(self) -> dict[str, object]:
        if self.content is None:
            return {"path": self.path, "base": self.base, "delete": True}
        return {"path": self.path, "base": self.base, "content": self.content}

    def wire_size(self) -> int:
        return len(json.dumps(self.as_json(), ensure_ascii=False).encode("utf-8"))


@dataclass(frozen=True)
class PushResult:
    """The server's file after one change (see the protocol's table)."""

    path: str
    status: str
    hash: str | None
    revision: int
    content: str | None = None
    conflict_path: str | None = None
    conflict_revision: int | None = None
    message: str | None = None


EXPECTED_FAILURES: Final = (httpx2.HTTPError, ChannelError, SyncRefused, SyncProtocolError, OSError)


def describe_failure(exc: Exception, server_url: str) -> str:
    """The one place a failed sync step becomes words for the user; never memory text."""
    if isinstance(exc, httpx2.HTTPError | ChannelError):
        return describe(exc, server_url)
    if isinstance(exc, SyncRefused) and exc.status == 404:
        return f"the memory server at {server_url} does not offer file sync (HTTP 404); is it up to date?"
    if isinstance(exc, SyncRefused | SyncProtocolError):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{exc.filename or 'a local file'}: {exc.strerror or type(exc).__name__}"
    return f"internal error ({type(exc).__name__}); see the log"


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
        try:
            items = _list(document, "changes")
            limits = announced(document)
            if len(items) > limits.max_changes:
                raise SyncProtocolError(
                    f"the server sent {len(items)} changes in one answer; at most {limits.max_changes} are accepted"
                )
            changes = [c for c in map(_change, items) if not over_size(c.path, c.content, limits)]
            return Changes(
                revision=_int(document, "revision"),
                next=_int(document, "next"),
                more=_bool(document, "more"),
                reset=_bool(document, "reset"),
                changes=changes,
            )
        except (KeyError, TypeError) as exc:
            raise SyncProtocolError(f"malformed changes answer from the server ({exc})") from None

    async def push(self, batch: Sequence[PushChange]) -> tuple[int, list[PushResult]]:
        """Send `batch`: the index's revision after it, and one result per change, in order."""
        body = json.dumps({"changes": [change.as_json() for change in batch]}, ensure_ascii=False).encode("utf-8")
        response = await self._client.post(PUSH_PATH, content=body, headers={"content-type": "application/json"})
        document = _answer(response)
        try:
            revision = _int(document, "revision")
            results = [_result(item) for item in _list(document, "results")]
        except (KeyError, TypeError) as exc:
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
            stored = _list(document, "results")
        except (KeyError, TypeError) as exc:
            raise SyncProtocolError(f"malformed sessions answer from the server ({exc})") from None
        if len(stored) != len(parts):
            raise SyncProtocolError("the server's sessions answer does not match the parts sent")


def _answer(response: httpx2.Response) -> dict[str, Any]:
    if response.status_code != 200:
        code, message = _error(response)
        raise SyncRefused(response.status_code, code, message)
    try:
        document = json.loads(response.content)
    except ValueError:
        raise SyncProtocolError("the server's sync answer is not JSON") from None
    if not isinstance(document, dict):
        raise SyncProtocolError("the server's sync answer is not a JSON object")
    return document


def _error(response: httpx2.Response) -> tuple[str, str]:
    """The protocol's `{"error": {"code", "message"}}`, or the channel's `{"error": "reason"}`, or the status."""
    try:
        error = json.loads(response.content[:MAX_ERROR_BODY]).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("code"), str) and isinstance(error.get("message"), str):
        return error["code"], _printable(error["message"])
    if isinstance(error, str):
        return "refused", _printable(error)
    return "refused", response.reason_phrase or "no reason given"


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else " " for ch in text[:500])


def _list(document: dict[str, Any], name: str) -> list[Any]:
    value = document[name]
    if not isinstance(value, list):
        raise TypeError(f"{name} is not a list")
    return value


def _int(document: dict[str, Any], name: str) -> int:
    value = document[name]
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise TypeError(f"{name} is not a revision")
    return value


def _bool(document: dict[str, Any], name: str) -> bool:
    value = document.get(name, False)
    if not isinstance(value, bool):
        raise TypeError(f"{name} is not a boolean")
    return value


def _str(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{name} is not a string")
    return value


def _hash(document: dict[str, Any]) -> str | None:
    value = _str(document, "hash")
    if value is not None and not _HASH.match(value):
        raise TypeError("hash is not a sha256 hex digest")
    return value


def _change(item: object) -> Change:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        raise TypeError("a change has no path")
    change = Change(item["path"], _int(item, "revision"), _hash(item), _str(item, "content"))
    if (change.hash is None) != (change.content is None):
        raise TypeError(f"change {change.path!r}: content and hash must come together")
    return change


def _result(item: object) -> PushResult:
    if not isinstance(item, dict) or not isinstance(item.get("path"), str):
        raise TypeError("a result has no path")
    status = item.get("status")
    if status not in STATUSES:
        raise TypeError(f"unknown status {status!r}")
    conflict_revision = _int(item, "conflict_revision") if item.get("conflict_revision") is not None else None
    return PushResult(
        path=item["path"],
        status=status,
        hash=_hash(item),
        revision=_int(item, "revision"),
        content=_str(item, "content"),
        conflict_path=_str(item, "conflict_path"),
        conflict_revision=conflict_revision,
        message=_str(item, "message"),
    )
