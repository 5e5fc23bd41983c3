"""The container, run natively: the Dockerfile's exact ENTRYPOINT with the environment, mounts and user that the
Dockerfile and compose.yaml give it, reached by a real `memory-proxy` as Claude Code launches it.

Both files are read here, so the test follows them: the runtime stage's ENV and ENTRYPOINT and its user's uid, and
compose's environment (with `${VAR:-default}` filled in as compose would), secrets and volumes. What a container
has and a process here does not is emulated: `/data` becomes a writable folder owned by the container's user,
`/keys` (`./keys:/keys:ro`) a folder with mode 0555 owned by the operator, `/run/secrets/*` files, and the port a
free one instead of 8765 (no network namespace). Run as root, the server runs as compose runs it: as the image's
uid where this machine's Python lets that user in, else as root, and always with every capability dropped
(`cap_drop: ALL`, through `setpriv`), so file modes bind it and the read-only folder really is read-only to it.
Otherwise it runs as the current (non-root) user.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from mcp import Client
from mcp.client.stdio import stdio_client

from channel.keys import PublicKey
from server.cli import main
from server.index.model_package import INT8
from tests.conftest import REPO
from tests.fakes.provider_api import FakeProviderAPI
from tests.fakes.provider_api import serve as serve_provider
from tests.mcp_support import structured
from tests.ports import free_port
from tests.proxy_support import init_proxy_home, proxy_params

pytestmark = pytest.mark.anyio

START = 120.0  # a cold start imports torch and loads the model: ~13 s here, more on a busy CI machine
STOP = 30.0  # compose's stop_grace_period
STOPPED = (0, -signal.SIGTERM)  # uvicorn re-raises the SIGTERM it handled, after a graceful stop
LISTENING = re.compile(r"listening on http://\S+:(\d+) ")
METRICS = re.compile(r"metrics on (http://\S+/metrics)")
MEMORY_TEXT = "Container canary 7f3a: the staging database is rebuilt every Sunday at 03:00"
PROVIDER_KEY = "sk-container-CANARY-5c1d9e"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# what the Dockerfile and compose.yaml say -------------------------------------------------------------------


@dataclass(frozen=True)
class Image:
    entrypoint: list[str]
    env: dict[str, str]
    uid: int
    workdir: str


def read_dockerfile() -> Image:
    """The runtime (last) stage: ENV, ENTRYPOINT (exec form), WORKDIR, and the uid its USER was created with."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    runtime = text.split("\nFROM ")[-1]
    env: dict[str, str] = {}
    entrypoint: list[str] = []
    workdir = "/"
    for line in runtime.splitlines():
        instruction, _, rest = line.strip().partition(" ")
        if instruction == "ENV":
            env.update(pair.split("=", 1) for pair in shlex.split(rest))
        elif instruction == "ENTRYPOINT":
            entrypoint = json.loads(rest)
        elif instruction == "WORKDIR":
            workdir = rest.strip()
    uid = re.search(r"useradd [^\n]*--uid (\d+)", runtime)
    assert entrypoint and uid, "the runtime stage has an exec-form ENTRYPOINT and creates its user with --uid"
    return Image(entrypoint, env, int(uid.group(1)), workdir)


def interpolate(value: str, variables: Mapping[str, str]) -> str:
    """compose's `${NAME:-default}` and `${NAME}`, from `variables` (the operator's .env and shell)."""

    def one(found: re.Match[str]) -> str:
        name, default = found.group(1), found.group(3) or ""
        return variables.get(name) or default

    return re.sub(r"\$\{(\w+)(:-([^}]*))?\}", one, value)


@dataclass(frozen=True)
class Service:
    env: dict[str, str]
    secrets: dict[str, str]  # name -> host file ('' when none)
    volumes: list[str]


def read_compose(variables: Mapping[str, str]) -> Service:
    spec = yaml.safe_load((REPO / "compose.yaml").read_text())
    service = spec["services"]["memory-server"]
    env = {key: interpolate(str(value), variables) for key, value in service["environment"].items()}
    secrets = {name: interpolate(spec["secrets"][name]["file"], variables) for name in service["secrets"]}
    return Service(env, {name: "" if f == "/dev/null" else f for name, f in secrets.items()}, service["volumes"])


# one deployment on this machine ------------------------------------------------------------------------------


