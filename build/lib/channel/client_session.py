"""The client's view of one session: its keys, its request counter, and when to replace it.

Deadlines are on the client's own clock: the lifetime the server grants (expiry minus server time in msg2) is
counted from when msg1 was sent, so clock differences between laptop and server do not matter.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from channel.constants import REHANDSHAKE_MARGIN, SESSION_IDLE, SESSION_LIFETIME
from channel.framing import encode_session_id
from channel.handshake import Welcome
from channel.noise import TransportKeys


@dataclass
class ClientSession:
    id: bytes = field(repr=False)
    header: str = field(repr=False)  # the session header's value
    send_key: bytes = field(repr=False)
    receive_key: bytes = field(repr=False)
    expires: float
    last_used: float
    _counter: itertools.count[int] = field(default_factory=itertools.count, repr=False)

    @classmethod
    def start(cls, welcome: Welcome, keys: TransportKeys, sent_at: float) -> ClientSession:
        """The session a verified msg2 grants, with its deadline on the client's clock."""
        granted = (welcome.expires_at_ms - welcome.server_time_ms) / 1000
        lifetime = min(max(granted, 0.0), SESSION_LIFETIME)
        return cls(
            id=welcome.session_id,
            header=encode_session_id(welcome.session_id),
            send_key=keys.initiator_to_responder,
            receive_key=keys.responder_to_initiator,
            expires=sent_at + lifetime,
            last_used=sent_at,
        )

    def usable(self, now: float) -> bool:
        """False shortly before the absolute or the idle expiry: time to handshake again."""
        return now < self.expires - REHANDSHAKE_MARGIN and now - self.last_used < SESSION_IDLE - REHANDSHAKE_MARGIN

    def next_counter(self) -> int:
        """The nonce of the next request frame: never repeats within the session."""
        return next(self._counter)

    @property
    def tag(self) -> str:
        """A short, loggable prefix of the session id (never the whole id)."""
        return self.id[:4].hex()
