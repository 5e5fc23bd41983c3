"""Sealed frames: the request frame and the stream of response frames. Pure; no I/O, no clocks.

    frame = version (1) | kind (1) | counter (8) | length (4) | ChaCha20-Poly1305 ciphertext (length)

A request frame is sealed with the client->server key, nonce = its counter, and associated data
`header | session id`. Response frames are sealed with the server->client key under the server's own counter,
with associated data `header | session id | request counter | sequence number | FINAL`: a frame moved to
another response, reordered, or a stream cut before the FINAL frame does not verify.
"""

from __future__ import annotations

import base64
import re
import struct
from dataclasses import dataclass

from channel.constants import (
    FRAME_HEADER_LEN,
    KIND_BODY,
    KIND_END,
    KIND_HEAD,
    KIND_REQUEST,
    MAX_COUNTER,
    MAX_REQUEST_FRAME,
    MAX_RESPONSE_FRAME,
    SESSION_ID_LEN,
    TAG_LEN,
    VERSION,
)
from channel.errors import FrameError
from channel.noise import open_sealed, seal

_HEADER = struct.Struct(">BBQI")
_BINDING = struct.Struct(">QIB")
_RESPONSE_KINDS = (KIND_HEAD, KIND_BODY, KIND_END)
_SESSION_TEXT = re.compile(rb"[A-Za-z0-9_-]{22}")


def encode_session_id(session_id: bytes) -> str:
    """The session header's value: unpadded URL-safe base64 of the 16-byte id."""
    return base64.urlsafe_b64encode(session_id).decode("ascii").rstrip("=")


def decode_session_id(text: bytes) -> bytes | None:
    """The session id from a header value, or None when it is not exactly the form `encode_session_id` makes."""
    if not _SESSION_TEXT.fullmatch(text):
        return None
    raw = base64.urlsafe_b64decode(text + b"==")
    return raw if len(raw) == SESSION_ID_LEN and encode_session_id(raw).encode() == text else None


@dataclass(frozen=True)
class FrameHeader:
    """The cleartext 14-byte header of a frame; `raw` goes into the associated data, so none of it can change."""

    kind: int
    counter: int
    length: int
    raw: bytes


def parse_header(data: bytes | bytearray | memoryview, max_frame: int) -> FrameHeader:
    """Check version, counter and length against the protocol limits before anything is buffered or decrypted."""
    if len(data) < FRAME_HEADER_LEN:
        raise FrameError()
    raw = bytes(data[:FRAME_HEADER_LEN])
    version, kind, counter, length = _HEADER.unpack(raw)
    if version != VERSION or counter > MAX_COUNTER or length < TAG_LEN or FRAME_HEADER_LEN + length > max_frame:
        raise FrameError()
    return FrameHeader(kind, counter, length, raw)


def seal_request(key: bytes, session_id: bytes, counter: int, plaintext: bytes) -> bytes:
    """A request frame under the client->server key; the counter is the nonce and must never repeat in a session."""
    header = _HEADER.pack(VERSION, KIND_REQUEST, counter, len(plaintext) + TAG_LEN)
    return header + seal(key, counter, header + session_id, plaintext)


def parse_request(frame: bytes) -> FrameHeader:
    """Check the shape of a request frame before any decryption."""
    header = parse_header(frame, MAX_REQUEST_FRAME)
    if header.kind != KIND_REQUEST or FRAME_HEADER_LEN + header.length != len(frame):
        raise FrameError()
    return header


def open_request(key: bytes, session_id: bytes, header: FrameHeader, frame: bytes) -> bytes:
    """Authenticate and decrypt a request frame that `parse_request` accepted."""
    return open_sealed(key, header.counter, header.raw + session_id, frame[FRAME_HEADER_LEN:], FrameError)


def _response_ad(header: bytes, session_id: bytes, request_counter: int, seq: int, final: bool) -> bytes:
    return header + session_id + _BINDING.pack(request_counter, seq, 1 if final else 0)


def seal_response(
    key: bytes, session_id: bytes, counter: int, kind: int, request_counter: int, seq: int, plaintext: bytes
) -> bytes:
    """One response frame under the server->client key and the server's own counter, bound to its request."""
    if kind not in _RESPONSE_KINDS:
        raise FrameError()
    header = _HEADER.pack(VERSION, kind, counter, len(plaintext) + TAG_LEN)
    ad = _response_ad(header, session_id, request_counter, seq, kind == KIND_END)
    return header + seal(key, counter, ad, plaintext)


class ResponseReader:
    """Reassembles and verifies the response frames of one request from arbitrary byte chunks.

    `feed` returns the (kind, plaintext) frames completed so far; `finish` raises unless the FINAL frame came.
    Memory stays bounded: a frame longer than the protocol allows is refused from its header.
    """

    def __init__(self, key: bytes, session_id: bytes, request_counter: int) -> None:
        self._key = key
        self._session_id = session_id
        self._request_counter = request_counter
        self._buffer = bytearray()
        self._seq = 0
        self._last_counter = -1  # the server's counters grow within one response
        self.done = False

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        if self.done:
            if data:
                raise FrameError()
            return []
        self._buffer += data
        frames: list[tuple[int, bytes]] = []
        while len(self._buffer) >= FRAME_HEADER_LEN and not self.done:
            header = parse_header(self._buffer, MAX_RESPONSE_FRAME)
            end = FRAME_HEADER_LEN + header.length
            if len(self._buffer) < end:
                break
            frames.append(self._open(header, bytes(self._buffer[FRAME_HEADER_LEN:end])))
            del self._buffer[:end]
        if self.done and self._buffer:
            raise FrameError()
        return frames

    def _open(self, header: FrameHeader, ciphertext: bytes) -> tuple[int, bytes]:
        expected_head = self._seq == 0
        if header.kind not in _RESPONSE_KINDS or (header.kind == KIND_HEAD) != expected_head:
            raise FrameError()
        if header.counter <= self._last_counter:
            raise FrameError()
        ad = _response_ad(header.raw, self._session_id, self._request_counter, self._seq, header.kind == KIND_END)
        plaintext = open_sealed(self._key, header.counter, ad, ciphertext, FrameError)
        self._last_counter = header.counter
        self._seq += 1
        if header.kind == KIND_END:
            if plaintext:
                raise FrameError()
            self.done = True
        return header.kind, plaintext

    def finish(self) -> None:
        if not self.done or self._buffer:
            raise FrameError()
