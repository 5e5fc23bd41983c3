"""Frames and their plaintexts: round trips, and every change to a frame or a response stream fails closed."""

from __future__ import annotations

import os

import pytest

from channel.codec import InnerHead, InnerRequest, pack_head, pack_request, unpack_head, unpack_request
from channel.constants import (
    FRAME_HEADER_LEN,
    KIND_BODY,
    KIND_END,
    KIND_HEAD,
    KIND_REQUEST,
    MAX_BODY,
    MAX_CHUNK,
    MAX_REQUEST_FRAME,
    TAG_LEN,
)
from channel.errors import ChannelError, FrameError
from channel.framing import (
    ResponseReader,
    decode_session_id,
    encode_session_id,
    open_request,
    parse_header,
    parse_request,
    seal_request,
    seal_response,
)

C2S, S2C = os.urandom(32), os.urandom(32)
SESSION = os.urandom(16)
REQUEST = InnerRequest(b"R" * 16, "POST", b"/mcp?x=1", [(b"x-memory-index", b"notes")], b'{"jsonrpc":"2.0"}')


def request_frame(counter: int = 7, session: bytes = SESSION) -> bytes:
    return seal_request(C2S, session, counter, pack_request(REQUEST))


def response(request_counter: int = 7, start: int = 100, chunks=(b"hello ", b"world")) -> list[bytes]:
    """A whole response stream: HEAD, BODY..., END, under consecutive server counters."""
    kinds = [(KIND_HEAD, pack_head(InnerHead(200, [(b"content-type", b"text/plain")])))]
    kinds += [(KIND_BODY, chunk) for chunk in chunks] + [(KIND_END, b"")]
    return [
        seal_response(S2C, SESSION, start + seq, kind, request_counter, seq, data)
        for seq, (kind, data) in enumerate(kinds)
    ]


def read(frames: bytes, request_counter: int = 7, step: int | None = None) -> tuple[InnerHead, bytes]:
    reader = ResponseReader(S2C, SESSION, request_counter)
    got: list[tuple[int, bytes]] = []
    step = step or len(frames) or 1
    for start in range(0, len(frames), step):
        got += reader.feed(frames[start : start + step])
    reader.finish()
    assert got[0][0] == KIND_HEAD and got[-1][0] == KIND_END
    return unpack_head(got[0][1]), b"".join(data for kind, data in got if kind == KIND_BODY)


def test_a_request_round_trips_through_its_frame():
    frame = request_frame()
    header = parse_request(frame)
    assert header.kind == KIND_REQUEST and header.counter == 7
    assert unpack_request(open_request(C2S, SESSION, header, frame)) == REQUEST
    assert "notes" not in repr(REQUEST) and "jsonrpc" not in repr(REQUEST)


@pytest.mark.parametrize("step", [1, 5, 13, 14, 15, 64, None])
def test_a_response_stream_is_read_back_whatever_the_chunking(step):
    head, body = read(b"".join(response()), step=step)
    assert head == InnerHead(200, [(b"content-type", b"text/plain")]) and body == b"hello world"


def test_every_flipped_truncated_or_extended_request_frame_is_refused():
    frame = request_frame()
    mutations = [frame[:cut] for cut in range(len(frame))] + [frame + b"\x00"]
    for index in range(len(frame)):
        flipped = bytearray(frame)
        flipped[index] ^= 0x04
        mutations.append(bytes(flipped))
    for mutated in mutations:
        with pytest.raises(FrameError):
            header = parse_request(mutated)
            open_request(C2S, SESSION, header, mutated)


def test_a_request_frame_does_not_open_in_another_session_or_direction():
    frame = request_frame()
    header = parse_request(frame)
    with pytest.raises(FrameError):
        open_request(C2S, os.urandom(16), header, frame)
    with pytest.raises(FrameError):
        open_request(S2C, SESSION, header, frame)


def test_every_flipped_byte_of_a_response_stream_is_detected():
    stream = b"".join(response())
    for index in range(len(stream)):
        flipped = bytearray(stream)
        flipped[index] ^= 0x10
        with pytest.raises(FrameError):
            read(bytes(flipped))


def test_a_response_stream_cut_anywhere_before_final_is_detected():
    stream = b"".join(response())
    for cut in range(len(stream)):
        with pytest.raises(FrameError):
            read(stream[:cut])


