"""`memory-proxy hook EVENT`: the commands `install-claude` puts in Claude Code's hooks.

Claude Code passes each hook a JSON object on stdin (`session_id`, `transcript_path`, `cwd`, and per event
`source`, `trigger` or `stop_hook_active`) and reads its stdout: SessionStart's becomes the agent's context, a
Stop hook's `{"decision": "block", "reason": ...}` makes the agent go on with the reason as its next instruction,
PreCompact's is shown to the user only (https://code.claude.com/docs/en/hooks). A hook never fails the session:
a broken payload or an unreadable transcript means no reminder, exit 0.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any, Final

from channel.files import atomic_write
from client_proxy.claude import reminders
from client_proxy.claude.reminders import Tally
from client_proxy.errors import ProxyError
from client_proxy.forward.local_zone import local_timezone
from client_proxy.project.context import build_context, local_today
from client_proxy.sync.state import state_home

log = logging.getLogger(__name__)

EVENTS: Final = ("session-start", "pre-compact", "stop")
MAX_PAYLOAD_BYTES: Final = 1024 * 1024
MAX_TRANSCRIPT_READ: Final = 32 * 1024 * 1024  # per Stop; the rest is read at the next one
TALLY_FOLDER: Final = "claude-hooks"


def run_hook(event: str, stdin: IO[bytes], stdout: IO[str], env: Mapping[str, str]) -> int:
    """Answer one hook call; always 0 (a hook must not break the session), except a missing project folder."""
    payload = read_payload(stdin)
    if event == "session-start":
        project = Path(env.get("CLAUDE_PROJECT_DIR") or text_field(payload, "cwd") or ".")
        today = local_today(dt.datetime.now(dt.UTC), local_timezone(env))
        stdout.write(build_context(project, today) + reminders.session_start_extra(payload))
    elif event == "pre-compact":
        stdout.write(reminders.PRE_COMPACT_NOTE + "\n")
    else:
        answer = stop(payload, state_home(env) / TALLY_FOLDER)
        if answer is not None:
            stdout.write(json.dumps(answer) + "\n")
    return 0


def read_payload(stdin: IO[bytes]) -> dict[str, Any]:
    """The hook's JSON input; {} when there is none or it is not a JSON object (run by hand, say)."""
    if stdin.isatty():
        return {}
    try:
        document = json.loads(stdin.read(MAX_PAYLOAD_BYTES + 1)[:MAX_PAYLOAD_BYTES])
    except (ValueError, RecursionError, OSError):
        return {}
    return document if isinstance(document, dict) else {}


def text_field(payload: Mapping[str, Any], name: str) -> str | None:
    """A payload field usable as a name or a path: a non-empty string without NUL that UTF-8 can encode (a lone
    surrogate cannot be); None for anything else, which the hook then treats as absent."""
    value = payload.get(name)
    if not isinstance(value, str) or not value or "\x00" in value:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return value


def stop(payload: dict[str, Any], folder: Path) -> dict[str, str] | None:
    """The Stop hook: read the transcript on from where the last call stopped, count, maybe remind."""
    session, transcript = text_field(payload, "session_id"), text_field(payload, "transcript_path")
    if session is None or transcript is None:
        return None
    tally_path = folder / (hashlib.sha256(session.encode()).hexdigest()[:32] + ".json")
    tally = _load_tally(tally_path)
    try:
        lines, offset = _new_lines(Path(transcript), tally.offset)
    except OSError as exc:
        log.debug("stop hook: cannot read the transcript: %s", exc.strerror)
        return None
    answer, edits = reminders.stop_answer(payload, reminders.count(lines, tally.edits))
    try:
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        atomic_write(tally_path, json.dumps(asdict(Tally(offset, edits))).encode(), 0o600, durable=False)
    except OSError as exc:  # no tally: the next call counts from the start again, which only delays a reminder
        log.debug("stop hook: cannot keep the tally: %s", exc.strerror)
    return answer


def _new_lines(path: Path, offset: int) -> tuple[list[bytes], int]:
    """The whole lines after `offset` (a line still being written waits), and the offset after them."""
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if offset > size:  # a different or rewritten file: start over
            offset = 0
        handle.seek(offset)
        data = handle.read(MAX_TRANSCRIPT_READ)
    end = data.rfind(b"\n") + 1
    return data[:end].splitlines(), offset + end


def _load_tally(path: Path) -> Tally:
    try:
        document = json.loads(path.read_bytes())
        return Tally(int(document["offset"]), int(document["edits"]))
    except (OSError, ValueError, KeyError, TypeError):
        return Tally()


def main_hook(event: str) -> int:
    """`memory-proxy hook EVENT` as Claude Code runs it: 0 whatever the payload, so the session never breaks; a
    fault of the hook itself is logged (the one exception: a missing project folder, which the user must fix)."""
    try:
        return run_hook(event, sys.stdin.buffer, sys.stdout, os.environ)
    except ProxyError:
        raise
    except Exception:
        log.warning("memory-proxy hook %s failed; answering nothing", event, exc_info=True)
        return 0
