"""A TCP relay between the laptops and the server that can cut connections in the middle of a body.

    relay = Relay(server_port)          # listens on 127.0.0.1:relay.port, in a thread of its own
    relay.cut(rng)                      # from now on each connection is closed after a few hundred bytes more
    relay.mend()                        # bytes flow whole again
    relay.close()

A cut closes both sides of the connection at once, as a broken Wi-Fi or a NAT timeout does: the proxy sees a
request or answer end early and retries; the server sees a body end early and must change nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import threading
from typing import Any

from tests.ports import free_port

CHUNK = 4096


class Relay:
    def __init__(self, upstream_port: int = 0, *, upstream_socket: str | None = None) -> None:
        """To 127.0.0.1:`upstream_port`, or to the Unix socket at `upstream_socket` (a test's PostgreSQL)."""
        self.upstream_port, self.upstream_socket = upstream_port, upstream_socket
        self.cuts = 0  # connections cut so far
        self._budget: tuple[int, int] | None = None  # bytes a connection may still carry once cutting: (low, high)
        self._rng = random.Random(0)
        self._open: dict[asyncio.Event, asyncio.Task[Any]] = {}  # per connection relayed: set it to end it
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = free_port()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the relay did not start")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self, rng: random.Random, low: int = 64, high: int = 6000) -> None:
        self._rng = random.Random(rng.random())
        self._budget = (low, high)

    def mend(self) -> None:
        self._budget = None

    def close(self) -> None:
        """Stop listening, and end the connections still open (their sockets closed, not left to the collector)."""
        asyncio.run_coroutine_threadsafe(self._end_all(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _end_all(self) -> None:
        for done in self._open:
            done.set()
        if self._open:
            await asyncio.wait(list(self._open.values()), timeout=5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()
            self._loop.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.upstream_socket is not None:
                up_reader, up_writer = await asyncio.open_unix_connection(self.upstream_socket)
            else:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            writer.close()
            return
        left = [-1]  # bytes this connection may still carry once cutting began (-1: not counting yet)
        done = asyncio.Event()
        task = asyncio.current_task()
        assert task is not None, "start_server runs each connection in a task"
        self._open[done] = task
        pumps = [
            asyncio.ensure_future(self._pump(reader, up_writer, left, done)),
            asyncio.ensure_future(self._pump(up_reader, writer, left, done)),
        ]
        await done.wait()
        for pump in pumps:
            pump.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for end in (writer, up_writer):
            with contextlib.suppress(Exception):  # already gone
                end.transport.abort()
        await asyncio.sleep(0)  # the aborts close their sockets on the next turn of the loop
        del self._open[done]

    async def _pump(
        self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, left: list[int], done: asyncio.Event
    ) -> None:
        try:
            while data := await source.read(CHUNK):
                if self._budget is not None:
                    if left[0] < 0:
                        left[0] = self._rng.randint(*self._budget)
                    if len(data) >= left[0]:
                        sink.write(data[: left[0]])
                        await sink.drain()
                        self.cuts += 1
                        return
                    left[0] -= len(data)
                sink.write(data)
                await sink.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            done.set()
