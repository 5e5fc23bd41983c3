"""The scale-out deployment end to end (`make test-scale`): two real `memory-server` processes on one real
PostgreSQL behind Debian's nginx round-robin (the deployment's own config), laptops as real `memory-proxy`
processes that reach the servers only through nginx. A laptop's write is found by another's search on every
replica, edits travel between laptops (p50 reported), a revoked laptop is refused by every replica, and a replica
killed with SIGKILL in the middle of a burst of writes loses nothing acknowledged and rejoins when restarted."""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from tests.conftest import REPO
from tests.faults.cluster import until
from tests.mcp_support import structured
from tests.postgres_support import fresh_database
from tests.scale.cluster import ScaleCluster
from tests.sync_support import eventually, search_paths

pytestmark = [pytest.mark.scale, pytest.mark.anyio]

REPORT = REPO / "build" / "test-scale.json"
EDITS = 20
BURST = 40
KILL_AFTER = 12  # acknowledged writes before replica 0 is killed
IN_FLIGHT = 4  # writes open at once through one laptop's proxy during the burst
REVOKED_WITHIN = 1.0  # seconds for a replica to refuse a revoked laptop (callers are NOTIFY'd to every replica)


@pytest.fixture(scope="module")
def cluster(postgres_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ScaleCluster]:
    folder = tmp_path_factory.mktemp("scale")
    with fresh_database(postgres_server) as url, ScaleCluster(folder, url, names=("alice", "bob", "carol")) as running:
        yield running


def report(key: str, value: Any) -> None:
    """Keep a measured number in build/test-scale.json (and show it)."""
    REPORT.parent.mkdir(exist_ok=True)
    held = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    held[key] = value
    REPORT.write_text(json.dumps(held, indent=2) + "\n")
    print(f"\ntest-scale: {key} = {value}")


async def write(client: Any, path: str, content: str) -> bool:
    """memory_write through the laptop's proxy; True when the server acknowledged it."""
    try:
        result = await client.call_tool("memory_write", {"content": content, "path": path, "mode": "append"})
    except Exception:  # a cut stream: not acknowledged
        return False
    return not result.is_error and structured(result).get("path") == path


async def refused(client: Any, tool: str, arguments: dict[str, Any]) -> bool:
    """The tool call through the laptop's proxy failed (an error answer, or an MCP error the proxy raised)."""
    try:
        result = await client.call_tool(tool, arguments)
    except Exception:
        return True
    return bool(result.is_error)


async def test_a_write_on_laptop_a_is_found_by_laptop_bs_search_on_every_replica(cluster: ScaleCluster) -> None:
    async with cluster.laptops["alice"].running() as alice, cluster.laptops["bob"].running() as bob:
        assert await write(alice, "memory/deploys.md", "The zebrafalcon release ships on Tuesdays.\n")
        for replica in (0, 1):  # each server on its own: both see the write, whichever took it
            await anyio.to_thread.run_sync(
                lambda r=replica: until(
                    lambda: "memory/deploys.md" in cluster.search("bob", "zebrafalcon", replica=r),
                    f"replica {r} to find alice's write",
                    30,
                )
            )
        for _ in range(4):  # through nginx: successive calls land on both replicas
            assert await search_paths(bob, "zebrafalcon") == ["memory/deploys.md"]


async def test_a_file_edited_on_laptop_a_reaches_laptop_b_through_either_replica(cluster: ScaleCluster) -> None:
    alice, bob = cluster.laptops["alice"], cluster.laptops["bob"]
    took = []
    with alice.bare(), bob.bare():
        alice.write("memory/handoff.md", "start\n")
        await eventually(lambda: bob.read("memory/handoff.md") == "start\n", "the first file to reach bob")
        for number in range(EDITS):
            text = f"start\nedit {number} on alice's laptop\n"
            alice.write("memory/handoff.md", text)
            took.append(await eventually(lambda t=text: bob.read("memory/handoff.md") == t, f"edit {number}"))
    p50, p90 = statistics.median(took), statistics.quantiles(took, n=10)[-1]
    report(
        "edit_a_to_b_seconds", {"edits": EDITS, "p50": round(p50, 3), "p90": round(p90, 3), "max": round(max(took), 3)}
    )
    assert p50 < 5.0


