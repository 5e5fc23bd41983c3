"""The engine end to end on real SQLite, sqlite-vec and the real model."""

from __future__ import annotations

import os
import shutil
import threading
import unicodedata
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from server.index.embeddings.chain import ProviderChain
from server.index.embeddings.local import LocalEmbedder
from server.index.engine import MemoryIndex
from server.index.errors import InvalidArgumentError, UnknownIndexError
from server.index.model_package import FP32, INT8
from server.index.queries import prefix_upper_bound
from server.index.search import build_options
from tests.fakes.embedder import HashingEmbedder


@pytest.fixture
def index(tmp_path: Path, local_embedder) -> MemoryIndex:
    opened = MemoryIndex.open(tmp_path / "data", "demo", local_embedder, create=True)
    yield opened
    opened.close()


def _write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, "utf-8")


def test_indexing_the_example_makes_it_searchable_with_citations(index, folder):
    report = index.index(folder)
    assert report.files_indexed == 5 and report.chunks_written == report.chunks_embedded > 5
    result = index.search("how do we avoid processing the same webhook event twice")
    assert result.mode == "hybrid" and result.notice is None
    top = result.hits[0]
    assert top.path == "memory/2026-11-18.md" and "Webhook retries" in top.heading
    assert top.citation == f"memory/2026-11-18.md#L{top.start_line}-L{top.end_line}"
    lines = (folder / top.path).read_text().splitlines()
    assert "processed_events" in "\n".join(lines[top.start_line - 1 : top.end_line])
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    assert all(0 < h.score <= 1 for h in result.hits)


def test_an_unchanged_tree_embeds_nothing_and_an_edit_reembeds_only_its_chunk(index, folder, local_embedder):
    index.index(folder)
    again = index.index(folder)
    assert (again.files_indexed, again.files_unchanged, again.chunks_embedded) == (0, 5, 0)

    log = folder / "memory" / "2026-11-16.md"
    original = log.read_text()
    log.write_text(original.replace("burst 20", "burst 50"))
    edited = index.index(folder)
    assert (edited.files_indexed, edited.chunks_embedded) == (1, 1)
    assert index.search("burst 50 token bucket").hits[0].path == "memory/2026-11-16.md"

    log.write_text(original)  # a revert is free: the old chunk's vector is still in the cache
    reverted = index.index(folder)
    assert (reverted.files_indexed, reverted.chunks_embedded) == (1, 0)


def test_a_touched_file_with_the_same_bytes_is_not_reindexed(index, folder):
    index.index(folder)
    path = folder / "MEMORY.md"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 5_000_000_000))
    report = index.index(folder)
    assert (report.files_indexed, report.files_unchanged) == (0, 5)


def test_deleted_files_leave_the_index(index, folder):
    index.index(folder)
    (folder / "memory" / "decisions.md").unlink()
    report = index.index(folder)
    assert report.files_removed == 1
    hits = index.search("advisory lock settlement job", build_options(limit=20)).hits
    assert all(h.path != "memory/decisions.md" for h in hits)
    assert index.status().files == {"memory": 4}


def test_only_memory_files_are_indexed_and_symlinks_are_not_followed(index, folder, tmp_path):
    _write(folder / "notes.md", "not memory: outside the patterns")
    _write(folder / "memory" / "deep" / "nested" / "topic.md", "# Topic\nnested memory about kubernetes")
    _write(folder / "memory" / "image.png", b"\x89PNG")
    outside = tmp_path / "secret.md"
    _write(outside, "the outside secret zebra")
    (folder / "memory" / "link.md").symlink_to(outside)
    (folder / "memory" / "linked-dir").symlink_to(tmp_path)
    index.index(folder)
    paths = {h.path for h in index.search("kubernetes zebra outside", build_options(limit=50)).hits}
    assert "memory/deep/nested/topic.md" in paths
    assert not paths & {"notes.md", "memory/link.md"} and not any("linked-dir" in p for p in paths)


