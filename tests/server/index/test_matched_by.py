"""Hits say how they were found: by meaning (vector), by exact terms (keyword) or both, with each retriever's own
rank, so an agent can tell an exact term match from a loose semantic one."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.index.engine import MemoryIndex
from server.index.hits import Retrievers
from server.index.search import build_options


def test_ranks_follow_each_retrievers_own_order_and_matched_by_names_who_found_a_chunk():
    found = Retrievers.of({1: 0.9, 2: 0.4, 3: 0.7}, {3: -8.0, 4: -2.5})
    assert found.vector == {1: 1, 3: 2, 2: 3} and found.keyword == {3: 1, 4: 2}
    assert [found.matched_by(c) for c in (1, 2, 3, 4)] == ["vector", "vector", "both", "keyword"]


@pytest.fixture
def index(tmp_path: Path, local_embedder) -> MemoryIndex:
    project = tmp_path / "project" / "memory"
    project.mkdir(parents=True)
    (project / "deploy.md").write_text("# Deploy\n\nWe ship with blue-green switches behind the load balancer.\n")
    (project / "codes.md").write_text("# Error codes\n\nE_QX47 means the ledger snapshot is stale.\n")
    (project / "food.md").write_text("# Lunch\n\nThe team likes the noodle place on the corner.\n")
    opened = MemoryIndex.open(tmp_path / "data", "found", local_embedder, create=True)
    opened.index(tmp_path / "project")
    yield opened
    opened.close()


def test_a_rare_identifier_is_found_by_keyword_and_a_paraphrase_by_vector(index):
    by_term = index.search("E_QX47", build_options(limit=3)).hits
    assert by_term[0].path == "memory/codes.md" and by_term[0].matched_by in ("keyword", "both")
    assert by_term[0].keyword_rank == 1
    # No word in common and a cosine of 0.25: below the default threshold, which says so instead of guessing.
    query = "how are releases rolled out to production"
    by_default = index.search(query, build_options(limit=3))
    assert by_default.hits == [] and by_default.notice is not None and "nothing relevant" in by_default.notice
    by_meaning = index.search(query, build_options(limit=3, min_score=0.0)).hits
    assert by_meaning[0].path == "memory/deploy.md"
    assert by_meaning[0].matched_by == "vector" and by_meaning[0].keyword_rank is None
    assert by_meaning[0].vector_rank == 1
    assert {"matched_by", "vector_rank", "keyword_rank"} <= set(by_meaning[0].as_dict())


def test_keyword_only_and_vector_only_searches_say_so(index):
    keyword = index.search("noodle", build_options(mode="keyword")).hits
    assert keyword and all(h.matched_by == "keyword" and h.vector_rank is None for h in keyword)
    vector = index.search("noodle", build_options(mode="vector")).hits
    assert vector and all(h.matched_by == "vector" and h.keyword_rank is None for h in vector)


@pytest.mark.anyio
async def test_memory_search_hits_carry_matched_by_and_both_ranks(tmp_path, local_embedder):
    from server.memory.service import MemoryService
    from tests.mcp_support import channel_user, connect, structured

    service = MemoryService(tmp_path / "data", local_embedder)
    try:
        async with connect(service, channel_user("alice", {"notes": "rw"}, "notes")) as client:
            await client.call_tool("memory_write", {"content": "E_QX47 means the ledger snapshot is stale."})
            hits = structured(await client.call_tool("memory_search", {"query": "E_QX47 ledger"}))["hits"]
    finally:
        service.close()
    assert hits[0]["matched_by"] == "both" and hits[0]["vector_rank"] == 1 and hits[0]["keyword_rank"] == 1
