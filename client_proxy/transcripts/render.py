"""A Claude Code session as markdown that reads well and indexes well, and cut into parts that fit the server.

The document is a `# Session ...` title, a metadata list, then one `## <time> UTC · <role>` section per message,
so the indexer (which splits on headings) gives every chunk a heading path citing the session and the time. It
ends with a trailer line holding what grows (the last time, the message count), so the head never changes as a
session goes on and `split_parts` can keep every part but the last byte for byte. A new title (a rename, or the
AI title Claude Code updates as the conversation evolves) is the exception: it is the first line of every part.

Headings inside a message's own text are demoted by two levels (`#` becomes `###`, never deeper than `######`)
rather than escaped or fenced: the message keeps its structure, its subsections nest under the message, and no
line of it can pose as a session title or a message heading. Lines inside fenced code are left alone, and a fence
the message (or its truncation) leaves open is closed, so it cannot swallow the messages after it. Setext
underlines are left as they are: the indexer knows only ATX headings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Final

from client_proxy.transcripts.lines import Message, Transcript

PART_BYTES: Final = 1024 * 1024
MIN_PART_BYTES: Final = 4096
MAX_MESSAGE_CHARS: Final = 8000
MAX_TARGET_CHARS: Final = 120
_TITLE_CHARS: Final = 80
_META_CHARS: Final = 300
_TRAILER_RESERVE: Final = 256  # room every part keeps, so appending the trailer to the last one never overflows it
# Mirrors server/index/markdown.py, which this package must not import: what the indexer sees is what matters.
_FENCE: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_HEADING: Final = re.compile(r"^( {0,3})(#{1,6})(?=[ \t]|$)")
_TRAILER: Final = re.compile(r"_(?:Ended \d{4}-\d\d-\d\d \d\d:\d\d UTC after )?\d+ messages?\._\n?")


def session_title(transcript: Transcript) -> str:
    """The explicit title, else the first words the user typed, else the session id; one line, at most 80 chars."""
    first_words = next((m.text for m in transcript.messages if m.role == "user"), "")
    return _shorten(transcript.title or first_words or transcript.session_id, _TITLE_CHARS)


def render_markdown(transcript: Transcript, *, laptop: str, max_message_chars: int = MAX_MESSAGE_CHARS) -> str:
    """The session as markdown: title, metadata, one section per message (text cut at `max_message_chars` with a
    visible note, then its tool calls as a list), and a trailer with the last time and the message count.

    Redact the transcript first (`redact_transcript`): what is cut here may be the end of a secret."""
    started = transcript.started
    date = f" ({started:%Y-%m-%d})" if started else ""
    lines = [f"# Session {session_title(transcript)}{date}", "", f"- session: {_meta(transcript.session_id)}"]
    lines.append(f"- laptop: {_meta(laptop)}")
    if transcript.cwd:
        lines.append(f"- project: {_meta(transcript.cwd)}")
    if transcript.git_branch:
        lines.append(f"- branch: {_meta(transcript.git_branch)}")
    if started:
        lines.append(f"- started: {_when(started)}")
    lines.append("")
    for message in transcript.messages:
        lines.extend(_section(message, max_message_chars))
    count = len(transcript.messages)
    ended = f"Ended {_when(transcript.ended)} after " if transcript.ended else ""
    lines.append(f"_{ended}{count} message{'' if count == 1 else 's'}._")
    return "\n".join(lines) + "\n"


def _section(message: Message, max_chars: int) -> list[str]:
    when = f"{_when(message.time)} · " if message.time else ""
    lines = [f"## {when}{message.role}", ""]
    if message.text:
        lines.extend([*_body(message.text, max_chars), ""])
    for call in message.tools:
        target = f" {_cut(call.target, MAX_TARGET_CHARS)}" if call.target else ""
        name = call.name.replace("`", "'")
        lines.append(f"- `{name}`{target}{' (failed)' if call.failed else ''}")
    if message.tools:
        lines.append("")
    return lines


def _body(text: str, max_chars: int) -> list[str]:
    """The message's lines with headings demoted outside fences, cut to `max_chars`, every fence closed."""
    kept = text[:max_chars]
    out: list[str] = []
    fence: str | None = None
    for line in kept.split("\n"):
        if fence is not None:
            fence = None if _closes(line, fence) else fence
            out.append(line)
        elif opener := _FENCE.match(line):
            fence = opener.group(1)
            out.append(line)
        else:
            out.append(_HEADING.sub(_demote, line, count=1))
    if fence is not None:
        out.append(fence[0] * len(fence))
    if len(text) > max_chars:
        out.extend(["", f"… [truncated: {len(text) - max_chars} more characters]"])
    return out


