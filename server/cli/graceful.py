"""uvicorn that tells the app when it stops taking requests, before it waits for the ones in flight.

Every connected laptop holds a long-poll open (`/sync/changes`, up to 30 s). uvicorn's graceful shutdown waits
`timeout_graceful_shutdown` seconds for requests to end and then cancels them, which logs each cancelled long-poll
as an error with a traceback. Told at the start of the shutdown, the long-polls answer at once (with whatever they
have), the laptops reconnect to the restarted server, and a stop is quiet and quick.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

import uvicorn


class GracefulServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, *, on_stopping: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.on_stopping = on_stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_stopping is not None:
            self.on_stopping()
        await super().shutdown(sockets)