def test_filters_by_source_path_prefix_and_date_range(index, folder):
    index.index(folder)
    only_logs = build_options(
        limit=50, min_score=0.0, path_prefix="memory/", date_from="2026-11-17", date_to="2026-11-20"
    )
    paths = {h.path for h in index.search("deploy database test", only_logs).hits}
    assert paths == {"memory/2026-11-18.md", "memory/2026-11-20.md"}
    prefixed = {h.path for h in index.search("decisions", build_options(limit=50, path_prefix="memory/dec")).hits}
    assert prefixed == {"memory/decisions.md"}
    assert index.search("deploy", build_options(sources=["sessions"])).hits == []
    assert index.search("deploy", build_options(sources=["memory"])).hits


@pytest.mark.parametrize("prefix", ["memory/\U0010ffff", "memory/\ud7ff", "\U0010ffff\U0010ffff"])
def test_a_path_filter_ending_in_the_last_code_points_finds_nothing_else_and_does_not_fail(index, folder, prefix):
    index.index(folder)
    assert index.search("decisions", build_options(limit=50, path_prefix=prefix)).hits == []


@given(st.text(max_size=4), st.text(max_size=4))
@example("a\U0010ffff", "b")
@example("a\ud7ff", "\ue000")
@example("\U0010ffff", "")
def test_a_path_filters_range_holds_every_path_starting_with_it_and_no_other(prefix: str, rest: str) -> None:
    # Python compares text by code point, as SQLite and a "C" collation compare its UTF-8 bytes.
    bound = prefix_upper_bound(prefix)
    for path in (prefix + rest, rest, rest + prefix):
        assert (path >= prefix and (bound is None or path < bound)) == path.startswith(prefix)
    assert bound is None or bound.encode("utf-8")  # never a lone surrogate, which neither database takes


def test_min_score_drops_weak_hits(index, folder):
    index.index(folder)
    everything = index.search("integer cents for money", build_options(limit=50, min_score=0.0)).hits
    strong = index.search("integer cents for money", build_options(limit=50, min_score=0.5)).hits
    assert strong and len(strong) < len(everything) and all(h.score >= 0.5 for h in strong)


@pytest.mark.parametrize(
    "query",
    [
        "C++",
        '"unterminated',
        "AND OR NOT",
        "*",
        "-x",
        "NEAR(",
        "col:value",
        "a' OR 1=1 --",
        "^start",
        "((((",
        "\x00",
    ],
)
def test_fts5_syntax_in_a_query_is_searched_as_text(index, folder, query):
    index.index(folder)
    result = index.search(query)
    assert result.mode in ("hybrid", "vector")


def test_keyword_search_finds_code_identifiers(index, folder):
    index.index(folder)
    hits = index.search("processed_events", build_options(mode="keyword")).hits
    assert hits[0].path == "memory/2026-11-18.md" and hits[0].keyword_score == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 10_000}, "limit"),
        ({"limit": True}, "limit"),
        ({"min_score": 2}, "min_score"),
        ({"sources": ["bogus"]}, "source"),
        ({"path_prefix": "../etc"}, "path"),
        ({"path_prefix": "/etc"}, "path"),
        ({"date_from": "2026-13-01"}, "date_from"),
        ({"date_from": "yesterday"}, "date_from"),
        ({"date_from": "2026-11-20", "date_to": "2026-11-01"}, "after"),
        ({"mode": "magic"}, "mode"),
    ],
)
def test_bad_search_arguments_are_clear_errors(kwargs, message):
    with pytest.raises(InvalidArgumentError, match=message):
        build_options(**kwargs)


@pytest.mark.parametrize("query", ["", "   \n\t", "x" * 5000])
def test_empty_or_huge_queries_are_clear_errors(index, query):
    with pytest.raises(InvalidArgumentError):
        index.search(query)


def test_unknown_and_badly_named_indexes_are_clear_errors(tmp_path, local_embedder):
    with pytest.raises(UnknownIndexError):
        MemoryIndex.open(tmp_path, "missing", local_embedder)
    for name in ("../escape", "UPPER", "", "a/b", ".hidden", "x" * 65):
        with pytest.raises(InvalidArgumentError):
            MemoryIndex.open(tmp_path, name, local_embedder, create=True)


