"""uvicorn in a thread on 127.0.0.1: the one way tests run a real server (the channel's, the product's, the proxy's)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import uvicorn

from server.cli.graceful import GracefulServer

START_TIMEOUT = 10.0


class ThreadedUvicorn(GracefulServer):
    """The product's uvicorn, telling the test when it has started and when its shutdown began."""

    def __init__(self, config: uvicorn.Config, *, on_stopping: Callable[[], None] | None = None) -> None:
        super().__init__(config, on_stopping=on_stopping)
        self.ready = threading.Event()
        self.shutting_down = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.shutting_down.set()
        await super().shutdown(sockets)


@contextmanager
def run_uvicorn(
    config: uvicorn.Config, *, port: int = 0, on_stopping: Callable[[], None] | None = None
) -> Iterator[tuple[str, ThreadedUvicorn]]:
    """Serve `config` on 127.0.0.1:`port` (0: a free one) until the block ends; yields the URL and the server.
    `on_stopping` is called when the shutdown begins (the product passes `MemoryService.stopping`)."""
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets that say so (else 40 ms per request).
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    server = ThreadedUvicorn(config, on_stopping=on_stopping)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        if not server.ready.wait(START_TIMEOUT):
            raise RuntimeError("the test server did not start")
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", server
    finally:
        server.should_exit = True
        thread.join(START_TIMEOUT)
        listener.close()
