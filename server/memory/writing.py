"""The read-modify-write of `memory_write`, under the mirror's lock: what an append adds or a replace puts, the
size check, and the idempotency record stored with the file's new state. Also the redaction of what is written.
Servers sharing one database are not ordered by that lock: a write made over another's is made again over it
(`server.mirror.current.rewritten`), as the lock would have ordered the two.

Writing: `append` (default) adds to a file, by default today's daily log `memory/YYYY-MM-DD.md` in the caller's
time zone; a new daily log starts with `# YYYY-MM-DD`; an entry in a daily log goes under `## HH:MM — topic`
(`## HH:MM` without a topic), an entry in another file under `## HH:MM — topic` only when a topic is given;
entries are separated by one blank line. An entry's heading that would repeat the path of one in the file (two
entries of one topic in one minute) gets ` (2)`, ` (3)`, ... after its title, so each can be read and written by
its own heading. `replace` needs `expected_hash`: the file's current sha256, or the literal "absent" for a file
that must not exist yet. Either way the mirror and the index are updated before the call returns, and an
`idempotency_key` makes a retry return the first answer without writing again.

With a `heading` (`server.memory.sections`), an append goes under that section, created when missing; in a daily
log, or with a topic, as a timed entry one level below it (`### HH:MM — topic`). A replace with a heading replaces
only that section, guarded by the section's hash ("absent": the section must not exist yet, and is created).

With `tags` and `category`, an append to a daily log carries them on its new entry's heading
(`## HH:MM — topic [tags: a, b] [category: x]`, `server.index.labels`); every other write, with or without a
heading, merges them into the file's front matter (`server.index.frontmatter`: created when missing, tags added,
the category replaced; a replace keeps the front matter its content brings, with the labels added).

Refused, with nothing written: content that opens a code fence it does not close, and an append after a file's
unclosed fence (`server.memory.sections`: the later entries, their headings and labels, would be code); with
`redact_writes`, a tag or category holding a secret (`server.memory.intake`: a label cannot be redacted).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeVar

from server.errors import ConflictError, InvalidArgumentError
from server.index.frontmatter import with_front_matter
from server.index.labels import Labels, labels_argument, render_inline
from server.index.markdown import HEADING_SEPARATOR
from server.index.scan import day_of
from server.indexes.registry import OpenIndex
from server.memory import sections
from server.memory.arguments import (
    check_content,
    check_expected_hash,
    check_heading,
    check_idempotency_key,
    check_topic,
    request_digest,
    time_zone,
)
from server.memory.intake import redacted, refuse_secret_labels, refuse_secret_path
from server.memory.results import WriteOutput
from server.memory.text import Appended, clean_topic, compose_append, count_lines, entry_title
from server.mirror.current import Current, rewritten
from server.mirror.mirror import ABSENT, IdempotencyRecord, MirrorFile, check_expected
from server.mirror.paths import normalise_memory_path
from syncproto.paths import daily_log_path
from syncproto.wire import sha256_hex


@dataclass(frozen=True)
class WriteRequest:
    """One checked `memory_write`: who, what, where, how, and the idempotency key with the request's digest."""

    caller: str
    content: str
    target: str
    mode: Literal["append", "replace"]
    topic: str | None
    expected: str | None
    local: dt.datetime  # now, in the caller's time zone
    key: str | None
    request: str
    redacted: dict[str, int]
    heading: tuple[str, ...] | None = None  # the section's titles, when the write is to one section
    labels: Labels = field(default_factory=Labels)  # tags and category to store with the text

    @property
    def inline_labels(self) -> bool:
        """The labels go on the new entry's heading (an append to a daily log), not into the front matter."""
        return self.mode == "append" and day_of(self.target) is not None


