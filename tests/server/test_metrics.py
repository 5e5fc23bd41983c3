"""Prometheus metrics: a valid text page, numbers that agree with the engine's own, served inside the channel to
authenticated callers (their own indexes only) and on a loopback-only listener, never on the public port."""

from __future__ import annotations

import io
import math
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest

from channel.constants import INDEX_HEADER
from channel.keys import PrivateKey
from server.app import create_app
from server.callers.config import CALLERS_FILE
from server.callers.file import CallersFile, update_callers
from server.cli import serve
from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.errors import InvalidArgumentError
from server.index.tuning import chunker_config
from server.memory.service import CallerContext, MemoryService
from server.observe.metrics import BUCKETS, Family, Metrics, Sample, read_index_sizes, render
from server.observe.metrics_app import MetricsListener, service_metrics
from tests.channel.conftest import RunningServer
from tests.conftest import EXAMPLE
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import serve_asgi

pytestmark = pytest.mark.anyio

# The exposition format 0.0.4, line by line: comments, and samples `name{label="value",...} number`.
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = rf'{NAME}="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"^({NAME})(\{{{LABEL}(?:,{LABEL})*\}})? (-?[0-9.e+-]+|\+Inf|-Inf|NaN)$")
COMMENT = re.compile(rf"^# (HELP|TYPE) ({NAME}) (.*)$")
KINDS = {"counter", "gauge", "histogram", "summary", "untyped"}


