"""A smaller finding: after a write ran and its answer was lost, the retry's refusal must not claim the request
was not executed (reproduced end to end in tests/channel/test_attacks.py, the lost-answer test); here each
status says only what it proves. And a connection that breaks before an answer (a server shedding connections
under a flood) is retried without ever running a request twice."""

from __future__ import annotations

import httpx2
import pytest

from channel.constants import TUNNEL_PATH
from channel.errors import TunnelRefused
from channel.keys import PrivateKey
from tests.channel.apps import AppState, caller, inner_app, table
from tests.channel.conftest import MutableDirectory, serve_channel

pytestmark = pytest.mark.anyio

DEVICE = PrivateKey.generate("alice@laptop")


@pytest.mark.parametrize(
    ("status", "ran"), [(401, "it was not executed"), (429, "it was not executed"), (502, "may or may not")]
)
def test_each_refusal_says_only_what_its_status_proves(status, ran):
    assert ran in str(TunnelRefused(status))


class BreakOnce(httpx2.AsyncBaseTransport):
    """The network for a client: the first tunnel request's connection breaks, before or after the server got it."""

    def __init__(self, *, after_delivery: bool) -> None:
        self.real = httpx2.AsyncHTTPTransport()
        self.after_delivery = after_delivery
        self.broken = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if request.url.path == TUNNEL_PATH and not self.broken:
            self.broken = True
            if self.after_delivery:
                answer = await self.real.handle_async_request(request)
                await answer.aclose()
            raise httpx2.ReadError("connection closed by the server")
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


@pytest.mark.parametrize("after_delivery", [False, True])
async def test_a_broken_connection_is_retried_and_the_request_never_runs_twice(after_delivery):
    state = AppState()
    network = BreakOnce(after_delivery=after_delivery)
    with serve_channel(inner_app(state), MutableDirectory(table(caller("alice", DEVICE, notes="rw")))) as server:
        async with server.client(DEVICE, transport=network) as client:
            if after_delivery:  # it ran; the retry is recognised by its request id and refused
                with pytest.raises(TunnelRefused, match="an earlier attempt of it may have run"):
                    await client.post("/count")
            else:  # the server never saw it: the retry runs it
                assert (await client.post("/count")).json() == {"count": 1}
    assert state.count == 1