async def test_a_revoked_laptop_is_refused_by_every_replica(cluster: ScaleCluster) -> None:
    for replica in (0, 1):
        assert cluster.tool("carol", "search", "zebrafalcon", replica=replica).returncode == 0
    async with cluster.laptops["carol"].running() as carol:
        assert not await refused(carol, "memory_list", {})
        await anyio.to_thread.run_sync(cluster.revoke, "carol")
        revoked = time.monotonic()
        # Through nginx, successive calls go round the replicas: refused calls in a row mean both refuse (and each
        # replica alone is asked below).
        in_a_row, first_refused = 0, None
        with anyio.fail_after(REVOKED_WITHIN * 3):
            while in_a_row < 4:
                if await refused(carol, "memory_list", {}):
                    in_a_row += 1
                    first_refused = first_refused or time.monotonic() - revoked
                else:
                    in_a_row = 0
                    await anyio.sleep(0.05)
        all_refused = time.monotonic() - revoked
    for replica in (0, 1):  # and each replica on its own, with a new process and handshake
        assert cluster.tool("carol", "search", "zebrafalcon", replica=replica).returncode != 0
    report("revoked_refused_seconds", {"first": round(first_refused or 0, 2), "four_in_a_row": round(all_refused, 2)})
    assert first_refused is not None and first_refused < REVOKED_WITHIN
    assert all_refused < 2 * REVOKED_WITHIN  # four calls in a row through round-robin


async def test_a_replica_killed_in_a_burst_of_writes_loses_nothing_acknowledged_and_rejoins(
    cluster: ScaleCluster,
) -> None:
    bob = cluster.laptops["bob"]
    acknowledged: dict[str, str] = {}
    refused: list[str] = []
    enough = threading.Event()

    numbers = iter(range(BURST))

    async def burst(alice: Any) -> None:  # IN_FLIGHT of these share the numbers: several writes are always open
        for number in numbers:
            path, text = f"memory/burst-{number:02d}.md", f"burst note {number} marker{number}quokka\n"
            if await write(alice, path, text):
                acknowledged[path] = text
            else:
                refused.append(path)
            if len(acknowledged) >= KILL_AFTER:
                enough.set()

    with bob.bare():
        async with cluster.laptops["alice"].running() as alice, anyio.create_task_group() as group:
            for _ in range(IN_FLIGHT):
                group.start_soon(burst, alice)
            await anyio.to_thread.run_sync(lambda: enough.wait(60))
            cluster.kill_replica(0)  # while writes are in flight through nginx
            at_kill = len(acknowledged) + len(refused)
        assert len(acknowledged) + len(refused) == BURST and at_kill < BURST - 10
        last = [f"memory/burst-{n:02d}.md" for n in range(BURST - 10, BURST)]  # sent well after the kill
        assert all(path in acknowledged for path in last), f"refused after the kill: {refused}"
        await eventually(
            lambda: all(bob.read(path) == text for path, text in acknowledged.items()),
            "every acknowledged write to reach bob through the surviving replica",
            within=60,
        )
    report("burst", {"writes": BURST, "killed_after": at_kill, "acknowledged": len(acknowledged), "refused": refused})
    started = time.monotonic()
    await anyio.to_thread.run_sync(cluster.start_replica, 0)
    report("killed_replica_restarted_in_seconds", round(time.monotonic() - started, 2))
    newest = f"memory/burst-{BURST - 1:02d}.md"
    await anyio.to_thread.run_sync(
        lambda: until(
            lambda: newest in cluster.search("bob", f"marker{BURST - 1}quokka", replica=0),
            "the restarted replica to find a write made while it was down",
            30,
        )
    )


def test_the_balancer_config_is_round_robin_over_every_replica(cluster: ScaleCluster) -> None:
    rendered = cluster.balancer.config.read_text()
    assert "ip_hash" not in rendered and "hash " not in rendered and "sticky" not in rendered
    assert all(f"server 127.0.0.1:{port} " in rendered for port in cluster.ports)
    assert Path(cluster.balancer.folder / "error.log").exists()
