"""Which memory file names collide on a laptop: one rule for the server (which refuses to create the second) and
the proxy (which refuses to write a server-supplied name over a different local file).

macOS and Windows disks are case-insensitive and macOS stores names decomposed, so `Case.md` and `case.md`,
`MEMORY.md` and `memory.md`, or `é.md` in its NFC and NFD forms, are one file there: syncing both would make one
silently overwrite the other. Two names collide when they are equal after Unicode NFC normalisation and case
folding, and differ as written.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable


def collision_key(path: str) -> str:
    """The form under which two names are one file on a case-insensitive, normalising disk."""
    return unicodedata.normalize("NFC", unicodedata.normalize("NFC", path).casefold())


def find_collision(path: str, existing: Iterable[str]) -> str | None:
    """An existing name that is the same file as `path` on such a disk but spelled differently, or None."""
    key = collision_key(path)
    for other in existing:
        if other != path and collision_key(other) == key:
            return other
    return None
