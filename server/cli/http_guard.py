"""uvicorn's HTTP/1.1 protocol with the limits it lacks: a deadline for every request head, a connection cap that
sheds idle sockets first, and a check at start that the process may open enough files for that cap.

uvicorn times out only keep-alive connections between requests: a socket that connects and sends nothing, or
sends a request head a byte at a time, is held forever, and a few thousand of them exhaust the file descriptors.
Here a connection gets `header_timeout` seconds for each request head (from the connection, or from the end of
the previous response), and at most `max_connections` are open at once. When a new connection would pass the
cap, the oldest connection that has not yet sent a complete request head is closed to make room (an idle or
slowloris socket costs its sender nothing to reopen; an honest client's connection carries requests); if every
connection is busy, the new one gets a 503 and is closed at once.

Bodies have their own deadline in `channel.asgi.read_body`; the channel caps in-flight requests per caller.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # uvicorn is imported only by the command that serves (the CLI starts faster without it)
    from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)

HEADER_TIMEOUT = 10.0  # seconds for a request head to arrive in full
KEEP_ALIVE_TIMEOUT = 5  # seconds an idle keep-alive connection stays open (uvicorn's default, said on purpose)
MAX_CONNECTIONS = 1024
ACCEPT_BATCH = 64  # uvicorn's backlog: asyncio accepts up to this many sockets before any protocol code runs
FD_RESERVE = 256  # descriptors for everything that is not a connection: databases, mirrors, the model, logs
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\nretry-after: 1\r\n\r\n"


class FdLimitError(Exception):
    """The process may not open enough files for its connection cap."""


def check_fd_limit(max_connections: int, reserve: int = FD_RESERVE) -> int:
    """Raise the soft limit on open files up to what `max_connections` needs (within the hard limit); the limit
    in force. FdLimitError when even the hard limit is too low, with the fix."""
    needed = max_connections + reserve
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            target = soft
        soft = target
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise FdLimitError(
            f"this process may open {soft} files, but {max_connections} connections need {needed}: raise the limit "
            f"(`ulimit -n {needed}`, or `ulimits: nofile` in compose.yaml)"
        )
    return soft


def guarded_h11(*, max_connections: int, header_timeout: float) -> type[H11Protocol]:
    """An `H11Protocol` class with these limits, for `uvicorn.Config(http=...)`."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    waiting: OrderedDict[H11Protocol, None] = OrderedDict()  # connections with no complete request head yet

    class GuardedH11Protocol(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _seen_cycle: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections and not self._shed_one():
                log.warning("connection cap (%d) reached: refusing a connection", max_connections)
                transport.write(_BUSY)
                transport.close()
                return
            waiting[self] = None
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            waiting.pop(self, None)
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._seen_cycle:  # a complete head arrived
                self._seen_cycle = self.cycle
                waiting.pop(self, None)
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next head has its own deadline (keep-alive closes an idle one sooner)

        def _arm(self) -> None:
            self._disarm()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _disarm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is running: the body deadline and the app govern it
            waiting.pop(self, None)
            if not self.transport.is_closing():
                self.transport.close()

        def _shed_one(self) -> bool:
            """Close the oldest connection still waiting for its first request head; False when there is none."""
            for victim in waiting:
                if victim is not self and victim.cycle is None:
                    waiting.pop(victim, None)
                    victim._disarm()
                    victim.transport.close()
                    return True
            return False

    return GuardedH11Protocol
