"""The container files: hadolint and the compose-spec schema accept them, the build context holds the packages
pyproject.toml lists and none of the keys, data, settings or tests, compose.scale.yaml's replicas get what
compose.yaml's server gets (and a database password of any characters, and addresses that survive a recreate), and
the health checks reach the server whatever proxy the container's environment names."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from docker.utils.build import exclude_paths
from psycopg.conninfo import conninfo_to_dict
from setuptools import find_packages

from server.settings import url_parts
from tests.conftest import REPO
from tests.ports import free_port

BIN = Path(sys.executable).parent
NEVER_SENT = ("keys/", "backups/", "tests/", ".venv/", ".git/", ".data/", "bench/", "config/")
CONFIG_VOLUME = "./config:/config:ro"  # commented out in the compose files; docs/deploy.md says to uncomment it
# What breaks a password pasted into a URL: '/' (in about half of base64 random strings), '@', '%', '#', '?'.
URL_BREAKING_PASSWORD = "q3Zr/Kx9@vT%2b#Lm?8Wd0Yb4+Hn6="


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def shipped_packages() -> list[str]:
    """What pip installs into the image: the packages pyproject.toml's find-include lists."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    return find_packages(str(REPO), include=config["tool"]["setuptools"]["packages"]["find"]["include"])


def compose_file(name: str, *, uncommented: bool = False) -> dict[str, Any]:
    """A compose file of the repository; `uncommented`: after the guide's step of uncommenting the config volume."""
    text = (REPO / name).read_text()
    if uncommented:
        text = text.replace(f"# - {CONFIG_VOLUME}", f"- {CONFIG_VOLUME}")
    loaded: dict[str, Any] = yaml.safe_load(text)
    return loaded


def replicas(scale: Mapping[str, Any]) -> list[str]:
    return sorted(name for name in scale["services"] if name.startswith("memory-server-"))


def interpolate(value: str, env: Mapping[str, str]) -> str:
    """`value` as compose reads it: ${NAME}, ${NAME:-default} (unset or empty), ${NAME:?message} (set or fail)."""

    def one(found: re.Match[str]) -> str:
        name, operator, argument = found.group(1), found.group(2), found.group(3)
        given = env.get(name, "")
        if operator == ":?" and not given:
            raise AssertionError(f"compose refuses to start: {argument}")
        return given or (argument if operator == ":-" else "")

    return re.sub(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}", one, value)


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


def test_each_replica_keeps_one_fixed_address_beside_the_database_and_the_balancer():
    """nginx (deploy/nginx/nginx.conf) looks the replicas' names up once, when it starts: a replica compose recreates
    (`up -d` after a build) must come back on the address it had. The other containers are given addresses from a
    range apart from the replicas', and one .env variable moves the network and every address together."""
    scale = compose_file("compose.scale.yaml")
    services = scale["services"]
    for env in ({}, {"SCALE_SUBNET": "10.213.40"}):
        addresses, networks = {}, set()
        for name in replicas(scale):
            ((network, settings),) = services[name]["networks"].items()
            addresses[name] = ipaddress.ip_address(interpolate(settings["ipv4_address"], env))
            networks.add(network)
        (network,) = networks
        (pool,) = scale["networks"][network]["ipam"]["config"]
        subnet = ipaddress.ip_network(interpolate(pool["subnet"], env))
        dynamic = ipaddress.ip_network(interpolate(pool["ip_range"], env))
        assert dynamic.subnet_of(subnet)  # type: ignore[arg-type]
        assert len(set(addresses.values())) == len(addresses)
        for name, address in addresses.items():
            assert address in subnet and address not in dynamic, f"{name}: {address} in {subnet}, outside {dynamic}"
        for other in ("db", "balancer"):
            assert services[other]["networks"] == [network]
    assert subnet == ipaddress.ip_network("10.213.40.0/24")


def test_a_replica_is_given_the_provider_key_secrets_and_the_config_folder_compose_yaml_gives_its_server():
    single_file = compose_file("compose.yaml", uncommented=True)
    single = single_file["services"]["memory-server"]
    scale = compose_file("compose.scale.yaml", uncommented=True)
    assert CONFIG_VOLUME in single["volumes"]
    assert scale["secrets"] == single_file["secrets"]  # the same .env variables name the same files
    for name in replicas(scale):
        replica = scale["services"][name]
        missing = single["environment"].items() - replica["environment"].items()
        assert not missing, f"{name} is not given {dict(missing)}"
        assert replica["secrets"] == single["secrets"]
        assert CONFIG_VOLUME in replica["volumes"], f"{name}: the guide's step leaves it without the config folder"
    shipped = compose_file("compose.scale.yaml")["services"]  # commented out, as in compose.yaml
    assert not [name for name in replicas(scale) if CONFIG_VOLUME in shipped[name]["volumes"]]


