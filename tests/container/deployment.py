"""The shipped image and compose.yaml, run for real by a Docker engine, as an operator runs them.

    deployment = Deployment(tmp / "server", image, grants={"alice": "team"})
    deployment.set_up_keys()                 # the guide's commands: `memory-admin keys init`, chmod, chown
    alice = Laptop(tmp / "alice", deployment, "alice", "team")   # tests.sync_support's laptop: a real memory-proxy
    deployment.up()                          # `docker compose up -d` of a copy of compose.yaml, its own project

Each deployment is a folder holding a verbatim copy of compose.yaml, a `keys/` folder and an `.env`, plus, when a
test needs one, a `compose.override.yaml` (how an operator adds settings compose.yaml does not pass). Its compose
project name is its own, so it runs beside anything else on the engine; `down(volumes=True)` removes what it made.
"""

from __future__ import annotations

import ipaddress
import os
import re
import shlex
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import anyio

from channel.keys import PublicKey
from tests.conftest import REPO
from tests.ports import free_port

GUIDE = REPO / "docs" / "deploy.md"
SERVICE = "memory-server"
IMAGE_UID = 10001  # the image's USER, and the owner the guide gives the server key
COMMAND_TIMEOUT = 180.0


class DockerError(AssertionError):
    """A docker or compose command failed; the message carries its output."""


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    timeout: float = COMMAND_TIMEOUT,
    check: bool = True,
    with_stderr: bool = False,
) -> str:
    """Run a docker or compose command; its stdout (and stderr after it, `with_stderr`)."""
    done = subprocess.run(
        list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
    )
    if check and done.returncode != 0:
        raise DockerError(f"{shlex.join(argv)} exited {done.returncode}:\n{(done.stdout + done.stderr)[-4000:]}")
    return done.stdout + done.stderr if with_stderr else done.stdout


@cache
def compose_command() -> tuple[str, ...]:
    """Compose v2 (`docker compose`) where the docker client has it, else v1 (`docker-compose`, Debian's 1.29)."""
    if subprocess.run(["docker", "compose", "version"], capture_output=True, check=False).returncode == 0:
        return ("docker", "compose")
    if shutil.which("docker-compose"):
        return ("docker-compose",)
    raise DockerError("neither `docker compose` nor `docker-compose` is installed")


def free_subnet() -> str:
    """A /24 of 172.16.0.0/16 that no network of the engine overlaps, by its first three numbers: compose.scale.yaml's
    SCALE_SUBNET, so that a test's scale deployment (whose replicas have fixed addresses) runs beside others."""
    networks = run(["docker", "network", "ls", "--quiet"]).split()
    listed = run(["docker", "network", "inspect", "--format", "{{range .IPAM.Config}}{{.Subnet}} {{end}}", *networks])
    subnets = [ipaddress.ip_network(subnet, strict=False) for subnet in listed.split()]
    taken = [net for net in subnets if isinstance(net, ipaddress.IPv4Network)]
    for step in range(256):
        third = (os.getpid() + step) % 256  # concurrent runs start apart
        candidate = ipaddress.IPv4Network(f"172.16.{third}.0/24")
        if not any(candidate.overlaps(net) for net in taken):
            return f"172.16.{third}"
    raise DockerError("every /24 of 172.16.0.0/16 overlaps a network of the engine")


def admin_command(folder: Path, image: str) -> list[str]:
    """The guide's `memory-admin` alias, run in `folder`, with `image` in place of memory-server:latest."""
    alias = re.search(r"^alias memory-admin='([^']+)'$", GUIDE.read_text("utf-8"), flags=re.M)
    assert alias, "docs/deploy.md defines the memory-admin alias"
    text = alias.group(1).replace("$(id -u)", str(os.getuid())).replace("$(id -g)", str(os.getgid()))
    words = [word.replace("$PWD", str(folder)) for word in shlex.split(text)]
    assert words[-1] == "memory-server:latest", words
    return [*words[:-1], image]


@dataclass(frozen=True)
class ServerKey:
    """What a laptop pins: the server's public key, read from keys/server.pub as the guide says."""

    public: PublicKey


