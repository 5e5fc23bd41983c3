"""Session keys at rest in the shared database: sealed under a key only the replicas hold.

Every replica reads the same server key file; the database never holds it. The sealing key is derived from the
server's X25519 private key with HKDF-SHA256 (RFC 5869) under a label of its own, so it serves nothing else, and
each session's two transport keys are sealed with XChaCha20-Poly1305 under a random nonce, bound to the session id.
A dump of the database thus shows which device held a session and when, but not a key that opens its traffic.
"""

from __future__ import annotations

import hashlib
import hmac

from nacl import bindings
from nacl.exceptions import CryptoError

from channel.constants import KEY_LEN
from channel.keys import PrivateKey
from server.errors import EngineError

SALT = b"agent-memory session store v1"
INFO = b"agent-memory channel v1: sealing the transport keys of stored sessions"
_NONCE_LEN = bindings.crypto_aead_xchacha20poly1305_ietf_NPUBBYTES


def hkdf_sha256(secret: bytes, salt: bytes, info: bytes, length: int = KEY_LEN) -> bytes:
    """RFC 5869: extract, then expand to `length` bytes."""
    pseudo_random = hmac.new(salt, secret, hashlib.sha256).digest()
    output, block, counter = b"", b"", 1
    while len(output) < length:
        block = hmac.new(pseudo_random, block + info + bytes((counter,)), hashlib.sha256).digest()
        output, counter = output + block, counter + 1
    return output[:length]


class KeySealer:
    """Seals and opens a session's (receive, send) keys with the key derived from the server's private key."""

    __slots__ = ("_key",)

    def __init__(self, server_key: PrivateKey) -> None:
        self._key = hkdf_sha256(server_key.x25519, SALT, INFO)

    def __repr__(self) -> str:
        return "KeySealer()"

    def seal(self, session_id: bytes, receive_key: bytes, send_key: bytes, nonce: bytes) -> bytes:
        """nonce | ciphertext of both keys, bound to the session id (a row's keys cannot move to another row)."""
        if len(nonce) != _NONCE_LEN:
            raise ValueError("a sealing nonce has 24 bytes")
        sealed = bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(
            receive_key + send_key, session_id, nonce, self._key
        )
        return nonce + sealed

    def open(self, session_id: bytes, sealed: bytes) -> tuple[bytes, bytes]:
        """The (receive, send) keys; EngineError when they were sealed under another server key or changed."""
        try:
            keys = bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(
                sealed[_NONCE_LEN:], session_id, sealed[:_NONCE_LEN], self._key
            )
        except (CryptoError, ValueError, TypeError):
            raise EngineError("a stored session does not open with this server's key") from None
        return keys[:KEY_LEN], keys[KEY_LEN:]