def test_the_replicas_database_url_holds_no_password_and_one_of_any_characters_reaches_libpq_apart(tmp_path):
    scale = compose_file("compose.scale.yaml")
    env = {"POSTGRES_PASSWORD": URL_BREAKING_PASSWORD}
    db = {key: interpolate(str(value), env) for key, value in scale["services"]["db"]["environment"].items()}
    clean = {key: value for key, value in os.environ.items() if not key.startswith(("MEMORY_", "PG"))}
    for name in replicas(scale):
        template = scale["services"][name]["environment"]
        _scheme, userinfo, _rest = url_parts(template["MEMORY_DATABASE_URL"])
        assert userinfo is not None and "$" not in userinfo and ":" not in userinfo  # no password in the URL
        given = {key: interpolate(str(value), env) for key, value in template.items()}
        url = given["MEMORY_DATABASE_URL"]
        wanted = {"user": db["POSTGRES_USER"], "host": "db", "port": "5432", "dbname": db["POSTGRES_DB"]}
        assert conninfo_to_dict(url) == wanted
        assert given["PGPASSWORD"] == db["POSTGRES_PASSWORD"] == URL_BREAKING_PASSWORD  # libpq reads PGPASSWORD
    # and the server takes it as it is, without showing it: `memory-server config` with the replica's variables
    settings = {"MEMORY_DATABASE_URL": url, "PGPASSWORD": given["PGPASSWORD"],
                "MEMORY_DATA_DIR": str(tmp_path / "data"), "MEMORY_KEYS_DIR": str(tmp_path / "keys")}  # fmt: skip
    shown = subprocess.run([str(BIN / "memory-server"), "config"], env={**clean, **settings},
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert URL_BREAKING_PASSWORD not in shown.stdout + shown.stderr
    assert re.search(r"^database_url\s+postgresql://\S*db:5432/memory\s", shown.stdout, flags=re.M), shown.stdout


def dockerfile_healthcheck() -> list[str]:
    """The image's HEALTHCHECK command (the Dockerfile's exec form), without the CMD."""
    text = (REPO / "Dockerfile").read_text().replace("\\\n", " ")
    found = re.search(r"^HEALTHCHECK .*? CMD (\[.*\])$", text, flags=re.M)
    assert found, "the Dockerfile has an exec-form HEALTHCHECK"
    command: list[str] = json.loads(found.group(1))
    return command


def balancer_healthcheck() -> list[str]:
    test: list[str] = compose_file("compose.scale.yaml")["services"]["balancer"]["healthcheck"]["test"]
    assert test[0] == "CMD"
    return test[1:]


@contextmanager
def answering_http() -> Iterator[tuple[int, list[str]]]:
    """An HTTP server on 127.0.0.1 answering 200 to every GET; yields its port and the paths it was asked for."""
    asked: list[str] = []

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "3")
            self.end_headers()
            self.wfile.write(b"ok\n")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize("healthcheck", [dockerfile_healthcheck, balancer_healthcheck], ids=["server", "balancer"])
def test_the_health_check_reaches_the_server_when_the_environment_names_a_proxy(healthcheck):
    """Docker sets http_proxy / HTTP_PROXY in a container from the client's proxies: the check must not follow
    them to 127.0.0.1. Its command as shipped, with a free port for 8765, against a live HTTP server."""
    command = healthcheck()
    if command[0] == "python":
        command = [sys.executable, *command[1:]]
    elif shutil.which(command[0]) is None:
        pytest.skip(f"{command[0]} is not installed here")
    proxy = f"http://127.0.0.1:{free_port()}"  # nothing listens: a check sent through it fails
    env = {key: value for key, value in os.environ.items() if "proxy" not in key.lower()}
    env.update(http_proxy=proxy, HTTP_PROXY=proxy)
    with answering_http() as (port, asked):
        argv = [word.replace(":8765/", f":{port}/") for word in command]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(asked) == 1 and asked[0].endswith("healthz")


def test_the_image_and_both_compose_files_spell_the_servers_health_check_alike():
    spelled = ["CMD", *dockerfile_healthcheck()]
    assert compose_file("compose.yaml")["services"]["memory-server"]["healthcheck"]["test"] == spelled
    scale = compose_file("compose.scale.yaml")
    for name in replicas(scale):
        assert scale["services"][name]["healthcheck"]["test"] == spelled
