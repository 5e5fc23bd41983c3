"""The proxy's side of the stdio wire: newline-delimited JSON-RPC on stdin and stdout, and nothing else on stdout.

`claim_stdio` moves the wire to private descriptors and points fd 1 at stderr (fd 0 at /dev/null), as the SDK's
own stdio server does, so a stray print or a child process can never corrupt the MCP stream. Stdin is read by a
daemon thread with plain `os.read` calls on the descriptor: a blocking read cannot be cancelled, a daemon thread
never holds up the exit when the parent vanishes without closing the pipe, and no file object is involved whose
`close` would wait for that read to return.

A line over `MAX_LINE` is dropped; its first `HEAD` bytes are kept, to read the id of the request it held
(`client_proxy.forward.id_scan`), so the forwarder can answer that request with an error.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import BinaryIO, Final

import anyio
import anyio.from_thread
import anyio.to_thread
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from client_proxy.forward.id_scan import request_id_in
from client_proxy.forward.jsonrpc import RequestId

log = logging.getLogger(__name__)

MAX_LINE: Final = 32 * 1024 * 1024  # the channel's largest request body
LINE_BUFFER: Final = 16  # lines read ahead of the forwarder
READ_SIZE: Final = 64 * 1024
HEAD: Final = 4096  # bytes kept of a line over MAX_LINE: clients write the id and method before the params
OVERSIZED: Final = "dropped an input line over %d bytes"


class StdoutClosedError(Exception):
    """The client stopped reading: nothing more can be said to it."""


class OversizedLine(bytes):
    """A line over `MAX_LINE`, as its first `HEAD` bytes (a reader that does not know this type sees the cut-off
    line it is, which `parse` refuses), with the id of the request read from them."""

    request_id: RequestId

    def __new__(cls, head: bytes, request_id: RequestId) -> OversizedLine:
        line = super().__new__(cls, head)
        line.request_id = request_id
        return line


@contextmanager
def claim_stdio() -> Iterator[tuple[int, BinaryIO]]:
    """The wire's input (a private descriptor) and output (a private binary file); fds 0 and 1 are diverted until
    the block ends. The input descriptor stays open: the daemon reader may still be blocked on it."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    saved_in, saved_out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(devnull, 0)
        os.dup2(2, 1)
        with os.fdopen(wire_out, "wb") as stdout:
            yield wire_in, stdout
    finally:
        os.dup2(saved_in, 0)
        os.dup2(saved_out, 1)
        for fd in (devnull, saved_in, saved_out):
            os.close(fd)


@asynccontextmanager
async def stdin_lines(fd: int) -> AsyncIterator[MemoryObjectReceiveStream[bytes | None]]:
    """The lines of `fd` as `_read_lines` gives them, as they arrive; the stream of lines ends at EOF."""
    send, receive = anyio.create_memory_object_stream[bytes | None](LINE_BUFFER)
    async with anyio.from_thread.BlockingPortal() as portal:
        threading.Thread(target=_pump, args=(fd, portal, send), name="memory-proxy stdin", daemon=True).start()
        try:
            with receive:
                yield receive
        finally:
            await portal.stop(cancel_remaining=True)
            send.close()  # the pump closes it at EOF, unless the portal stopped first: then nothing else would


LineSender = MemoryObjectSendStream[bytes | None]


def _pump(fd: int, portal: anyio.from_thread.BlockingPortal, send: LineSender) -> None:
    try:
        for line in _read_lines(fd):
            portal.call(send.send, line)
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, RuntimeError, OSError):
        pass  # the forwarder has stopped listening (RuntimeError: the portal is closed), or stdin broke
    finally:
        with suppress(RuntimeError):
            portal.call(send.aclose)


def _read_lines(fd: int) -> Iterator[bytes | None]:
    """Lines without their ending, blank ones skipped. A line over `MAX_LINE` is dropped: an `OversizedLine` stands
    for it when its first bytes show the id of a request, None otherwise."""
    parts: list[bytes] = []  # the line so far
    size = 0
    dropping = False  # the line is over MAX_LINE: drop the rest of it
    while chunk := os.read(fd, READ_SIZE):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if not dropping and size + end - start <= MAX_LINE:
                line = b"".join([*parts, chunk[start:end]]).rstrip(b"\r")
                if line.strip():
                    yield line
            elif not dropping:
                yield _oversized([*parts, chunk[start:end]])
            parts, size, dropping = [], 0, False
            start = end + 1
        if not dropping and start < len(chunk):
            parts.append(chunk[start:])
            size += len(chunk) - start
            if size > MAX_LINE:
                yield _oversized(parts)
                parts, size, dropping = [], 0, True
    if not dropping and (line := b"".join(parts).rstrip(b"\r")).strip():
        yield line


def _oversized(parts: list[bytes]) -> OversizedLine | None:
    """What stands for a line over `MAX_LINE` made of `parts`: its first `HEAD` bytes, when they show a request id."""
    log.warning(OVERSIZED, MAX_LINE)
    head = bytearray()
    for part in parts:
        head += part[: HEAD - len(head)]
        if len(head) >= HEAD:
            break
    request_id = request_id_in(bytes(head))
    return OversizedLine(bytes(head), request_id) if request_id is not None else None


class StdoutWriter:
    """Writes whole lines to the wire, one at a time, off the event loop (a slow reader blocks only its thread)."""

    def __init__(self, stream: BinaryIO) -> None:
        self._stream = stream
        self._lock = anyio.Lock()

    async def write(self, line: bytes) -> None:
        async with self._lock:
            try:
                await anyio.to_thread.run_sync(self._write, line + b"\n")
            except (BrokenPipeError, ValueError) as exc:  # ValueError: the file was closed
                raise StdoutClosedError() from exc

    def _write(self, data: bytes) -> None:
        self._stream.write(data)
        self._stream.flush()