def test_bad_files_are_skipped_with_a_reason_and_never_crash(tmp_path, folder, local_embedder):
    from server.index.engine_settings import EngineSettings
    from server.index.scan import ScanConfig

    _write(folder / "memory" / "latin1.md", "caf\xe9 cr\xe8me".encode("latin-1"))
    _write(folder / "memory" / "binary.md", b"\x00\x01\x02binary")
    _write(folder / "memory" / "empty.md", "")
    _write(folder / "memory" / "huge.md", "word " * 30_000)
    _write(folder / "memory" / "bom.md", "\ufeff# BOM\r\nwindows line endings with a bom\r\n")
    settings = EngineSettings(scan=ScanConfig(max_file_bytes=100_000))
    index = MemoryIndex.open(tmp_path / "data", "bad", local_embedder, create=True, settings=settings)
    try:
        report = index.index(folder)
        reasons = dict(report.skipped)
        assert set(reasons) == {"memory/latin1.md", "memory/binary.md", "memory/huge.md"}
        assert "UTF-8" in reasons["memory/latin1.md"] and "binary" in reasons["memory/binary.md"]
        assert "larger" in reasons["memory/huge.md"]
        assert index.status().files == {"memory": 7}  # the five examples, the empty file and the BOM file
        hit = index.search("windows line endings", build_options(mode="keyword")).hits[0]
        assert hit.path == "memory/bom.md" and (hit.start_line, hit.end_line) == (2, 2)  # under "# BOM"
    finally:
        index.close()


@pytest.mark.parametrize("damage", ["garbage", "truncated", "zeroed-pages"])
def test_a_corrupt_database_is_detected_and_rebuilt_from_the_files(tmp_path, folder, local_embedder, damage):
    index = MemoryIndex.open(tmp_path / "data", "demo", local_embedder, create=True)
    index.index(folder)
    db_path = index.db_path
    index.close()
    data = bytearray(db_path.read_bytes())
    if damage == "garbage":
        data = bytearray(b"this is not a database" * 1000)
    elif damage == "truncated":
        data = data[: len(data) // 3]
    else:
        data[4096:] = bytes(len(data) - 4096)
    db_path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)

    reopened = MemoryIndex.open(tmp_path / "data", "demo", local_embedder)
    try:
        result = reopened.search("webhook idempotent processed events")
        assert result.hits[0].path == "memory/2026-11-18.md"
        assert reopened.status().files == {"memory": 5}
        assert list(db_path.parent.glob("index.sqlite3.corrupt-*")), "the damaged file is kept for inspection"
    finally:
        reopened.close()


class GatedEmbedder(HashingEmbedder):
    """Embeds on other threads (the background rebuild) only once `open` is set, so 'meanwhile' lasts."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()
        self.open.set()

    def embed(self, texts, *, kind="document"):
        if threading.current_thread() is not threading.main_thread():
            assert self.open.wait(timeout=30), "the test never let the rebuild embed"
        return super().embed(texts, kind=kind)


def test_a_database_corrupted_while_serving_is_rebuilt_with_keyword_search_meanwhile(tmp_path, folder):
    embedder = GatedEmbedder()
    index = MemoryIndex.open(tmp_path / "data", "live", embedder, create=True)
    try:
        index.index(folder)
        assert index.search("webhook idempotent processed events").mode == "hybrid"
        index.store.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with index.db_path.open("r+b") as handle:  # pages zeroed under the open server, as a failing disk does
            handle.seek(4096)
            handle.write(bytes(index.db_path.stat().st_size - 4096))

        embedder.open.clear()  # the background rebuild of the vectors waits until the search below has answered
        meanwhile = index.search("webhook idempotent processed events")
        embedder.open.set()
        assert meanwhile.mode == "keyword" and "rebuilt" in (meanwhile.notice or "")
        assert meanwhile.hits[0].path == "memory/2026-11-18.md"
        assert list(index.db_path.parent.glob("index.sqlite3.corrupt-*")), "the damaged file is kept for inspection"
        thread = index._rebuild_thread
        assert thread is not None
        thread.join(timeout=30)
        after = index.search("webhook idempotent processed events")
        assert after.mode == "hybrid" and after.hits[0].path == "memory/2026-11-18.md"
        assert index.status().files == {"memory": 5} and index.status().pending_vectors == 0
    finally:
        index.close()


CRASHING_INDEXER = """
import os, sys
from pathlib import Path
from server.index.engine import MemoryIndex
from tests.fakes.embedder import HashingEmbedder

