"""The newest handshake timestamp the server accepted from this device, kept in a file beside the device key.

The server requires msg1's timestamp to grow per device key (`channel.session`), and remembers the newest it
accepted across restarts. A transport keeps its own timestamps growing, but a new process starts from the clock:
after the laptop's clock stepped back (NTP correcting a clock that ran a minute or two fast), every handshake of a
restarted proxy, of a terminal command or of `memory-proxy doctor` looked replayed and was refused until real time
passed the stored one, up to the five-minute clock window. Every process of the device starts above this file's
value instead (found by the fault loop: a clock two minutes ahead, then set right).

Best effort: a file that cannot be read or written only loses the protection against a stepped-back clock.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)

STAMP_FILE = "handshake-stamp"
_MAX_BYTES = 32


class StampFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def newest(self) -> int:
        """The newest accepted timestamp (nanoseconds), 0 when none is recorded or the file is unusable."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return 0
        try:
            return _parse(os.read(fd, _MAX_BYTES))
        except OSError:
            return 0
        finally:
            os.close(fd)

    def accepted(self, timestamp: int) -> None:
        """Record `timestamp` if it is newer than the recorded one (under a lock: several processes share it)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.debug("cannot record the handshake timestamp in %s: %s", self.path, exc)
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if timestamp > _parse(os.pread(fd, _MAX_BYTES, 0)):
                data = str(timestamp).encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, data, 0)
        except OSError as exc:
            log.debug("cannot record the handshake timestamp in %s: %s", self.path, exc)
        finally:
            os.close(fd)  # releases the lock


def _parse(data: bytes) -> int:
    text = data.decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else 0
