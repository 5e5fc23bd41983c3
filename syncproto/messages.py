"""The sync protocol's messages: what a push, its results and a pull answer look like on the wire.

Each shape is one dataclass with its JSON form (`as_json`, what the sender writes) and its strict reading
(`from_json` / `parse_*`, what the receiver accepts); MessageRefused names the first thing wrong.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from syncproto.errors import MessageRefused
from syncproto.wire import MAX_PUSH_CHANGES, MAX_WAIT, STATUSES, Status, is_content_hash

_CHANGE_FIELDS = frozenset({"path", "base", "content", "delete"})


@dataclass(frozen=True)
class PushChange:
    """One pushed change: `content` None is a deletion. `hash` is the pushed content's (the sender's own record,
    not sent); `path` is checked by the server per change, later."""

    path: str
    base: str | None
    content: str | None
    hash: str | None = None

    def as_json(self) -> dict[str, object]:
        if self.content is None:
            return {"path": self.path, "base": self.base, "delete": True}
        return {"path": self.path, "base": self.base, "content": self.content}

    def wire_size(self) -> int:
        return len(json.dumps(self.as_json(), ensure_ascii=False).encode("utf-8"))


@dataclass(frozen=True)
class PushResult:
    """The server's file after one change; see the table in the protocol."""

    path: str
    status: Status
    hash: str | None
    revision: int
    content: str | None = None
    conflict_path: str | None = None
    conflict_revision: int | None = None
    message: str | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"path": self.path, "status": self.status, "hash": self.hash}
        out["revision"] = self.revision
        for name in ("content", "conflict_path", "conflict_revision", "message"):
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, item: object) -> PushResult:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise MessageRefused("a result has no path")
        status = item.get("status")
        if status not in STATUSES:
            raise MessageRefused(f"unknown status {status!r}")
        conflict_revision = _int(item, "conflict_revision") if item.get("conflict_revision") is not None else None
        return cls(
            path=item["path"],
            status=status,
            hash=_hash(item),
            revision=_int(item, "revision"),
            content=_str(item, "content"),
            conflict_path=_str(item, "conflict_path"),
            conflict_revision=conflict_revision,
            message=_str(item, "message"),
        )


@dataclass(frozen=True)
class Change:
    """One path's latest state in a pull answer; `hash` None is a deletion."""

    path: str
    revision: int
    hash: str | None
    content: str | None
    updated_by: str | None = None
    updated_at: str | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"path": self.path, "revision": self.revision, "hash": self.hash}
        if self.content is not None:
            out["content"] = self.content
        out.update(updated_by=self.updated_by, updated_at=self.updated_at)
        return out

    @classmethod
    def from_json(cls, item: object) -> Change:
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise MessageRefused("a change has no path")
        change = cls(item["path"], _int(item, "revision"), _hash(item), _str(item, "content"))
        if (change.hash is None) != (change.content is None):
            raise MessageRefused(f"change {change.path!r}: content and hash must come together")
        return change


@dataclass
class Changes:
    """A pull answer: the index's revision, where the next pull starts, and the changes after `since`."""

    revision: int
    next: int
    more: bool
    reset: bool
    changes: list[Change] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return changes_json(self.revision, self.next, self.more, self.reset, [c.as_json() for c in self.changes])

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> Changes:
        changes = [Change.from_json(item) for item in _list(document, "changes")]
        return cls(
            revision=_int(document, "revision"),
            next=_int(document, "next"),
            more=_bool(document, "more"),
            reset=_bool(document, "reset"),
            changes=changes,
        )


def changes_json(
    revision: int, next_revision: int, more: bool, reset: bool, changes: list[dict[str, object]]
) -> dict[str, object]:
    """A pull answer's body, its changes already in their wire form (`Change.as_json`)."""
    return {"revision": revision, "next": next_revision, "more": more, "reset": reset, "changes": changes}


def push_body(batch: Sequence[PushChange]) -> bytes:
    """The body of a push."""
    return json.dumps({"changes": [change.as_json() for change in batch]}, ensure_ascii=False).encode("utf-8")


