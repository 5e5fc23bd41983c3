"""Builders for Claude Code session files as real releases write them: one JSON envelope per line around a message
in the Anthropic Messages shape, under `<claude home>/projects/<munged cwd>/<session id>.jsonl`.

Lines are plain dicts, so a test can bend any field; `write_session` turns them (or raw bytes, for broken lines)
into a file. Timestamps are `datetime`s written as JavaScript's `toISOString()` does.
"""

from __future__ import annotations

import itertools
import json
import uuid as uuidlib
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from client_proxy.transcripts.files import munged_name

SESSION = "3f2a9c1e-7b4d-4e8f-9a6b-0c1d2e3f4a5b"
CWD = "/home/me/app"
START = datetime(2025, 6, 1, 10, 0, tzinfo=UTC)
VERSION = "2.0.14"
MODEL = "claude-sonnet-4-5-20250929"

_ids = itertools.count(1)
Line = dict[str, Any]


def at(minutes: float) -> datetime:
    """A time `minutes` after the fixtures' session start."""
    return START + timedelta(minutes=minutes)


def iso(time: datetime) -> str:
    return time.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{time.microsecond // 1000:03d}Z"


def envelope(
    kind: str,
    message: dict[str, Any] | None,
    *,
    session: str = SESSION,
    ts: datetime = START,
    cwd: str = CWD,
    branch: str = "main",
    uuid: str | None = None,
    parent: str | None = None,
    sidechain: bool = False,
    meta: bool | None = None,
    **extra: Any,
) -> Line:
    """The fields every user and assistant line carries, in the order Claude Code writes them."""
    line: Line = {"parentUuid": parent, "isSidechain": sidechain, "userType": "external", "cwd": cwd}
    line |= {"sessionId": session, "version": VERSION, "gitBranch": branch, "type": kind}
    if meta is not None:
        line["isMeta"] = meta
    if message is not None:
        line["message"] = message
    line |= {"uuid": uuid or str(uuidlib.uuid4()), "timestamp": iso(ts)}
    return line | extra


def user_line(content: str | list[dict[str, Any]], **fields: Any) -> Line:
    """A user's prompt: a string, or a list of blocks (`text`, `image`, `tool_result`)."""
    return envelope("user", {"role": "user", "content": content}, **fields)


def image_block() -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}


