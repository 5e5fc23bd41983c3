"""Where the server keeps its sessions: the protocol the middleware asks, whatever holds them.

`channel.session.SessionTable` keeps them in one process's memory (the default). A server whose replicas share a
database gives the middleware a store of its own (the server's `server.postgres.sessions`): the channel itself
imports nothing of the server's. Every method is called on the event loop and must not await; a store that keeps
its state elsewhere makes each check-and-commit atomic there (one statement or one transaction), and raises
`channel.errors.StoreUnavailable` when it cannot answer (the peer gets a 503, nothing was run).
"""

from __future__ import annotations

from typing import Protocol

from channel.session import Session


class SessionStore(Protocol):
    lifetime: float  # seconds, absolute, from the handshake
    idle: float  # seconds without a request

    def __len__(self) -> int:
        """How many live sessions this store holds (for the metrics)."""
        ...

    def timestamp_is_fresh(self, static_key: bytes, timestamp: int) -> bool:
        """Whether msg1's timestamp is newer than every one accepted from this key (a cheap pre-check)."""
        ...

    def open(self, session: Session, timestamp: int) -> bool:
        """Commit the msg1 timestamp and add the session within the caps; False (nothing committed) if the
        timestamp did not grow or the server is full."""
        ...

    def get(self, session_id: bytes) -> Session | None:
        """The live session with this id (the same object each time while it lives), or None."""
        ...

    def commit_request(self, session: Session, counter: int, request_id: bytes) -> str | None:
        """Accept an authenticated frame's counter and request id, and mark the session in use: None, or why
        not ("replayed-counter", "repeated-request", "no-session"). Each counter and id is accepted once."""
        ...

    def touch(self, session: Session) -> None:
        """Mark the session in use now (an open response stream keeps it alive)."""
        ...

    def drop_key(self, static_key: bytes) -> int:
        """End every session of a device key (it was revoked); how many ended."""
        ...
