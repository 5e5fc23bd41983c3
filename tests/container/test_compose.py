"""The compose deployment as an operator and two laptops use it: the image built from this tree, the shipped
compose.yaml, keys set up as docs/deploy.md says, real `memory-proxy` processes on the host talking to the container
through the published port. The tests of this module share one deployment and run in order: later ones restart,
stop and finally wipe it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from mcp import Client

from tests.container.conftest import record
from tests.container.deployment import Deployment, run
from tests.mcp_support import structured
from tests.sync_support import Laptop, eventually, search_paths

pytestmark = [pytest.mark.container, pytest.mark.anyio, pytest.mark.timeout(900)]

TEAM = "team"
HEALTHY_WITHIN = 30.0
STOPPED_WITHIN = 10.0
CANARY = "pa-CANARY-container-7d41e0c2b9"  # a Voyage key, handed over as a compose secret
# Voyage is tried first and answers nothing (a closed port on the container's own loopback): the server falls back
# to the packaged model, and the key is read, sent and failed with, which is where a leak would happen.
OVERRIDE = """services:
  memory-server:
    environment:
      MEMORY_VOYAGE_BASE_URL: http://127.0.0.1:9
"""
NOTES = 60  # files a laptop brings, for resident memory while indexing


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


class Stack:
    def __init__(self, folder: Path, image: str) -> None:
        secret = folder / "voyage.key"
        self.deployment = Deployment(
            folder / "server",
            image,
            grants={"alice": TEAM, "bob": TEAM},
            env={
                "MEMORY_EMBEDDING_PROVIDERS": "voyage,local",
                "VOYAGE_API_KEY_SECRET": str(secret),
                "MEMORY_METRICS_PORT": "9100",
                "MEMORY_LOG_LEVEL": "info",
            },
            override=OVERRIDE,
        )
        secret.write_text(CANARY + "\n")
        secret.chmod(0o600)
        self.deployment.chown(secret)
        self.deployment.set_up_keys()
        self.alice = Laptop(folder / "alice", self.deployment, "alice", TEAM)  # type: ignore[arg-type]
        self.bob = Laptop(folder / "bob", self.deployment, "bob", TEAM)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def stack(image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    made = Stack(tmp_path_factory.mktemp("compose"), image)
    started = time.monotonic()
    made.deployment.up()
    made.up_at = started  # type: ignore[attr-defined]
    try:
        yield made
    finally:
        made.deployment.down(volumes=True)


def no_canary(text: str, where: str) -> None:
    assert CANARY not in text and CANARY.upper() not in text, f"the provider key reached {where}"


async def test_the_container_is_healthy_within_30_seconds_of_up_with_keys_set_up_as_the_guide_says(stack):
    await stack.deployment.wait_answering(HEALTHY_WITHIN)
    record("up to /healthz answering", f"{time.monotonic() - stack.up_at:.1f} s")
    waited = await stack.deployment.wait_healthy(HEALTHY_WITHIN)
    record("up to healthy (the engine's check runs every 10 s)", f"{time.monotonic() - stack.up_at:.1f} s")
    logs = stack.deployment.logs()
    assert stack.deployment.key.public.fingerprint in logs  # the key the guide's `keys init` made is the one served
    assert "listening on http://0.0.0.0:8765" in logs
    assert waited <= HEALTHY_WITHIN
    record("resident memory at idle", f"{stack.deployment.rss_mib():.0f} MiB")


async def test_laptop_a_writes_and_laptop_b_finds_it_and_an_edit_on_a_reaches_bs_file(stack):
    alice, bob = stack.alice, stack.bob
    async with alice.running() as a, bob.running() as b:
        await written_on_a_found_on_b(alice, a, bob, b)

        status = structured(await a.call_tool("memory_status", {}))
        no_canary(str(status), "a tool result")

        samples = await sample_rss_while(stack.deployment, lambda: index_notes(alice, b))
        record("resident memory while indexing", f"max {max(samples):.0f} MiB over {len(samples)} samples")


async def written_on_a_found_on_b(alice: Laptop, a: Client, bob: Laptop, b: Client, *, searches: int = 1) -> None:
    """Laptop A writes through the tool and edits a file in its folder; B's search finds the first (`searches`
    times) and the second reaches B's folder."""
    written = await a.call_tool(
        "memory_write", {"content": "The staging database is rebuilt every Sunday at 03:00.", "topic": "ops"}
    )
    path = structured(written)["path"]
    assert path in await search_paths(b, "when is the staging database rebuilt")

    alice.write("memory/deploy.md", "# Deploy\n\nWe deploy with blue-green switches behind HAProxy.\n")
    await eventually(lambda: bob.read("memory/deploy.md") == alice.read("memory/deploy.md"), "bob's copy")
    for _ in range(searches):
        assert "memory/deploy.md" in await search_paths(b, "how do we deploy blue-green")


async def index_notes(laptop: Laptop, searcher: object) -> None:
    """The laptop brings NOTES new files; returns once the last is searchable through the other laptop."""
    for number in range(NOTES):
        laptop.write(
            f"memory/notes/note-{number:03}.md",
            f"# Note {number}\n\nService {number} listens on port {9000 + number} and logs to journald.\n\n"
            + "Its runbook says to restart it twice before paging anyone. " * 8,
        )

    async def last_is_found() -> bool:
        hits = await search_paths(searcher, "which service listens on port 9059")  # type: ignore[arg-type]
        return f"memory/notes/note-{NOTES - 1:03}.md" in hits

    with anyio.fail_after(180):
        while not await last_is_found():
            await anyio.sleep(0.5)