def parse(page: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """Check `page` line by line against the format and return {sample name: {labels: value}}; every sample
    belongs to the family whose TYPE came last, and each family has HELP and TYPE once."""
    assert page.endswith("\n")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    typed: dict[str, str] = {}
    helped: set[str] = set()
    family = None
    for line in page.splitlines():
        comment = COMMENT.match(line)
        if comment:
            what, name, rest = comment.groups()
            if what == "TYPE":
                assert name not in typed and rest in KINDS, line
                typed[name], family = rest, name
            else:
                assert name not in helped, line
                helped.add(name)
            continue
        found = SAMPLE.match(line)
        assert found, f"not a valid sample line: {line!r}"
        name, labels, value = found.groups()
        suffixes = ("_bucket", "_sum", "_count") if typed.get(family or "") == "histogram" else ("",)
        assert family and any(name == family + suffix for suffix in suffixes), f"{name} outside its family"
        pairs = tuple(re.findall(rf'({NAME})="((?:[^"\\]|\\.)*)"', labels or ""))
        samples.setdefault(name, {})[pairs] = float(value)
    assert helped == set(typed)
    return samples


SMALL_CHUNKS = EngineSettings(chunker=chunker_config(64, 8))


def test_the_page_is_valid_text_format_with_escaped_labels_and_cumulative_buckets():
    metrics = Metrics(started=1700000000.5)
    for seconds in (0.001, 0.02, 0.02, 0.3, 45.0, 120.0):
        metrics.observe_request("/mcp", "POST", 200, seconds)
    metrics.observe_request("/sync/push", "POST", 409, 0.01)
    metrics.observe_request("/etc/passwd", "PROPFIND", 404, 0.0)  # labels stay few: route and method folded
    metrics.observe_channel("/v1/handshake", 403)
    metrics.collectors.append(
        lambda visible: [
            Family("odd", "gauge", "A help text\\with a newline\nin it.", [Sample((("l", 'a"b\\c\nd'),), 1)])
        ]
    )

    samples = parse(metrics.render(lambda _index: True))

    histogram = samples["memory_request_duration_seconds_bucket"].items()
    buckets = {dict(labels)["le"]: value for labels, value in histogram if dict(labels)["route"] == "/mcp"}
    assert list(buckets) == [*(str(b).removesuffix(".0") if b >= 1 else str(b) for b in BUCKETS), "+Inf"]
    counts = list(buckets.values())
    assert counts == sorted(counts) and counts[-1] == 6 and buckets["0.025"] == 3 and buckets["60"] == 5
    mcp = (("route", "/mcp"), ("method", "POST"))
    assert math.isclose(samples["memory_request_duration_seconds_sum"][mcp], 165.341)
    assert samples["memory_request_duration_seconds_count"][mcp] == 6
    requests = samples["memory_requests_total"]
    assert requests[(("route", "/mcp"), ("method", "POST"), ("status", "2xx"))] == 6
    assert requests[(("route", "/sync/push"), ("method", "POST"), ("status", "4xx"))] == 1
    assert requests[(("route", "other"), ("method", "other"), ("status", "4xx"))] == 1
    assert samples["memory_channel_requests_total"] == {(("path", "/v1/handshake"), ("status", "403")): 1}
    assert samples["memory_process_start_time_seconds"] == {(): 1700000000.5}
    assert samples["odd"] == {(("l", 'a\\"b\\\\c\\nd'),): 1}


def test_a_failing_collector_costs_its_own_families_only(caplog):
    metrics = Metrics()

    def broken(visible):
        raise OSError("disk gone")

    metrics.collectors.append(broken)
    metrics.observe_request("/mcp", "GET", 200, 0.1)
    samples = parse(metrics.render(lambda _index: True))
    assert samples["memory_requests_total"] == {(("route", "/mcp"), ("method", "GET"), ("status", "2xx")): 1}
    assert "metrics collector failed: OSError" in caplog.text and "disk gone" not in caplog.text


def test_an_empty_family_still_has_help_and_type():
    assert (
        render([Family("memory_x", "gauge", "Nothing yet.")]) == "# HELP memory_x Nothing yet.\n# TYPE memory_x gauge\n"
    )


def caller(index: str) -> CallerContext:
    return CallerContext("alice", "SHA256:alice", {"alice-notes": "rw", "team": "rw"}, index, "rw")


def test_index_sizes_agree_with_the_engines_status_and_count_the_embedding_backlog(tmp_path):
    embedder = HashingEmbedder()
    service = MemoryService(tmp_path, embedder)
    try:
        service.write(caller("alice-notes"), "Deploys go out on Tuesdays.\n\nRollbacks need a ticket.")
        project = "# Project\n\nUses SQLite."
        service.write(caller("alice-notes"), project, path="MEMORY.md", mode="replace", expected_hash="absent")
        embedder.fail = True  # the provider is down: new chunks wait for their vectors
        service.write(caller("team"), "Standup at nine.", path="memory/team.md")
        service.write(caller("team"), "Retro on Fridays.", path="memory/retro.md")
        statuses = {index: service.status(caller(index)) for index in ("alice-notes", "team")}
        sizes = {size.name: size for size in read_index_sizes(tmp_path, lambda _index: True)}
    finally:
        service.close()

    assert set(sizes) == {"alice-notes", "team"}
    for index, status in statuses.items():
        size = sizes[index]
        assert size.files == status.files and size.chunks == sum(status.chunks.values())
        assert size.pending_vectors == status.pending_vectors and size.database_bytes["index"] == status.database_bytes
        assert size.mirror_files == sum(status.files.values()) == 2
        assert size.database_bytes["state"] > 0 and not size.rebuilding
    assert sizes["alice-notes"].pending_vectors == 0 and sizes["team"].pending_vectors == 2
    assert [s.name for s in read_index_sizes(tmp_path, lambda index: index == "team")] == ["team"]
    assert read_index_sizes(tmp_path / "nothing-here", lambda _index: True) == []


# served --------------------------------------------------------------------------------------------------------


@contextmanager
def product(tmp_path: Path) -> Iterator[tuple[RunningServer, dict[str, PrivateKey], MemoryService]]:
    """The whole app under uvicorn, with alice (alice-notes) and bob (bob-notes) let in."""
    keys_dir, data_dir = tmp_path / "keys", tmp_path / "data"
    server_key = serve.ensure_server_key(keys_dir, out=io.StringIO())
    serve.prepare_data_dir(data_dir)
    devices = {name: PrivateKey.generate(name) for name in ("alice", "bob")}
    for name, key in devices.items():
        update_callers(keys_dir / CALLERS_FILE, lambda c, n=name, k=key: c.add(n, [k.public], {f"{n}-notes": "rw"}))
    service = MemoryService(data_dir, HashingEmbedder())
    metrics = service_metrics(service)
    app = create_app(service, server_key=server_key, callers=CallersFile(keys_dir / CALLERS_FILE), metrics=metrics)
    with serve_asgi(app) as (url, _):
        yield RunningServer(url, server_key.public, server_key, app), devices, service


async def test_inside_the_channel_a_caller_sees_the_counters_and_only_its_own_indexes(tmp_path):
    with product(tmp_path) as (server, devices, service):
        for who in ("alice", "bob"):
            user = CallerContext(who, "SHA256:x", {f"{who}-notes": "rw"}, f"{who}-notes", "rw")
            service.write(user, f"{who} writes a note.")
        index = {INDEX_HEADER: "alice-notes"}
        async with server.client(devices["alice"]) as alice:
            pushed = await alice.post("/sync/push", json={"changes": []}, headers=index)
            missing = await alice.get("/nowhere", headers=index)
            page = await alice.get("/metrics")  # no index named: the caller's grants decide what it sees
        async with httpx2.AsyncClient(base_url=server.url) as plain:
            outside = await plain.get("/metrics")

    assert outside.status_code == 404  # the public port serves /metrics only through the channel
    assert page.status_code == 200 and page.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse(page.text)
    assert set(dict(labels)["index"] for labels in samples["memory_index_chunks"]) == {"alice-notes"}
    assert samples["memory_mirror_files"] == {(("index", "alice-notes"),): 1}
    requests = samples["memory_requests_total"]
    assert requests[(("route", "/sync/push"), ("method", "POST"), ("status", status_class(pushed)))] == 1
    assert requests[(("route", "other"), ("method", "GET"), ("status", "4xx"))] == 1 and missing.status_code == 404
    assert samples["memory_embedding_provider_info"] == {(("provider", "test"), ("model", "hashing-v1")): 1}


def status_class(response: httpx2.Response) -> str:
    return f"{response.status_code // 100}xx"


async def test_the_inner_endpoint_refuses_a_request_without_a_channel_caller(tmp_path):
    with product(tmp_path) as (server, _devices, _service):
        inner = server.middleware.app  # reached directly, as if the channel had been bypassed
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(inner), base_url="http://memory") as bypass:
            answer = await bypass.get("/metrics")
    assert answer.status_code == 404 and "memory_" not in answer.text


