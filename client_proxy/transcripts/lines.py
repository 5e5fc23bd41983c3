"""What one Claude Code session file says: its lines folded into messages, pure (the file is read elsewhere).

The format is undocumented and changes between releases, so this is liberal: it keeps what the people and the
assistant said (text, slash commands, one line per tool call, compaction summaries), counts everything else by
type so the caller can log what it did not understand, and a bad line costs that line only. Tool output is left
out on purpose: it is large, often holds secrets, and already lives in the files and commands it came from.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import PurePath
from typing import Any, Final, Literal

_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_HIDDEN_SPANS: Final = re.compile(r"<(system-reminder|local-command-caveat)>.*?</\1>", re.DOTALL)
_COMMAND_TAG: Final = re.compile(r"\s*<(command-name|command-message|command-args|bash-input)>(.*?)</\1>\s*", re.DOTALL)
_COMMAND_OUTPUT: Final = re.compile(
    r"(?:\s*<(local-command-stdout|local-command-stderr|bash-stdout|bash-stderr)>.*?</\1>)+\s*", re.DOTALL
)
# Line types Claude Code writes that hold nothing for a reader: counted in `skipped_lines`, not `unknown_lines`.
_IGNORED_TYPES: Final = frozenset(
    {"system", "file-history-snapshot", "queue-operation", "attachment", "progress", "last-prompt", "mode"}
)
_TOOL_BLOCKS: Final = frozenset({"tool_use", "server_tool_use"})
_THINKING_BLOCKS: Final = frozenset({"thinking", "redacted_thinking"})
_PATH_KEYS: Final = ("file_path", "path", "notebook_path")
_TEXT_KEYS: Final = ("pattern", "url", "query", "description", "prompt")

Role = Literal["user", "assistant", "summary", "command"]


@dataclass(frozen=True)
class ToolCall:
    """One tool the assistant called, with what it acted on (a path, a command's first line, a query...)."""

    name: str
    target: str = ""
    failed: bool = False  # its result came back with `is_error`


@dataclass(frozen=True)
class Message:
    """One thing said in the session, in file order; tool-only assistant turns have empty `text`."""

    role: Role
    time: datetime | None
    text: str
    tools: tuple[ToolCall, ...] = ()

    @property
    def tool_errors(self) -> int:
        return sum(call.failed for call in self.tools)


@dataclass(frozen=True)
class Transcript:
    """What one session file says so far, and how much of the file that is (`complete_bytes`, for growth)."""

    session_id: str
    title: str | None = None  # an explicit title (custom, then AI-written, then summary); None when there is none
    cwd: str | None = None
    git_branch: str | None = None
    version: str | None = None  # Claude Code's version on the last line that named one, for the caller's logs
    started: datetime | None = None
    ended: datetime | None = None
    messages: tuple[Message, ...] = ()
    tool_errors: int = 0  # every tool result marked `is_error`, matched to a call or not
    complete_bytes: int = 0
    line_count: int = 0
    bad_lines: int = 0
    skipped_lines: dict[str, int] = field(default_factory=dict)  # known lines left out, by type or reason
    unknown_lines: dict[str, int] = field(default_factory=dict)  # line types this reader does not know
    unknown_blocks: dict[str, int] = field(default_factory=dict)  # content block types it does not know


@dataclass
class _Draft:
    """A message while lines may still add to it (an assistant's later blocks, a tool's error)."""

    role: Role
    time: datetime | None
    texts: list[str]
    tools: list[ToolCall]
    api_id: str | None = None


class LineReader:
    """Folds the complete lines of one session file, fed in order, into a `Transcript`."""

    def __init__(self) -> None:
        self.drafts: list[_Draft] = []
        self.tool_at: dict[str, tuple[_Draft, int]] = {}
        self.uuids: set[str] = set()  # of the messages kept, to drop a line written twice
        self.seen: set[str] = set()  # of every line, for the summaries that name their conversation's last line
        self.titles: dict[str, str] = {}
        self.summaries: list[tuple[str | None, str]] = []
        self.first: dict[str, str] = {}
        self.version: str | None = None
        self.tool_errors = self.bad_lines = 0
        self.skipped: Counter[str] = Counter()
        self.unknown: Counter[str] = Counter()
        self.unknown_blocks: Counter[str] = Counter()

    def feed(self, raw: bytes) -> None:
        """One complete line, as bytes; a line that is not a JSON object is counted in `bad_lines`."""
        text = raw.decode("utf-8", "replace").strip()
        if not text:
            return
        try:
            line = json.loads(text)
        except (ValueError, RecursionError):
            self.bad_lines += 1
            return
        if not isinstance(line, dict):
            self.bad_lines += 1
            return
        self._line(line)

    def too_long(self) -> None:
        """A line too long to read, skipped unread: counted in `bad_lines`."""
        self.bad_lines += 1

    def _line(self, line: dict[str, Any]) -> None:
        for key in ("sessionId", "cwd", "gitBranch"):
            value = _text(line.get(key))
            if value and key not in self.first:
                self.first[key] = value
        self.version = _text(line.get("version")) or self.version
        if isinstance(line.get("uuid"), str):
            self.seen.add(line["uuid"])
        kind = _type(line)
        if kind in ("user", "assistant"):
            self._envelope(kind, line)
        elif kind == "system" and line.get("subtype") == "local_command":
            self._user_text(_clean_text(_text(line.get("content")) or ""), _timestamp(line.get("timestamp")))
        elif kind in ("summary", "custom-title", "ai-title"):
            key = {"summary": "summary", "custom-title": "customTitle", "ai-title": "aiTitle"}[kind]
            title = _one_line(_text(line.get(key)) or "")
            if title and kind == "summary":
                self.summaries.append((_text(line.get("leafUuid")), title))
            elif title:
                self.titles[kind] = title
        elif kind in _IGNORED_TYPES:
            self.skipped[kind] += 1
        else:
            self.unknown[kind] += 1

    def _envelope(self, kind: str, line: dict[str, Any]) -> None:
        if line.get("isSidechain") is True:
            self.skipped["sidechain"] += 1
            return
        if line.get("isMeta") is True:
            self.skipped["meta"] += 1
            return
        uuid = line.get("uuid")
        if isinstance(uuid, str):
            if uuid in self.uuids:
                self.skipped["duplicate"] += 1
                return
            self.uuids.add(uuid)
        message = line.get("message")
        message = message if isinstance(message, dict) else {}
        blocks = _blocks(message.get("content"))
        time = _timestamp(line.get("timestamp"))
        if line.get("isCompactSummary") is True:
            summary = _clean_text("\n\n".join(_text(b.get("text")) or "" for b in blocks if b.get("type") == "text"))
            if summary:
                self._add("summary", time, summary)
            else:
                self._skip("empty")
        elif kind == "user":
            self._user(blocks, time)
        else:
            self._assistant(blocks, time, _text(message.get("id")), _text(line.get("cwd")))

    def _user(self, blocks: list[dict[str, Any]], time: datetime | None) -> None:
        texts: list[str] = []
        results = 0
        for block in blocks:
            kind = _type(block)
            if kind == "text":
                texts.append(_text(block.get("text")) or "")
            elif kind == "tool_result":
                results += 1
                if block.get("is_error") is True:
                    self._tool_failed(_text(block.get("tool_use_id")))
            elif kind == "image":
                texts.append("[image]")
            else:
                self.unknown_blocks[kind] += 1
        text = _clean_text("\n\n".join(texts))
        if text:
            self._user_text(text, time)
        else:
            self._skip("tool-result" if results else "empty")

    def _user_text(self, text: str, time: datetime | None) -> None:
        """A user's words, or a slash (or `!` shell) command written as markup, whose output is left out."""
        if not text:
            self._skip("empty")
        elif _COMMAND_OUTPUT.fullmatch(text):
            self._skip("command-output")
        elif (command := _command(text)) is not None:
            self._add("command", time, command)
        else:
            self._add("user", time, text)

    def _assistant(
        self, blocks: list[dict[str, Any]], time: datetime | None, api_id: str | None, cwd: str | None
    ) -> None:
        texts: list[str] = []
        tools: list[tuple[str | None, ToolCall]] = []
        for block in blocks:
            kind = _type(block)
            if kind == "text":
                texts.append(_text(block.get("text")) or "")
            elif kind in _TOOL_BLOCKS:
                name = _one_line(_text(block.get("name")) or "?")
                tools.append((_text(block.get("id")), ToolCall(name, _target(block.get("input"), cwd))))
            elif kind not in _THINKING_BLOCKS:
                self.unknown_blocks[kind] += 1
        text = _clean_text("\n\n".join(texts))
        last = self.drafts[-1] if self.drafts else None
        if last is not None and last.role == "assistant" and api_id is not None and last.api_id == api_id:
            draft = last  # Claude Code writes one line per content block of the same API message
            if text:
                draft.texts.append(text)
        elif text or tools:
            draft = self._add("assistant", time, text, api_id)
        else:
            thought = blocks and all(_type(block) in _THINKING_BLOCKS for block in blocks)
            self._skip("thinking" if thought else "empty")
            return
        for tool_id, call in tools:
            if tool_id is not None:
                self.tool_at[tool_id] = (draft, len(draft.tools))
            draft.tools.append(call)

    def _tool_failed(self, tool_id: str | None) -> None:
        self.tool_errors += 1
        if tool_id in self.tool_at:
            draft, index = self.tool_at[tool_id]
            call = draft.tools[index]
            draft.tools[index] = ToolCall(call.name, call.target, failed=True)

    def _add(self, role: Role, time: datetime | None, text: str, api_id: str | None = None) -> _Draft:
        draft = _Draft(role, time, [text] if text else [], [], api_id)
        self.drafts.append(draft)
        return draft

    def _skip(self, reason: str) -> None:
        self.skipped[reason] += 1

    def finish(self, stem: str, *, complete_bytes: int, line_count: int) -> Transcript:
        """The transcript so far; `stem` (the file's name) is its id when no line names the session."""
        messages = tuple(Message(d.role, d.time, "\n\n".join(d.texts), tuple(d.tools)) for d in self.drafts)
        times = [m.time for m in messages if m.time is not None]
        # A file can open with summaries of other conversations (whose last line is elsewhere): those are no title.
        own = [text for leaf, text in self.summaries if leaf is None or leaf in self.seen]
        return Transcript(
            session_id=self.first.get("sessionId", stem),
            title=self.titles.get("custom-title") or self.titles.get("ai-title") or (own[-1] if own else None),
            cwd=self.first.get("cwd"),
            git_branch=self.first.get("gitBranch"),
            version=self.version,
            started=times[0] if times else None,
            ended=times[-1] if times else None,
            messages=messages,
            tool_errors=self.tool_errors,
            complete_bytes=complete_bytes,
            line_count=line_count,
            bad_lines=self.bad_lines,
            skipped_lines=dict(self.skipped),
            unknown_lines=dict(self.unknown),
            unknown_blocks=dict(self.unknown_blocks),
        )


def _type(item: dict[str, Any]) -> str:
    """A line's or a block's `type`; any other JSON value there (a list is unhashable) counts as no type."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else "(no type)"


def _blocks(content: object) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [block for block in content if isinstance(block, dict)]
    return []


def _command(text: str) -> str | None:
    """`/name args` when `text` is nothing but command markup, `!command` for a shell escape, else None."""
    fields: dict[str, str] = {}
    position = 0
    while position < len(text):
        match = _COMMAND_TAG.match(text, position)
        if match is None:
            return None
        fields[match.group(1)] = match.group(2).strip()
        position = match.end()
    if "bash-input" in fields:
        return "!" + fields["bash-input"]
    name = fields.get("command-name", "")
    if not name:
        return None
    name = name if name.startswith("/") else "/" + name
    return f"{name} {fields.get('command-args', '')}".strip()


def _target(tool_input: object, cwd: str | None) -> str:
    """What a tool call acted on, in one line: a path (relative to the session's folder when inside it), else a
    command's first line, else the first of a pattern, URL, query, description or prompt. Whole: rendering
    shortens it, after redaction (a secret cut short would no longer be recognised)."""
    if not isinstance(tool_input, dict):
        return ""
    for key in _PATH_KEYS:
        value = _text(tool_input.get(key))
        if value:
            return _one_line(_relative(value, cwd))
    command = _text(tool_input.get("command"))
    if command and command.strip():
        return _one_line(command.strip().split("\n", 1)[0])
    for key in _TEXT_KEYS:
        value = _text(tool_input.get(key))
        if value and value.strip():
            return _one_line(value)
    return ""


def _relative(path: str, cwd: str | None) -> str:
    if cwd and os.path.isabs(path):
        pure, root = PurePath(path), PurePath(cwd)
        if root in pure.parents:
            return pure.relative_to(root).as_posix()
    return path


def _timestamp(value: object) -> datetime | None:
    """The line's time in UTC; None when it is not one (a bad time costs the line its time, nothing more)."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: in UTC it would fall outside years 1 to 9999
        return None


def _text(value: object) -> str | None:
    """A string from the file, made safe to write out: lone surrogates (valid in JSON, not in UTF-8) replaced."""
    if not isinstance(value, str):
        return None
    return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _clean_text(text: str) -> str:
    """Message text as markdown can hold it: hidden spans removed, `\\n` line ends (the indexer also splits on a
    lone `\\r`), control characters (a NUL would make the file binary) shown as U+FFFD."""
    text = _HIDDEN_SPANS.sub("", text).replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROL.sub("\ufffd", text).strip()


def _one_line(text: str) -> str:
    return " ".join(_CONTROL.sub("\ufffd", text.replace("\r", " ").replace("\n", " ")).split())
