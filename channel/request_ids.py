"""Request ids, and the server's memory of the ids opened with one device key, so no request runs twice.

The client gives each request an id and keeps it when it sends the request again (after a 401, in a new session),
so a copy the network kept back meets an id that already ran. The server cannot remember every id: a device key
may open more than REQUEST_ID_MEMORY within a session lifetime. So the ids sort by when they were made, and an id
the memory lets go raises the key's floor; an id at or below the floor counts as used. Every id ever opened is
then remembered or at most the floor: refused again, however late its copy comes, whatever the ids' clock did.

    request id = 4 zero bytes | the client's clock, ns (8, big-endian, growing per transport) | 4 random bytes

Ids of proxies from before this layout are 16 random bytes; they do not sort, so they are only remembered (for
them, an id let go is forgotten, as it always was: updating the proxy closes that gap).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from channel.constants import REQUEST_ID_LEN, REQUEST_ID_MEMORY

_SORTED = bytes(4)  # the prefix of ids that sort by time (a random id has it once in 2**32)


def new_request_id(stamp_ns: int, random: Callable[[int], bytes]) -> bytes:
    """An id made at `stamp_ns` (which must grow from one id to the next of a transport)."""
    return _SORTED + stamp_ns.to_bytes(8, "big") + random(REQUEST_ID_LEN - 12)


def sorts(request_id: bytes) -> bool:
    """Whether the id has the layout that sorts by time."""
    return request_id.startswith(_SORTED)


class RequestIds:
    """The ids opened with one device key: the newest ones, and the floor below which the others lie."""

    __slots__ = ("_floor", "_limit", "_opened")

    def __init__(self, limit: int = REQUEST_ID_MEMORY) -> None:
        self._limit = limit
        self._opened: OrderedDict[bytes, float] = OrderedDict()  # id -> when it was opened, oldest first
        self._floor = b""  # the highest id let go (b"" sorts below every id)

    def first_use(self, request_id: bytes, now: float, keep_for: float) -> bool:
        """Record an id opened at `now`; False (nothing recorded) if it was opened before, or may have been.

        Ids are remembered for `keep_for` seconds and at most `limit` of them; older ones raise the floor."""
        opened = self._opened
        while opened:
            oldest, opened_at = next(iter(opened.items()))
            if now - opened_at < keep_for and len(opened) < self._limit:
                break
            del opened[oldest]
            if sorts(oldest) and oldest > self._floor:
                self._floor = oldest
        if request_id in opened or (sorts(request_id) and request_id <= self._floor):
            return False
        opened[request_id] = now
        return True
