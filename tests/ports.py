"""A free TCP port on the loopback interface, for a test's server, relay or balancer to listen on."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A port nothing listens on now (the OS picks it; another process could take it before the caller binds)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