def check_write(
    caller: str,
    content: str,
    *,
    path: str | None,
    mode: str,
    topic: str | None,
    heading: str | None,
    expected_hash: str | None,
    idempotency_key: str | None,
    timezone: str | None,
    now: dt.datetime,
    redact_writes: bool,
    tags: list[str] | None = None,
    category: str | None = None,
) -> WriteRequest:
    """The checked (and, with `redact_writes`, redacted) request of one `memory_write` call, at time `now`."""
    check_content(content)
    topic = check_topic(topic)
    redacted: dict[str, int] = {}
    if redact_writes:
        content = redact_into(content, redacted)
        topic = redact_into(topic, redacted) if topic is not None else None
        heading = redact_into(heading, redacted) if isinstance(heading, str) else heading
        refuse_secret_labels(tags, category, "Nothing was written: label the text by its topic, never a credential")
    sections.refuse_unclosed_fence(content)
    if mode not in ("append", "replace"):
        raise InvalidArgumentError("mode must be 'append' or 'replace'")
    parts = check_heading(heading)
    labels = labels_argument(tags, category)
    expected = check_expected_hash(expected_hash)
    key = check_idempotency_key(idempotency_key)
    zone = time_zone(timezone)
    if mode == "replace":
        if path is None:
            raise InvalidArgumentError("replace needs a path")
        if expected is None:
            what = (
                "the section's hash (section_hash from memory_get with heading)"
                if parts
                else ("the file's current hash (from memory_get or memory_list)")
            )
            raise InvalidArgumentError(f"replace needs expected_hash: {what}, or {ABSENT!r} to create it")
    arguments: dict[str, object] = {
        "content": content, "path": path, "mode": mode, "topic": topic, "expected_hash": expected, "timezone": timezone
    }  # fmt: skip
    # Only when given: the digests of earlier writes stay what they were.
    optional = {"heading": heading, "tags": list(labels.tags) if tags is not None else None, "category": category}
    arguments.update((name, value) for name, value in optional.items() if value is not None)
    local = now.astimezone(zone)
    target = normalise_memory_path(path) if path is not None else daily_log_path(local.date())
    if redact_writes and path is not None:
        refuse_secret_path(target, "Nothing was written: write to a path without it")
    mode_: Literal["append", "replace"] = "replace" if mode == "replace" else "append"
    return WriteRequest(
        caller, content, target, mode_, topic, expected, local, key, request_digest(arguments), redacted, parts, labels
    )


def _whole_file(found: Current, req: WriteRequest) -> tuple[str, int, int]:
    """The file after a write without a heading, and the first and last line written."""
    check_expected(req.target, found.hash, req.expected)
    if req.mode == "replace":  # the text it replaces is not needed: a file damaged on the server's disk may go
        return req.content, 1, count_lines(req.content)
    current = found.needs_text("an append")
    lines = sections.plain(sections.raw_lines(current.text)) if current is not None else []
    if current is not None:  # the same rule as a write under a heading: nothing added inside an unclosed fence
        sections.refuse_open_fence(lines, len(lines), req.target)
    title = f"# {day}" if current is None and (day := day_of(req.target)) else None
    existing = current.text if current else ""
    clean = clean_topic(req.topic)

    def under(entry: str | None) -> Appended:
        return compose_append(existing, req.content, title=title, heading=f"## {entry}" if entry else None)

    timed = clean is not None or day_of(req.target) is not None
    added = _with_entry(req, clean, lines, under) if timed else under(None)
    return added.text, added.start_line, added.end_line


def _section(current: MirrorFile | None, req: WriteRequest, parts: tuple[str, ...]) -> sections.Edit:
    """The file after a write to the section named `parts` (`expected_hash`, when given, is that section's)."""
    existing = current.text if current else ""
    day = day_of(req.target)
    title = f"# {day}" if day else None
    lines = sections.plain(sections.raw_lines(existing))
    span = sections.locate(lines, parts, req.target)
    if req.expected is not None:
        actual = sections.section_hash(lines, span) if span is not None else None
        check_section_expected(req.target, HEADING_SEPARATOR.join(parts), actual, req.expected, current)
    if req.mode == "replace":
        if span is not None:
            return sections.replace(existing, span, req.content)
        return sections.append(existing, parts, req.content, where=req.target, title=title)
    clean = clean_topic(req.topic)

    def under(entry: str | None) -> sections.Edit:
        return sections.append(existing, parts, req.content, where=req.target, entry=entry, title=title)

    return _with_entry(req, clean, lines, under) if clean is not None or day is not None else under(None)


