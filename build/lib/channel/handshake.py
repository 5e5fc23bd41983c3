"""The channel's handshake on top of Noise IK: what msg1 and msg2 carry, as create/consume pairs.

    msg1 = VERSION | KIND_HELLO   | Noise msg1 with payload: timestamp (u64 ns, must grow per device key)
    msg2 = VERSION | KIND_WELCOME | Noise msg2 with payload: session id | expiry (u64 ms) | server time (u64 ms)

Randomness (ephemeral keys) is passed in. Every failure is a bare `HandshakeError`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from channel.constants import (
    DH_LEN,
    HELLO_LEN,
    HELLO_PAYLOAD_LEN,
    KIND_HELLO,
    KIND_WELCOME,
    PROLOGUE,
    PROTOCOL_NAME,
    SESSION_ID_LEN,
    VERSION,
    WELCOME_LEN,
)
from channel.errors import HandshakeError
from channel.keys import PrivateKey, PublicKey
from channel.noise import Initiator, Responder, TransportKeys

Random = Callable[[int], bytes]
_WELCOME = struct.Struct(f">{SESSION_ID_LEN}sQQ")
_HELLO = struct.Struct(">Q")


@dataclass(frozen=True)
class Hello:
    """What the server learns from an authentic msg1."""

    client_static: bytes  # the device key's X25519 form
    timestamp: int  # nanoseconds


@dataclass(frozen=True)
class Welcome:
    """What the client learns from an authentic msg2."""

    session_id: bytes
    expires_at_ms: int
    server_time_ms: int

    def __repr__(self) -> str:
        return f"Welcome(session={self.session_id[:4].hex()}…, expires_at_ms={self.expires_at_ms})"


def create_initiation(
    client: PrivateKey,
    server: PublicKey,
    timestamp: int,
    random: Random,
    *,
    prologue: bytes = PROLOGUE,
) -> tuple[bytes, Initiator]:
    """msg1 for `server`, and the state `consume_response` needs."""
    initiator = Initiator(
        protocol_name=PROTOCOL_NAME,
        prologue=prologue,
        static_private=client.x25519,
        remote_static=server.x25519,
        ephemeral_private=random(DH_LEN),
    )
    body = initiator.create_msg1(_HELLO.pack(timestamp))
    return bytes((VERSION, KIND_HELLO)) + body, initiator


def consume_initiation(server: PrivateKey, message: bytes) -> tuple[Hello, Responder]:
    """Authenticate msg1. The caller must still check the key is allowed and the timestamp grew."""
    if len(message) != HELLO_LEN or message[0] != VERSION or message[1] != KIND_HELLO:
        raise HandshakeError()
    responder = Responder(protocol_name=PROTOCOL_NAME, prologue=PROLOGUE, static_private=server.x25519)
    payload = responder.consume_msg1(message[2:])
    if len(payload) != HELLO_PAYLOAD_LEN:
        raise HandshakeError()
    (timestamp,) = _HELLO.unpack(payload)
    return Hello(responder.remote_static, timestamp), responder


def create_response(responder: Responder, welcome: Welcome, random: Random) -> tuple[bytes, TransportKeys]:
    """msg2 carrying the session id, expiry and server time; and the transport keys."""
    if len(welcome.session_id) != SESSION_ID_LEN:
        raise HandshakeError()
    payload = _WELCOME.pack(welcome.session_id, welcome.expires_at_ms, welcome.server_time_ms)
    body, keys = responder.create_msg2(payload, random(DH_LEN))
    return bytes((VERSION, KIND_WELCOME)) + body, keys


def consume_response(initiator: Initiator, message: bytes) -> tuple[Welcome, TransportKeys]:
    if len(message) != WELCOME_LEN or message[0] != VERSION or message[1] != KIND_WELCOME:
        raise HandshakeError()
    payload, keys = initiator.consume_msg2(message[2:])
    session_id, expires_at_ms, server_time_ms = _WELCOME.unpack(payload)
    return Welcome(session_id, expires_at_ms, server_time_ms), keys
