#!/usr/bin/env python3
"""Build the memory-server image, also on a machine that reaches package registries but no container registry.

    scripts/container/build-image.py [--tag memory-server:latest] [--base IMAGE] [--print-base]

- The base image is python:3.11-slim-bookworm; when it is neither present nor pullable, an equivalent Debian
  bookworm base is built from Debian's packages (scripts/container/base-image.sh, cached between runs).
- pip inside the build uses this machine's pip settings: its index, find-links and CA bundle reach the build as
  BuildKit secrets (never a layer), local find-links folders are served on a loopback port for the duration of the
  build (`--network host`), and a local CPU torch wheel there is used instead of the PyTorch index.
Only the standard library: it runs before any virtualenv exists.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BASE = "python:3.11-slim-bookworm"
FALLBACK_BASE = "memory-server-base:bookworm"
TORCH_WHEEL = re.compile(r"torch-2\.13\.0\+cpu-cp311-cp311-manylinux[^/]*x86_64\.whl$")
# pip settings that mean the same inside the build; file paths are translated below, the rest are left out.
PORTABLE = {"index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout", "retries", "proxy"}
PIP_CONF_IN_BUILD = "/etc/pip.conf"
CA_IN_BUILD = "/etc/ssl/certs/build-ca.pem"


def say(message: str) -> None:
    print(f"build-image: {message}", file=sys.stderr, flush=True)


def docker(*args: str, check: bool = True, capture: bool = True, timeout: float | None = None) -> str:
    result = subprocess.run(
        ["docker", *args], check=check, capture_output=capture, text=True, timeout=timeout, env=buildkit_env()
    )
    return result.stdout if capture else ""


def buildkit_env() -> dict[str, str]:
    return {**os.environ, "DOCKER_BUILDKIT": "1"}


def builder() -> list[str]:
    """A build command that understands `--secret`: buildx where installed, else a client with BuildKit built in."""
    if subprocess.run(["docker", "buildx", "version"], capture_output=True, check=False).returncode == 0:
        return ["docker", "buildx", "build", "--load"]
    seen: set[Path] = set()
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = Path(folder) / "docker"
        if not candidate.is_file() or candidate.resolve() in seen:
            continue
        seen.add(candidate.resolve())
        probe = subprocess.run(
            [str(candidate), "build", "--help"], capture_output=True, text=True, check=False, env=buildkit_env()
        )
        if "--secret" in probe.stdout:
            return [str(candidate), "build"]
    raise SystemExit(
        "build-image: no docker client here builds with BuildKit (install docker-buildx, or Docker >= 20.10)"
    )


def ensure_base(base: str, fallback_allowed: bool) -> str:
    if subprocess.run(["docker", "image", "inspect", base], capture_output=True, check=False).returncode == 0:
        return base
    say(f"pulling {base}")
    try:
        pulled = subprocess.run(["docker", "pull", base], capture_output=True, check=False, timeout=300).returncode == 0
    except subprocess.TimeoutExpired:
        pulled = False
    if pulled:
        return base
    if not fallback_allowed:
        raise SystemExit(f"build-image: cannot pull {base}")
    say(f"cannot pull {base}: building {FALLBACK_BASE} from Debian's packages instead")
    subprocess.run([str(REPO / "scripts/container/base-image.sh"), FALLBACK_BASE], check=True)
    return FALLBACK_BASE


def pip_settings() -> dict[str, str]:
    """This machine's effective pip settings (files and PIP_* variables), as `pip config list` shows them."""
    listing = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False
    ).stdout
    settings: dict[str, str] = {}
    for line in listing.splitlines():
        found = re.match(r"^(?:[\w:-]*)\.([\w-]+)='(.*)'$", line.strip())
        if found:
            settings[found.group(1)] = found.group(2)
    return settings


def local_folder(location: str) -> Path | None:
    path = Path(location.removeprefix("file://")) if location.startswith(("file://", "/")) else None
    return path if path is not None and path.is_dir() else None


@contextlib.contextmanager
def serve_folders(folders: list[Path]) -> Iterator[list[str]]:
    """Serve each folder read-only on 127.0.0.1 (as /0/, /1/, ...) while the build runs; yields their URLs."""
    with tempfile.TemporaryDirectory(prefix="build-image-") as tree:
        for number, folder in enumerate(folders):
            (Path(tree) / str(number)).symlink_to(folder, target_is_directory=True)

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=tree))
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            port = server.server_address[1]
            yield [f"http://127.0.0.1:{port}/{number}/" for number in range(len(folders))]
        finally:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def build_secrets() -> Iterator[tuple[list[str], dict[str, str]]]:
    """`--secret` arguments and build arguments that carry this machine's pip settings into the build."""
    settings = pip_settings()
    lines = [f"{key} = {value}" for key, value in settings.items() if key in PORTABLE and "file://" not in value]
    dropped = [key for key, value in settings.items() if key in PORTABLE and "file://" in value]
    if dropped:
        say(f"leaving out pip settings that name local indexes: {', '.join(dropped)}")
    links = settings.get("find-links", "").split()
    folders = [folder for folder in map(local_folder, links) if folder is not None]
    remote_links = [link for link in links if local_folder(link) is None and link.startswith(("http://", "https://"))]
    build_args: dict[str, str] = {}
    if any(TORCH_WHEEL.search(name) for folder in folders for name in os.listdir(folder)):
        build_args["TORCH_INDEX_URL"] = ""  # the CPU wheel is in a find-links folder: no PyTorch index needed
    with serve_folders(folders) as served, tempfile.TemporaryDirectory(prefix="build-secrets-") as scratch:
        if served or remote_links:
            lines.append(f"find-links = {' '.join([*served, *remote_links])}")
        secrets: list[str] = []
        cert = settings.get("cert")
        if cert and Path(cert).is_file():
            lines.append(f"cert = {CA_IN_BUILD}")
            secrets += ["--secret", f"id=ca.pem,src={cert}"]
        if lines:
            conf = Path(scratch) / "pip.conf"
            conf.write_text("[global]\n" + "\n".join(lines) + "\n")
            secrets += ["--secret", f"id=pip.conf,src={conf}"]
        yield secrets, build_args


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tag", default="memory-server:latest")
    parser.add_argument("--base", help=f"base image (default {DEFAULT_BASE}, env MEMORY_BASE_IMAGE)")
    parser.add_argument("--print-base", action="store_true", help="make sure the base image exists, print its name")
    args = parser.parse_args()
    if shutil.which("docker") is None:
        raise SystemExit("build-image: docker is not installed")
    explicit = args.base or os.environ.get("MEMORY_BASE_IMAGE")
    base = ensure_base(explicit or DEFAULT_BASE, fallback_allowed=not explicit)
    if args.print_base:  # for images built on the same base (the container tier's stand-ins)
        print(base)
        return 0
    command = builder()
    started = time.monotonic()
    with build_secrets() as (secrets, build_args):
        build_args["BASE_IMAGE"] = base
        arguments = [f"--build-arg={key}={value}" for key, value in build_args.items()]
        say(f"building {args.tag} on {base} with {' '.join(command[:2])}")
        subprocess.run(
            [*command, "--network", "host", "--progress", "plain", *arguments, *secrets, "--tag", args.tag, str(REPO)],
            check=True,
            env=buildkit_env(),
        )
    size = docker("image", "inspect", "--format", "{{.Size}}", args.tag).strip()
    say(f"built {args.tag}: {int(size) / 1e6:.0f} MB in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