class _Composed(Protocol):
    @property
    def text(self) -> str: ...


Composed = TypeVar("Composed", bound=_Composed)


def _with_entry(req: WriteRequest, topic: str | None, lines: list[str], compose: Callable[[str], Composed]) -> Composed:
    """The file of `lines` after the write `compose` makes with a timed entry's heading text (`HH:MM — topic`, the
    inline labels after it when they go there); ` (2)`, ` (3)`, ... after its title when the heading would repeat
    the path of a section of the file (`sections.distinct_title`)."""
    labels = render_inline(req.labels) if req.inline_labels else ""
    title = entry_title(req.local.strftime("%H:%M"), topic)
    first = compose(title + labels)
    distinct = sections.distinct_title(lines, sections.plain(sections.raw_lines(first.text)), title)
    return first if distinct == title else compose(distinct + labels)


def check_section_expected(
    path: str, name: str, actual: str | None, expected: str | None, current: MirrorFile | None
) -> None:
    """ConflictError unless `expected` (ABSENT: no such section, or a hash) matches the section's hash `actual`."""
    if expected == ABSENT:
        if actual is not None:
            raise ConflictError(
                f"{path} already has a section {name!r} (its hash is {actual}); pass that hash to replace it", actual
            )
        return
    if actual is None:
        raise ConflictError(f"{path} has no section {name!r}; pass {ABSENT!r} as expected_hash to create it", None)
    if actual != expected:
        hint = ""
        if current is not None and expected == current.hash:
            hint = " (that is the whole file's hash: a section replace takes the section_hash from memory_get)"
        raise ConflictError(
            f"section {name!r} of {path} has changed: expected_hash does not match{hint}; its current hash is {actual}",
            actual,
        )


# What `write_locked` made: the record of an earlier write with the key, or this write's answer and record.
Made = IdempotencyRecord | tuple[WriteOutput, IdempotencyRecord | None]


def write_locked(handle: OpenIndex, req: WriteRequest) -> Made:
    """The read-modify-write of `write`, under the mirror's lock; made again over a write another server made
    meanwhile (`rewritten`), the key looked up again with it: that write may be this one, retried through there."""
    return rewritten(handle.mirror, req.target, lambda found: _written(handle, req, found))


def _written(handle: OpenIndex, req: WriteRequest, found: Current) -> Made:
    earlier = handle.mirror.recall(req.caller, req.key) if req.key is not None else None
    if earlier is not None:
        return earlier
    edit = None
    if req.heading is not None:
        edit = _section(found.needs_text("a write to one section"), req, req.heading)
    text, first, last = (edit.text, edit.start_line, edit.end_line) if edit else _whole_file(found, req)
    if req.labels and not req.inline_labels:
        labelled = with_front_matter(text, req.labels)
        moved = count_lines(labelled) - count_lines(text)  # the block grew at the top: the written lines moved
        whole = req.mode == "replace" and edit is None  # the whole file is what was written
        text, first, last = labelled, first if whole else first + moved, last + moved
    data = text.encode("utf-8")
    if len(data) > handle.mirror.max_file_bytes:
        raise InvalidArgumentError(
            f"{req.target} would be larger than {handle.mirror.max_file_bytes} bytes; write to another file"
        )
    output = WriteOutput(
        path=req.target,
        mode=req.mode,
        hash=sha256_hex(data),
        lines=count_lines(text),
        start_line=first,
        end_line=last,
        indexed=False,
        replayed=False,
        redacted=req.redacted,
        heading=edit.heading if edit else None,
        section_hash=edit.section_hash if edit else None,
    )
    record = IdempotencyRecord(req.caller, req.key, req.request, output.model_dump_json()) if req.key else None
    handle.mirror.write(
        req.target,
        text,
        caller=req.caller,
        expected_hash=found.hash if found.hash is not None else ABSENT,
        record=record,
    )
    return output, record


def redact_into(text: str, counts: dict[str, int]) -> str:
    """`text` with its secrets replaced; adds what was replaced, per kind, to `counts` (see `server.memory.intake`)."""
    return redacted(text, counts)
