"""Server-side session state: the live sessions, their expiry and caps, handshake timestamps, request ids.

Pure bookkeeping with the clock passed in (seconds, wall time). Nothing here awaits, so every check-and-commit
is atomic on the event loop; the replay window also locks, for callers on other threads.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from channel.constants import (
    MAX_SESSIONS,
    MAX_SESSIONS_PER_CALLER,
    REQUEST_ID_MEMORY,
    SESSION_IDLE,
    SESSION_LIFETIME,
)
from channel.replay import ReplayWindow
from channel.request_ids import RequestIds
from channel.timestamps import MemoryTimestamps, TimestampStore, stray_above

Clock = Callable[[], float]


@dataclass
class Session:
    """One live session on the server: its keys, replay window and lifetimes. Reprs never show secrets."""

    id: bytes = field(repr=False)
    caller: str
    static_key: bytes  # the device key's X25519 form
    receive_key: bytes = field(repr=False)
    send_key: bytes = field(repr=False)
    created: float
    expires_at: float
    last_used: float
    window: ReplayWindow = field(default_factory=ReplayWindow, repr=False)
    # The nonces of response frames: they must never repeat under the send key. One process counts from 0; a
    # shared store hands each replica blocks of its own (still growing within each response, as clients check).
    send_counters: Iterator[int] = field(default_factory=itertools.count, repr=False)

    def next_send_counter(self) -> int:
        """The nonce of the next response frame: one sequence per session, shared by all its responses."""
        return next(self.send_counters)

    @property
    def tag(self) -> str:
        """A short, loggable prefix of the session id (never the whole id)."""
        return self.id[:4].hex()

    def alive(self, now: float, idle: float) -> bool:
        """Before its absolute expiry, and used within the last `idle` seconds."""
        return now < self.expires_at and now - self.last_used < idle


class SessionTable:
    """The live sessions, capped per caller and overall; the last msg1 timestamp and the request ids per key."""

    def __init__(
        self,
        clock: Clock,
        *,
        lifetime: float = SESSION_LIFETIME,
        idle: float = SESSION_IDLE,
        max_sessions: int = MAX_SESSIONS,
        max_per_caller: int = MAX_SESSIONS_PER_CALLER,
        timestamps: TimestampStore | None = None,
        request_id_memory: int = REQUEST_ID_MEMORY,
    ) -> None:
        self._clock = clock
        self.lifetime = lifetime
        self.idle = idle
        self._max = max_sessions
        self._max_per_caller = max_per_caller
        self._sessions: dict[bytes, Session] = {}
        self._timestamps = timestamps if timestamps is not None else MemoryTimestamps()
        self._request_id_memory = request_id_memory
        self._request_ids: dict[bytes, RequestIds] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def timestamp_is_fresh(self, static_key: bytes, timestamp: int) -> bool:
        """Whether msg1's timestamp is newer than every one accepted from this key (a replayed msg1 is not); a
        recorded one that is stray (`channel.timestamps.stray_above`) is ignored."""
        latest = self._timestamps.latest(static_key)
        if latest > stray_above(self._clock()):
            return True
        return timestamp > latest

    def open(self, session: Session, timestamp: int) -> bool:
        """Commit the msg1 timestamp and add the session, evicting the caller's oldest beyond its cap.

        Returns False (and commits nothing) when the timestamp did not grow or the server is full.
        """
        if not self.timestamp_is_fresh(session.static_key, timestamp):
            return False
        mine = [s for s in self._sessions.values() if s.caller == session.caller]
        if len(self._sessions) >= self._max and len(mine) < self._max_per_caller:
            self.purge()
            if len(self._sessions) >= self._max:
                return False
        self._timestamps.commit(session.static_key, timestamp)
        if len(mine) >= self._max_per_caller:
            oldest = min(mine, key=lambda s: s.created)
            del self._sessions[oldest.id]
        self._sessions[session.id] = session
        return True

    def get(self, session_id: bytes) -> Session | None:
        """The live session with this id, dropping it if it expired."""
        session = self._sessions.get(session_id)
        if session is None:
            return None
        if not session.alive(self._clock(), self.idle):
            del self._sessions[session_id]
            return None
        return session

    def touch(self, session: Session) -> None:
        """Mark the session in use now (idle expiry counts from here)."""
        session.last_used = self._clock()

    def commit_request(self, session: Session, counter: int, request_id: bytes) -> str | None:
        """Commit the frame's counter, then its request id, then mark the session in use; or why not."""
        if not session.window.accept(counter):
            return "replayed-counter"
        if not self.first_use_of_request_id(session.static_key, request_id):
            return "repeated-request"
        self.touch(session)
        return None

    def drop_key(self, static_key: bytes) -> int:
        """End every session of this device key; how many ended."""
        return self.drop_where(lambda s: s.static_key == static_key)

    def drop_where(self, predicate: Callable[[Session], bool]) -> int:
        """End every session matching `predicate` (e.g. all sessions of a revoked key); how many ended."""
        doomed = [sid for sid, s in self._sessions.items() if predicate(s)]
        for sid in doomed:
            del self._sessions[sid]
        return len(doomed)

    def purge(self) -> int:
        """Forget expired sessions."""
        now = self._clock()
        return self.drop_where(lambda s: not s.alive(now, self.idle))

    def first_use_of_request_id(self, static_key: bytes, request_id: bytes) -> bool:
        """Remember a request id for this device key; False if it was (or may have been) opened already: do not
        run it again. Ids are remembered for a session lifetime, the newest `request_id_memory` of them; an
        older one is still refused (`channel.request_ids`)."""
        ids = self._request_ids.get(static_key)
        if ids is None:
            ids = self._request_ids[static_key] = RequestIds(self._request_id_memory)
        return ids.first_use(request_id, self._clock(), self.lifetime)