async def sample_rss_while(deployment: Deployment, work: object) -> list[float]:
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            samples.append(deployment.rss_mib())
            done.wait(0.25)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        await work()  # type: ignore[operator]
    finally:
        done.set()
        thread.join(10)
    return samples


def test_the_server_runs_as_a_non_root_user_without_capabilities_on_a_read_only_root(stack):
    deployment = stack.deployment
    status = deployment.exec("cat", "/proc/1/status")
    assert "\nUid:\t10001\t10001\t10001\t10001\n" in status
    assert "\nGid:\t10001\t10001\t10001\t10001\n" in status
    for capabilities in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"\n{capabilities}:\t0000000000000000\n" in status, capabilities
    assert "\nNoNewPrivs:\t1\n" in status
    assert deployment.inspect("{{.HostConfig.ReadonlyRootfs}}") == "true"
    refused = deployment.exec("touch", "/opt/venv/written", check=False)
    assert "Read-only file system" in refused
    deployment.exec("touch", "/tmp/scratch")  # the tmpfs compose gives it
    assert deployment.exec("ls", "-ln", "/keys/server.key").split()[2] == "10001"


async def test_a_provider_key_from_a_compose_secret_never_reaches_logs_metrics_or_tool_results(stack):
    deployment = stack.deployment
    config = deployment.exec("memory-server", "config")
    assert "/run/secrets/voyage_api_key" in config  # the secret was read: the key is in the server's hands
    no_canary(config, "`memory-server config`")
    scrape = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9100/metrics').read().decode())"
    metrics = deployment.python(scrape)
    info = [line for line in metrics.splitlines() if line.startswith("memory_embedding_provider_info{")]
    assert len(info) == 1 and 'provider="local"' in info[0], info  # voyage does not answer: local from the start
    no_canary(metrics, "/metrics")
    no_canary(deployment.logs(), "docker logs")
    async with stack.alice.running() as a:
        for tool, arguments in [("memory_status", {}), ("memory_search", {"query": "voyage api key"})]:
            no_canary(str(structured(await a.call_tool(tool, arguments))), f"the {tool} result")


async def test_sigterm_stops_it_within_10_seconds_and_a_write_acknowledged_just_before_is_kept(stack):
    deployment = stack.deployment
    text = "Acknowledged just before the stop: the backup window moved to 02:00."
    async with stack.alice.running() as a:
        path = structured(await a.call_tool("memory_write", {"content": text, "topic": "backups"}))["path"]
    started = time.monotonic()
    deployment.compose("stop")  # SIGTERM, then compose's stop_grace_period
    stopped = time.monotonic() - started
    record("stop on SIGTERM", f"{stopped:.1f} s")
    assert deployment.inspect("{{.State.ExitCode}}") in ("0", "143")
    assert stopped < STOPPED_WITHIN
    deployment.compose("start")
    await deployment.wait_healthy(60)
    async with stack.bob.running() as b:
        got = structured(await b.call_tool("memory_get", {"path": path}))
        assert text in got["content"]
        assert path in await search_paths(b, "when is the backup window")


async def test_data_survives_restart_and_down_and_up_and_only_down_with_volumes_loses_it(stack):
    deployment = stack.deployment
    deployment.compose("restart")
    await deployment.wait_healthy(60)
    async with stack.bob.running() as b:
        assert "memory/deploy.md" in await search_paths(b, "how do we deploy blue-green")
    deployment.down()
    deployment.up()
    await deployment.wait_healthy(60)
    async with stack.bob.running() as b:
        assert "memory/deploy.md" in await search_paths(b, "how do we deploy blue-green")
    no_canary(deployment.logs(), "docker logs")
    deployment.down(volumes=True)
    deployment.up()
    await deployment.wait_healthy(60)
    listing = deployment.exec("ls", "-A", "/data")
    assert "indexes" not in listing.split() or deployment.exec("ls", "-A", "/data/indexes").strip() == ""


async def test_a_server_key_others_can_read_is_refused_with_the_fix_in_the_logs(image, tmp_path):
    deployment = Deployment(tmp_path / "careless", image)
    deployment.set_up_keys()
    (deployment.folder / "keys" / "server.key").chmod(0o644)
    deployment.up()
    try:
        logs = await deployment.wait_log("chmod 600", within=60)
        assert "server.key" in logs
        assert deployment.health() != "healthy"
    finally:
        deployment.down(volumes=True)


def test_the_image_passes_its_own_self_check(image):
    report = run(["docker", "run", "--rm", "--entrypoint", "memory-server", image, "self-check"])
    assert report.count("ok   ") == 4 and "FAIL" not in report, report


async def test_a_cold_start_answers_healthz_within_10_seconds(image, tmp_path):
    deployment = Deployment(tmp_path / "cold", image)
    deployment.set_up_keys()
    name = f"{deployment.project}-cold"
    keys = f"{deployment.folder / 'keys'}:/keys:ro"
    published = f"127.0.0.1:{deployment.port}:8765"
    started = time.monotonic()
    run(["docker", "run", "--detach", "--name", name, "--read-only", "--tmpfs", "/tmp", "--cap-drop", "ALL",
         "--volume", keys, "--publish", published, image])  # fmt: skip
    try:
        await deployment.wait_answering(30)
        cold = time.monotonic() - started
        record("cold start (docker run to /healthz answering)", f"{cold:.1f} s")
        assert cold < 10
    finally:
        run(["docker", "rm", "--force", "--volumes", name])
