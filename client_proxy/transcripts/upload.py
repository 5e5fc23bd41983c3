"""Session transcripts to the server (opt-in, `memory-proxy run --transcripts`): this project's Claude Code sessions,
rendered to markdown, redacted on this laptop, uploaded to `POST /sync/sessions` as source `sessions`.

When: a pass every `POLL` seconds looks at each session file's size (cheap). A session is uploaded when it has
grown by `RESEND_BYTES`, or by `RESEND_LINES` complete lines (`transcripts_delta_bytes` and `_lines` in
client_proxy.tuning), since its last upload; or when it has been quiet for
`QUIET` seconds with anything not yet sent (a finished session's final state); and once more at shutdown, within
`FLUSH_GRACE`. A file unchanged since it was last read through is not read again. The pass at start catches up
sessions that ran while the proxy did not. Of a session's parts only those whose text changed are sent, in as
many requests as the server's body cap needs (`client_proxy.transcripts.batches`). A session goes up under its
file's name (Claude Code names a file after its session id, and copies of a session keep the id inside), and a
file that cannot be read is set aside until it grows, so the others still go. Nothing unredacted ever leaves:
`redaction.redact` runs on each piece of the session whole (before rendering cuts a long message or command short)
and again on the whole rendered text before it is split.

State (`<state home>/<digest>.transcripts.json`, beside the file sync's): per session file, the bytes covered by
the last upload, each part's hash and the day it went up under (so a session without times of its own, dated by
its file, keeps its first day as it grows; files of older versions have none). A lost or corrupt state costs one
re-upload, nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Final

import anyio
import anyio.to_thread

from channel.files import atomic_write
from client_proxy.sync.api import EXPECTED_FAILURES, SyncApi, SyncRefusedError, describe_failure
from client_proxy.sync.retry import Retry
from client_proxy.sync.state import state_path, utc_stamp
from client_proxy.transcripts.batches import upload_batches
from client_proxy.transcripts.files import (
    TranscriptError,
    belongs_to,
    is_empty,
    read_transcript,
    session_files,
    transcript_folders,
)
from client_proxy.transcripts.redacted import redact_transcript
from client_proxy.transcripts.render import render_markdown, split_parts
from redaction import Redaction, redact
from syncproto.content import open_regular
from syncproto.wire import SESSION_ID

log = logging.getLogger(__name__)

POLL: Final = 5.0  # seconds between passes
RESEND_BYTES: Final = 64 * 1024  # growth of a session file that is worth an upload
RESEND_LINES: Final = 40  # or this many new complete lines (about twenty exchanges)
QUIET: Final = 60.0  # seconds without growth after which whatever is unsent goes (the session's final state)
FLUSH_GRACE: Final = 10.0  # seconds the last pass may take when the proxy stops
MAX_STATE_BYTES: Final = 16 * 1024 * 1024


@dataclass
class SentSession:
    """What the server holds of one session file: the bytes covered and each part's hash (empty: skipped)."""

    covered: int
    parts: list[str] = field(default_factory=list)
    skipped: str | None = None  # why it is not uploaded ("empty", "another project"), until it grows
    uploaded_at: str | None = None
    redacted: int = 0
    day: str | None = None  # the day the server files it under, kept as the session grows (None: not sent yet)


class TranscriptState:
    """The uploader's state file: loaded once, saved atomically after every upload."""

    def __init__(self, home: Path, server_url: str, index: str, project: Path) -> None:
        self.path = state_path(home, server_url, index, project, ".transcripts.json")
        self.sessions: dict[str, SentSession] = {}

    def load(self, *, quiet: bool = False) -> None:
        """Read the state; a missing or unusable file is an empty state (`quiet`: without a warning)."""
        try:
            with open(self.path, "rb") as handle:
                data = handle.read(MAX_STATE_BYTES + 1)
            document = json.loads(data)
            self.sessions = {
                str(path): SentSession(
                    covered=int(entry["covered"]),
                    parts=[str(h) for h in entry["parts"]],
                    skipped=entry.get("skipped"),
                    uploaded_at=entry.get("uploaded_at"),
                    redacted=int(entry.get("redacted", 0)),
                    day=_day(entry.get("day")),
                )
                for path, entry in document["sessions"].items()
            }
        except FileNotFoundError:
            self.sessions = {}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            if not quiet:
                log.warning("transcripts: state %s unusable (%s); sessions will be sent again", self.path, exc)
            self.sessions = {}

    def save(self) -> None:
        document = {"version": 1, "sessions": {path: vars(sent) for path, sent in sorted(self.sessions.items())}}
        if not self.path.parent.is_dir():
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write(self.path, json.dumps(document, indent=1).encode("utf-8"), 0o600)


