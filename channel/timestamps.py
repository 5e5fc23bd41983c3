"""The newest msg1 timestamp accepted from each device key: in memory, or kept in a file across restarts.

msg1 carries a timestamp that must grow per key, so a recorded msg1 cannot open a second session. Kept only in
memory, that memory ends with the process: after a restart a recorded msg1 would be accepted once more (its
session is useless without the device's key, but it occupies a slot). `FileTimestamps` closes that gap.

Writes happen on the event loop during a handshake, so they are one small file replaced atomically, without
fsync: a clean restart keeps them (the page cache survives the process); a power loss may forget the last few,
which reopens the gap only for messages recorded in those seconds.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Protocol

from channel.constants import CLOCK_WINDOW
from channel.files import atomic_write

log = logging.getLogger(__name__)

MAX_FILE_BYTES = 4 * 1024 * 1024  # ~40,000 device keys: far beyond any deployment; a bigger file is not ours


def stray_above(now: float) -> int:
    """The msg1 timestamp (ns) above which a recorded one is stray, at clock `now` (seconds): two clock windows
    ahead. Only timestamps within CLOCK_WINDOW of the server's clock are accepted, so a higher one was recorded
    before that check existed (a clock years ahead), or by a stray file; it is ignored, so that a device it would
    lock out gets back in, and the next accepted handshake replaces it. The one rule for both sides and stores."""
    return int(now * 1e9) + int(2 * CLOCK_WINDOW * 1e9)


class TimestampStore(Protocol):
    def latest(self, static_key: bytes) -> int:
        """The newest timestamp accepted from this key, or -1."""
        ...

    def commit(self, static_key: bytes, timestamp: int) -> None:
        """Record an accepted timestamp (callers check it grew first)."""
        ...


class MemoryTimestamps:
    """Timestamps for the life of the process."""

    def __init__(self) -> None:
        self._latest: dict[bytes, int] = {}

    def latest(self, static_key: bytes) -> int:
        return self._latest.get(static_key, -1)

    def commit(self, static_key: bytes, timestamp: int) -> None:
        self._latest[static_key] = timestamp


class FileTimestamps(MemoryTimestamps):
    """Timestamps that survive a restart, in a JSON file `{hex of the X25519 key: timestamp}` (mode 0600)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self._lock = threading.Lock()
        self._latest.update(_load(path))

    def commit(self, static_key: bytes, timestamp: int) -> None:
        with self._lock:
            super().commit(static_key, timestamp)
            data = json.dumps({key.hex(): value for key, value in self._latest.items()}, sort_keys=True)
            try:
                atomic_write(self.path, data.encode("ascii"), 0o600, durable=False)
            except OSError as exc:  # the handshake stands; only restart protection for this key is weaker
                log.error("cannot save handshake timestamps to %s: %s", self.path, exc.strerror)


def _load(path: Path) -> dict[bytes, int]:
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.error("cannot read handshake timestamps from %s (%s); starting without them", path, exc.strerror)
        return {}
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError("too large")
        document = json.loads(raw)
        if not isinstance(document, dict):
            raise ValueError("not an object")
        loaded = {bytes.fromhex(key): value for key, value in document.items()}
        if not all(len(key) == 32 and type(value) is int and value >= 0 for key, value in loaded.items()):
            raise ValueError("bad entry")
    except ValueError:
        log.error("handshake timestamps in %s are damaged; starting without them", path)
        return {}
    return loaded
