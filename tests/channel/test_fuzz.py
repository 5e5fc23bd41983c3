"""Fuzzing the parsers that read bytes from the network: they raise only the protocol's own error type,
finish quickly (hypothesis' deadline), and use memory bounded by the protocol limits, not by the input."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from channel.codec import InnerHead, InnerRequest, pack_head, pack_request, unpack_head, unpack_request
from channel.constants import KIND_BODY, KIND_END, KIND_HEAD, MAX_RESPONSE_FRAME, VERSION
from channel.errors import FrameError, HandshakeError, ProtocolError
from channel.framing import (
    ResponseReader,
    decode_session_id,
    open_request,
    parse_request,
    seal_request,
    seal_response,
)
from channel.handshake import Welcome, consume_initiation, consume_response, create_initiation, create_response
from channel.keys import PrivateKey

FUZZ = settings(max_examples=150, deadline=500, suppress_health_check=[HealthCheck.too_slow])
MEMORY_BOUND = 2 * MAX_RESPONSE_FRAME  # what one response reader may hold, whatever it is fed
CLIENT, SERVER = PrivateKey(bytes(range(32))), PrivateKey(bytes(range(32, 64)))
EPHEMERAL = bytes(range(64, 96))
KEY, SESSION = bytes(32), bytes(16)
MSG1 = create_initiation(CLIENT, SERVER.public, 1, lambda _: EPHEMERAL)[0]
PLAIN_REQUEST = pack_request(InnerRequest(b"r" * 16, "GET", b"/x?y", [(b"a", b"b"), (b"c", b"")], b"body"))
PLAIN_HEAD = pack_head(InnerHead(200, [(b"content-type", b"text/plain"), (b"x", b"y")]))
FRAME = seal_request(KEY, SESSION, 3, PLAIN_REQUEST)
RESPONSE = b"".join(
    seal_response(KEY, SESSION, n, kind, 3, n, data)
    for n, (kind, data) in enumerate([(KIND_HEAD, pack_head(InnerHead(200, []))), (KIND_BODY, b"x"), (KIND_END, b"")])
)


def only(error: type[ProtocolError], parse: Callable[[], object]) -> None:
    """Run `parse`: it may succeed or raise `error`, and nothing else; its peak memory stays bounded."""
    tracemalloc.start()
    try:
        parse()
    except error:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak < MEMORY_BOUND


def mutate(message: bytes, index: int, value: int) -> bytes:
    index %= len(message)
    return message[:index] + bytes((message[index] ^ value,)) + message[index + 1 :]


def _fresh_initiator():
    return create_initiation(CLIENT, SERVER.public, 1, lambda _: EPHEMERAL)[1]


def _reply() -> bytes:
    _, responder = consume_initiation(SERVER, MSG1)
    return create_response(responder, Welcome(SESSION, 2, 1), os.urandom)[0]


REPLY = _reply()


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_msg1_raise_only_handshake_error(data):
    only(HandshakeError, lambda: consume_initiation(SERVER, data))


@FUZZ
@given(st.binary(min_size=len(MSG1), max_size=len(MSG1)).map(lambda tail: bytes((VERSION, 1)) + tail[2:]))
def test_well_shaped_random_msg1_raises_only_handshake_error(data):
    with pytest.raises(HandshakeError):
        consume_initiation(SERVER, data)


@FUZZ
@given(st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_any_single_byte_change_to_msg1_or_msg2_is_refused(index, value):
    with pytest.raises(HandshakeError):
        consume_initiation(SERVER, mutate(MSG1, index, value))
    with pytest.raises(HandshakeError):
        consume_response(_fresh_initiator(), mutate(REPLY, index, value))


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_msg2_raise_only_handshake_error(data):
    only(HandshakeError, lambda: consume_response(_fresh_initiator(), data))


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_bytes_as_a_request_frame_raise_only_frame_error(data):
    def parse() -> object:
        return unpack_request(open_request(KEY, SESSION, parse_request(data), data))

    only(FrameError, parse)


@FUZZ
@given(st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_any_single_byte_change_to_a_request_frame_is_refused(index, value):
    data = mutate(FRAME, index, value)
    with pytest.raises(FrameError):
        open_request(KEY, SESSION, parse_request(data), data)


@FUZZ
@given(st.binary(max_size=4096))
def test_arbitrary_plaintexts_raise_only_frame_error(data):
    only(FrameError, lambda: unpack_request(data))
    only(FrameError, lambda: unpack_head(data))


@FUZZ
@given(st.integers(min_value=0), st.integers(min_value=1, max_value=255))
def test_near_valid_plaintexts_parse_or_raise_only_frame_error(index, value):
    only(FrameError, lambda: unpack_request(mutate(PLAIN_REQUEST, index, value)))
    only(FrameError, lambda: unpack_head(mutate(PLAIN_HEAD, index, value)))


@FUZZ
@given(st.lists(st.binary(max_size=600), max_size=12))
def test_arbitrary_response_chunks_raise_only_frame_error(chunks):
    def parse() -> None:
        reader = ResponseReader(KEY, SESSION, 3)
        for chunk in chunks:
            reader.feed(chunk)
        reader.finish()

    only(FrameError, parse)


@FUZZ
@given(st.lists(st.integers(min_value=1, max_value=len(RESPONSE)), max_size=8), st.integers(min_value=0))
def test_a_valid_response_in_any_chunking_reads_back_and_any_change_is_refused(cuts, index):
    pieces, start = [], 0
    for cut in sorted(set(cuts)):
        pieces.append(RESPONSE[start:cut])
        start = cut
    pieces.append(RESPONSE[start:])
    reader = ResponseReader(KEY, SESSION, 3)
    frames = [frame for piece in pieces for frame in reader.feed(piece)]
    reader.finish()
    assert [kind for kind, _ in frames] == [KIND_HEAD, KIND_BODY, KIND_END]
    with pytest.raises(FrameError):
        changed = ResponseReader(KEY, SESSION, 3)
        changed.feed(mutate(RESPONSE, index, 0x01))
        changed.finish()


def test_a_header_announcing_the_largest_frame_does_not_make_the_reader_allocate_it():
    header = bytes((VERSION, KIND_HEAD)) + bytes(8) + (MAX_RESPONSE_FRAME - 14).to_bytes(4, "big")
    only(FrameError, lambda: ResponseReader(KEY, SESSION, 3).feed(header + bytes(100)))


@FUZZ
@given(st.binary(max_size=64))
def test_session_header_values_decode_to_sixteen_bytes_or_nothing(data):
    decoded = decode_session_id(data)
    assert decoded is None or len(decoded) == 16