def test_bytes_after_the_final_frame_are_refused():
    stream = b"".join(response())
    with pytest.raises(FrameError):
        read(stream + b"\x00")
    with pytest.raises(FrameError):
        read(stream + response(start=200)[1])


def test_reordered_dropped_or_duplicated_frames_are_detected():
    frames = response(chunks=(b"a", b"b", b"c"))
    variants = [
        [frames[0], frames[2], frames[1], *frames[3:]],  # reordered
        [frames[0], frames[1], frames[3], frames[4]],  # a body frame dropped
        [frames[0], frames[1], frames[1], *frames[2:]],  # duplicated
        [frames[1], frames[0], *frames[2:]],  # head not first
        [*frames[:-1], frames[1]],  # no end
    ]
    for variant in variants:
        with pytest.raises(FrameError):
            read(b"".join(variant))


def test_a_frame_of_another_response_does_not_verify():
    mine, theirs = response(request_counter=7), response(request_counter=8, start=200)
    with pytest.raises(FrameError):
        read(b"".join(theirs), request_counter=7)  # two in-flight responses swapped
    with pytest.raises(FrameError):
        read(b"".join([mine[0], theirs[1], *mine[2:]]))  # one frame spliced in


def test_a_request_frame_reflected_back_as_a_response_does_not_verify():
    with pytest.raises(FrameError):
        read(request_frame())
    reader = ResponseReader(C2S, SESSION, 7)  # even under the client's own key: the kind is wrong
    with pytest.raises(FrameError):
        reader.feed(request_frame())


def test_an_oversized_frame_is_refused_from_its_header_before_buffering():
    reader = ResponseReader(S2C, SESSION, 7)
    header = bytes((1, KIND_BODY)) + (0).to_bytes(8, "big") + (MAX_CHUNK * 4).to_bytes(4, "big")
    with pytest.raises(FrameError):
        reader.feed(header)
    with pytest.raises(FrameError):
        parse_header(bytes((1, KIND_REQUEST)) + bytes(8) + MAX_REQUEST_FRAME.to_bytes(4, "big"), MAX_REQUEST_FRAME)
    with pytest.raises(FrameError):
        parse_header(bytes((1, KIND_BODY)) + bytes(8) + (TAG_LEN - 1).to_bytes(4, "big"), MAX_REQUEST_FRAME)
    assert FRAME_HEADER_LEN == 14


def test_session_ids_have_exactly_one_text_form():
    session_id = os.urandom(16)
    text = encode_session_id(session_id).encode()
    assert len(text) == 22 and decode_session_id(text) == session_id
    for bad in [b"", text[:-1], text + b"A", text.replace(text[:1], b"+"), b"=" * 22, b"A" * 21 + b"B"]:
        assert decode_session_id(bad) is None


@pytest.mark.parametrize(
    "request_",
    [
        InnerRequest(b"R" * 15, "GET", b"/", [], b""),
        InnerRequest(b"R" * 16, "get", b"/", [], b""),
        InnerRequest(b"R" * 16, "GET", b"no-slash", [], b""),
        InnerRequest(b"R" * 16, "GET", b"/a b", [], b""),
        InnerRequest(b"R" * 16, "GET", b"/", [(b"Upper", b"x")], b""),
        InnerRequest(b"R" * 16, "GET", b"/", [(b"x-a", b"line\r\nbreak")], b""),
        InnerRequest(b"R" * 16, "POST", b"/", [], bytes(MAX_BODY + 1)),
    ],
)
def test_a_request_that_cannot_be_encoded_says_why_locally(request_):
    with pytest.raises(ChannelError) as raised:
        pack_request(request_)
    assert not isinstance(raised.value, FrameError) and str(raised.value)


def test_plaintexts_with_trailing_or_missing_bytes_are_refused():
    head = pack_head(InnerHead(204, []))
    for bad in [head + b"\x00", head[:-1], b"", (99).to_bytes(2, "big") + bytes(2)]:
        with pytest.raises(FrameError):
            unpack_head(bad)
    packed = pack_request(REQUEST)
    for cut in range(16 + 1 + 4 + 2 + 8):
        with pytest.raises(FrameError):
            unpack_request(packed[:cut])
