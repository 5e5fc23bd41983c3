"""`memory-server`: the command line (serve, index, search, status, keys, callers, config).

`main` (in `server.cli.main`) is the console script's entry point, re-exported here as `server.cli:main`.
"""

from server.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