index = MemoryIndex.open(Path(sys.argv[1]), "demo", HashingEmbedder())
db = index.store.connection()
inserted = []

def crash():
    inserted.append(1)
    if len(inserted) == 2:
        os._exit(9)  # the process dies inside the file's transaction, with no chance to roll back
    return 0

db.create_scalar_function("crash", crash, 0)
db.execute("CREATE TEMP TRIGGER die BEFORE INSERT ON chunks BEGIN SELECT crash(); END")
index.index(Path(sys.argv[2]))
"""


def test_a_process_killed_while_writing_a_file_leaves_a_consistent_index(tmp_path, folder):
    import subprocess
    import sys

    from tests.conftest import REPO

    data = tmp_path / "data"
    index = MemoryIndex.open(data, "demo", HashingEmbedder(), create=True)
    index.index(folder)
    index.close()
    log = folder / "memory" / "2026-11-20.md"
    log.write_text(log.read_text() + "\n## 18:00 — Crash test\nThe unicorn migration runs tonight.\n")

    child = subprocess.run(
        [sys.executable, "-c", CRASHING_INDEXER, str(data), str(folder)], cwd=REPO, timeout=120, check=False
    )
    assert child.returncode == 9

    index = MemoryIndex.open(data, "demo", HashingEmbedder())
    try:
        assert index.store.connection().execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert not index.search("unicorn", build_options(mode="keyword")).hits
        old = index.search("deploy checklist rollback", build_options(mode="keyword")).hits
        assert old and old[0].path == "memory/2026-11-20.md"  # the file's previous content is whole
        assert index.index(folder).files_indexed == 1
        assert index.search("unicorn", build_options(mode="keyword")).hits
    finally:
        index.close()


def test_without_a_model_search_falls_back_to_keywords_and_says_so(tmp_path, folder):
    index = MemoryIndex.open(tmp_path / "data", "plain", None, create=True)
    try:
        index.index(folder)
        result = index.search("webhook retries idempotent")
        assert result.mode == "keyword" and "keyword" in (result.notice or "")
        assert result.hits[0].path == "memory/2026-11-18.md"
        assert index.status().search_modes == ["keyword"]
    finally:
        index.close()


def test_without_sqlite_vec_search_falls_back_to_keywords_and_says_so(tmp_path, folder, local_embedder, monkeypatch):
    from server.index import store

    monkeypatch.setattr(store, "vec_available", lambda: False)
    index = MemoryIndex.open(tmp_path / "data", "novec", local_embedder, create=True)
    try:
        index.index(folder)
        result = index.search("webhook retries")
        assert result.mode == "keyword" and "sqlite-vec" in (result.notice or "")
        assert result.hits[0].path == "memory/2026-11-18.md"
    finally:
        index.close()


def test_a_failing_model_leaves_chunks_pending_until_it_recovers(tmp_path, folder):
    embedder = HashingEmbedder()
    embedder.fail = True
    now = [0.0]
    providers = ProviderChain.of([embedder], clock=lambda: now[0])
    index = MemoryIndex.open(tmp_path / "data", "flaky", providers, create=True)
    try:
        report = index.index(folder)
        assert report.chunks_written > 0 and report.chunks_pending == report.chunks_written
        failing = index.search("webhook retries")
        assert failing.mode == "keyword" and "unavailable" in (failing.notice or "") and failing.hits
        embedder.fail = False
        index.index(folder)
        assert index.status().pending_vectors == report.chunks_written  # the breaker rests the provider a while
        now[0] += 60
        index.index(folder)
        assert index.status().pending_vectors == 0
        assert index.search("webhook retries", build_options(mode="vector")).hits
    finally:
        index.close()


def test_switching_model_rebuilds_vectors_in_the_background_while_keywords_answer(tmp_path, folder, local_embedder):
    old = HashingEmbedder()
    first = MemoryIndex.open(tmp_path / "data", "switch", old, create=True)
    first.index(folder)
    first.close()

    gate = threading.Event()
    entered = threading.Event()

    class GatedLocal:
        provider, model, dimensions, max_tokens = (
            local_embedder.provider,
            local_embedder.model,
            local_embedder.dimensions,
            local_embedder.max_tokens,
        )
        tokenizer = local_embedder.tokenizer

        def embed(self, texts, *, kind="document"):
            if kind == "document":
                entered.set()
                assert gate.wait(60), "the test never opened the gate"
            return local_embedder.embed(texts, kind=kind)

    index = MemoryIndex.open(tmp_path / "data", "switch", GatedLocal())
    try:
        assert index.vector_state()[0] == "rebuilding"
        thread = index.start_background_rebuild()
        assert entered.wait(60)
        during = index.search("webhook retries idempotent")
        assert during.mode == "keyword" and "rebuilt" in (during.notice or "")
        assert during.hits[0].path == "memory/2026-11-18.md"
        assert index.status().model == "hashing-v1"  # the old vectors stay live until the swap
        gate.set()
        thread.join(120)
        assert not thread.is_alive()
        after = index.search("webhook retries idempotent")
        assert after.mode == "hybrid" and after.hits[0].path == "memory/2026-11-18.md"
        status = index.status()
        assert (status.model, status.dimensions, status.pending_vectors) == (local_embedder.model, 384, 0)
        tables = {r[0] for r in index.store.connection().execute("SELECT name FROM sqlite_master")}
        assert "vectors_1" not in tables and "vectors_2" in tables
    finally:
        gate.set()
        index.close()


def test_switching_between_the_fp32_and_int8_local_models_rebuilds_vectors_each_way(tmp_path, folder, fp32_embedder):
    first = MemoryIndex.open(tmp_path / "data", "local", fp32_embedder, create=True)  # built before int8 was default
    first.index(folder)
    first.close()
    for embedder in (LocalEmbedder(), fp32_embedder):  # the new default, then back (MEMORY_LOCAL_MODEL)
        index = MemoryIndex.open(tmp_path / "data", "local", embedder)
        try:
            assert index.needs_rebuild and index.vector_state()[0] == "rebuilding"
            thread = index.start_background_rebuild()
            assert thread is not None
            thread.join(120)
            assert not thread.is_alive()
            status = index.status()
            assert (status.model, status.pending_vectors) == (embedder.model, 0)
            result = index.search("how do we avoid processing the same webhook event twice")
            assert result.mode == "hybrid" and result.hits[0].path == "memory/2026-11-18.md"
            cached = index.store.connection().execute("SELECT DISTINCT model FROM embedding_cache ORDER BY model")
            assert [row[0] for row in cached] == [FP32.model_id, INT8.model_id]  # apart: neither taken for the other
        finally:
            index.close()


def test_indexing_given_paths_looks_at_those_files_only(tmp_path, folder):
    index = MemoryIndex.open(tmp_path / "data", "paths", HashingEmbedder(), create=True)
    try:
        index.index(folder)
        _write(folder / "memory" / "2026-11-16.md", "# 2026-11-16\n\n- Rewritten: zebra migration notes.\n")
        _write(folder / "memory" / "2026-11-18.md", "# 2026-11-18\n\n- Rewritten: okapi rollout notes.\n")
        report = index.index(paths=["memory/2026-11-16.md"])
        assert (report.files_seen, report.files_indexed, report.files_removed) == (1, 1, 0)
        assert index.search("zebra", build_options(mode="keyword")).hits
        assert not index.search("okapi", build_options(mode="keyword")).hits  # not asked for: not looked at

        (folder / "memory" / "2026-11-16.md").unlink()
        outside = tmp_path / "outside"
        outside.mkdir()
        _write(outside / "2026-11-18.md", "# planted\n\n- okapi through a symlink\n")
        shutil.rmtree(folder / "memory" / "sub", ignore_errors=True)
        (folder / "memory" / "sub").symlink_to(outside)
        report = index.index(paths=["memory/2026-11-16.md", "memory/sub/2026-11-18.md", "../escape.md", "notes.txt"])
        assert (report.files_seen, report.files_removed) == (0, 1)
        assert not index.search("zebra", build_options(mode="keyword")).hits
        assert not index.search("okapi", build_options(mode="keyword")).hits
        assert index.status().files == {"memory": 4}
    finally:
        index.close()


def test_neighbouring_chunks_of_one_file_come_back_as_one_hit_spanning_them(tmp_path, local_embedder):
    project = tmp_path / "project"
    turns = [f"- **Ana:** the release train {n} leaves on Thursday and the hotfix lane stays open." for n in range(40)]
    _write(project / "memory" / "2026-11-20.md", "# Release notes\n\n" + "\n".join(turns) + "\n")
    index = MemoryIndex.open(tmp_path / "data", "places", local_embedder, create=True)
    try:
        index.index(project)
        chunks = index.store.connection().execute("SELECT count(*) FROM chunks").fetchall()[0][0]
        hits = index.search("when does the release train leave", build_options(limit=8)).hits
    finally:
        index.close()
    assert chunks > 2  # the file is several chunks, and every one of them matches
    assert len(hits) == 1 and (hits[0].start_line, hits[0].end_line) == (3, 42)
    assert hits[0].citation == "memory/2026-11-20.md#L3-L42"


def test_a_hit_points_to_the_lines_under_its_heading_which_it_carries_apart(tmp_path, local_embedder):
    project = tmp_path / "project"
    _write(project / "memory" / "2026-11-20.md", "# 2026-11-20 - standup\n\n- Ana moved the release train.\n")
    _write(project / "memory" / "notes.md", "# Project\n\n## Release\n\nThe train leaves on Thursday.\n")
    index = MemoryIndex.open(tmp_path / "data", "bodies", local_embedder, create=True)
    try:
        index.index(project)
        hits = {hit.path: hit for hit in index.search("release train", build_options(limit=8)).hits}
    finally:
        index.close()
    log, note = hits["memory/2026-11-20.md"], hits["memory/notes.md"]
    assert (log.citation, log.heading) == ("memory/2026-11-20.md#L3-L3", "2026-11-20 - standup")
    assert log.snippet == "- Ana moved the release train."
    assert (note.citation, note.heading) == ("memory/notes.md#L5-L5", "Project > Release")
    assert note.snippet == "The train leaves on Thursday."


def test_a_damaged_vector_table_is_taken_for_corruption_and_rebuilt(tmp_path, folder):
    # Found by the fault loop (scripts/faults.py --seed 2): 4 KiB of noise in the middle of index.sqlite3 left the
    # b-tree sound but sqlite-vec's chunk of vectors unreadable, and every search failed with "vectors blob read
    # error" instead of rebuilding the index from the files.
    index = MemoryIndex.open(tmp_path / "data", "live", HashingEmbedder(), create=True)
    try:
        index.index(folder)
        db = index.store.connection()
        (table,) = [
            row[0]
            for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE '%vector_chunks%'")
        ]
        db.execute(f"UPDATE {table} SET vectors = zeroblob(3)")  # a chunk of vectors of the wrong size

        meanwhile = index.search("webhook idempotent processed events")
        assert meanwhile.hits[0].path == "memory/2026-11-18.md"
        assert list(index.db_path.parent.glob("index.sqlite3.corrupt-*")), "the damaged file is kept for inspection"
    finally:
        index.close()


@pytest.mark.parametrize(
    "message",
    [
        "vectors blob read error for 1",
        "vectors blob size doesn't match - expected 262144, found 3",
        "chunks iter error",
        "UNIQUE constraint failed on vectors_1 primary key",
    ],
)
def test_sqlite_vec_reporting_its_own_tables_unreadable_is_corruption(message):
    # The messages noise in index.sqlite3 drew from sqlite-vec in the fault loop and in a fuzz of its damage.
    import apsw

    from server.index.store import is_corruption

    assert is_corruption(apsw.SQLError(message))
    assert not is_corruption(apsw.SQLError("invalid float32 vector BLOB length. Must be divisible by 4, found 3"))
    assert not is_corruption(apsw.ConstraintError("UNIQUE constraint failed: files.path"))


def test_damage_first_seen_in_the_vector_space_at_open_is_rebuilt_from_the_files(tmp_path, folder, monkeypatch):
    # Found by a fuzz of the fault loop's damage: the schema check passed, the meta page read next was malformed,
    # and the index could not be opened at all (every search and push of the index failed).
    import apsw

    import server.index.engine as engine

    index = MemoryIndex.open(tmp_path / "data", "live", HashingEmbedder(), create=True)
    index.index(folder)
    index.close()
    real = engine.ensure_live_space
    calls = []

    def damaged_once(store, embedder):
        calls.append(1)
        if len(calls) == 1:
            raise apsw.CorruptError("database disk image is malformed")
        return real(store, embedder)

    monkeypatch.setattr(engine, "ensure_live_space", damaged_once)
    reopened = MemoryIndex.open(tmp_path / "data", "live", HashingEmbedder())
    try:
        assert reopened.search("webhook idempotent processed events").hits[0].path == "memory/2026-11-18.md"
        assert list(reopened.db_path.parent.glob("index.sqlite3.corrupt-*")), "the damaged file is kept"
    finally:
        reopened.close()


def _indexed_beside_its_files(tmp_path: Path, folder: Path) -> MemoryIndex:
    """An index whose files lie in its own folder, as the service keeps them."""
    from server.index.naming import FILES_FOLDER

    index = MemoryIndex.open(tmp_path / "data", "kept", HashingEmbedder(), create=True)
    files = index.directory / FILES_FOLDER
    shutil.copytree(folder, files)
    index.index(files)
    return index


@pytest.mark.parametrize("garbled", [b"", b'{"root": "/x', b"[]", b"\xff\xfe"])
def test_an_unreadable_index_json_is_rewritten_from_the_folder_and_the_index_answers(tmp_path, folder, garbled, caplog):
    import json

    from server.index.naming import FILES_FOLDER

    index = _indexed_beside_its_files(tmp_path, folder)
    directory, db_path = index.directory, index.db_path
    index.close()
    (directory / "index.json").write_bytes(garbled)

    reopened = MemoryIndex.open(tmp_path / "data", "kept", HashingEmbedder())
    try:
        assert any("rewritten" in record.message for record in caplog.records)
        assert reopened.root == (directory / FILES_FOLDER).resolve() and reopened.db_path == db_path
        assert json.loads((directory / "index.json").read_text("utf-8"))["root"] == str(reopened.root)
        assert reopened.search("webhook idempotent processed events").hits[0].path == "memory/2026-11-18.md"
        assert not list(directory.glob("index.sqlite3.corrupt-*")), "the database was kept, not rebuilt"
    finally:
        reopened.close()


def test_a_rewritten_index_json_names_the_newest_database_present(tmp_path):
    from server.index.rechunk import present_database

    assert present_database(tmp_path) == "index.sqlite3"
    for name in ("index.sqlite3", "index-900.sqlite3", "index-1000.sqlite3", "index-2000.sqlite3-wal", "other.db"):
        (tmp_path / name).write_bytes(b"")
    assert present_database(tmp_path) == "index-1000.sqlite3"


def test_index_json_is_flushed_to_disk_and_its_rename_too(tmp_path, monkeypatch):
    import server.index.naming as naming

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(naming.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    naming.write_info(tmp_path, {"root": None})
    assert len(synced) == 2  # the new file, then the folder holding the rename


def test_the_files_folder_a_rewritten_index_json_names_is_the_one_the_mirror_keeps(tmp_path):
    from server.index.naming import FILES_FOLDER
    from server.mirror.mirror import Mirror

    mirror = Mirror(tmp_path)
    try:
        assert mirror.files_dir == tmp_path / FILES_FOLDER
    finally:
        mirror.close()


REFUSED_NAMES = [
    "memory/" + unicodedata.normalize("NFD", "café.md"),
    "memory/a:b.md",
    "memory/.draft.md",
    "memory/CON.md",
    "sessions/laptop/notes.md",
]


def test_the_index_holds_the_files_the_mirror_holds_and_none_it_refuses(tmp_path, folder):
    from server.mirror.files import walk

    index = MemoryIndex.open(tmp_path / "data", "names", HashingEmbedder(), create=True)
    try:
        for name in REFUSED_NAMES:
            _write(folder / name, "# refused\n\nzzrefusedmarker text\n")
        _write(folder / "sessions" / "laptop" / "2026-11-20-abc.md", "# transcript\n\nzztranscript text\n")
        index.index(folder)
        assert set(index.indexed_files()) == {path for path, _ in walk(folder)}
        assert index.search("zzrefusedmarker", build_options(mode="keyword")).hits == []
        assert index.index(folder, paths=REFUSED_NAMES).files_seen == 0  # named, they are refused just the same
    finally:
        index.close()


def test_a_model_whose_dimensions_change_under_its_name_embeds_again_instead_of_reading_old_vectors(tmp_path, folder):
    first = MemoryIndex.open(tmp_path / "data", "dims", HashingEmbedder("same-name", 64), create=True)
    first.index(folder)
    first.close()
    resized = HashingEmbedder("same-name", 32)
    index = MemoryIndex.open(tmp_path / "data", "dims", resized)
    try:
        assert index.rebuild_vectors()
        assert sum(resized.calls) > 0, "the cached vectors of the old size were not taken"
        result = index.search("webhook idempotent processed events")
        assert result.mode == "hybrid" and result.hits[0].path == "memory/2026-11-18.md"
        sizes = index.store.connection().execute("SELECT DISTINCT length(vector) FROM embedding_cache").fetchall()
        assert sizes == [(4 * 32,)], "the old vectors were replaced"
    finally:
        index.close()


def test_an_unexpected_error_in_the_background_rebuild_is_logged_by_its_type_only(
    tmp_path, folder, monkeypatch, caplog
):
    import server.index.engine as engine

    def failing(*args, **kwargs):
        raise RuntimeError("text quoting memory/secret.md")

    index = MemoryIndex.open(tmp_path / "data", "fails", HashingEmbedder(), create=True)
    try:
        index.index(folder)
        monkeypatch.setattr(engine, "rebuild", failing)
        thread = index.start_background_rebuild()
        assert thread is not None
        thread.join(timeout=30)
        assert not thread.is_alive()
        logged = [record.getMessage() for record in caplog.records if record.name == "server.index.engine"]
        assert any("RuntimeError" in message for message in logged)
        assert not any("secret" in message for message in logged)
    finally:
        index.close()


def test_an_indexed_file_that_turns_unreadable_leaves_the_index_until_it_is_readable_again(tmp_path, folder):
    index = MemoryIndex.open(tmp_path / "data", "turns", HashingEmbedder(), create=True)
    try:
        _write(folder / "memory" / "turns.md", "# t\n\nzzoldwords text\n")
        index.index(folder)
        _write(folder / "memory" / "turns.md", b"# t\n\nzznewwords \xff\xfe text\n")
        report = index.index(folder)
        assert [path for path, _ in report.skipped] == ["memory/turns.md"]
        assert index.search("zzoldwords", build_options(mode="keyword")).hits == []
        assert "memory/turns.md" not in index.indexed_files()
        _write(folder / "memory" / "turns.md", "# t\n\nzzfixedwords text\n")
        index.index(folder)
        assert index.search("zzfixedwords", build_options(mode="keyword")).hits[0].path == "memory/turns.md"
    finally:
        index.close()


@pytest.mark.parametrize("loss", ["deleted", "emptied"])
def test_a_lost_database_is_rebuilt_from_the_files_and_says_so(tmp_path, folder, loss, caplog):
    index = MemoryIndex.open(tmp_path / "data", "lost", HashingEmbedder(), create=True)
    index.index(folder)
    db_path = index.db_path
    index.close()
    if loss == "deleted":
        db_path.unlink()
    else:
        db_path.write_bytes(b"")

    reopened = MemoryIndex.open(tmp_path / "data", "lost", HashingEmbedder())
    try:
        assert any("has no database" in record.message for record in caplog.records)
        hits = reopened.search("webhook idempotent processed events", build_options(mode="keyword")).hits
        assert hits[0].path == "memory/2026-11-18.md" and reopened.status().files == {"memory": 5}
    finally:
        reopened.close()


def test_a_new_index_without_files_opens_without_a_warning(tmp_path, caplog):
    MemoryIndex.open(tmp_path / "data", "fresh", HashingEmbedder(), create=True).close()
    assert not [record for record in caplog.records if record.levelname == "WARNING"]
