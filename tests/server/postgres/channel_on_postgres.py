"""The channel's own tests again, their servers keeping sessions in PostgreSQL: import this module's `serve` and
`make_relay` beside the tests of a `tests/channel` module (see `test_tunnel_on_postgres.py`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from channel.asgi import ASGIApp
from channel.authz import CallerDirectory
from channel.keys import PrivateKey
from server.postgres.sessions import PgSessionStore
from tests.channel.conftest import RunningServer, make_relay, serve_channel

__all__ = ["make_relay", "serve"]


@pytest.fixture
def serve(postgres_url: str) -> Iterator[Callable[..., RunningServer]]:
    """As `tests/channel/conftest.py`'s `serve`, each server's sessions in a PostgreSQL store on the test's database
    (on the server's clock, when a test gives one)."""
    with ExitStack() as stack:

        def start(app: ASGIApp, callers: CallerDirectory, **options: Any) -> RunningServer:
            key = options.pop("server_key", None) or PrivateKey.generate("test server")
            store = PgSessionStore(postgres_url, key, options.get("clock", time.time))
            stack.callback(store.close)
            return stack.enter_context(serve_channel(app, callers, server_key=key, sessions=store, **options))

        yield start
