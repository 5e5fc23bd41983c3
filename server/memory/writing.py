"""The read-modify-write of `memory_write`, under the mirror's lock: what an append adds or a replace puts, the
size check, and the idempotency record stored with the file's new state. Also the redaction of what is written.

Writing: `append` (default) adds to a file, by default today's daily log `memory/YYYY-MM-DD.md` in the caller's
time zone; a new daily log starts with `# YYYY-MM-DD`; an entry in a daily log goes under `## HH:MM — topic`
(`## HH:MM` without a topic), an entry in another file under `## HH:MM — topic` only when a topic is given;
entries are separated by one blank line. `replace` needs `expected_hash`: the file's current sha256, or the
literal "absent" for a file that must not exist yet. Either way the mirror and the index are updated before
the call returns, and an `idempotency_key` makes a retry return the first answer without writing again.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

from server.errors import InvalidArgumentError
from server.index.scan import day_of
from server.indexes.registry import OpenIndex
from server.memory.intake import redacted
from server.memory.results import WriteOutput
from server.memory.text import clean_topic, compose_append, count_lines, entry_heading
from server.mirror.mirror import ABSENT, IdempotencyRecord, check_expected
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


def write_locked(handle: OpenIndex, req: WriteRequest) -> tuple[WriteOutput, IdempotencyRecord | None]:
    """The read-modify-write of `write`, under the mirror's lock."""
    current = handle.mirror.read(req.target)
    check_expected(req.target, current.hash if current else None, req.expected)
    if req.mode == "append":
        title = f"# {day}" if current is None and (day := day_of(req.target)) else None
        heading = None
        clean = clean_topic(req.topic)
        if clean is not None or day_of(req.target) is not None:
            heading = entry_heading(req.local.strftime("%H:%M"), clean)
        added = compose_append(current.text if current else "", req.content, title=title, heading=heading)
        text, first, last = added.text, added.start_line, added.end_line
    else:
        text, first, last = req.content, 1, count_lines(req.content)
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
    )
    record = IdempotencyRecord(req.caller, req.key, req.request, output.model_dump_json()) if req.key else None
    handle.mirror.write(
        req.target,
        text,
        caller=req.caller,
        expected_hash=current.hash if current is not None else ABSENT,
        record=record,
    )
    return output, record


def redact_into(text: str, counts: dict[str, int]) -> str:
    """`text` with its secrets replaced; adds what was replaced, per kind, to `counts` (see `server.memory.intake`)."""
    return redacted(text, counts)
