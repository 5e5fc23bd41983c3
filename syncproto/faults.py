"""Named fault points for the fault-injection loop (`make test-faults`, `tests/faults/`); nothing otherwise.

    fault_point("mirror.write.published")   # between two steps of a write: the file renamed, the state not committed

A point does nothing unless the environment variable `MEMORY_FAULT_POINTS` names it when the process starts:
`mirror.write.published@3,proxy.pull.written` kills the process with SIGKILL on the third hit of the first point
and on the first hit of the second, as a power cut or the OOM killer would, with no cleanup. The variable is read
once, at import; unset, a point costs one comparison. Both sides use it (standard library only), which is why it
lives here. The points, in the order of the steps they separate, are listed in `docs/faults.md`.
"""

from __future__ import annotations

import os
import signal

FAULT_VARIABLE = "MEMORY_FAULT_POINTS"


def parse_points(value: str) -> dict[str, int]:
    """`a@3,b` -> {"a": 3, "b": 1}: each named point and the hit that kills."""
    armed: dict[str, int] = {}
    for item in value.split(","):
        name, _, count = item.strip().partition("@")
        if name:
            armed[name] = int(count) if count.strip().isdigit() and int(count) > 0 else 1
    return armed


_ARMED = parse_points(os.environ.get(FAULT_VARIABLE, ""))
_hits: dict[str, int] = {}


def fault_point(name: str) -> None:
    """Die here, at once and with no cleanup, if this point is armed and this is its fatal hit."""
    if not _ARMED or name not in _ARMED:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == _ARMED[name]:
        os.kill(os.getpid(), signal.SIGKILL)
