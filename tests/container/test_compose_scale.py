"""compose.scale.yaml as an operator runs it: the shipped file, the image built from this tree twice over as the
replicas, the shipped nginx configuration, and PostgreSQL with pgvector, with keys and callers set up as
docs/deploy.md says; real `memory-proxy` processes on the host reach the replicas through the balancer's published
port. PostgreSQL and nginx are stand-ins built here (tests/container/standins.py): no registry serves the images
the file names. The tests of this module share one deployment and run in order. Its database password holds the
characters that break a URL, and its replicas' network is one no other network of the engine overlaps
(SCALE_SUBNET in .env, as docs/deploy.md says for a clash)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from server.postgres.connection import schema_of
from tests.container.conftest import record
from tests.container.deployment import Deployment, free_subnet
from tests.container.standins import base_image, build_nginx, build_postgres, pgserver_package
from tests.container.test_compose import written_on_a_found_on_b
from tests.sync_support import Laptop

pytestmark = [pytest.mark.container, pytest.mark.anyio, pytest.mark.timeout(900)]

TEAM = "team"
REPLICAS = ("memory-server-1", "memory-server-2")
UP_WITHIN = 120.0  # PostgreSQL's first start, then two replicas loading the model on two cores
# '/' (in about half of base64 random strings), '@' and '%' each broke the replicas' URL when it held the password.
PASSWORD = "scale/tier@3b9e%61f0+c4d8a2"
ADDRESS = "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}"  # docker inspect: a container's address


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class ScaleStack:
    def __init__(self, folder: Path, image: str) -> None:
        base = base_image()
        started = time.monotonic()
        postgres, nginx = build_postgres(base), build_nginx(base)
        record("scale: stand-in images built", f"{time.monotonic() - started:.0f} s")
        self.deployment = Deployment(
            folder / "server",
            image,
            grants={"alice": TEAM, "bob": TEAM},
            env={
                "POSTGRES_PASSWORD": PASSWORD,
                "POSTGRES_IMAGE": postgres,
                "NGINX_IMAGE": nginx,
                "MEMORY_LOG_LEVEL": "info",
                "SCALE_SUBNET": free_subnet(),
            },
            compose_file="compose.scale.yaml",
            carried=("deploy/nginx/nginx.conf", "deploy/nginx/proxy.conf"),
        )
        self.deployment.set_up_keys()
        # Before the first start, as the guide's "Adding a laptop": keys/callers.toml, read into the database then.
        self.alice = Laptop(folder / "alice", self.deployment, "alice", TEAM)  # type: ignore[arg-type]
        self.folder = folder

    def admit_in_the_database(self, name: str) -> Laptop:
        """A laptop added once replicas serve: `memory-server callers add` in a replica, against the database."""
        deployment = self.deployment

        class ThroughTheDatabase:
            url, key = deployment.url, deployment.key

            @staticmethod
            def admit(caller: str, device: object) -> None:
                line = device.line()  # type: ignore[attr-defined]
                deployment.compose("exec", "-T", REPLICAS[0], "memory-server", "callers", "add", caller,
                                   "--key", line, "--grant", f"{TEAM}=rw")  # fmt: skip

        return Laptop(self.folder / name, ThroughTheDatabase, name, TEAM)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleStack]:
    made = ScaleStack(tmp_path_factory.mktemp("scale"), image)
    made.up_at = time.monotonic()  # type: ignore[attr-defined]
    made.deployment.up()
    try:
        yield made
    finally:
        made.deployment.down(volumes=True)


def served_by(stack: ScaleStack, replica: str, caller: str) -> int:
    """How many requests of `caller` this replica's log shows."""
    return stack.deployment.logs(replica).count(f"caller={caller}")


