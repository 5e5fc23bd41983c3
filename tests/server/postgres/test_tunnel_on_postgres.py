"""`tests/channel/test_tunnel.py` again, every server keeping its sessions in PostgreSQL."""

from __future__ import annotations

from tests.channel.test_tunnel import *  # noqa: F403 - its tests and fixtures, collected here again
from tests.server.postgres.channel_on_postgres import make_relay, serve  # noqa: F401 - the fixtures they use
