"""`POST /sync/sessions`: a laptop uploads its Claude Code session transcripts (source `sessions`).

A transcript is markdown the laptop rendered and redacted (`client_proxy.transcripts`, `redaction`), in parts of at
most the file cap so a long session still indexes. The laptop sends the parts that changed since its last upload
and the part count; the server keeps them at `sessions/<caller>/<day>-<session>[.<n>].md` (only ever under the
uploading caller's own folder, whatever the body says), drops parts past the count, and indexes them before it
answers. Transcripts are the laptop's alone: no merge, no conflict copy, no expected hash; the upload replaces.

Body::

    {"session": "<id>", "day": "YYYY-MM-DD", "count": 3,
     "parts": [{"number": 3, "content": "# Session ... (part 3)\\n..."}]}

Answer: `{"results": [{"path", "hash"}], "removed": [paths]}`.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from server.errors import InvalidArgumentError
from server.memory.intake import redacted, refuse_secret_path
from server.memory.service import CallerContext, MemoryService
from server.memory.text import utf8
from server.mirror.paths import session_file_path
from syncproto.wire import MAX_PARTS_PER_UPLOAD, MAX_SESSION_PARTS, SESSION_ID

log = logging.getLogger(__name__)

_FIELDS = frozenset({"session", "day", "count", "parts"})


@dataclass(frozen=True)
class SessionUpload:
    session: str
    day: dt.date
    count: int
    parts: tuple[tuple[int, str], ...]  # (number from 1, markdown)


def parse_upload(document: object, max_part_bytes: int) -> SessionUpload:
    """The upload a body describes; InvalidArgumentError naming the first thing wrong."""
    if not isinstance(document, dict):
        raise InvalidArgumentError('the body must be {"session", "day", "count", "parts"}')
    unknown = sorted(set(document) - _FIELDS)
    if unknown:
        raise InvalidArgumentError(f"unknown field {unknown[0]!r}")
    session, day, count, parts = (document.get(name) for name in ("session", "day", "count", "parts"))
    if not isinstance(session, str) or SESSION_ID.fullmatch(session) is None:
        raise InvalidArgumentError("session must be 1 to 128 letters, digits, '-' or '_' (a Claude Code session id)")
    if not isinstance(day, str) or len(day) != 10:
        raise InvalidArgumentError("day must be a date, YYYY-MM-DD")
    try:
        first_day = dt.date.fromisoformat(day)
    except ValueError:
        raise InvalidArgumentError("day must be a date, YYYY-MM-DD") from None
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_SESSION_PARTS:
        raise InvalidArgumentError(f"count must be a whole number from 1 to {MAX_SESSION_PARTS}")
    if not isinstance(parts, list) or len(parts) > MAX_PARTS_PER_UPLOAD:
        raise InvalidArgumentError(f"parts must be a list of at most {MAX_PARTS_PER_UPLOAD} parts")
    seen: set[int] = set()
    parsed: list[tuple[int, str]] = []
    for position, item in enumerate(parts):
        where = f"parts[{position}]"
        if not isinstance(item, dict) or set(item) != {"number", "content"}:
            raise InvalidArgumentError(f'{where} must be {{"number", "content"}}')
        number, content = item["number"], item["content"]
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= count:
            raise InvalidArgumentError(f"{where}.number must be a whole number from 1 to count ({count})")
        if number in seen:
            raise InvalidArgumentError(f"{where}: part {number} appears twice")
        if not isinstance(content, str) or not content.strip():
            raise InvalidArgumentError(f"{where}.content must be non-empty text")
        if len(utf8(content, f"{where}.content")) > max_part_bytes:  # the rule the mirror's write applies
            raise InvalidArgumentError(f"{where} is larger than {max_part_bytes} bytes; split it into more parts")
        seen.add(number)
        parsed.append((number, content))
    return SessionUpload(session, first_day, count, tuple(parsed))


class SessionUploads:
    def __init__(self, service: MemoryService) -> None:
        self.service = service

    def upload(self, caller: CallerContext, upload: SessionUpload) -> dict[str, object]:
        """Store the parts under the caller's folder, drop parts past the count, index; the answer's JSON."""
        with self.service.calling():
            handle = self.service.open_index(caller, write=True)
            mirror = handle.mirror
            results: list[dict[str, object]] = []
            removed: list[str] = []
            parts = self._stored(upload, mirror.max_file_bytes)  # every part checked before any is written
            with mirror.holding_changes():  # readers hear of it once it is searchable
                with mirror.lock:
                    for number, content in parts:
                        path = session_file_path(caller.name, upload.day, upload.session, number)
                        state = mirror.write(path, content, caller=caller.name)
                        results.append({"path": path, "hash": state.hash})
                    # Every stored part past the count, gaps or not (an upload may send part 5 before part 2).
                    past = [
                        session_file_path(caller.name, upload.day, upload.session, number)
                        for number in range(upload.count + 1, MAX_SESSION_PARTS + 1)
                    ]
                    stored = mirror.states(past)
                    for stale in past:
                        recorded = stored.get(stale)
                        if recorded is None or recorded.hash is None:  # never stored, or removed already
                            continue
                        if mirror.delete(stale, caller=caller.name) is not None:
                            removed.append(stale)
                touched = [str(r["path"]) for r in results] + removed
                if touched:
                    self.service.reindex(handle, touched)
            log.info(
                "sessions: %s uploaded %d part(s) of a session (%d in all), removed %d",
                caller.name,
                len(results),
                upload.count,
                len(removed),
            )
            return {"results": results, "removed": removed}

    def _stored(self, upload: SessionUpload, max_bytes: int) -> list[tuple[int, str]]:
        """The parts as they will be stored, redacted when `redact_writes` (the proxy redacted already; an old or
        altered one may not); InvalidArgumentError naming a part that redaction took over the file cap, and
        SecretsRefusedError for a session id holding a secret (it names the files, and a name cannot be redacted).

        Such a part is refused, with nothing stored, rather than cut or stored over the cap (which no reader of the
        file would then take): a current proxy splits into parts of half the default cap after redacting with the
        same rules, so only an old or altered one meets this, and a 400 sets the transcript aside on the laptop."""
        if not self.service.redact_writes:
            return list(upload.parts)
        refuse_secret_path(
            f"session {upload.session}", "Nothing was stored. Update memory-proxy: it sends such an id hashed"
        )
        parts: list[tuple[int, str]] = []
        for position, (number, content) in enumerate(upload.parts):
            content = redacted(content)
            if len(utf8(content, f"parts[{position}].content")) > max_bytes:
                raise InvalidArgumentError(
                    f"parts[{position}] (part {number}) is larger than {max_bytes} bytes once the secrets in it are "
                    "redacted; nothing was stored. Update memory-proxy: it redacts before splitting"
                )
            parts.append((number, content))
        return parts
