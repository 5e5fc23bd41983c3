"""Tags and categories in the index: stored per chunk, filtered in SQL on both retrievers before ranking, carried
by hits; front matter is not text; an index from before labels is re-chunked once on upgrade, from the cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from server.index import filtered, relabel
from server.index.engine import MemoryIndex
from server.index.labelled_files import FileLabels
from server.index.labels import Labels
from server.index.migrations import RELABEL_KEY, SCHEMA_VERSION
from server.index.search import build_options
from tests.fakes.embedder import HashingEmbedder

DECISIONS = (
    "---\ntags: [database, postgres]\ncategory: decision\n---\n"  # lines 1-4
    "# Database\n\nWe chose PostgreSQL for the billing service.\n"  # 5-7
)
LOG = (
    "# 2024-05-01\n\n"
    "## 09:00 — cache [tags: redis] [category: pattern]\n\nCache invoices in Redis for an hour.\n\n"
    "## 10:00 — lunch\n\nThe billing team had soup.\n"
)


@pytest.fixture
def embedder() -> HashingEmbedder:
    return HashingEmbedder()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "memory").mkdir(parents=True)
    (root / "memory" / "decisions.md").write_text(DECISIONS)
    (root / "memory" / "2024-05-01.md").write_text(LOG)
    for n in range(100):  # untagged passages about billing: more than the 40 candidates of a top-k cut
        (root / "memory" / f"other-{n:02d}.md").write_text(f"# Other {n}\n\nBilling billing service note {n}.\n")
    return root


@pytest.fixture
def index(tmp_path: Path, embedder: HashingEmbedder, folder: Path) -> Iterator[MemoryIndex]:
    opened = MemoryIndex.open(tmp_path / "data", "demo", embedder, create=True)
    opened.index(folder)
    yield opened
    opened.close()


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid"])
def test_a_tag_filter_finds_only_tagged_passages_even_past_an_unfiltered_top_k(index: MemoryIndex, mode: str) -> None:
    unfiltered = index.search("billing service", build_options(limit=3, mode=mode))
    assert "memory/decisions.md" not in [h.path for h in unfiltered.hits]
    found = index.search("billing service", build_options(limit=3, mode=mode, tags=["Postgres", "nothing"]))
    assert found.mode == mode
    assert [(h.path, h.tags, h.category) for h in found.hits] == [
        ("memory/decisions.md", ("database", "postgres"), "decision")
    ]


def test_a_category_filter_is_exact_and_combines_with_tags(index: MemoryIndex) -> None:
    hits = index.search("invoices billing", build_options(category="pattern")).hits
    assert [(h.path, h.heading, h.tags) for h in hits] == [
        ("memory/2024-05-01.md", "2024-05-01 > 09:00 — cache", ("redis",))
    ]
    assert index.search("billing", build_options(category="patterns")).hits == []
    assert index.search("billing", build_options(category="pattern", tags=["database"])).hits == []


def test_an_untagged_entry_of_a_labelled_log_carries_no_labels(index: MemoryIndex) -> None:
    hit = index.search("soup", build_options(mode="keyword")).hits[0]
    assert (hit.heading, hit.tags, hit.category) == ("2024-05-01 > 10:00 — lunch", (), None)


def test_front_matter_and_inline_labels_are_not_text_and_lines_stay_the_files(index: MemoryIndex) -> None:
    assert index.search("category decision", build_options(mode="keyword")).hits == []
    assert index.search("redis", build_options(mode="keyword")).hits[0].heading.endswith("cache")
    hit = index.search("PostgreSQL billing", build_options(mode="keyword", tags=["database"])).hits[0]
    assert (hit.start_line, hit.end_line) == (7, 7)  # the real file's lines, front matter counted


def test_file_labels_list_every_tag_and_category_of_a_file_and_filter_like_search(index: MemoryIndex) -> None:
    everything = index.file_labels(Labels())
    assert everything["memory/2024-05-01.md"] == FileLabels(("redis",), ("pattern",))
    assert everything["memory/other-00.md"] == FileLabels((), ())
    assert set(index.file_labels(Labels(("redis", "postgres")))) == {"memory/2024-05-01.md", "memory/decisions.md"}
    assert set(index.file_labels(Labels((), "decision"))) == {"memory/decisions.md"}
    assert index.file_labels(Labels(("redis",), "decision")) == {}
    assert set(index.file_labels(Labels(), ["memory/decisions.md", "gone.md"])) == {"memory/decisions.md"}
    assert index.file_labels(Labels(("redis",)), ["memory/decisions.md"]) == {}


def test_editing_front_matter_retags_the_file_on_the_next_run(index: MemoryIndex, folder: Path) -> None:
    (folder / "memory" / "decisions.md").write_text(DECISIONS.replace("postgres]", "postgres, billing]"))
    index.index(folder)
    assert set(index.file_labels(Labels(("billing",)))) == {"memory/decisions.md"}
    (folder / "memory" / "decisions.md").write_text(DECISIONS.replace("---\ntags", "--\ntags"))  # now malformed
    index.index(folder)
    assert index.file_labels(Labels(("database",))) == {}
    assert index.search("category decision", build_options(mode="keyword")).hits[0].path == "memory/decisions.md"


def _as_schema_3(db_path: Path) -> None:
    """Turn the database back into what the version before labels wrote (same chunks, no label columns)."""
    db = apsw.Connection(str(db_path))
    db.execute(
        "DROP TABLE chunk_tags; DROP INDEX chunks_by_category;"
        " ALTER TABLE chunks DROP COLUMN tags; ALTER TABLE chunks DROP COLUMN category; PRAGMA user_version = 3"
    )
    db.close()


def test_an_index_from_before_labels_is_rechunked_in_the_background_on_upgrade_without_the_model(
    tmp_path: Path, embedder: HashingEmbedder, folder: Path
) -> None:
    old = MemoryIndex.open(tmp_path / "data", "demo", embedder, create=True)
    old.index(folder)
    old.close()
    _as_schema_3(tmp_path / "data" / "indexes" / "demo" / "index.sqlite3")
    embedded = embedder.embedded

    upgraded = MemoryIndex.open(tmp_path / "data", "demo", embedder)
    try:
        assert upgraded.status().schema_version == SCHEMA_VERSION == 4
        assert upgraded.search("billing service", build_options(limit=3)).hits  # served meanwhile, as it was
        assert upgraded.relabel_thread is not None
        upgraded.relabel_thread.join(timeout=30)
        assert upgraded.store.get_meta(RELABEL_KEY) is None
        assert embedder.embedded == embedded + 1  # the query; every chunk text was in the embedding cache
        found = upgraded.search("billing service", build_options(tags=["postgres"]))
        assert found.mode == "hybrid" and [h.path for h in found.hits] == ["memory/decisions.md"]
        assert upgraded.index(folder).files_indexed == 0  # re-chunked once, then unchanged as before
    finally:
        upgraded.close()


def test_a_filter_that_keeps_most_chunks_overfetches_a_knn_and_ranks_as_the_exact_scan_does(
    tmp_path: Path, embedder: HashingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "wide"
    (root / "memory").mkdir(parents=True)
    for n in range(30):
        tag = "wide" if n % 10 else "narrow"
        (root / "memory" / f"n{n:02d}.md").write_text(f"---\ntags: [{tag}]\n---\n# Note {n}\n\nDeploy step {n}.\n")
    opened = MemoryIndex.open(tmp_path / "data", "wide", embedder, create=True)
    try:
        opened.index(root)
        options = build_options(limit=5, mode="vector", tags=["wide"])
        exact = [(h.path, round(h.score, 4)) for h in opened.search("deploy step 7", options).hits]
        monkeypatch.setattr(filtered, "EXACT_MAX_CHUNKS", 3)  # 27 chunks pass: the KNN path
        overfetched = [(h.path, round(h.score, 4)) for h in opened.search("deploy step 7", options).hits]
    finally:
        opened.close()
    assert overfetched == exact and len(exact) == 5
    assert exact[0][0] == "memory/n07.md" and all(not path.endswith(("00.md", "10.md", "20.md")) for path, _ in exact)


def test_closing_stops_the_rechunk_and_the_next_open_goes_on(
    tmp_path: Path, embedder: HashingEmbedder, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = MemoryIndex.open(tmp_path / "data", "demo", embedder, create=True)
    old.index(folder)
    old.close()
    _as_schema_3(tmp_path / "data" / "indexes" / "demo" / "index.sqlite3")
    monkeypatch.setattr(relabel, "RELABEL_BATCH_FILES", 1)
    first = MemoryIndex.open(tmp_path / "data", "demo", embedder)
    first.close()  # most likely in the middle of its 102 batches
    assert first.relabel_thread is not None
    first.relabel_thread.join(timeout=30)
    second = MemoryIndex.open(tmp_path / "data", "demo", embedder)
    try:
        if second.relabel_thread is not None:
            second.relabel_thread.join(timeout=30)
        assert second.store.get_meta(RELABEL_KEY) is None
        assert all(second.indexed_files().values())
        assert set(second.file_labels(Labels(("postgres",)))) == {"memory/decisions.md"}
    finally:
        second.close()
