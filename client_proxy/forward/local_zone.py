"""The laptop's time zone as an IANA name, sent with every request so the server dates daily logs as the user does.

Taken from `TZ`, else from where `/etc/localtime` links to (Linux and macOS both link into a `zoneinfo` tree),
else UTC. Only a name the local time zone database knows is sent (a POSIX rule such as `CET-1CEST` is not one).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

TIMEZONE_HEADER: Final = "x-memory-timezone"  # the inner request header the server reads the zone from
UTC: Final = "UTC"
LOCALTIME: Final = Path("/etc/localtime")
# IANA names: `Area/Location[/Sub]` or a few single words (UTC, EST5EDT); letters, digits, `_+-`.
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_+\-]*(/[A-Za-z0-9][A-Za-z0-9_+\-]*){0,2}$")
_MAX_NAME = 64


def local_timezone(env: Mapping[str, str], localtime: Path = LOCALTIME) -> str:
    """The IANA name of the local time zone, or "UTC" when it cannot be told."""
    for candidate in (_from_tz(env.get("TZ", "")), _from_link(localtime)):
        if candidate is not None and _known(candidate):
            return candidate
    return UTC


def _known(name: str) -> bool:
    if len(name) > _MAX_NAME or not _NAME.fullmatch(name):
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True


def _from_tz(value: str) -> str | None:
    """`TZ=Europe/Paris`, `TZ=:Europe/Paris`, or `TZ=:/usr/share/zoneinfo/Europe/Paris`."""
    value = value.strip().removeprefix(":")
    if not value:
        return None
    if value.startswith("/"):
        return _after_zoneinfo(value)
    return value


def _from_link(localtime: Path) -> str | None:
    try:
        target = os.readlink(localtime)
    except OSError:  # missing, or a copy of the zone file rather than a link
        return None
    return _after_zoneinfo(os.path.normpath(os.path.join(localtime.parent, target)))


def _after_zoneinfo(path: str) -> str | None:
    """`/usr/share/zoneinfo/Europe/Paris` -> `Europe/Paris`; also `zoneinfo.default/`, `posix/` and `right/`."""
    _, found, name = path.rpartition("/zoneinfo")
    if not found:
        return None
    name = name.partition("/")[2]
    for prefix in ("posix/", "right/"):
        name = name.removeprefix(prefix)
    return name or None
