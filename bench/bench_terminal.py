"""Benchmark: `memory-proxy search` (a new process each time: start, channel handshake, MCP session, search on
the running server, print) against `memory-server search` (a new process that opens the index and loads the
embedding model itself), the same query on the same index.

The server runs in this process with the real model (`tests.sync_support.ProductServer`), holding a few dozen
notes written with `memory-proxy write`. `memory-proxy --help` is timed too: the floor of any proxy command.

    .venv/bin/python bench/bench_terminal.py [--quick]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import REPO, percentile, report, save_json, table

from server.index.embeddings.local import LocalEmbedder
from tests.sync_support import Laptop, ProductServer

QUICK = "--quick" in sys.argv
PROXY_RUNS = 10 if QUICK else 30
SERVER_RUNS = 3 if QUICK else 5
NOTES = 40
QUERY = "how do we roll out a release to staging"
BIN = REPO / ".venv" / "bin"
TOPICS = ("deploys", "testing", "databases", "on-call", "reviews", "releases", "staging", "backups")


def timed(command: list[str], env: dict[str, str], runs: int) -> list[float]:
    """Wall-clock seconds of each run of `command`, which must succeed."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - started)
        assert done.returncode == 0, done.stderr
    return times


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        server = ProductServer(root / "server", LocalEmbedder(), {"alice": {"team": "rw"}})
        alice = Laptop(root / "alice", server, "alice", "team")
        server.start()
        try:
            params = alice.params()
            env = {**(params.env or {}), "MEMORY_PROXY_LOG_LEVEL": "WARNING"}
            proxy_command = str(BIN / "memory-proxy")
            for number in range(NOTES):
                topic = TOPICS[number % len(TOPICS)]
                note = f"Note {number} on {topic}: we agreed on step {number} of the {topic} checklist."
                timed([proxy_command, "write", "--topic", topic, "--path", f"memory/{topic}.md", note], env, 1)
            proxy = timed([str(BIN / "memory-proxy"), "search", QUERY], env, PROXY_RUNS)
            floor = timed([str(BIN / "memory-proxy"), "--help"], env, PROXY_RUNS)
            server_env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
            direct = [str(BIN / "memory-server"), "--data-dir", str(server.data_dir)]
            direct += ["search", "--index", "team", QUERY]
            local = timed(direct, server_env, SERVER_RUNS)
        finally:
            server.stop()
    rows = [
        ["memory-proxy search (through the running server)", PROXY_RUNS, *_stats(proxy)],
        ["memory-proxy --help (process start and imports only)", PROXY_RUNS, *_stats(floor)],
        ["memory-server search (loads the index and the model)", SERVER_RUNS, *_stats(local)],
    ]
    body = table(["command", "runs", "p50 s", "p95 s", "min s"], rows)
    speedup = percentile(local, 50) / percentile(proxy, 50)
    body += f"\n\n`memory-proxy search` p50 is {speedup:.0f}x faster; query {QUERY!r}, {NOTES} notes."
    report("terminal", "Terminal search: memory-proxy (through the server) vs memory-server (local model)", body)
    save_json("terminal", {"proxy": proxy, "help": floor, "server": local, "query": QUERY, "notes": NOTES})


def _stats(times: list[float]) -> list[float]:
    return [percentile(times, 50), percentile(times, 95), min(times)]


if __name__ == "__main__":
    main()
