"""The proxy in front of the product: `create_app` (channel, MCP tools, memory service) under uvicorn, a real
`memory-proxy` process, and the SDK's client on its stdio, as Claude Code runs it. Every tool, both generations."""

from __future__ import annotations

import datetime as dt
import io
from zoneinfo import ZoneInfo

import pytest
from mcp import Client
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from client_proxy.config import render_config, write_config
from server.app import create_app
from server.callers.config import CALLERS_FILE
from server.callers.file import CallersFile, update_callers
from server.cli import serve
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.mcp_support import MODES, serve_asgi, structured
from tests.proxy_support import init_proxy_home, proxy_params

pytestmark = pytest.mark.anyio

INDEX = "alice-notes"
ZONE = "Pacific/Kiritimati"  # UTC+14: its date differs from UTC's for most of the day


@pytest.fixture
def product(tmp_path):
    """What `memory-server serve` runs, with one laptop (the proxy's device key) granted `INDEX`."""
    keys_dir, data_dir, home = tmp_path / "keys", tmp_path / "data", tmp_path / "home"
    server_key = serve.ensure_server_key(keys_dir, out=io.StringIO())
    serve.prepare_data_dir(data_dir)
    device = init_proxy_home(home)  # the device key first: callers.toml must name it before the server starts
    update_callers(keys_dir / CALLERS_FILE, lambda callers: callers.add("alice", [device], {INDEX: "rw"}))
    service = MemoryService(data_dir, HashingEmbedder())
    app = create_app(service, server_key=server_key, callers=CallersFile(keys_dir / CALLERS_FILE), data_dir=data_dir)
    with serve_asgi(app) as (url, _):
        write_config(home, render_config(url, server_key.public, "alice"))  # as `memory-proxy init` would pin it
        yield home


@pytest.mark.parametrize("mode", MODES)
async def test_every_tool_works_through_the_proxy_and_the_daily_log_is_dated_in_the_laptops_zone(
    product, tmp_path, mode
):
    params = proxy_params(product, tmp_path / "proxy.log", index=INDEX)
    params.env = {**(params.env or {}), "TZ": ZONE}
    progress = []

    async def on_progress(done, total, message):
        progress.append(done)

    before = dt.datetime.now(ZoneInfo(ZONE)).date()
    with open(tmp_path / "stderr", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode=mode) as client:
            assert len((await client.list_tools()).tools) == 9
            written = structured(await client.call_tool("memory_write", {"content": "Deploys go out on Tuesdays"}))
            found = structured(await client.call_tool("memory_search", {"query": "deploys tuesdays"}))
            got = structured(await client.call_tool("memory_get", {"path": written["path"]}))
            listed = structured(await client.call_tool("memory_list", {}))
            status = structured(await client.call_tool("memory_status", {}))
            synced = structured(await client.call_tool("memory_sync", {"force": True}, progress_callback=on_progress))
            deleted = structured(await client.call_tool("memory_delete", {"path": written["path"]}))
    after = dt.datetime.now(ZoneInfo(ZONE)).date()

    assert written["path"] in {f"memory/{day.isoformat()}.md" for day in (before, after)}
    assert found["hits"][0]["citation"].startswith(written["path"] + "#L")
    assert "Deploys go out on Tuesdays" in got["content"]
    assert [entry["path"] for entry in listed["files"]] == [written["path"]]
    assert (status["caller"], status["index"]) == ("alice", INDEX)
    assert synced["files_seen"] == 1 and progress == [1]
    assert deleted["deleted"] is True


async def test_the_new_arguments_work_through_the_proxy_and_an_unknown_one_is_refused_by_name(product, tmp_path):
    params = proxy_params(product, tmp_path / "proxy.log", index=INDEX)
    with open(tmp_path / "stderr", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="auto") as client:
            decisions = {"path": "memory/decisions.md", "content": "# Decisions\n\n## Database\n\nPostgres 16.\n"}
            new = {**decisions, "mode": "replace", "expected_hash": "absent", "tags": ["database"]}
            structured(await client.call_tool("memory_write", new))
            structured(await client.call_tool("memory_write", {"content": "Lunch was good", "category": "fact"}))
            section = structured(
                await client.call_tool("memory_get", {"path": "memory/decisions.md", "heading": "Database"})
            )
            found = structured(await client.call_tool("memory_search", {"query": "postgres", "tags": ["database"]}))
            synced = structured(
                await client.call_tool("memory_sync", {"source": "memory", "path": "memory/decisions.md"})
            )
            with pytest.raises(MCPError) as refused:
                await client.call_tool("memory_search", {"query": "postgres", "heading": "Database"})

    assert "Postgres 16." in section["content"] and section["content"].lstrip().startswith("## Database")
    hit = found["hits"][0]
    assert hit["path"] == "memory/decisions.md" and hit["tags"] == ["database"]
    assert hit["matched_by"] in ("keyword", "both") and hit["keyword_rank"] == 1
    assert [h["path"] for h in found["hits"]] == ["memory/decisions.md"]  # the untagged daily log is filtered out
    assert synced["files_seen"] == 1
    assert refused.value.error.code == INVALID_PARAMS
    assert "memory_search does not take the argument 'heading'; it takes: query," in refused.value.error.message
