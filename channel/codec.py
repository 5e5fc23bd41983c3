"""The plaintexts inside frames: an inner request, and an inner response head. Pure, bounded, strict.

    request = request id (16) | u8 method length | method | u16 target length | target
              | u16 header count | (u16 name length | name | u16 value length | value)* | body
    head    = u16 status | u16 header count | headers as above

Header names are lowercase tokens, values carry no CR, LF or NUL, the target is printable ASCII starting with
`/`. Unpacking anything else raises a bare `FrameError` (it came from the wire); packing it raises a
`ChannelError` that says what is wrong (it came from local code).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence
from dataclasses import dataclass

from channel.constants import MAX_BODY, MAX_INNER_HEAD, MAX_INNER_HEADERS, REQUEST_ID_LEN
from channel.errors import ChannelError, FrameError

Headers = list[tuple[bytes, bytes]]

_U16 = struct.Struct(">H")
_METHOD = re.compile(rb"[A-Z][A-Z0-9_-]{0,15}")
_TARGET = re.compile(rb"/[\x21-\x7e]{0,8190}")
_NAME = re.compile(rb"[a-z0-9!#$%&'*+.^_`|~-]{1,256}")
_BAD_VALUE = re.compile(rb"[\r\n\x00]")


@dataclass(frozen=True)
class InnerRequest:
    """One tunnelled HTTP request. Its id (`channel.request_ids`) lets the server refuse to run a request twice."""

    request_id: bytes
    method: str
    target: bytes  # raw path and query string
    headers: Headers
    body: bytes

    def __repr__(self) -> str:
        return f"InnerRequest({self.method} body={len(self.body)}B)"


@dataclass(frozen=True)
class InnerHead:
    """The status and headers of a tunnelled response; the body follows in its own frames."""

    status: int
    headers: Headers


def pack_request(request: InnerRequest) -> bytes:
    """The plaintext of a request frame."""
    method = request.method.encode("ascii", "replace")
    if len(request.request_id) != REQUEST_ID_LEN:
        raise ChannelError(f"a request id has {REQUEST_ID_LEN} bytes")
    if not _METHOD.fullmatch(method):
        raise ChannelError("cannot tunnel this request: its method is not an upper-case token")
    if not _TARGET.fullmatch(request.target):
        raise ChannelError("cannot tunnel this request: its path must be printable ASCII starting with '/'")
    if len(request.body) > MAX_BODY:
        raise ChannelError(f"cannot tunnel a body of {len(request.body)} bytes: the limit is {MAX_BODY}")
    head = b"".join((request.request_id, bytes((len(method),)), method, _U16.pack(len(request.target)), request.target))
    head += _pack_headers(request.headers)
    if len(head) > MAX_INNER_HEAD:
        raise ChannelError(f"cannot tunnel this request: its path and headers exceed {MAX_INNER_HEAD} bytes")
    return head + request.body


def unpack_request(data: bytes) -> InnerRequest:
    """Parse a decrypted request frame; any deviation from the layout is a `FrameError`."""
    view = memoryview(data)
    if len(view) < REQUEST_ID_LEN + 1:
        raise FrameError()
    request_id = bytes(view[:REQUEST_ID_LEN])
    pos = REQUEST_ID_LEN
    method_len = view[pos]
    method = bytes(view[pos + 1 : pos + 1 + method_len])
    pos += 1 + method_len
    if len(method) != method_len or not _METHOD.fullmatch(method):
        raise FrameError()
    target, pos = _read_u16_bytes(view, pos)
    if not _TARGET.fullmatch(target):
        raise FrameError()
    headers, pos = _unpack_headers(view, pos)
    if pos > MAX_INNER_HEAD or len(view) - pos > MAX_BODY:
        raise FrameError()
    return InnerRequest(request_id, method.decode("ascii"), target, headers, bytes(view[pos:]))


def pack_head(head: InnerHead) -> bytes:
    """The plaintext of a HEAD frame."""
    if not 100 <= head.status <= 999:
        raise ChannelError(f"invalid response status {head.status}")
    data = _U16.pack(head.status) + _pack_headers(head.headers)
    if len(data) > MAX_INNER_HEAD:
        raise ChannelError(f"response headers exceed {MAX_INNER_HEAD} bytes")
    return data


def unpack_head(data: bytes) -> InnerHead:
    """Parse a decrypted HEAD frame."""
    view = memoryview(data)
    if len(view) < 4 or len(view) > MAX_INNER_HEAD:
        raise FrameError()
    (status,) = _U16.unpack_from(view, 0)
    headers, pos = _unpack_headers(view, 2)
    if pos != len(view) or not 100 <= status <= 999:
        raise FrameError()
    return InnerHead(status, headers)


def _pack_headers(headers: Sequence[tuple[bytes, bytes]]) -> bytes:
    if len(headers) > MAX_INNER_HEADERS:
        raise ChannelError(f"more than {MAX_INNER_HEADERS} headers")
    parts = [_U16.pack(len(headers))]
    for name, value in headers:
        if not _NAME.fullmatch(name):
            raise ChannelError(f"header name {name[:40]!r} is not a lowercase token")
        if _BAD_VALUE.search(value) or len(value) > 0xFFFF:
            raise ChannelError(f"the value of header {name.decode()} has CR, LF or NUL, or is too long")
        parts += (_U16.pack(len(name)), name, _U16.pack(len(value)), value)
    return b"".join(parts)


def _unpack_headers(view: memoryview, pos: int) -> tuple[Headers, int]:
    if pos + 2 > len(view):
        raise FrameError()
    (count,) = _U16.unpack_from(view, pos)
    pos += 2
    if count > MAX_INNER_HEADERS:
        raise FrameError()
    headers: Headers = []
    for _ in range(count):
        name, pos = _read_u16_bytes(view, pos)
        value, pos = _read_u16_bytes(view, pos)
        if not _NAME.fullmatch(name) or _BAD_VALUE.search(value):
            raise FrameError()
        headers.append((name, value))
    return headers, pos


def _read_u16_bytes(view: memoryview, pos: int) -> tuple[bytes, int]:
    if pos + 2 > len(view):
        raise FrameError()
    (length,) = _U16.unpack_from(view, pos)
    end = pos + 2 + length
    if end > len(view):
        raise FrameError()
    return bytes(view[pos + 2 : end]), end