async def test_the_database_the_replicas_and_the_balancer_come_up_healthy(stack):
    for service in ("db", *REPLICAS):
        await stack.deployment.wait_healthy(UP_WITHIN, service)
    await stack.deployment.wait_answering(UP_WITHIN)  # /healthz of a replica, through nginx on the published port
    record("scale: up to both replicas healthy and the balancer answering", f"{time.monotonic() - stack.up_at:.1f} s")
    await stack.deployment.wait_healthy(UP_WITHIN, "balancer")
    fingerprint = stack.deployment.key.public.fingerprint
    for replica in REPLICAS:
        logs = stack.deployment.logs(replica)
        assert fingerprint in logs, f"{replica} serves the key the guide's `keys init` made"
        assert "listening on http://0.0.0.0:8765" in logs


async def test_a_laptop_from_callers_toml_and_one_added_in_the_database_share_memory_through_both_replicas(stack):
    alice, bob = stack.alice, stack.admit_in_the_database("bob")
    async with alice.running() as a, bob.running() as b:
        await written_on_a_found_on_b(alice, a, bob, b, searches=4)  # round-robin: calls land on both replicas
    for replica in REPLICAS:
        assert served_by(stack, replica, "bob") > 0, f"nginx sent none of bob's requests to {replica}"


async def test_with_one_replica_stopped_the_laptops_carry_on_through_the_other(stack):
    alice, carol = stack.alice, stack.admit_in_the_database("carol")
    stack.deployment.compose("stop", "--timeout", "30", REPLICAS[0])
    try:
        async with alice.running() as a, carol.running() as c:
            await a.call_tool("memory_write", {"content": "Rotate the VPN certificates every March.", "topic": "ops"})
            with anyio.fail_after(60):
                while "VPN certificates" not in str(await c.call_tool("memory_search", {"query": "VPN rotation"})):
                    await anyio.sleep(0.5)
    finally:
        stack.deployment.compose("start", REPLICAS[0])
    await stack.deployment.wait_healthy(UP_WITHIN, REPLICAS[0])


async def test_replicas_recreated_by_up_keep_their_addresses_and_the_balancer_left_running_reaches_both(stack):
    # An upgrade: `up -d` after a build recreates the replicas and leaves nginx running, with the addresses it
    # looked their names up to when it started.
    deployment = stack.deployment
    before = {replica: deployment.inspect(ADDRESS, replica) for replica in REPLICAS}
    balancer = deployment.container("balancer")
    deployment.compose("up", "--detach", "--no-build", "--no-deps", "--force-recreate", *REPLICAS)
    for replica in REPLICAS:
        await deployment.wait_healthy(UP_WITHIN, replica)
    assert deployment.container("balancer") == balancer, "compose left the balancer as it was"
    assert {replica: deployment.inspect(ADDRESS, replica) for replica in REPLICAS} == before
    await deployment.wait_answering(UP_WITHIN)
    note = {"content": "The staging database is rebuilt from the nightly dump every Sunday.", "topic": "ops"}
    async with stack.alice.running() as a:
        await a.call_tool("memory_write", note)
        with anyio.fail_after(60):
            while "staging database" not in str(await a.call_tool("memory_search", {"query": "staging rebuild"})):
                await anyio.sleep(0.5)
        for _ in range(4):  # round-robin: the calls land on both recreated replicas
            assert "staging database" in str(await a.call_tool("memory_search", {"query": "staging rebuild"}))
    for replica in REPLICAS:  # the logs of the new containers only
        assert served_by(stack, replica, "alice") > 0, f"nginx sent none of alice's requests to the new {replica}"


def test_a_dump_taken_as_the_guide_says_holds_the_team_index(stack, tmp_path):
    # docs/deploy.md: `docker compose -f compose.scale.yaml exec -T db pg_dump -U memory -Fc memory > memory.dump`
    dump = tmp_path / "memory.dump"
    dump.write_bytes(stack.deployment.compose_bytes("exec", "-T", "db", "pg_dump", "-U", "memory", "-Fc", "memory"))
    record("scale: pg_dump of the test's memory", f"{dump.stat().st_size / 1e3:.0f} kB")
    restore = pgserver_package() / "pginstall" / "bin" / "pg_restore"
    listing = subprocess.run([str(restore), "--list", str(dump)], capture_output=True, text=True, check=True).stdout
    assert f"TABLE DATA {schema_of(TEAM)} files" in listing, listing[-2000:]
