"""The search options that reorder hits, through a real index: MMR diversity, the recency boost for daily logs,
Voyage reranking (against a local server speaking its wire format) that falls back to the search's order with a
note when it fails, and the empty answer a threshold gives when nothing is relevant."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from server.index.engine import MemoryIndex
from server.index.engine_settings import EngineSettings
from server.index.ordering import NO_RERANKER
from server.index.rerank import GuardedReranker, VoyageReranker
from server.index.search import build_options
from server.index.tuning import CALIBRATED_MIN_SCORE
from tests.fakes.embedder import HashingEmbedder
from tests.fakes.provider_api import FakeProviderAPI, serve

KEY = "pa-rerank-0123456789abcdef0123456789"
DUPLICATE = "The billing webhook retries failed deliveries with idempotent writes to the ledger."
NOTES = {
    "memory/billing.md": f"# Billing\n\n{DUPLICATE}\n",
    "memory/billing-copy.md": f"# Billing copy\n\n{DUPLICATE} Again.\n",
    "memory/ledger.md": "# Ledger\n\nThe ledger job reconciles webhook payments every night.\n",
    "memory/garden.md": "# Garden\n\nTomatoes need water in July and shade in August.\n",
}


def _open(tmp_path: Path, notes: dict[str, str], settings: EngineSettings | None = None) -> MemoryIndex:
    folder = tmp_path / "project"
    for path, text in notes.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text)
    index = MemoryIndex.open(tmp_path / "data", "options", HashingEmbedder(), create=True, settings=settings)
    index.index(folder)
    return index


def _paths(index: MemoryIndex, query: str, **options: object) -> list[str]:
    return [hit.path for hit in index.search(query, build_options(limit=4, **options)).hits]  # type: ignore[arg-type]


def test_diversity_moves_a_near_duplicate_below_a_different_place(tmp_path):
    index = _open(tmp_path, NOTES)
    try:
        query = "billing webhook retries idempotent ledger"
        plain = _paths(index, query)
        assert plain[:2] == ["memory/billing.md", "memory/billing-copy.md"]
        diverse = _paths(index, query, mmr_lambda=0.3)
        assert diverse[0] == "memory/billing.md" and diverse.index("memory/billing-copy.md") > 1
        assert sorted(diverse) == sorted(plain)  # reordered, nothing lost
    finally:
        index.close()


def test_the_recency_boost_puts_this_weeks_log_above_last_years_and_leaves_other_notes_alone(tmp_path):
    today = dt.datetime.now(dt.UTC).date()
    old, recent = today - dt.timedelta(days=400), today - dt.timedelta(days=2)
    text = "Deployed the payments service behind the new load balancer."
    index = _open(
        tmp_path,
        {
            f"memory/{old}.md": f"# {old}\n\n{text}\n",
            f"memory/{recent}-deploy.md": f"# {recent} deploy notes, written in a hurry\n\n{text}\n",
            "MEMORY.md": "# Lasting\n\nThe payments service deploys behind a load balancer.\n",
        },
    )
    try:
        query = "deployed payments service load balancer"
        old_log, recent_log = f"memory/{old}.md", f"memory/{recent}-deploy.md"
        plain = {hit.path: hit.score for hit in index.search(query, build_options(limit=4)).hits}
        assert plain[old_log] > plain[recent_log]  # by relevance alone the shorter heading wins
        boosted = index.search(query, build_options(limit=4, recency_half_life_days=30)).hits
        order = [hit.path for hit in boosted]
        assert order.index(recent_log) < order.index(old_log)
        by_path = {hit.path: hit.score for hit in boosted}
        assert by_path["MEMORY.md"] == plain["MEMORY.md"]  # not a daily log: its score stands
        assert by_path[old_log] == pytest.approx(plain[old_log] * 0.5 ** (400 / 30))
    finally:
        index.close()


@pytest.fixture
def api():
    with serve(FakeProviderAPI(api_key=KEY)) as running:
        yield running


def _reranker(api: FakeProviderAPI, now: list[float]) -> GuardedReranker:
    return GuardedReranker(VoyageReranker(model="rerank-2-lite", api_key=KEY, base_url=api.url), clock=lambda: now[0])


def test_reranking_reorders_the_best_hits_by_the_providers_scores(tmp_path, api):
    index = _open(tmp_path, NOTES, EngineSettings(reranker=_reranker(api, [0.0])))
    try:
        query = "ledger reconciles payments every night"
        plain = _paths(index, query)
        reranked = index.search(query, build_options(limit=4, rerank=True))
        sent = api.requests[-1]
        assert sent["query"] == query and sent["model"] == "rerank-2-lite" and len(sent["documents"]) >= 3
        scores = dict(zip(sent["documents"], api.rerank_scores(query, sent["documents"]), strict=True))
        best = max(scores, key=scores.__getitem__)
        assert reranked.hits[0].path == "memory/ledger.md" and "reconciles" in best
        assert reranked.notice is None and sorted(h.path for h in reranked.hits) == sorted(plain)
    finally:
        index.close()


@pytest.mark.parametrize("failure", ["status", "malformed"])
def test_a_failed_rerank_keeps_the_search_order_with_a_note_and_rests_the_provider(tmp_path, api, failure):
    now = [0.0]
    index = _open(tmp_path, NOTES, EngineSettings(reranker=_reranker(api, now)))
    try:
        query = "billing webhook retries"
        plain = _paths(index, query)
        if failure == "status":
            api.fail(503, times=1)
        else:
            api.corrupt = "indexes"
        result = index.search(query, build_options(limit=4, rerank=True))
        assert [hit.path for hit in result.hits] == plain
        assert result.notice is not None and "reranking is unavailable right now" in result.notice
        assert KEY not in result.notice and "scripted" not in result.notice  # no key, no provider body
        api.corrupt = None
        asked = len(api.requests)
        again = index.search(query, build_options(limit=4, rerank=True))  # the breaker rests it: no request
        assert len(api.requests) == asked and again.notice is not None and "next try" in again.notice
        now[0] += 60
        assert index.search(query, build_options(limit=4, rerank=True)).notice is None  # back after its rest
    finally:
        index.close()


def test_reranking_without_a_configured_reranker_says_so_and_keeps_the_order(tmp_path):
    index = _open(tmp_path, NOTES)
    try:
        result = index.search("billing webhook", build_options(limit=4, rerank=True))
        assert result.hits and result.notice == NO_RERANKER
    finally:
        index.close()


def test_a_threshold_that_leaves_nothing_answers_empty_and_says_nothing_is_relevant(tmp_path):
    index = _open(tmp_path, NOTES)
    try:
        result = index.search("tomatoes in the garden", build_options(limit=4, min_score=0.99))
        assert result.hits == []
        assert result.notice is not None and result.notice.startswith("nothing relevant")
        assert index.search("tomatoes in the garden", build_options(limit=4)).notice is None
    finally:
        index.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"mmr_lambda": 1.5}, "mmr_lambda must be a number from 0 to 1"),
        ({"mmr_lambda": True}, "mmr_lambda"),
        ({"recency_half_life_days": -1}, "recency_half_life_days must be a number from 0"),
        ({"rerank": "yes"}, "rerank must be true or false"),
    ],
)
def test_bad_option_values_are_refused_by_name(options, message):
    from server.index.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=message):
        build_options(**options)  # type: ignore[arg-type]


def test_the_measured_default_gates_the_best_hit_and_keeps_the_weaker_ones_after_a_relevant_one(tmp_path, monkeypatch):
    monkeypatch.setitem(CALIBRATED_MIN_SCORE, ("test", "hashing-v1"), 0.5)  # as measured for the local model
    index = _open(tmp_path, NOTES)
    try:
        auto = index.search("billing webhook retries idempotent ledger", build_options(limit=4)).hits
        assert auto[0].score >= 0.5 and min(hit.score for hit in auto) < 0.5  # the tail stays
        cut = index.search("billing webhook retries idempotent ledger", build_options(limit=4, min_score=0.5)).hits
        assert cut and all(hit.score >= 0.5 for hit in cut) and len(cut) < len(auto)  # a given one cuts every hit
        weak = index.search("ledger zebra unicorn moon river castle dragon", build_options(limit=4))
        assert weak.hits == [] and weak.notice is not None and "min_score 0.5" in weak.notice
        assert index.search("ledger zebra unicorn moon river castle dragon", build_options(limit=4, min_score=0)).hits
    finally:
        index.close()
