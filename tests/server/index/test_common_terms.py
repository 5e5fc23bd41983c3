"""Words in a large share of the chunks leave the keyword query of a large index (real SQLite FTS5; the same on
PostgreSQL: `tests/server/postgres/test_search.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.index import common_terms
from server.index.engine import MemoryIndex
from server.index.search import build_options
from tests.fakes.embedder import HashingEmbedder


@pytest.fixture
def index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MemoryIndex:
    """40 notes that all say 'service', a third say 'deploy', one says 'zanzibar'; 'large' from 10 chunks."""
    monkeypatch.setattr(common_terms, "MIN_CHUNKS", 10)
    folder = tmp_path / "notes" / "memory"
    folder.mkdir(parents=True)
    for n in range(40):
        extra = " deploy" if n % 3 == 0 else ""
        rare = " zanzibar" if n == 17 else ""
        (folder / f"n{n:02}.md").write_text(f"# Note {n}\n\nservice note{n}{extra}{rare}\n", "utf-8")
    opened = MemoryIndex.open(tmp_path / "data", "terms", HashingEmbedder(), create=True)
    opened.index(tmp_path / "notes")
    yield opened
    opened.close()


def rare(index: MemoryIndex, terms: list[str]) -> list[str]:
    return common_terms.rare_terms(terms, *common_terms.fts_counter(index.store.connection()))


def test_words_in_most_chunks_leave_the_keyword_query_but_the_rarest_stays(index):
    assert rare(index, ["service", "zanzibar", "deploy"]) == ["zanzibar"]
    assert rare(index, ["service", "deploy"]) == ["deploy"]  # all common: the rarest stays
    assert rare(index, ["nowhere"]) == ["nowhere"]


def test_a_keyword_search_of_a_large_index_finds_the_rare_word_among_common_ones(index):
    hits = index.search("service zanzibar", build_options(limit=3, mode="keyword")).hits
    assert [h.path for h in hits] == ["memory/n17.md"]  # 'service' alone no longer matches every note


def test_a_small_index_keeps_every_word(index, monkeypatch):
    monkeypatch.setattr(common_terms, "MIN_CHUNKS", 1000)
    assert rare(index, ["service", "zanzibar"]) == ["service", "zanzibar"]


def test_counts_are_remembered_for_a_while_then_read_again(index):
    now = [0.0]
    db = index.store.connection()
    chunks, holding = common_terms.TermCounts(clock=lambda: now[0]).remembering(*common_terms.fts_counter(db))
    assert (chunks(), holding("zanzibar")) == (40, 1)
    db.execute("DELETE FROM chunks WHERE text LIKE '%zanzibar%'")
    assert (chunks(), holding("zanzibar")) == (40, 1)
    now[0] = common_terms.COUNTS_TTL + 1
    assert (chunks(), holding("zanzibar")) == (39, 0)


def test_words_are_taken_rarest_first_only_while_their_matches_stay_under_the_bound(index, monkeypatch):
    monkeypatch.setattr(common_terms, "COMMON_SHARE", 1.0)
    monkeypatch.setattr(common_terms, "MAX_MATCHES", 10)
    assert rare(index, ["deploy", "zanzibar"]) == ["zanzibar"]  # 1 + 14 matches would pass 10
    monkeypatch.setattr(common_terms, "MAX_MATCHES", 15)
    assert rare(index, ["deploy", "zanzibar"]) == ["deploy", "zanzibar"]
