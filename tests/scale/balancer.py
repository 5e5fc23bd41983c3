"""Debian's nginx as the scale tier's load balancer, run from the deployment's own files: `deploy/nginx/nginx.conf`
with only its addresses and folders changed (the replicas on 127.0.0.1 ports instead of compose service names),
and `deploy/nginx/proxy.conf` included as it is. So the tier proves the configuration operators deploy.

    with Balancer(folder, port, [8801, 8802]) as balancer:   # round-robin over the two replicas
        balancer.url
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from types import TracebackType

from tests.conftest import REPO
from tests.faults.cluster import answers, until

DEPLOY = REPO / "deploy" / "nginx"
START_WITHIN = 10.0


def render(text: str, folder: Path, port: int, upstreams: list[int]) -> str:
    """The deployment's nginx.conf for this machine: listens on 127.0.0.1:`port`, passes to the `upstreams`
    ports in order, keeps its pid and temporary files in `folder`, runs in the foreground. AssertionError when
    the file no longer has a line this changes (then this function needs to follow it)."""
    servers = re.findall(r"^ *server memory-server-\d+:8765 (.*);$", text, flags=re.M)
    assert len(servers) == len(upstreams), "deploy/nginx/nginx.conf names a different number of replicas"
    replacements = [
        (r"^( *)server memory-server-(\d+):8765 ", lambda m: f"{m[1]}server 127.0.0.1:{upstreams[int(m[2]) - 1]} "),
        (r"^( *)listen 8765;$", lambda m: f"{m[1]}listen 127.0.0.1:{port};"),
        (r"/tmp/", lambda m: f"{folder}/"),
        (r"include /etc/nginx/memory-proxy.conf;", lambda m: f"include {DEPLOY / 'proxy.conf'};"),
        (r"^error_log /dev/stderr warn;$", lambda m: f"error_log {folder}/error.log info;"),
    ]
    for pattern, replace in replacements:
        text, count = re.subn(pattern, replace, text, flags=re.M)
        assert count, f"deploy/nginx/nginx.conf has no line matching {pattern!r}"
    user = "user root;\n" if os.geteuid() == 0 else ""  # the workers read nothing but this folder
    return f"daemon off;\n{user}" + text.replace("worker_processes auto;", "worker_processes 1;")


class Balancer:
    """nginx on 127.0.0.1:`port`, round-robin over the replicas on `upstreams`; started by `with`."""

    def __init__(self, folder: Path, port: int, upstreams: list[int]) -> None:
        self.folder, self.port = folder, port
        folder.mkdir(parents=True, exist_ok=True)
        self.config = folder / "nginx.conf"
        self.config.write_text(render((DEPLOY / "nginx.conf").read_text(), folder, port, upstreams))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        return [nginx, "-e", str(self.folder / "error.log"), "-p", str(self.folder), "-c", str(self.config)]

    def check(self) -> None:
        """`nginx -t`: the rendered configuration parses (AssertionError with nginx's words otherwise)."""
        done = subprocess.run([*self.command(), "-t"], capture_output=True, text=True, timeout=30, check=False)
        assert done.returncode == 0, done.stderr

    def __enter__(self) -> Balancer:
        self.check()
        with (self.folder / "nginx.out").open("ab") as out:
            self.process = subprocess.Popen(self.command(), stdout=out, stderr=out)
        until(self._answers, "nginx to answer", START_WITHIN)
        return self

    def _answers(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            raise AssertionError(f"nginx exited with {self.process.returncode}; see {self.folder}/error.log")
        return answers(f"{self.url}/nginx-healthz")

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self.process is None:
            return
        self.process.send_signal(signal.SIGTERM)  # fast: open long-polls are cut, as a balancer restart would
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.process = None