class TranscriptUploader:
    """Uploads the project's sessions until cancelled, then flushes what is left. Never raises for the server's
    or the files' failures: they are logged and retried with backoff."""

    def __init__(
        self,
        api: SyncApi,
        project: Path,
        environ: Mapping[str, str],
        state: TranscriptState,
        *,
        laptop: str,
        server_url: str,
        clock: Callable[[], float] = time.time,
        delta_bytes: int = RESEND_BYTES,
        delta_lines: int = RESEND_LINES,
    ) -> None:
        """`delta_bytes`, `delta_lines`: the growth worth an upload (`transcripts_delta_bytes`, `_lines`)."""
        self.api, self.project, self.environ, self.state = api, project, environ, state
        self.laptop, self.server_url, self.clock = laptop, server_url, clock
        self.delta_bytes, self.delta_lines = delta_bytes, delta_lines
        self._retry = Retry()
        self.stopped = False  # set when the server refuses this device for good (no write access)
        # (size, mtime) of each session file when last read through: reading it again unchanged finds nothing new.
        self._read_through: dict[str, tuple[int, int]] = {}

    async def run(self) -> None:
        await anyio.to_thread.run_sync(self.state.load)
        log.info("transcripts: uploading Claude Code sessions of %s (redacted on this laptop)", self.project)
        try:
            while not self.stopped:
                if await self.pass_once():
                    await anyio.sleep(POLL)
                else:
                    await self._retry.pause()
        finally:
            if not self.stopped:
                with anyio.CancelScope(shield=True) as scope:
                    scope.deadline = anyio.current_time() + FLUSH_GRACE
                    await self.pass_once(flush=True)

    async def pass_once(self, *, flush: bool = False) -> bool:
        """Upload every session that is due (all with unsent lines when `flush`); False when the server failed."""
        try:
            files = await anyio.to_thread.run_sync(
                lambda: session_files(transcript_folders(self.project, self.environ))
            )
        except TranscriptError as exc:
            log.warning("transcripts: %s", exc)
            return True
        for path in files:
            if not await anyio.to_thread.run_sync(self._due, path, flush):
                continue
            try:
                await self._upload(path)
            except SyncRefusedError as exc:
                if exc.status == 403:  # this device may not write to the index: asking again will not help
                    log.error("transcripts: %s; no more uploads until memory-proxy restarts", exc)
                    self.stopped = True
                    return False
                if exc.status not in (400, 413):
                    log.warning("transcripts: upload failed: %s", describe_failure(exc, self.server_url))
                    return False
                log.warning("transcripts: %s was refused (%s); it is tried again when it grows", path.name, exc)
                self._set_aside(path, "refused by the server")
                continue
            except EXPECTED_FAILURES as exc:
                log.warning("transcripts: upload failed: %s", describe_failure(exc, self.server_url))
                return False
            self._retry.succeeded()
        return True

    def _set_aside(self, path: Path, why: str, covered: int | None = None) -> None:
        """Not uploaded until it grows past `covered` (by default, its size now); the day it went up under stays."""
        if covered is None:
            try:
                covered = os.stat(path, follow_symlinks=False).st_size
            except OSError:
                return
        previous = self.state.sessions.get(str(path))
        self.state.sessions[str(path)] = SentSession(covered, [], why, day=previous.day if previous else None)
        self.state.save()

    def _due(self, path: Path, flush: bool) -> bool:
        """Whether `path` has grown enough, or has been quiet with unsent lines (or `flush`)."""
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return False
        if self._read_through.get(str(path)) == (info.st_size, info.st_mtime_ns):
            return False  # e.g. a long last line never finished: re-reading the whole session would find no more
        sent = self.state.sessions.get(str(path))
        covered = sent.covered if sent is not None else 0
        if info.st_size == covered:
            return False
        if info.st_size < covered:  # rewritten from scratch: send it all again
            return True
        if info.st_size - covered >= self.delta_bytes:
            return True
        lines = _new_lines(path, covered, self.delta_bytes, self.delta_lines)
        if lines == 0:
            return False
        return flush or lines >= self.delta_lines or self.clock() - info.st_mtime >= QUIET

    async def _upload(self, path: Path) -> None:
        try:
            info = os.stat(path, follow_symlinks=False)
        except OSError:
            return
        await self._send(path)
        self._read_through[str(path)] = (info.st_size, info.st_mtime_ns)  # as it was before the read

    async def _send(self, path: Path) -> None:
        prepared = await anyio.to_thread.run_sync(self._prepare, path)
        if prepared is None:
            return
        session, first_day, parts, redacted, covered = prepared
        sent = self.state.sessions.get(str(path))
        day = sent.day if sent is not None and sent.day is not None else first_day
        before = sent.parts if sent is not None and sent.skipped is None else []
        hashes = [hashlib.sha256(part.encode("utf-8")).hexdigest() for part in parts]
        changed = [(n + 1, part) for n, part in enumerate(parts) if n >= len(before) or before[n] != hashes[n]]
        if changed or len(before) != len(parts):
            # At least one request, even with no part changed: a smaller count makes the server drop the rest.
            for batch in upload_batches(session, day, len(parts), changed):
                await self.api.upload_session(session, day, len(parts), batch)
            log.info(
                "transcripts: sent session %s (%d of %d part(s), %d secret(s) redacted)",
                session[:8],
                len(changed),
                len(parts),
                redacted.total,
            )
            if redacted.counts:
                log.info("transcripts: redacted %s", ", ".join(f"{k} {n}" for k, n in sorted(redacted.counts.items())))
        self.state.sessions[str(path)] = SentSession(covered, hashes, None, utc_stamp(), redacted.total, day)
        await anyio.to_thread.run_sync(self.state.save)

    def _prepare(self, path: Path) -> tuple[str, str, list[str], Redaction, int] | None:
        """The session's id, first day, redacted parts; None (and the reason recorded) when it is not sent."""
        try:
            return self._prepare_file(path)
        except Exception as exc:  # a shape no reader foresaw costs that file only, until it grows
            # Where it failed, never the message: that may quote the file's text.
            frame = traceback.extract_tb(exc.__traceback__)[-1]
            log.error(
                "transcripts: %s could not be read (%s in %s:%s); it is tried again when it grows",
                path.name,
                type(exc).__name__,
                Path(frame.filename).name,
                frame.lineno,
            )
            self._set_aside(path, "unreadable")
            return None

    def _prepare_file(self, path: Path) -> tuple[str, str, list[str], Redaction, int] | None:
        try:
            transcript = read_transcript(path)
        except TranscriptError as exc:
            log.warning("transcripts: %s", exc)
            return None
        skipped = None
        if not belongs_to(transcript, self.project):
            skipped = "another project"
        elif is_empty(transcript):
            skipped = "empty"
        if skipped is not None:
            self._set_aside(path, skipped, transcript.complete_bytes)
            return None
        # Each piece whole first, then the rendered text, whose cuts and joins only a second pass sees.
        pieces, counts = redact_transcript(transcript)
        rendered = redact(render_markdown(pieces, laptop=self.laptop))
        redaction = Redaction(rendered.text, dict(Counter(counts) + Counter(rendered.counts)))
        first = transcript.started or datetime.fromtimestamp(os.stat(path).st_mtime, UTC)
        day = first.astimezone(UTC).date().isoformat()
        parts = split_parts(redaction.text)
        return _upload_id(path, transcript.session_id), day, parts, redaction, transcript.complete_bytes


def _upload_id(path: Path, session_id: str) -> str:
    """The id the server names the session's files by: the file's name (no two files of a folder share one, while
    a resumed, forked or copied session keeps the id inside), else the id its lines give; hashed when neither is a
    usable id, since an id names files and a name cannot be redacted."""
    for candidate in (path.stem, session_id):
        if SESSION_ID.fullmatch(candidate) and not redact(candidate).total:
            return candidate
    return hashlib.sha256(session_id.encode("utf-8", "replace")).hexdigest()[:32]


def _day(value: object) -> str | None:
    """A remembered day as the state file holds it; anything else is none (the day is worked out again)."""
    if not isinstance(value, str):
        return None
    try:
        return date.fromisoformat(value).isoformat() if len(value) == 10 else None
    except ValueError:
        return None


def _new_lines(path: Path, covered: int, max_bytes: int, max_lines: int) -> int:
    """Complete lines after byte `covered` (a partly written last line does not count yet), up to `max_lines`."""
    try:
        fd, _info = open_regular(path)
    except OSError:  # gone, a link, or not a regular file: nothing new to count
        return 0
    try:
        return min(os.pread(fd, max_bytes, covered).count(b"\n"), max_lines)
    except OSError:
        return 0
    finally:
        os.close(fd)
