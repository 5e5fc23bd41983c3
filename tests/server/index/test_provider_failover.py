"""An embedding provider that fails mid-run is bypassed and taken back without a restart: Voyage and OpenAI as
local servers speaking their wire format, the breakers on a clock the test moves."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import anyio
import pytest

from server.index.embeddings.select import EmbeddingSettings, select_providers
from server.index.engine import MemoryIndex
from tests.conftest import EXAMPLE
from tests.fakes.provider_api import FakeProviderAPI, serve

KEY = "pa-test-0123456789abcdef0123456789"
QUERY = "webhook retries idempotent processed events"


@contextmanager
def two_providers() -> Iterator[tuple[FakeProviderAPI, FakeProviderAPI]]:
    """Voyage (64 dimensions) and OpenAI (48) as local servers."""
    with serve(FakeProviderAPI(api_key=KEY)) as voyage, serve(FakeProviderAPI(api_key=KEY, dimensions=48)) as openai:
        yield voyage, openai


@pytest.fixture
def apis():
    with two_providers() as running:
        yield running


def _open(tmp_path, voyage, openai, now, retries=0, settings=None):
    env = {
        "MEMORY_EMBEDDING_PROVIDERS": "voyage,openai",
        "VOYAGE_API_KEY": KEY,
        "OPENAI_API_KEY": KEY,
        "MEMORY_VOYAGE_BASE_URL": voyage.url,
        "MEMORY_OPENAI_BASE_URL": openai.url,
        "MEMORY_VOYAGE_DIMENSIONS": "64",
        "MEMORY_OPENAI_DIMENSIONS": "48",
        "MEMORY_EMBEDDING_RETRIES": str(retries),
        "MEMORY_EMBEDDING_FAILOVER_AFTER": "30",
    }
    providers, reasons = select_providers(EmbeddingSettings.from_env(env), env, clock=lambda: now[0])
    assert reasons == [] and [m.provider for m in providers.members] == ["voyage", "openai"]
    return MemoryIndex.open(tmp_path / "data", "team", providers, create=True, settings=settings)


@pytest.fixture
def opened(tmp_path, apis):
    """An index of the example notes on Voyage (OpenAI as fallback), and the clock its breakers read."""
    voyage, openai = apis
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    now = [1000.0]
    index = _open(tmp_path, voyage, openai, now)
    try:
        index.index(folder)
        yield index, folder, now
    finally:
        index.close()


def _rebuilt(index: MemoryIndex) -> None:
    thread = index._rebuild_thread
    assert thread is not None
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_provider_failing_mid_run_is_bypassed_and_taken_back_when_it_recovers(apis, opened):
    voyage, openai = apis
    index, folder, now = opened
    assert index.search(QUERY).mode == "hybrid" and index.status().provider == "voyage"
    assert [r["input"] for r in openai.requests] == [["ping"]]  # the start-up probe: nothing more meanwhile

    voyage.fail(503, times=10_000)
    first = index.search(QUERY)  # the query fails once, without retries: answered by keyword at once
    assert first.mode == "keyword" and "voyage" in (first.notice or "") and first.hits
    failures_left = voyage.failures[0].times  # each request Voyage gets takes one
    again = index.search(QUERY)
    assert again.mode == "keyword" and "next try in" in (again.notice or "")
    assert voyage.failures[0].times == failures_left  # the open breaker asks nobody
    status = index.status()
    assert status.vector_state == "unavailable" and status.search_modes == ["keyword"]
    assert [(p.provider, p.state) for p in status.providers] == [("voyage", "failing"), ("openai", "ok")]

    # Failing for longer than MEMORY_EMBEDDING_FAILOVER_AFTER: OpenAI's vectors are built beside Voyage's.
    now[0] += 31
    assert index.search(QUERY).mode == "keyword"
    _rebuilt(index)
    during = index.search(QUERY)
    assert during.mode == "hybrid" and during.hits[0].path == "memory/2026-11-18.md"
    assert index.status().provider == "openai" and index.status().dimensions == 48
    # A note written during the outage is embedded by the provider that serves now.
    (folder / "memory" / "2026-11-21.md").write_text("# 2026-11-21\n\n- Moved the nightly cron to UTC.\n")
    assert index.index(folder).chunks_pending == 0
    assert index.search("nightly cron UTC", None).hits[0].path == "memory/2026-11-21.md"

    # Voyage answers again: its breaker's next trial succeeds, and its vectors come back (from the cache,
    # but for the note of the outage) while OpenAI's keep serving searches.
    voyage.failures.clear()
    now[0] += 600
    asked_before = len(voyage.requests)
    assert index.search(QUERY).mode == "hybrid"  # on OpenAI's vectors, while Voyage's are rebuilt
    _rebuilt(index)
    rebuilt = [r for r in voyage.requests[asked_before:] if r["input_type"] == "document"]
    assert [len(r["input"]) for r in rebuilt] == [1]  # only the outage's note needed Voyage
    back = index.search(QUERY)
    assert back.mode == "hybrid" and index.status().provider == "voyage"
    assert [p.state for p in index.status().providers] == ["ok", "ok"]


def test_while_every_provider_fails_search_answers_by_keyword_and_says_why(apis, opened):
    voyage, openai = apis
    index, _folder, now = opened
    voyage.fail(503, times=10_000)
    openai.fail(401, times=10_000)  # a revoked key
    assert index.search(QUERY).mode == "keyword"
    now[0] += 31
    index.search(QUERY)
    if index._rebuild_thread is not None:
        _rebuilt(index)
    result = index.search(QUERY)
    assert result.mode == "keyword" and result.hits
    assert "voyage" in (result.notice or "") and "keyword search meanwhile" in (result.notice or "")
    assert index.status().provider == "voyage"  # never swapped to a half-built table
    states = {p.provider: p.detail or "" for p in index.status().providers}
    assert "HTTP 503" in states["voyage"] and "HTTP 401" in states["openai"] and KEY not in str(states)


@pytest.mark.anyio
async def test_a_search_during_an_outage_does_not_wait_for_the_provider(apis, opened):
    voyage, _openai = apis
    index, _folder, _now = opened
    voyage.fail(503, times=1, delay=0.5)  # the failing answer is slow once; then the breaker is open
    voyage.fail(503, times=10_000, delay=5.0)
    index.search(QUERY)
    with anyio.fail_after(2):  # would take 5 s if the open breaker let the request through
        result = await anyio.to_thread.run_sync(index.search, QUERY)
    assert result.mode == "keyword"


def test_a_provider_down_at_start_is_bypassed_at_once_and_taken_back_when_it_answers(tmp_path, apis):
    voyage, openai = apis
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    voyage.fail(503, times=1)  # the start-up probe
    now = [1000.0]
    index = _open(tmp_path, voyage, openai, now)
    try:
        index.index(folder)
        assert index.status().provider == "openai" and index.search(QUERY).mode == "hybrid"
        now[0] += 600  # past its rest: the next look tries it again, and it answers
        assert index.search(QUERY).mode == "hybrid"
        _rebuilt(index)
        assert index.status().provider == "voyage" and index.search(QUERY).mode == "hybrid"
    finally:
        index.close()


def test_a_provider_still_down_after_its_rest_costs_one_request_not_a_batchs_retries(apis, tmp_path):
    voyage, openai = apis
    folder = tmp_path / "project"
    shutil.copytree(EXAMPLE, folder)
    now = [1000.0]
    index = _open(tmp_path, voyage, openai, now, retries=4)  # a batch would be tried five times, with backoff
    try:
        index.index(folder)
        voyage.fail(503, times=10_000)
        index.search(QUERY)
        now[0] += 31  # failing past MEMORY_EMBEDDING_FAILOVER_AFTER: OpenAI's vectors are built
        index.search(QUERY)
        _rebuilt(index)
        assert index.status().provider == "openai"

        now[0] += 600  # Voyage's rest is over, but it still fails: the rebuild back to it tries it once
        failures_left = voyage.failures[0].times  # each request Voyage gets takes one
        assert index.search(QUERY).mode == "hybrid"  # on OpenAI's vectors
        _rebuilt(index)
        assert failures_left - voyage.failures[0].times == 1
        assert index.status().provider == "openai"
        assert [p.state for p in index.status().providers] == ["failing", "ok"]
    finally:
        index.close()
