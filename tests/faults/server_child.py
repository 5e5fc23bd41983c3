"""The product's server in a process of its own, for the fault loop to kill with SIGKILL:

    python -m tests.faults.server_child DATA_DIR KEYS_DIR PORT

What `memory-server serve` runs (`create_app`: channel, MCP, sync, under the product's uvicorn settings), with the
hashing embedder of the tests instead of the real model, so that a restart takes a second, not ten. Fault points
are armed by `MEMORY_FAULT_POINTS` in this process's environment (`syncproto.faults`).
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from server.app import create_app
from server.callers.config import CALLERS_FILE
from server.callers.file import CallersFile
from server.cli import serve
from server.cli.graceful import GracefulServer
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder


def main(argv: list[str]) -> int:
    data_dir, keys_dir, port = Path(argv[0]), Path(argv[1]), int(argv[2])
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    key = serve.ensure_server_key(keys_dir, out=sys.stderr)
    service = MemoryService(data_dir, HashingEmbedder())
    app = create_app(service, server_key=key, callers=CallersFile(keys_dir / CALLERS_FILE), data_dir=data_dir)
    listener = serve.bind("127.0.0.1", port)
    try:
        GracefulServer(serve.uvicorn_config(app, graceful=1), on_stopping=service.stopping).run(sockets=[listener])
    finally:
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
