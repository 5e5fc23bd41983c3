"""The container files: hadolint and the compose-spec schema accept them, and the build context holds the packages
pyproject.toml lists and none of the keys, data, settings or tests."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from docker.utils.build import exclude_paths
from setuptools import find_packages

from tests.conftest import REPO

BIN = Path(sys.executable).parent
NEVER_SENT = ("keys/", "backups/", "tests/", ".venv/", ".git/", ".data/", "bench/", "config/")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def shipped_packages() -> list[str]:
    """What pip installs into the image: the packages pyproject.toml's find-include lists."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return find_packages(str(REPO), include=config["tool"]["setuptools"]["packages"]["find"]["include"])


def build_context(root: Path) -> set[str]:
    """The files `docker build` sends from `root`, by docker-py's implementation of .dockerignore."""
    patterns = [
        line.strip() for line in (REPO / ".dockerignore").read_text().splitlines() if line.strip()[:1] not in ("", "#")
    ]
    return set(exclude_paths(str(root), patterns))


def test_the_dockerfile_passes_hadolint():
    result = run(str(BIN / "hadolint"), "--failure-threshold", "info", "Dockerfile")
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_yaml_matches_the_compose_spec():
    result = run(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "compose.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_python_package_of_the_tree_is_shipped_except_tests_and_benchmarks():
    top_level = {path.parent.name for path in REPO.glob("*/__init__.py")}
    assert top_level - {"tests", "bench"} == {name for name in shipped_packages() if "." not in name}


def test_the_build_context_holds_every_shipped_module_and_no_keys_data_settings_or_tests(tmp_path):
    tree = tmp_path / "checkout"
    # cache folders, not files named like one (server/index/cache_rules.py ships)
    local = shutil.ignore_patterns(".venv", ".git", ".data", ".*cache", ".hypothesis", "__pycache__")
    shutil.copytree(REPO, tree, ignore=local)
    planted = ["keys/server.key", "keys/callers.toml", ".env", "config/memory-server.toml", ".data/server/x.sqlite3",
               ".venv/bin/python", ".git/config", "notes/secret.pem", "server/index.sqlite3",
               "backups/memory-2026-11-25.tar"]  # fmt: skip
    for relative in planted:
        (tree / relative).parent.mkdir(parents=True, exist_ok=True)
        (tree / relative).write_text("must not reach a build\n")
    context = build_context(tree)
    modules = {
        path.relative_to(REPO).as_posix()
        for package in shipped_packages()
        for path in (REPO / package.replace(".", "/")).glob("*.py")
    }
    assert modules and modules <= context
    assert {"pyproject.toml", "README.md", "scripts/install.sh", "Dockerfile"} <= context
    assert not [path for path in context if path.startswith(NEVER_SENT) or path in planted]


def test_compose_scale_yaml_matches_the_compose_spec():
    result = run(str(BIN / "check-jsonschema"), "--builtin-schema", "vendor.compose-spec", "compose.scale.yaml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_scale_profile_is_postgres_two_replicas_of_the_image_and_nginx_in_front():
    single = yaml.safe_load((REPO / "compose.yaml").read_text())["services"]["memory-server"]
    scale = yaml.safe_load((REPO / "compose.scale.yaml").read_text())
    assert "name" not in scale  # docker-compose 1.29 refuses a top-level name
    services = scale["services"]
    replicas = sorted(name for name in services if name.startswith("memory-server-"))
    assert replicas == ["memory-server-1", "memory-server-2"]
    assert services["db"]["image"].endswith("pgvector/pgvector:pg17}")
    for name in replicas:
        replica = services[name]
        assert (replica["build"], replica["image"]) == (single["build"], single["image"])
        assert "@db:5432/" in replica["environment"]["MEMORY_DATABASE_URL"]
        assert replica["depends_on"]["db"]["condition"] == "service_healthy"
        assert "./keys:/keys:ro" in replica["volumes"] and "ports" not in replica  # reached only through nginx
        assert replica["read_only"] and replica["cap_drop"] == ["ALL"]
    caches = {volume.split(":")[0] for name in replicas for volume in services[name]["volumes"] if ":/data" in volume}
    assert len(caches) == len(replicas)  # each replica its own /data, never one shared between processes
    published = [name for name, service in services.items() if "ports" in service]
    assert published == ["balancer"]
    assert "./deploy/nginx/nginx.conf:/etc/nginx/nginx.conf:ro" in services["balancer"]["volumes"]


def test_the_balancer_is_round_robin_over_every_replica_and_passes_streams_through():
    config = (REPO / "deploy" / "nginx" / "nginx.conf").read_text()
    proxy = (REPO / "deploy" / "nginx" / "proxy.conf").read_text()
    replicas = sorted(n for n in yaml.safe_load((REPO / "compose.scale.yaml").read_text())["services"] if "-" in n)
    upstream = re.search(r"upstream memory_servers \{(.*?)\}", config, flags=re.S)
    assert upstream is not None
    assert sorted(re.findall(r"server (memory-server-\d+):8765", upstream.group(1))) == replicas
    assert not re.search(r"\b(ip_hash|hash|sticky|least_conn|random)\b", upstream.group(1))  # round-robin
    assert "include /etc/nginx/memory-proxy.conf;" in config
    directives = dict(re.findall(r"^(\w+) (.*?);", proxy, flags=re.M))
    assert directives["proxy_pass"] == "http://memory_servers"
    assert directives["proxy_buffering"] == "off" and directives["proxy_request_buffering"] == "off"
    assert directives["proxy_read_timeout"] == "1h"  # long-polls of 30 s, quiet MCP streams
    assert directives["client_max_body_size"] == "34m"
    assert "non_idempotent" not in directives["proxy_next_upstream"]  # a POST that reached a replica is never re-sent
