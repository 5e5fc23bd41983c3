"""The fault loop's cluster: the server in a process of its own, a TCP relay, two laptops with `memory-proxy run`,
each of which can be killed with SIGKILL, armed with fault points, or started with its clock an hour off.

    cluster = Cluster(tmp_path, disk=None)       # disk: a small tmpfs for the server's data, when root
    cluster.start_server(); cluster.start_proxy("alice"); cluster.start_proxy("bob")
    cluster.kill_server(); cluster.start_server(points="mirror.write.published@2")
    cluster.tool("alice", "history", "memory/a.md")   # a terminal command of the laptop, its --json answer
    cluster.close()
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from channel.keys import PublicKey
from syncproto.faults import FAULT_VARIABLE
from tests.faults.relay import Relay
from tests.sync_support import Laptop, ProductServer

REPO = Path(__file__).resolve().parents[2]
INDEX = "team"
NAMES = ("alice", "bob")
START_WITHIN = 30.0  # seconds for a process to come up
COMMAND_WITHIN = 30.0  # seconds for one terminal command of a laptop


def until(check: Callable[[], bool], what: str, within: float) -> None:
    """Wait until `check()` holds, looking every 50 ms, at most `within` seconds (else AssertionError)."""
    deadline = time.monotonic() + within
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"still waiting after {within:g} s for {what}")
        time.sleep(0.05)


def answers(url: str) -> bool:
    """A GET of `url` answers 200 now (False while nothing listens there)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


@dataclass
class _Behind:
    """The server as the laptops see it: through the relay."""

    url: str
    key: Any
    admit: Callable[[str, PublicKey], None]


class Cluster:
    def __init__(self, folder: Path, *, disk: Path | None = None) -> None:
        self.folder = folder
        with contextlib.redirect_stdout(io.StringIO()):  # the key's creation is announced
            self.server = ProductServer(disk or folder / "server", None, {name: {INDEX: "rw"} for name in NAMES})
        self.relay = Relay(self.server.port)
        behind = _Behind(self.relay.url, self.server.key, self.server.admit)
        self.laptops = {name: Laptop(folder / name, behind, name, INDEX) for name in NAMES}  # type: ignore[arg-type]
        self.server_process: subprocess.Popen[bytes] | None = None
        self.proxies: dict[str, subprocess.Popen[bytes]] = {}
        self.server_log = folder / "server.log"

    # the server ---------------------------------------------------------------------------------------

    def start_server(self, points: str = "") -> None:
        env = {**os.environ, FAULT_VARIABLE: points}
        command = [sys.executable, "-m", "tests.faults.server_child", str(self.server.data_dir)]
        command += [str(self.server.keys_dir), str(self.server.port)]
        with self.server_log.open("ab") as log:
            self.server_process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
        until(lambda: self._healthy(armed=bool(points)), "the server to answer /healthz", START_WITHIN)

    def _healthy(self, *, armed: bool = False) -> bool:
        """The server answers; an armed one may also have died at its point while starting."""
        if self.server_process is not None and self.server_process.poll() is not None:
            if armed:
                return True
            raise AssertionError(f"the server exited with {self.server_process.returncode}; see {self.server_log}")
        return answers(f"{self.server.url}/healthz")

    def server_alive(self) -> bool:
        return self.server_process is not None and self.server_process.poll() is None

    def kill_server(self) -> None:
        """SIGKILL (a no-op when it is down already)."""
        if self.server_process is not None:
            _kill(self.server_process)
            self.server_process = None

    def stop_server(self) -> None:
        if self.server_process is not None:
            self.server_process.send_signal(signal.SIGTERM)
            try:
                self.server_process.wait(15)
            except subprocess.TimeoutExpired:
                _kill(self.server_process)
            self.server_process = None

    @property
    def index_dir(self) -> Path:
        return self.server.data_dir / "indexes" / INDEX

    def history_texts(self) -> dict[str | None, str]:
        """Every content the server's history holds (at any path) and its text, read from its state database
        directly (None: a deletion)."""
        database = self.index_dir / "state.sqlite3"
        if not database.exists():
            return {}
        connection = apsw.Connection(str(database), flags=apsw.SQLITE_OPEN_READONLY)
        connection.set_busy_timeout(10_000)
        try:
            rows = connection.execute(
                "SELECT DISTINCT h.hash, v.data FROM history h LEFT JOIN versions v ON v.hash = h.hash"
            ).fetchall()
        except apsw.SQLError:  # not created yet
            return {}
        finally:
            connection.close()
        return {digest: zlib.decompress(data).decode("utf-8") if data else "" for digest, data in rows}

    def server_files(self) -> dict[str, str]:
        root = self.index_dir / "files"
        found = {}
        for candidate in [root / "MEMORY.md", *sorted((root / "memory").rglob("*.md"))]:
            if candidate.is_file():
                found[candidate.relative_to(root).as_posix()] = candidate.read_text("utf-8")
        return found

    # the laptops --------------------------------------------------------------------------------------

    def start_proxy(self, name: str, *, points: str = "", clock: str | None = None) -> None:
        """`memory-proxy run` for laptop `name` (stdin held open, no MCP client: it syncs). `clock`: a faketime
        offset such as "+1h" for a laptop whose clock is wrong."""
        params = self.laptops[name].params()
        env = {**(params.env or {}), FAULT_VARIABLE: points}
        command = [params.command, *params.args]
        if clock is not None:
            command = ["faketime", "-f", clock, *command]
            env["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"
        self.proxies[name] = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=params.cwd,
        )

    def proxy_alive(self, name: str) -> bool:
        process = self.proxies.get(name)
        return process is not None and process.poll() is None

    def kill_proxy(self, name: str) -> None:
        process = self.proxies.pop(name, None)
        if process is not None:
            _kill(process)

    def stop_proxy(self, name: str) -> None:
        """Quit the proxy as Claude Code does: end of its input."""
        process = self.proxies.pop(name, None)
        if process is None:
            return
        assert process.stdin is not None
        try:
            process.stdin.close()
            process.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            _kill(process)

    def tool(self, name: str, command: str, *args: str) -> dict[str, Any]:
        """`memory-proxy COMMAND ARGS --json` on laptop `name` (the MCP tool through the channel); its answer."""
        params = self.laptops[name].params()
        done = subprocess.run(
            [params.command, command, *args, "--json"],
            env=params.env,
            cwd=params.cwd,
            capture_output=True,
            timeout=COMMAND_WITHIN,
            check=False,
        )
        if done.returncode != 0:
            raise AssertionError(f"memory-proxy {command} {' '.join(args)} failed: {done.stderr.decode()[-400:]}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return answer

    def close(self) -> None:
        for name in list(self.proxies):
            self.stop_proxy(name)
        self.stop_server()
        self.relay.close()


def _kill(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait(15)