def container_user(uid: int) -> tuple[list[str], int, int]:
    """The command prefix, uid and gid that make a server process here hold what the container's does."""
    if os.geteuid() != 0:
        return [], os.geteuid(), os.getegid()
    setpriv = shutil.which("setpriv")
    assert setpriv, "running the container test as root needs setpriv (util-linux) to drop capabilities"
    no_capabilities = [setpriv, "--bounding-set=-all"]  # compose.yaml: cap_drop: ALL
    as_user = [*no_capabilities, f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    if subprocess.run([*as_user, sys.executable, "-c", ""], capture_output=True, check=False).returncode == 0:
        return as_user, uid, uid
    return no_capabilities, 0, 0  # this Python lives where only root may enter (e.g. under /root)


@dataclass
class Deployment:
    """A host folder holding what the container mounts, and the server process when it runs."""

    base: Path
    variables: dict[str, str] = field(default_factory=dict)  # the operator's .env
    port: int = field(default_factory=free_port)
    image: Image = field(default_factory=read_dockerfile)
    process: subprocess.Popen[str] | None = None
    lines: queue.Queue[str] = field(default_factory=queue.Queue)
    starts: int = 0

    def __post_init__(self) -> None:
        self.data, self.keys, self.secrets = self.base / "data", self.base / "keys", self.base / "secrets"
        self.prefix, self.uid, self.gid = container_user(self.image.uid)
        self.base.chmod(0o755)  # the container's user must reach the mounts, as it can in a container

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stderr(self) -> Path:
        return self.base / "server.log"

    def server_key(self) -> PublicKey:
        return PublicKey.parse((self.keys / "server.pub").read_text())

    def create_server_key(self) -> None:
        """The operator's first step (docs/deploy.md): the server key, in a folder the container's user may read."""
        assert main(["--keys-dir", str(self.keys), "keys", "init"]) == 0
        self.keys.chmod(0o755)

    def admit(self, name: str, device: PublicKey, *grants: str) -> None:
        """`memory-server callers add NAME --key LINE --grant INDEX=rw ...`, before the start."""
        args = [arg for grant in grants for arg in ("--grant", grant)]
        assert main(["--keys-dir", str(self.keys), "callers", "add", name, "--key", device.line(), *args]) == 0

    def seal(self) -> None:
        """The rest of the setup: the key readable by the container's user only (`sudo chown 10001:10001
        keys/server.key`), `./keys:/keys:ro` (nothing in it may change), and the `/data` volume."""
        assert "./keys:/keys:ro" in read_compose(self.variables).volumes
        os.chown(self.keys / "server.key", self.uid, self.gid)
        for path in self.keys.iterdir():
            path.chmod(path.stat().st_mode & 0o444)
        self.keys.chmod(0o555)
        self.data.mkdir(mode=0o700)  # a named volume, owned by the image's user
        os.chown(self.data, self.uid, self.gid)

    def environment(self) -> dict[str, str]:
        """The image's ENV, then compose's environment, paths mapped onto the host folders."""
        service = read_compose(self.variables)
        self.secrets.mkdir(exist_ok=True)
        for name, source in service.secrets.items():
            target = self.secrets / name
            target.write_text(Path(source).read_text() if source else "")  # unused secrets mount /dev/null
            if source:  # docs/deploy.md: chmod 600 and chown 10001 (a read-only mount keeps both); 0644 is refused
                os.chown(target, self.uid, self.gid)
            target.chmod(0o400 if source else 0o444)
        env = {**self.image.env, **service.env}
        for key, value in env.items():
            for inside, outside in (("/data", self.data), ("/keys", self.keys), ("/run/secrets", self.secrets)):
                if value == inside or value.startswith(inside + "/"):
                    env[key] = str(outside) + value[len(inside) :]
        env["PATH"] = f"{REPO / '.venv' / 'bin'}:{os.environ['PATH']}"  # the image's PATH puts its venv first
        env["HOME"] = str(self.data)  # the image's user has /data as its home
        env["MEMORY_PORT"] = str(self.port)  # no network namespace here: a free port instead of 8765
        return env

    def start(self, **overrides: str) -> None:
        assert self.image.workdir == "/data"
        env = {**self.environment(), **overrides}
        self.starts += 1
        self.lines = queue.Queue()
        with self.stderr.open("a") as errors:
            errors.write(f"--- start {self.starts}\n")
            errors.flush()
            self.process = subprocess.Popen(
                [*self.prefix, *self.image.entrypoint],  # exactly the ENTRYPOINT, found on PATH as in the image
                env=env,
                cwd=self.data,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
            )
        threading.Thread(target=self._pump, args=(self.process, self.lines), daemon=True).start()

    @staticmethod
    def _pump(process: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.put(line)
        lines.put("")

    def wait_listening(self, pattern: re.Pattern[str] = LISTENING) -> re.Match[str]:
        seen = []
        while True:
            line = self.lines.get(timeout=START)
            seen.append(line)
            assert line, "the server exited before listening:\n" + "".join(seen) + self.stderr.read_text()
            found = pattern.search(line)
            if found:
                return found

    def stop(self) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)  # what `docker compose down` sends (STOPSIGNAL SIGTERM)
        code = self.process.wait(STOP)
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code

    def kill(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def log_records(self) -> list[dict[str, Any]]:
        lines = [line for line in self.stderr.read_text().splitlines() if not line.startswith("--- start")]
        return [json.loads(line) for line in lines]


@pytest.fixture
def deployment() -> Iterator[Deployment]:
    # Under /tmp rather than pytest's tmp_path, whose parents only root may enter: the server may run as uid 10001.
    base = Path(tempfile.mkdtemp(prefix="memory-container-"))
    running = Deployment(base)
    try:
        yield running
    finally:
        running.kill()
        for folder in (running.keys, running.data):
            if folder.exists():
                folder.chmod(0o755)
        shutil.rmtree(base, ignore_errors=True)


def snapshot(folder: Path) -> dict[str, tuple[int, int, int]]:
    return {p.name: (p.stat().st_mode, p.stat().st_size, p.stat().st_mtime_ns) for p in [folder, *folder.iterdir()]}


# through the proxy ---------------------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def proxy_client(deployment: Deployment, home: Path, index: str) -> Any:
    """The SDK's client on a real `memory-proxy run`'s stdio, pinned to the deployment's server key."""
    project = home / "project"
    project.mkdir(exist_ok=True)
    params = proxy_params(home, home / "proxy.log", "--project", str(project), "--no-sync", index=index)
    with (home / "proxy.stderr").open("a") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            yield client


def laptop(deployment: Deployment, home: Path) -> PublicKey:
    """`memory-proxy init` on a laptop, pinned to the server key the operator handed out; its public key."""
    return init_proxy_home(home, url=deployment.url, key=deployment.server_key())


def metric(text: str, name: str, **labels: str) -> float:
    """One sample's value from a Prometheus text page."""
    wanted = ",".join(f'{key}="{value}"' for key, value in labels.items())
    for line in text.splitlines():
        sample, _, value = line.rpartition(" ")
        if sample == (f"{name}{{{wanted}}}" if labels else name):
            return float(value)
    raise AssertionError(f"no sample {name}{labels} in:\n{text}")


# the tests -----------------------------------------------------------------------------------------------------


async def test_the_entrypoint_serves_a_laptop_through_the_proxy_and_a_restart_keeps_every_index_and_file(
    deployment, tmp_path
):
    deployment.variables.update(MEMORY_LOG_FORMAT="json", MEMORY_LOG_LEVEL="info")  # the operator's .env
    alice = tmp_path / "alice"
    deployment.create_server_key()
    deployment.admit("alice", laptop(deployment, alice), "notes=rw", "team=rw")
    deployment.seal()
    keys_before = snapshot(deployment.keys)

    deployment.start()  # the default embedding provider: the local model, loaded at start
    deployment.wait_listening()
    async with proxy_client(deployment, alice, "notes") as notes:
        written = structured(await notes.call_tool("memory_write", {"content": MEMORY_TEXT, "topic": "staging"}))
        found = structured(await notes.call_tool("memory_search", {"query": "when is the staging database rebuilt"}))
    async with proxy_client(deployment, alice, "team") as team:
        shared = structured(
            await team.call_tool("memory_write", {"path": "MEMORY.md", "content": "# Team\n\nWe deploy on Tuesdays.\n"})
        )
    assert written["indexed"] is True
    assert found["search_mode"] == "hybrid" and found["hits"][0]["citation"].startswith(written["path"] + "#L")
    assert deployment.stop() in STOPPED

    metrics_port = free_port()
    deployment.start(MEMORY_METRICS_PORT=str(metrics_port))  # the same deployment, restarted
    deployment.wait_listening()
    async with proxy_client(deployment, alice, "notes") as notes:
        again = structured(await notes.call_tool("memory_search", {"query": "staging database Sunday", "scope": "all"}))
        got = structured(await notes.call_tool("memory_get", {"path": written["path"]}))
        listed = structured(await notes.call_tool("memory_list", {}))
    async with proxy_client(deployment, alice, "team") as team:
        team_file = structured(await team.call_tool("memory_get", {"path": "MEMORY.md"}))
        team_hit = structured(await team.call_tool("memory_search", {"query": "which day do we deploy"}))
    scraped = httpx2.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10.0)
    public = httpx2.get(f"{deployment.url}/metrics", timeout=10.0)
    assert deployment.stop() in STOPPED

    assert again["hits"][0]["citation"].startswith(written["path"] + "#L") and again["search_mode"] == "hybrid"
    assert MEMORY_TEXT in got["content"] and [f["path"] for f in listed["files"]] == [written["path"]]
    assert team_file["hash"] == shared["hash"] and team_hit["hits"][0]["path"] == "MEMORY.md"
    for index, path in (("notes", written["path"]), ("team", "MEMORY.md")):
        mirrored = deployment.data / "indexes" / index / "files" / path
        assert mirrored.is_file() and mirrored.stat().st_uid == deployment.uid
    assert snapshot(deployment.keys) == keys_before  # the read-only mount was left alone

    assert public.status_code == 404  # metrics never on the public port without the channel
    assert scraped.status_code == 200 and scraped.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert metric(scraped.text, "memory_index_chunks", index="notes") >= 1
    assert metric(scraped.text, "memory_mirror_files", index="team") == 1
    assert metric(scraped.text, "memory_index_pending_vectors", index="notes") == 0
    assert metric(scraped.text, "memory_requests_total", route="/mcp", method="POST", status="2xx") >= 3
    assert metric(scraped.text, "memory_channel_requests_total", path="/v1/handshake", status="200") >= 2
    model = {"provider": "local", "model": INT8.model_id}
    assert metric(scraped.text, "memory_embedding_provider_info", **model) == 1

    records = deployment.log_records()  # MEMORY_LOG_FORMAT=json: every line is one JSON object
    assert records and all({"time", "level", "logger", "message"} <= set(record) for record in records)
    assert any(record["message"].startswith("tunnel caller=alice") for record in records)
    assert "Container canary" not in deployment.stderr.read_text()


LOOSE_KEY = "refusing private key {keys}/server.key: mode 0644 lets other users read or change it; run: chmod 600 "
LOOSE_FOLDER = "refusing keys directory {keys}: mode 0775 lets group or others replace files in it; run: chmod go-w "


@pytest.mark.parametrize(
    ("loosen", "message"),
    [("server.key", LOOSE_KEY + "{keys}/server.key"), ("keys", LOOSE_FOLDER + "{keys}")],
)
def test_a_key_others_may_read_or_a_keys_folder_others_may_change_stops_the_start_with_the_fix(
    deployment, loosen, message
):
    deployment.create_server_key()
    deployment.seal()
    if loosen == "server.key":
        (deployment.keys / "server.key").chmod(0o644)  # e.g. copied with a careless umask
    else:
        deployment.keys.chmod(0o775)

    deployment.start()
    assert deployment.process is not None
    code = deployment.process.wait(START)

    assert code == 2
    assert f"memory-server: error: {message.format(keys=deployment.keys)}" in deployment.stderr.read_text()
    assert not list(deployment.data.iterdir())  # refused before anything was served or written
    with pytest.raises(httpx2.TransportError):
        httpx2.get(f"{deployment.url}/healthz", timeout=2.0)


async def test_a_remote_provider_key_from_a_secret_file_and_memory_text_never_reach_the_json_log(deployment, tmp_path):
    """A config file (the compose volume + MEMORY_CONFIG) chooses OpenAI through a fake API on this machine, the
    key comes from a compose secret, and the log is JSON at debug level; the API fails and echoes the key."""
    api = FakeProviderAPI(api_key=PROVIDER_KEY)
    secret = tmp_path / "openai.key"
    secret.write_text(PROVIDER_KEY + "\n")
    config = deployment.base / "memory-server.toml"
    alice = tmp_path / "alice"
    deployment.create_server_key()
    deployment.admit("alice", laptop(deployment, alice), "notes=rw")
    deployment.seal()

    with serve_provider(api):
        config.write_text(
            'embedding_providers = ["openai"]\n'
            f'openai_base_url = "{api.url}"\n'
            f"openai_dimensions = {api.dimensions}\n"
            "embedding_retries = 0\n"
            'log_level = "debug"\n'
            'log_format = "json"\n'
        )
        config.chmod(0o644)
        deployment.variables.update(MEMORY_CONFIG=str(config), OPENAI_API_KEY_SECRET=str(secret))
        deployment.start()
        deployment.wait_listening()
        async with proxy_client(deployment, alice, "notes") as notes:
            first = structured(await notes.call_tool("memory_write", {"content": MEMORY_TEXT}))
            status = structured(await notes.call_tool("memory_status", {}))
            echo = json.dumps({"error": {"message": f"rate limited for key {PROVIDER_KEY}"}}).encode()
            api.fail(status=429, times=50, body=echo)
            second = structured(await notes.call_tool("memory_write", {"content": MEMORY_TEXT + " (again)"}))
            found = structured(await notes.call_tool("memory_search", {"query": "staging database"}))
        assert deployment.stop() in STOPPED

    assert api.requests, "the provider was really used, with the key from the secret file"
    assert first["indexed"] is True and second["path"] == first["path"] and found["hits"]
    assert status["provider"] == "openai"
    log = deployment.stderr.read_text()
    records = deployment.log_records()
    assert any(record["level"] == "debug" for record in records)  # log_level from the config file
    assert any("embedding" in record["message"] or "keyword-only" in record["message"] for record in records)
    for secret_text in (PROVIDER_KEY, "Container canary", "staging database"):
        assert secret_text not in log
    assert stat.S_IMODE(config.stat().st_mode) == 0o644
