"""The sync protocol's constants, written once: endpoints, limits, hash and session-id formats, push statuses.

`docs/sync-protocol.md` is the specification. Both sides import these; neither writes its own copy.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final, Literal

CHANGES_PATH: Final = "/sync/changes"  # GET ?since=&wait=: the changes after a revision, long-polled
PUSH_PATH: Final = "/sync/push"  # POST {"changes": [...]}: a laptop's edits
SESSIONS_PATH: Final = "/sync/sessions"  # POST: a laptop's session transcripts

MAX_FILE_BYTES: Final = 2 * 1024 * 1024  # one memory file (the server's default cap; laptops never push more)
MAX_PUSH_CHANGES: Final = 100  # changes per push
# memory_write's cap on `content` (UTF-8 bytes): the server refuses more; the terminal's `write` reads stdin no
# further than one byte past it.
MAX_WRITE_BYTES: Final = 256 * 1024
MAX_PUSH_BYTES: Final = 8 * 1024 * 1024  # one push or upload body, as the server reads it
# What a laptop puts in one push: half the body cap, headroom for the JSON escapes it does not count.
PUSH_BATCH_BYTES: Final = MAX_PUSH_BYTES // 2
MAX_CHANGES: Final = 500  # changes per pull answer
MAX_CHANGE_BYTES: Final = 4 * 1024 * 1024  # content per pull answer (a longer answer says `more`)
MAX_WAIT: Final = 30.0  # seconds a pull may long-poll
MAX_SESSION_PARTS: Final = 999  # parts of one session transcript (the path pattern's limit)
MAX_PARTS_PER_UPLOAD: Final = 16

Status = Literal["applied", "merged", "unchanged", "conflict", "deleted", "kept", "rejected"]
STATUSES: Final = frozenset({"applied", "merged", "unchanged", "conflict", "deleted", "kept", "rejected"})

CONTENT_HASH: Final = re.compile(r"[0-9a-f]{64}")  # sha256 of a file's bytes, lowercase hex
# A Claude Code session id (a UUID) as the laptop sends it and the server names the transcript's file.
SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")


def sha256_hex(data: bytes) -> str:
    """The content hash of the protocol: sha256 of the bytes, lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def is_content_hash(value: object) -> bool:
    """Whether `value` is a content hash as the protocol writes it."""
    return isinstance(value, str) and CONTENT_HASH.fullmatch(value) is not None
