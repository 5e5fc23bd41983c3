"""Ending the MCP endpoint's open GET streams (server-to-client notifications) when the server stops.

Each session may hold one GET stream open for as long as it lives. As the server stops, those streams must end at
once, or uvicorn's graceful period is spent waiting for them and then cancels them with a traceback. The SDK
offers no public way to reach its sessions' streams, so this does it the ASGI way: every GET request's `receive`
reports the client gone once `end_all` is called, and the SDK finishes the stream as it does for any client that
leaves.
"""

from __future__ import annotations

import anyio

from channel.asgi import ASGIApp, Message, Receive, Scope, Send


class EndableStreams:
    """Wraps the MCP endpoint; `end_all` (on the event loop) ends every open GET stream, and any opened later."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._open: set[anyio.Event] = set()
        self._ended = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        ended = anyio.Event()
        if self._ended:
            ended.set()
        self._open.add(ended)

        async def receive_until_ended() -> Message:
            if ended.is_set():
                return {"type": "http.disconnect"}
            received: list[Message] = []
            async with anyio.create_task_group() as waiting:

                async def from_client() -> None:
                    received.append(await receive())
                    waiting.cancel_scope.cancel()

                async def until_ended() -> None:
                    await ended.wait()
                    waiting.cancel_scope.cancel()

                waiting.start_soon(from_client)
                waiting.start_soon(until_ended)
            return received[0] if received else {"type": "http.disconnect"}

        try:
            await self.app(scope, receive_until_ended, send)
        finally:
            self._open.discard(ended)

    def end_all(self) -> None:
        """End every open GET stream now, and refuse to keep any later one open."""
        self._ended = True
        for ended in list(self._open):
            ended.set()