def test_the_plain_listener_binds_loopback_only_and_serves_every_index(tmp_path):
    service = MemoryService(tmp_path, HashingEmbedder())
    service.write(caller("team"), "Standup at nine.")
    metrics = service_metrics(service)
    for host in ("127.0.0.1", "::1", "localhost"):
        listener = MetricsListener(metrics, host, 0)
        listener.start()
        try:
            url = f"http://{'[::1]' if ':' in listener.address[0] else listener.address[0]}:{listener.address[1]}"
            page = httpx2.get(f"{url}/metrics", timeout=5.0)
            other = httpx2.get(f"{url}/", timeout=5.0)
        finally:
            listener.close()
        assert page.status_code == 200 and parse(page.text)["memory_index_chunks"][(("index", "team"),)] == 1
        assert other.status_code == 404
    service.close()
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        with pytest.raises(InvalidArgumentError, match="loopback addresses only"):
            MetricsListener(metrics, host, 0)


def test_an_index_cut_again_into_a_new_database_is_counted_from_that_database(tmp_path):
    # The gauges read index.sqlite3 alone: once a re-chunk swapped in index-<n>.sqlite3, they showed the old
    # database's counts, or, with it retired, no such index at all.
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    first = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder(), create=True)
    first.index(folder)
    first.close()
    index = MemoryIndex.open(tmp_path / "data", "notes", HashingEmbedder(), settings=SMALL_CHUNKS)
    try:
        assert index.rechunker.run() is True
        status, live = index.status(), index.db_path
    finally:
        index.close()

    sizes = read_index_sizes(tmp_path / "data", lambda _index: True)
    assert live.name.startswith("index-")
    assert [size.name for size in sizes] == ["notes"]
    assert sizes[0].chunks == sum(status.chunks.values()) and sizes[0].files == status.files


def test_index_sizes_of_indexes_no_process_has_open_leave_no_wal_files_behind(tmp_path):
    service = MemoryService(tmp_path, HashingEmbedder())
    try:
        service.write(caller("team"), "Standup at nine.", path="memory/team.md")
    finally:
        service.close()
    folder = tmp_path / "indexes" / "team"
    before = sorted(path.name for path in folder.iterdir())

    sizes = read_index_sizes(tmp_path, lambda _index: True)

    assert [(size.name, size.files, size.mirror_files) for size in sizes] == [("team", {"memory": 1}, 1)]
    assert sorted(path.name for path in folder.iterdir()) == before  # no -wal or -shm made by the scrape
