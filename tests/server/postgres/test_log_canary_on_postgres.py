"""`tests/channel/test_log_canary.py` again, the server keeping its sessions in PostgreSQL: no session key, id or
server key reaches a log line through the store either."""

from __future__ import annotations

from tests.channel.test_log_canary import *  # noqa: F403 - its test, collected here again
from tests.server.postgres.channel_on_postgres import make_relay, serve  # noqa: F401 - the fixtures it uses
