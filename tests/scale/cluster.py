"""The scale-out deployment on one machine: real `memory-server serve` processes sharing one real PostgreSQL
(`MEMORY_DATABASE_URL`), behind Debian's nginx round-robin (`tests.scale.balancer`, the deployment's own config),
and laptops whose `memory-proxy` reaches them only through nginx. Each replica has its own data folder (its search
cache) and all share the keys folder (server key, callers.toml), as compose.scale.yaml mounts them.

    with ScaleCluster(tmp_path, database_url, replicas=2) as cluster:
        async with cluster.laptops["alice"].running() as client: ...   # through nginx
        cluster.kill_replica(0); cluster.start_replica(0)              # SIGKILL, and the same one again
        cluster.direct_tool("bob", 1, "search", "deploy")             # bob's laptop talking to replica 1 alone
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from channel.keys import PrivateKey, PublicKey
from client_proxy.config import render_config, write_config
from server.callers.config import CALLERS_FILE
from server.callers.file import update_callers
from server.cli import serve
from tests.faults.cluster import _kill, answers, until
from tests.ports import free_port
from tests.scale.balancer import Balancer
from tests.sync_support import Laptop

BIN = Path(sys.executable).parent
INDEX = "team"
NAMES = ("alice", "bob")
START_WITHIN = 60.0  # seconds for a replica to answer /healthz (the embedding model loads first)
COMMAND_WITHIN = 30.0


@dataclass
class Front:
    """The deployment as a laptop sees it (what `Laptop` asks of a server): nginx's URL and the server key."""

    url: str
    key: PrivateKey
    keys_dir: Path
    grants: dict[str, str]

    def admit(self, name: str, device: PublicKey) -> None:
        """`memory-server callers add NAME --key ... --grant team=rw`, as the operator does."""
        grants = {INDEX: self.grants.get(name, "rw")}
        update_callers(self.keys_dir / CALLERS_FILE, lambda callers: callers.add(name, [device], grants))  # type: ignore[arg-type]


class ScaleCluster:
    """`replicas` servers on the database at `database_url`, nginx in front, a laptop per name in `names`."""

    def __init__(
        self,
        folder: Path,
        database_url: str,
        *,
        replicas: int = 2,
        names: tuple[str, ...] = NAMES,
        embedding: str = "local",
    ) -> None:
        self.folder, self.database_url, self.embedding = folder, database_url, embedding
        self.keys_dir = folder / "keys"
        with contextlib.redirect_stdout(io.StringIO()):  # the key's creation is announced
            self.key = serve.ensure_server_key(self.keys_dir, out=io.StringIO())
        self.ports = [free_port() for _ in range(replicas)]
        self.processes: list[subprocess.Popen[bytes] | None] = [None] * replicas
        # deploy/nginx/nginx.conf lists two replicas: with one, both of its lines name it (nginx stays in the path).
        upstreams = [self.ports[n % replicas] for n in range(max(replicas, 2))]
        self.balancer = Balancer(folder / "nginx", free_port(), upstreams)
        self.front = Front(self.balancer.url, self.key, self.keys_dir, {})
        self.laptops = {name: Laptop(folder / name, self.front, name, INDEX) for name in names}  # type: ignore[arg-type]
        self._stack = contextlib.ExitStack()

    # replicas -----------------------------------------------------------------------------------------

    def data_dir(self, number: int) -> Path:
        return self.folder / f"replica-{number}"

    def log(self, number: int) -> Path:
        return self.folder / f"replica-{number}.log"

    def url(self, number: int) -> str:
        return f"http://127.0.0.1:{self.ports[number]}"

    def start_replica(self, number: int) -> None:
        """`memory-server serve` for replica `number` (again, after a kill: same port, same data folder)."""
        env = {
            **os.environ,
            "MEMORY_DATABASE_URL": self.database_url,
            "MEMORY_EMBEDDING_PROVIDERS": self.embedding,
            "MEMORY_LOG_LEVEL": "info",
            "MEMORY_CONFIG": "",
        }
        command = [str(BIN / "memory-server"), "--data-dir", str(self.data_dir(number))]
        command += ["--keys-dir", str(self.keys_dir), "serve", "--port", str(self.ports[number])]
        with self.log(number).open("ab") as log:
            self.processes[number] = subprocess.Popen(command, env=env, stdout=log, stderr=log)
        until(lambda: self.healthy(number), f"replica {number} to answer /healthz", START_WITHIN)

    def healthy(self, number: int) -> bool:
        process = self.processes[number]
        if process is not None and process.poll() is not None:
            raise AssertionError(f"replica {number} exited with {process.returncode}; see {self.log(number)}")
        return answers(f"{self.url(number)}/healthz")

    def kill_replica(self, number: int) -> None:
        """SIGKILL: no graceful stop, no request finished."""
        process = self.processes[number]
        if process is not None:
            _kill(process)
            self.processes[number] = None

    # the operator and the laptops -----------------------------------------------------------------------

    def revoke(self, name: str) -> None:
        """`memory-server callers revoke NAME` on the shared database, as the operator runs it."""
        done = subprocess.run(
            [str(BIN / "memory-server"), "--keys-dir", str(self.keys_dir), "callers", "revoke", name],
            env={**os.environ, "MEMORY_DATABASE_URL": self.database_url, "MEMORY_CONFIG": ""},
            capture_output=True,
            timeout=COMMAND_WITHIN,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()

    def direct_home(self, name: str, number: int) -> Path:
        """A copy of laptop `name`'s home (same device key) whose server URL is replica `number` itself."""
        laptop = self.laptops[name]
        home = self.folder / f"{name}-direct-{number}"
        if not home.exists():
            shutil.copytree(laptop.home, home)
            write_config(home, render_config(self.url(number), self.key.public, name, INDEX))
        return home

    def tool(self, name: str, command: str, *args: str, replica: int | None = None) -> subprocess.CompletedProcess[str]:
        """`memory-proxy COMMAND ARGS --json` on laptop `name`, through nginx or to one replica alone."""
        params = self.laptops[name].params()
        env = dict(params.env or {})
        if replica is not None:
            env["MEMORY_PROXY_HOME"] = str(self.direct_home(name, replica))
        return subprocess.run(
            [params.command, command, *args, "--json"],
            env=env,
            cwd=params.cwd,
            capture_output=True,
            text=True,
            timeout=COMMAND_WITHIN,
            check=False,
        )

    def search(self, name: str, query: str, *, replica: int | None = None) -> list[str]:
        """The paths `memory-proxy search QUERY` finds for laptop `name` (AssertionError when it fails)."""
        done = self.tool(name, "search", query, replica=replica)
        if done.returncode != 0:
            raise AssertionError(f"memory-proxy search {query!r} failed: {done.stderr[-400:]}")
        answer: dict[str, Any] = json.loads(done.stdout)
        return [hit["path"] for hit in answer["hits"]]

    # lifecycle ----------------------------------------------------------------------------------------

    def __enter__(self) -> ScaleCluster:
        try:
            for number in range(len(self.ports)):
                self.start_replica(number)
            self._stack.enter_context(self.balancer)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()
        for number in range(len(self.ports)):
            self.kill_replica(number)
