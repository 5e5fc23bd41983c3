"""Moving a running compose.yaml deployment to compose.scale.yaml, as docs/deploy.md ("Past one machine",
"Migrating") says: stop the single server, run `migrate --to postgres` through compose with the old data volume,
start the replicas. A laptop carries on where it was, nothing it wrote or deleted comes back different, and a new
laptop gets everything. The shipped files, the image built from this tree, stand-ins for PostgreSQL and nginx
(tests/container/standins.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from tests.container.conftest import record
from tests.container.deployment import Deployment
from tests.container.standins import base_image, build_nginx, build_postgres
from tests.container.test_compose_scale import PASSWORD, REPLICAS, UP_WITHIN
from tests.mcp_support import structured
from tests.sync_support import SETTLE, Laptop, eventually, search_paths

pytestmark = [pytest.mark.container, pytest.mark.anyio, pytest.mark.timeout(900)]

TEAM = "team"
NIGHTLY = "The nightly export job writes to the cold bucket in eu-west-3."


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def moving(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Deployment, Path]]:
    """One folder as the operator keeps it: compose.yaml first, compose.scale.yaml beside it for the move."""
    base = base_image()
    folder = tmp_path_factory.mktemp("migrate")
    deployment = Deployment(
        folder / "server",
        image,
        grants={"alice": TEAM, "bob": TEAM},
        env={"POSTGRES_PASSWORD": PASSWORD, "POSTGRES_IMAGE": build_postgres(base), "NGINX_IMAGE": build_nginx(base)},
        carried=("compose.scale.yaml", "deploy/nginx/nginx.conf", "deploy/nginx/proxy.conf"),
    )
    deployment.set_up_keys()
    try:
        yield deployment, folder
    finally:
        deployment.files = ["compose.scale.yaml"]
        deployment.down(volumes=True)
        deployment.files = ["compose.yaml"]
        deployment.down(volumes=True)


async def listed(client: object) -> set[str]:
    """The paths the server holds for the team index (memory_list)."""
    answer = structured(await client.call_tool("memory_list", {}))  # type: ignore[attr-defined]
    return {entry["path"] for entry in answer["files"]}


async def until_listed(client: object, wanted: set[str], gone: set[str]) -> None:
    with anyio.fail_after(SETTLE):
        while not (wanted <= (paths := await listed(client)) and not gone & paths):
            await anyio.sleep(0.25)


async def test_a_single_server_moved_to_replicas_keeps_every_file_deletion_and_laptop(moving):
    deployment, folder = moving
    alice = Laptop(folder / "alice", deployment, "alice", TEAM)
    bob = Laptop(folder / "bob", deployment, "bob", TEAM)
    deployment.up()
    await deployment.wait_answering(UP_WITHIN)
    async with alice.running() as a:
        written = structured(await a.call_tool("memory_write", {"content": NIGHTLY, "topic": "ops"}))["path"]
        alice.write("memory/old-runbook.md", "# Old runbook\n\nPage the on-call twice before escalating.\n")
        alice.write("memory/keep.md", "# Keep\n\nThe canary deploy waits ten minutes per region.\n")
        await until_listed(a, {written, "memory/keep.md", "memory/old-runbook.md"}, set())
        alice.path("memory/old-runbook.md").unlink()
        await until_listed(a, {written, "memory/keep.md"}, {"memory/old-runbook.md"})
        before = await listed(a)
    deployment.down()  # the single server stops; its data volume stays

    # docs/deploy.md: `docker compose -f compose.scale.yaml run --rm -v memory_memory-data:/old-data
    #     -e MEMORY_DATA_DIR=/old-data --entrypoint memory-server memory-server-1 migrate --to postgres`
    deployment.files = ["compose.scale.yaml"]
    started = time.monotonic()
    volume = f"{deployment.project}_memory-data"
    out = deployment.compose("run", "--rm", "-v", f"{volume}:/old-data", "-e", "MEMORY_DATA_DIR=/old-data",
                             "--entrypoint", "memory-server", REPLICAS[0], "migrate", "--to", "postgres",
                             timeout=300)  # fmt: skip
    record("migrate: compose run migrate --to postgres", f"{time.monotonic() - started:.1f} s")
    assert TEAM in out, out
    deployment.up()
    for service in REPLICAS:
        await deployment.wait_healthy(UP_WITHIN, service)
    await deployment.wait_answering(UP_WITHIN)

    async with alice.running() as a, bob.running() as b:
        assert await listed(b) == before, "the replicas hold what the single server held, the deletion kept"
        assert written in await search_paths(b, "where does the nightly export job write")
        assert "memory/keep.md" in await search_paths(a, "how long does the canary deploy wait per region")
        await eventually(lambda: bob.read("memory/keep.md") == alice.read("memory/keep.md"), "bob's copy")
        alice.write("memory/after.md", "# After\n\nThe replicas share one PostgreSQL database.\n")
        await eventually(lambda: bob.read("memory/after.md") == alice.read("memory/after.md"), "a new edit")
        assert bob.read("memory/old-runbook.md") is None and alice.read("memory/old-runbook.md") is None
        assert set(alice.files()) == set(bob.files()), "no conflict copies, nothing brought back"
