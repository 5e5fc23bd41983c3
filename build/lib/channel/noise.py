"""Noise_IK_25519_ChaChaPoly_BLAKE2b on PyNaCl and the standard library, per revision 34 of the Noise spec.

Only what IK needs: the symmetric state, the four message steps as create/consume pairs, and Split. Ephemeral
private keys are passed in, so tests can pin them. Every failure raises `HandshakeError` with no detail.

    <- s
    ...
    -> e, es, s, ss
    <- e, ee, se
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from nacl import bindings
from nacl.exceptions import CryptoError
from nacl.exceptions import RuntimeError as NaclRuntimeError

from channel.constants import DH_LEN, HASH_LEN, KEY_LEN, TAG_LEN
from channel.errors import HandshakeError

_ZERO_DH = bytes(DH_LEN)


def blake2b(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=HASH_LEN).digest()


def hkdf2(chaining_key: bytes, material: bytes) -> tuple[bytes, bytes]:
    """Noise HKDF with two outputs, HMAC-BLAKE2b."""
    temp = hmac.new(chaining_key, material, hashlib.blake2b).digest()
    first = hmac.new(temp, b"\x01", hashlib.blake2b).digest()
    second = hmac.new(temp, first + b"\x02", hashlib.blake2b).digest()
    return first, second


def nonce(counter: int) -> bytes:
    """ChaChaPoly's 96-bit nonce: 32 zero bits, then the counter little-endian."""
    return b"\x00\x00\x00\x00" + counter.to_bytes(8, "little")


def seal(key: bytes, counter: int, ad: bytes, plaintext: bytes) -> bytes:
    return bindings.crypto_aead_chacha20poly1305_ietf_encrypt(plaintext, ad, nonce(counter), key)


def open_sealed(key: bytes, counter: int, ad: bytes, ciphertext: bytes, error: type[Exception]) -> bytes:
    """Decrypt and authenticate, raising `error` (no detail) on any failure."""
    try:
        return bindings.crypto_aead_chacha20poly1305_ietf_decrypt(ciphertext, ad, nonce(counter), key)
    except (CryptoError, ValueError, TypeError):
        raise error() from None


def public_key(private: bytes) -> bytes:
    return bindings.crypto_scalarmult_base(private)


def dh(private: bytes, public: bytes) -> bytes:
    """X25519, refusing low-order points (an all-zero shared secret)."""
    if len(public) != DH_LEN:
        raise HandshakeError()
    try:
        shared = bindings.crypto_scalarmult(private, public)
    except (CryptoError, NaclRuntimeError, ValueError, TypeError):
        raise HandshakeError() from None
    if hmac.compare_digest(shared, _ZERO_DH):
        raise HandshakeError()
    return shared


class SymmetricState:
    """Noise's SymmetricState with its CipherState folded in (k, n)."""

    __slots__ = ("ck", "h", "k", "n")

    def __init__(self, protocol_name: bytes) -> None:
        if len(protocol_name) <= HASH_LEN:
            self.h = protocol_name.ljust(HASH_LEN, b"\x00")
        else:
            self.h = blake2b(protocol_name)
        self.ck = self.h
        self.k: bytes | None = None
        self.n = 0

    def mix_hash(self, data: bytes) -> None:
        self.h = blake2b(self.h + data)

    def mix_key(self, material: bytes) -> None:
        self.ck, temp = hkdf2(self.ck, material)
        self.k = temp[:KEY_LEN]
        self.n = 0

    def encrypt_and_hash(self, plaintext: bytes) -> bytes:
        if self.k is None:
            out = plaintext
        else:
            out = seal(self.k, self.n, self.h, plaintext)
            self.n += 1
        self.mix_hash(out)
        return out

    def decrypt_and_hash(self, ciphertext: bytes) -> bytes:
        if self.k is None:
            out = ciphertext
        else:
            out = open_sealed(self.k, self.n, self.h, ciphertext, HandshakeError)
            self.n += 1
        self.mix_hash(ciphertext)
        return out

    def split(self) -> tuple[bytes, bytes]:
        first, second = hkdf2(self.ck, b"")
        return first[:KEY_LEN], second[:KEY_LEN]


@dataclass(frozen=True)
class TransportKeys:
    """The two directional keys after Split, and the handshake hash."""

    initiator_to_responder: bytes
    responder_to_initiator: bytes
    handshake_hash: bytes

    def __repr__(self) -> str:
        return "TransportKeys(<secret>)"


class Initiator:
    """The client's half: `create_msg1` then `consume_msg2`."""

    def __init__(
        self,
        *,
        protocol_name: bytes,
        prologue: bytes,
        static_private: bytes,
        remote_static: bytes,
        ephemeral_private: bytes,
    ) -> None:
        self._ss = SymmetricState(protocol_name)
        self._ss.mix_hash(prologue)
        self._ss.mix_hash(remote_static)
        self._s = static_private
        self._rs = remote_static
        self._e = ephemeral_private

    def create_msg1(self, payload: bytes) -> bytes:
        ss = self._ss
        e_pub = public_key(self._e)
        ss.mix_hash(e_pub)
        ss.mix_key(dh(self._e, self._rs))
        encrypted_static = ss.encrypt_and_hash(public_key(self._s))
        ss.mix_key(dh(self._s, self._rs))
        return e_pub + encrypted_static + ss.encrypt_and_hash(payload)

    def consume_msg2(self, message: bytes) -> tuple[bytes, TransportKeys]:
        if len(message) < DH_LEN + TAG_LEN:
            raise HandshakeError()
        ss = self._ss
        re = message[:DH_LEN]
        ss.mix_hash(re)
        ss.mix_key(dh(self._e, re))
        ss.mix_key(dh(self._s, re))
        payload = ss.decrypt_and_hash(message[DH_LEN:])
        send, receive = ss.split()
        return payload, TransportKeys(send, receive, ss.h)


class Responder:
    """The server's half: `consume_msg1` then `create_msg2`."""

    def __init__(self, *, protocol_name: bytes, prologue: bytes, static_private: bytes) -> None:
        self._ss = SymmetricState(protocol_name)
        self._ss.mix_hash(prologue)
        self._ss.mix_hash(public_key(static_private))
        self._s = static_private
        self._re = b""
        self.remote_static = b""

    def consume_msg1(self, message: bytes) -> bytes:
        """Authenticate msg1; afterwards `remote_static` is the initiator's static key. Returns the payload."""
        if len(message) < DH_LEN + DH_LEN + TAG_LEN + TAG_LEN:
            raise HandshakeError()
        ss = self._ss
        re = message[:DH_LEN]
        ss.mix_hash(re)
        ss.mix_key(dh(self._s, re))
        rs = ss.decrypt_and_hash(message[DH_LEN : DH_LEN * 2 + TAG_LEN])
        ss.mix_key(dh(self._s, rs))
        payload = ss.decrypt_and_hash(message[DH_LEN * 2 + TAG_LEN :])
        self._re = re
        self.remote_static = rs
        return payload

    def create_msg2(self, payload: bytes, ephemeral_private: bytes) -> tuple[bytes, TransportKeys]:
        ss = self._ss
        e_pub = public_key(ephemeral_private)
        ss.mix_hash(e_pub)
        ss.mix_key(dh(ephemeral_private, self._re))
        ss.mix_key(dh(ephemeral_private, self.remote_static))
        message = e_pub + ss.encrypt_and_hash(payload)
        receive, send = ss.split()
        return message, TransportKeys(receive, send, ss.h)