def tool_use(name: str, *, id: str | None = None, **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": id or f"toolu_{next(_ids):024d}", "name": name, "input": tool_input}


def thinking(text: str) -> dict[str, Any]:
    return {"type": "thinking", "thinking": text, "signature": "EqQBCkYIBxgCKkB"}


def assistant_lines(
    text: str | None = None,
    tools: Sequence[dict[str, Any]] = (),
    *,
    blocks: Sequence[dict[str, Any]] = (),
    message_id: str | None = None,
    ts: datetime = START,
    **fields: Any,
) -> list[Line]:
    """One API message as Claude Code stores it: one line per content block (extra `blocks` first, then the text,
    then the tool calls), all with the same `message.id`, each with its own uuid."""
    content = [*blocks, *([{"type": "text", "text": text}] if text is not None else []), *tools]
    message_id = message_id or f"msg_{next(_ids):024d}"
    lines = []
    for block in content:
        message = {"id": message_id, "type": "message", "role": "assistant", "model": MODEL, "content": [block]}
        message |= {"stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 4, "output_tokens": 9}}
        lines.append(envelope("assistant", message, ts=ts, requestId=f"req_{next(_ids):020d}", **fields))
    return lines


def tool_result_line(tool_use_id: str, content: str = "ok", *, is_error: bool = False, **fields: Any) -> Line:
    """The user line carrying a tool's output back to the model."""
    block = {"tool_use_id": tool_use_id, "type": "tool_result", "content": content, "is_error": is_error}
    return user_line([block], toolUseResult={"stdout": content, "stderr": "", "interrupted": False}, **fields)


def compact_summary_line(text: str | list[dict[str, Any]], **fields: Any) -> Line:
    """The summary Claude Code writes as a user line when it compacts the conversation."""
    return user_line(text, isCompactSummary=True, isVisibleInTranscriptOnly=True, **fields)


def summary_line(summary: str, leaf_uuid: str | None) -> Line:
    """A conversation's summary, naming the uuid of its last line (None: a line without `leafUuid`)."""
    line = {"type": "summary", "summary": summary}
    return line if leaf_uuid is None else line | {"leafUuid": leaf_uuid}


def custom_title_line(title: str, session: str = SESSION) -> Line:
    return {"type": "custom-title", "customTitle": title, "sessionId": session}


def ai_title_line(title: str, session: str = SESSION) -> Line:
    return {"type": "ai-title", "aiTitle": title, "sessionId": session}


def command_markup(name: str, args: str = "") -> str:
    return (
        f"<command-name>{name}</command-name>\n            <command-message>{name.lstrip('/')}</command-message>\n"
        f"            <command-args>{args}</command-args>"
    )


def command_line(name: str, args: str = "", *, system: bool = False, **fields: Any) -> Line:
    """A slash command: a user line of markup (older releases) or a `system` line, `local_command` (newer)."""
    if not system:
        return user_line(command_markup(name, args), **fields)
    return system_line(command_markup(name, args), subtype="local_command", **fields)


def command_output_line(stdout: str, *, system: bool = False, **fields: Any) -> Line:
    text = f"<local-command-stdout>{stdout}</local-command-stdout>"
    return system_line(text, subtype="local_command", **fields) if system else user_line(text, **fields)


def system_line(content: str, *, subtype: str = "informational", **fields: Any) -> Line:
    return envelope("system", None, subtype=subtype, content=content, level="info", isMeta=False, **fields)


def snapshot_line(message_id: str = "m1") -> Line:
    return {"type": "file-history-snapshot", "messageId": message_id, "snapshot": {"trackedFileBackups": {}}}


def chain(lines: Iterable[Line | bytes | str]) -> list[Line | bytes | str]:
    """Link each envelope's `parentUuid` to the envelope before it, as Claude Code does (summaries are not linked)."""
    linked: list[Line | bytes | str] = []
    previous: str | None = None
    for line in lines:
        if isinstance(line, dict) and "uuid" in line:
            line = line | {"parentUuid": line.get("parentUuid") or previous}
            previous = line["uuid"]
        linked.append(line)
    return linked


def session_bytes(lines: Iterable[Line | bytes | str]) -> bytes:
    """Lines as the file holds them: compact JSON for dicts, raw bytes or text as given, each ending in `\\n`."""
    out = bytearray()
    for line in lines:
        if isinstance(line, dict):
            line = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
        out += (line.encode("utf-8") if isinstance(line, str) else line) + b"\n"
    return bytes(out)


def write_session(
    folder: Path, session_id: str, lines: Sequence[Line | bytes | str], *, truncate_last: bool = False
) -> Path:
    """`<folder>/<session_id>.jsonl` with `lines` (chained); with `truncate_last`, the last line stops halfway and
    has no newline, as when Claude Code is caught mid-write. `append_session` completes it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session_id}.jsonl"
    linked = chain(lines)
    data = session_bytes(linked)
    if truncate_last:
        last = len(session_bytes(linked[-1:]))
        data = data[: len(data) - last + last // 2]
    path.write_bytes(data)
    return path


def append_session(path: Path, lines: Sequence[Line | bytes | str]) -> None:
    """Append whatever of `lines` (all of the file's, as `write_session` was given them) the file lacks."""
    full = session_bytes(chain(lines))
    current = path.read_bytes()
    assert full.startswith(current), "the file is not a prefix of these lines"
    with path.open("ab") as handle:
        handle.write(full[len(current) :])


def project_folder(claude_home: Path, project: Path | str) -> Path:
    """Where current Claude Code releases keep `project`'s sessions (not created)."""
    return claude_home / "projects" / munged_name(str(project))