def _demote(heading: re.Match[str]) -> str:
    return heading.group(1) + "#" * min(len(heading.group(2)) + 2, 6)


def _closes(line: str, fence: str) -> bool:
    return re.fullmatch(r" {0,3}" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}[ \t]*", line) is not None


def _when(time: datetime) -> str:
    return f"{time:%Y-%m-%d %H:%M} UTC"


def _cut(line: str, limit: int) -> str:
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _meta(value: str) -> str:
    return _shorten(value, _META_CHARS)


def _shorten(text: str, limit: int) -> str:
    line = " ".join(text.split())
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut[limit // 2 :] else cut) + "…"


@dataclass
class _Packer:
    """Greedy packing of sections into parts, each decision depending only on what came before: a part is closed
    when the next section does not fit, so appending sections can only change the last part or add parts."""

    title: str
    rest: str  # the head after its title line
    budget: int
    parts: list[list[str]] = field(default_factory=list)
    size: int = 0
    fresh: bool = True  # the current part holds its head (and a continued heading) only

    def start(self, head: str) -> None:
        self.parts.append([head])
        self.size = _bytes(head)
        self.fresh = True
        if self.room() < MIN_PART_BYTES // 2:
            raise ValueError(f"a part of {self.budget} bytes has no room left after its {self.size}-byte head")

    def next_part(self) -> None:
        self.start(f"{self.title} (part {len(self.parts) + 1})\n{self.rest}")

    def room(self) -> int:
        return self.budget - self.size

    def add(self, text: str) -> None:
        self.parts[-1].append(text)
        self.size += _bytes(text)
        self.fresh = False

    def section(self, text: str) -> None:
        if _bytes(text) > self.room() and not self.fresh:
            self.next_part()
        if _bytes(text) <= self.room():
            self.add(text)
        else:
            self._oversized(text)

    def _oversized(self, text: str) -> None:
        """A single message larger than a part: cut at line ends (inside a line only when one line is larger),
        each later piece under its message's heading marked `(continued)`."""
        heading, _, _ = text.partition("\n")
        continued = f"{heading} (continued)\n\n"
        for line in _lines(text):
            while line:
                if _bytes(line) <= self.room():
                    self.add(line)
                    break
                if not self.fresh:
                    self.next_part()
                    self.add(continued)
                    self.fresh = True
                    continue
                piece = _utf8_prefix(line, self.room())
                self.add(piece)
                line = line[len(piece) :]


def split_parts(markdown: str, max_bytes: int = PART_BYTES) -> list[str]:
    """`render_markdown`'s output in parts of at most `max_bytes` UTF-8 bytes, cut between messages (inside one
    only when it alone is too large). A later part starts with the title plus `(part N)` and the metadata, so each
    part cites the session on its own. A document that fits is one part, unchanged."""
    if max_bytes < MIN_PART_BYTES:
        raise ValueError(f"parts must allow at least {MIN_PART_BYTES} bytes")
    if _bytes(markdown) <= max_bytes:
        return [markdown]
    head, sections, trailer = _blocks(markdown)
    title, _, rest = head.partition("\n")
    packer = _Packer(title, rest, max_bytes - _TRAILER_RESERVE)
    packer.start(head)
    for section in sections:
        packer.section(section)
    packer.parts[-1].append(trailer)
    return ["".join(part) for part in packer.parts]


def _blocks(markdown: str) -> tuple[str, list[str], str]:
    """(head, message sections, trailer): sections start at level-2 headings outside fenced code."""
    lines = _lines(markdown)
    trailer = lines.pop() if lines and _TRAILER.fullmatch(lines[-1]) else ""
    starts: list[int] = []
    fence: str | None = None
    for index, line in enumerate(lines):
        bare = line.rstrip("\n")
        if fence is not None:
            fence = None if _closes(bare, fence) else fence
        elif opener := _FENCE.match(bare):
            fence = opener.group(1)
        elif (heading := _HEADING.match(bare)) and len(heading.group(2)) == 2:
            starts.append(index)
    bounds = [*starts, len(lines)]
    head = "".join(lines[: bounds[0]])
    return head, ["".join(lines[a:b]) for a, b in pairwise(bounds)], trailer


def _lines(text: str) -> list[str]:
    """Lines with their `\\n`; only `\\n` ends a line here (the renderer writes no other line end)."""
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def _utf8_prefix(text: str, limit: int) -> str:
    data = text.encode("utf-8")[:limit]
    return data.decode("utf-8", "ignore")  # drops a character cut in half; it starts the next piece


def _bytes(text: str) -> int:
    return len(text.encode("utf-8"))