def parse_push(document: object) -> list[PushChange]:
    """The changes of a push body (`{"changes": [...]}`); MessageRefused for a malformed request."""
    if not isinstance(document, dict) or set(document) != {"changes"}:
        raise MessageRefused('the body must be {"changes": [...]}')
    raw = document["changes"]
    if not isinstance(raw, list):
        raise MessageRefused("changes must be a list")
    if len(raw) > MAX_PUSH_CHANGES:
        raise MessageRefused(f"at most {MAX_PUSH_CHANGES} changes per push")
    changes: list[PushChange] = []
    seen: set[str] = set()
    for number, item in enumerate(raw):
        change = _parse_change(item, number)
        if change.path in seen:
            raise MessageRefused(f"changes[{number}]: {change.path!r} appears twice in one push")
        seen.add(change.path)
        changes.append(change)
    return changes


def _parse_change(item: object, number: int) -> PushChange:
    where = f"changes[{number}]"
    if not isinstance(item, dict):
        raise MessageRefused(f"{where} must be an object")
    unknown = sorted(set(item) - _CHANGE_FIELDS)
    if unknown:
        raise MessageRefused(f"{where} has an unknown field {unknown[0]!r}")
    path, base = item.get("path"), item.get("base")
    if not isinstance(path, str) or not path:
        raise MessageRefused(f"{where}.path must be a non-empty string")
    if base is not None and not is_content_hash(base):
        raise MessageRefused(f"{where}.base must be null or a sha256 hex hash")
    delete = item.get("delete", False)
    if delete is not True and delete is not False:
        raise MessageRefused(f"{where}.delete must be true or false")
    content = item.get("content")
    if delete:
        if content is not None:
            raise MessageRefused(f"{where} deletes and sends content; send one or the other")
        return PushChange(path, base, None)
    if not isinstance(content, str):
        raise MessageRefused(f"{where}.content must be a string (or delete: true)")
    return PushChange(path, base, content)


def parse_push_answer(document: dict[str, Any]) -> tuple[int, list[PushResult]]:
    """The index's revision after a push and one result per change."""
    return _int(document, "revision"), [PushResult.from_json(item) for item in _list(document, "results")]


def parse_since(raw: str | None) -> int:
    """The `since` query parameter: a whole number from 0 (absent: 0)."""
    if raw is None or raw == "":
        return 0
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise MessageRefused("since must be a whole number from 0")
    return int(raw)


def parse_wait(raw: str | None) -> float:
    """The `wait` query parameter: seconds from 0 to MAX_WAIT (absent: 0)."""
    if raw is None or raw == "":
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        raise MessageRefused(f"wait must be a number of seconds from 0 to {MAX_WAIT:g}") from None
    if not 0.0 <= value <= MAX_WAIT:  # also refuses nan and inf
        raise MessageRefused(f"wait must be a number of seconds from 0 to {MAX_WAIT:g}")
    return value


def answer_list(document: dict[str, Any], name: str) -> list[Any]:
    """The list `document[name]`; MessageRefused when it is missing or not a list."""
    return _list(document, name)


def _list(document: dict[str, Any], name: str) -> list[Any]:
    value = _field(document, name)
    if not isinstance(value, list):
        raise MessageRefused(f"{name} is not a list")
    return value


def _field(document: dict[str, Any], name: str) -> object:
    if name not in document:
        raise MessageRefused(repr(name))  # as a KeyError reads: the field's name, quoted
    return document[name]


def _int(document: dict[str, Any], name: str) -> int:
    value = _field(document, name)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise MessageRefused(f"{name} is not a revision")
    return value


def _bool(document: dict[str, Any], name: str) -> bool:
    value = document.get(name, False)
    if not isinstance(value, bool):
        raise MessageRefused(f"{name} is not a boolean")
    return value


def _str(document: dict[str, Any], name: str) -> str | None:
    value = document.get(name)
    if value is not None and not isinstance(value, str):
        raise MessageRefused(f"{name} is not a string")
    return value


def _hash(document: dict[str, Any]) -> str | None:
    value = _str(document, "hash")
    if value is not None and not is_content_hash(value):
        raise MessageRefused("hash is not a sha256 hex digest")
    return value