class Deployment:
    """One compose project of the shipped compose.yaml in its own folder, with its keys, `.env` and volume."""

    def __init__(
        self,
        folder: Path,
        image: str,
        *,
        grants: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        override: str | None = None,
        compose_file: str = "compose.yaml",
        carried: Sequence[str] = (),
    ) -> None:
        self.folder, self.image = folder, image
        self.grants = dict(grants or {})  # caller name -> the index it may write
        self.project = f"memtest{os.getpid()}{folder.name.replace('-', '')}"[:40].lower()
        self.port = free_port()
        folder.mkdir(parents=True)
        (folder / "keys").mkdir()
        for name in (compose_file, *carried):  # the repository's files the compose file names, at the same place
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / name, folder / name)
        settings = {"MEMORY_IMAGE": image, "MEMORY_PORT": str(self.port), **(env or {})}
        (folder / ".env").write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
        self.files = [compose_file]
        if override is not None:
            (folder / "compose.override.yaml").write_text(override)
            self.files.append("compose.override.yaml")

    # the operator's commands --------------------------------------------------------------------------------

    def compose(self, *args: str, timeout: float = COMMAND_TIMEOUT, check: bool = True) -> str:
        files = [option for name in self.files for option in ("--file", name)]
        return run(
            [*compose_command(), "--project-name", self.project, *files, *args],
            cwd=self.folder,
            timeout=timeout,
            check=check,
        )

    def compose_bytes(self, *args: str) -> bytes:
        """A compose command's stdout as bytes (a dump), failing with its stderr."""
        files = [option for name in self.files for option in ("--file", name)]
        argv = [*compose_command(), "--project-name", self.project, *files, *args]
        done = subprocess.run(argv, cwd=self.folder, capture_output=True, timeout=COMMAND_TIMEOUT, check=False)
        if done.returncode != 0:
            raise DockerError(f"{shlex.join(argv)} exited {done.returncode}:\n{done.stderr.decode()[-4000:]}")
        return done.stdout

    def admin(self, *args: str) -> str:
        """`memory-admin ...` exactly as the guide defines it."""
        return run([*admin_command(self.folder, self.image), *args], cwd=self.folder)

    def set_up_keys(self) -> None:
        """The guide's "The server key": `memory-admin keys init`, `chmod 755 keys`, `chown 10001:10001` the key."""
        self.admin("keys", "init")
        os.chmod(self.folder / "keys", 0o755)
        self.chown(self.folder / "keys" / "server.key")

    def chown(self, path: Path) -> None:
        if os.geteuid() == 0:
            os.chown(path, IMAGE_UID, IMAGE_UID)
        else:  # without root on the host, root in a throwaway container does it
            mount = f"{path.parent}:/target"
            run(["docker", "run", "--rm", "--user", "0", "-v", mount, "--entrypoint", "chown", self.image,
                 f"{IMAGE_UID}:{IMAGE_UID}", f"/target/{path.name}"])  # fmt: skip

    @property
    def key(self) -> ServerKey:
        return ServerKey(PublicKey.parse((self.folder / "keys" / "server.pub").read_text("utf-8")))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def admit(self, name: str, device: PublicKey) -> None:
        """`memory-admin callers add NAME --key LINE --grant INDEX=rw`, for tests.sync_support's Laptop."""
        self.admin("callers", "add", name, "--key", device.line(), "--grant", f"{self.grants[name]}=rw")

    # the running container ----------------------------------------------------------------------------------

    def up(self) -> None:
        self.compose("up", "--detach", "--no-build")

    def down(self, *, volumes: bool = False) -> None:
        self.compose("down", *(["--volumes"] if volumes else []), "--timeout", "30")

    def container(self, service: str = SERVICE) -> str:
        ids = self.compose("ps", "--quiet", service).split()
        assert len(ids) == 1, f"expected one {service} container, compose shows {ids}"
        return ids[0]

    def inspect(self, template: str, service: str = SERVICE) -> str:
        return run(["docker", "inspect", "--format", template, self.container(service)]).strip()

    def health(self, service: str = SERVICE) -> str:
        return self.inspect("{{if .State.Health}}{{.State.Health.Status}}{{end}}", service)

    async def wait_healthy(self, within: float, service: str = SERVICE) -> float:
        """Seconds until the engine reports the container healthy; fails after `within` with its logs."""
        started = time.monotonic()
        try:
            with anyio.fail_after(within):
                while self.health(service) != "healthy":
                    await anyio.sleep(0.5)
        except TimeoutError:
            logs = self.logs(service)[-3000:]
            raise AssertionError(f"{service} not healthy after {within:g} s; logs:\n{logs}") from None
        return time.monotonic() - started

    async def wait_answering(self, within: float) -> float:
        """Seconds until GET /healthz answers 200 through the published port."""
        started = time.monotonic()
        with anyio.fail_after(within):
            while True:
                try:
                    with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                        if answer.status == 200:
                            return time.monotonic() - started
                except OSError:
                    pass
                await anyio.sleep(0.1)

    async def wait_log(self, text: str, within: float) -> str:
        try:
            with anyio.fail_after(within):
                while text not in (logs := self.logs()):
                    await anyio.sleep(0.5)
        except TimeoutError:
            raise AssertionError(f"{text!r} not in the logs after {within:g} s:\n{self.logs()[-3000:]}") from None
        return logs

    def logs(self, service: str = SERVICE) -> str:
        return run(["docker", "logs", self.container(service)], with_stderr=True)

    def exec(self, *command: str, check: bool = True, service: str = SERVICE) -> str:
        return run(["docker", "exec", self.container(service), *command], check=check, with_stderr=True)

    def rss_mib(self) -> float:
        """Resident memory of the server (the container's process 1), in MiB."""
        status = self.exec("cat", "/proc/1/status")
        found = re.search(r"^VmRSS:\s+(\d+) kB", status, flags=re.M)
        assert found, status
        return int(found.group(1)) / 1024

    def python(self, code: str) -> str:
        """Run Python inside the container (the image's virtualenv), e.g. to read its loopback-only metrics."""
        return self.exec("python", "-c", code)
