"""How much one pull may bring: the caps the server announces in each changes answer, never above this proxy's
own ceilings. A malicious or broken server must not fill the laptop's disk or memory: an answer over the ceiling
is not read to its end, one with more changes than allowed is refused whole, and a file over the size cap is
not written (the user is told, in the log, which and why)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from client_proxy.sync.scope import DEFAULT_MAX_FILE_BYTES

log = logging.getLogger(__name__)

CEILING_FILE_BYTES = DEFAULT_MAX_FILE_BYTES  # whatever a server announces, no bigger file is written
CEILING_CHANGES = 1000  # changes in one answer (the server sends at most 500)
CEILING_ANSWER_BYTES = 16 * 1024 * 1024  # one answer, JSON escapes included (the server aims at 4 MiB of text)


@dataclass(frozen=True)
class PullLimits:
    max_file_bytes: int = CEILING_FILE_BYTES
    max_changes: int = CEILING_CHANGES


def announced(document: dict[str, Any]) -> PullLimits:
    """The caps the server announced (`limits` in a changes answer), each at most this proxy's ceiling."""
    limits = document.get("limits")
    limits = limits if isinstance(limits, dict) else {}
    return PullLimits(
        max_file_bytes=_capped(limits.get("max_file_bytes"), CEILING_FILE_BYTES),
        max_changes=_capped(limits.get("max_changes"), CEILING_CHANGES),
    )


def over_size(path: str, content: str | None, limits: PullLimits) -> bool:
    """Whether a pulled file is larger than the cap (then it is logged and not written)."""
    if content is None or len(content) * 4 <= limits.max_file_bytes:  # UTF-8 is at most 4 bytes a character
        return False
    size = len(content.encode("utf-8", "surrogatepass"))
    if size <= limits.max_file_bytes:
        return False
    log.warning(
        "sync: %r from the server is %d bytes, over the cap of %d; not written", path, size, limits.max_file_bytes
    )
    return True


def _capped(value: object, ceiling: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value < ceiling:
        return value
    return ceiling
