"""The search index in PostgreSQL (`server.postgres.search`): hybrid search by meaning and by keyword over a real
PostgreSQL with pgvector, edits and deletions reaching the index, hostile queries, and work
that runs once across two servers on one database (indexing, the rebuild for a new model)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

import psycopg
import pytest

from server.index.chunker import ChunkerConfig
from server.index.embeddings.chain import ProviderChain
from server.index.engine_settings import EngineSettings
from server.index.labels import Labels
from server.index.search import SearchOptions, build_options
from server.index.stats import COMPLETE_THROUGH
from server.postgres.connection import schema_of
from server.postgres.files import PgFileStore
from server.postgres.search import PgSearchIndex
from server.postgres.search_queries import MAX_LEXEME_CHARS
from server.postgres.search_vectors import meta, read_space
from tests.fakes.embedder import HashingEmbedder
from tests.postgres_support import OLD_POSTINGS
from tests.server.postgres.conftest import Opened

NOTES = {
    "memory/deploy.md": "# Deploying\n\nThe staging cluster is upgraded every Tuesday by the release train.\n",
    "memory/food.md": "# Lunch\n\nThe team prefers ramen on Fridays; the noodle shop opens at noon.\n",
    "memory/db.md": "# Database\n\nPostgreSQL replicas replay the write-ahead log from the primary.\n",
}


def write_all(store: PgFileStore, notes: dict[str, str]) -> None:
    for path, text in notes.items():
        store.write(path, text, caller="alice")


def paths_of(index: PgSearchIndex, query: str, **options: object) -> list[str]:
    return [hit.path for hit in index.search(query, build_options(**options)).hits]  # type: ignore[arg-type]


def test_hybrid_search_finds_a_note_by_keyword_and_by_meaning(open_index: Callable[..., Opened]) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    report = index.index()
    assert report.files_indexed == 3 and report.chunks_pending == 0

    result = index.search("noodle shop", SearchOptions())
    assert result.mode == "hybrid" and result.notice is None
    assert result.hits[0].path == "memory/food.md"
    assert result.hits[0].matched_by == "both" and result.hits[0].citation == "memory/food.md#L3-L3"
    assert result.hits[0].heading == "Lunch" and result.hits[0].snippet.startswith("The team prefers ramen")
    assert paths_of(index, "replay write-ahead log", mode="keyword")[0] == "memory/db.md"
    # The hashing embedder's "meaning" is word overlap: a query the keyword side cannot stem alike still finds it.
    assert paths_of(index, "staging cluster Tuesday", mode="vector")[0] == "memory/deploy.md"


def test_an_edited_file_loses_its_old_chunks_and_a_deleted_one_leaves_the_index(
    open_index: Callable[..., Opened],
) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    index.index()
    store.write("memory/food.md", "# Lunch\n\nThe team now prefers tacos on Fridays.\n", caller="alice")
    index.index(paths=["memory/food.md"])
    assert paths_of(index, "ramen noodle", mode="keyword") == []
    assert paths_of(index, "tacos", mode="keyword") == ["memory/food.md"]
    store.delete("memory/db.md", caller="alice")
    assert index.index().files_removed == 1
    assert paths_of(index, "write-ahead log", mode="keyword") == []
    assert set(index.indexed_files()) == {"memory/deploy.md", "memory/food.md"}
    status = index.status()
    assert status.files == {"memory": 2} and status.pending_vectors == 0 and status.vector_state == "ready"


def test_filters_by_path_and_tag_apply_on_both_sides(open_index: Callable[..., Opened]) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    store.write("memory/ops/tagged.md", "---\ntags: [ops]\n---\n# Pager\n\nThe pager rotates weekly.\n", caller="a")
    index.index()
    assert paths_of(index, "pager rotates", tags=["ops"]) == ["memory/ops/tagged.md"]
    assert paths_of(index, "team", path_prefix="memory/food") == ["memory/food.md"]
    labelled = index.file_labels(Labels(("ops",), None))
    assert list(labelled) == ["memory/ops/tagged.md"] and labelled["memory/ops/tagged.md"].tags == ("ops",)


def test_every_path_column_compares_by_bytes_whatever_the_databases_collation(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    # Under en_US.utf8 (the official images' default) 'memory/deploy.md' sorts after 'memory0', the bound of the
    # path filter's range: the filter found nothing. This machine has no such locale, so the columns are checked.
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    index.index()
    with psycopg.connect(postgres_url) as db:
        rows = db.execute(
            "SELECT table_name, collation_name FROM information_schema.columns"
            " WHERE table_schema = %s AND column_name = 'path'",
            (schema_of("proj"),),
        ).fetchall()
    tables = {table for table, _ in rows}
    assert {"files", "history", "indexed_files"} <= tables and any(t.startswith("vectors_") for t in tables)
    assert {table: collation for table, collation in rows} == dict.fromkeys(tables, "C")


def test_a_word_longer_than_an_index_key_is_cut_and_its_file_still_found_by_it_alone(
    open_index: Callable[..., Opened],
) -> None:
    digits = "".join(hashlib.sha256(str(n).encode()).hexdigest() for n in range(80))
    dump = f"{digits}"  # one 5,120-character word that does not compress: over a btree key's 2.7 kB
    key = digits[:1500]  # a word under the query's limit, still far over the lexemes kept
    index, store = open_index(HashingEmbedder())
    write_all(store, {**NOTES, "memory/dump.md": f"# Dump\n\n{dump}\n", "memory/key.md": f"# Key\n\n{key}\n"})
    assert index.index().files_indexed == 5  # every file, those after the dump too
    assert paths_of(index, "dump", mode="keyword") == ["memory/dump.md"]
    assert paths_of(index, key, mode="keyword") == ["memory/key.md"]  # the dump's word starts alike, is another
    with index._reader() as db:
        longest = db.execute("SELECT max(length(lexeme)) FROM chunk_terms").fetchall()[0][0]
    assert longest == MAX_LEXEME_CHARS


def test_an_index_schema_version_4_made_gets_byte_ordered_paths_and_cut_lexemes(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    index.index()
    long_a, long_b = "k" * 250 + "a", "k" * 250 + "b"  # one chunk's two words that agree on the kept 200
    with psycopg.connect(postgres_url, autocommit=True) as admin:  # back to what version 4 made
        admin.execute(f'SET search_path TO "{schema_of("proj")}", public')
        for table in ("files", "history", "indexed_files"):
            admin.execute(f'ALTER TABLE {table} ALTER COLUMN path TYPE TEXT COLLATE "default"')
        admin.execute(OLD_POSTINGS)
        chunk = admin.execute("SELECT min(id) FROM chunks").fetchone()
        assert chunk is not None
        for word in (long_a, long_b):
            admin.execute("INSERT INTO chunk_terms(lexeme, chunk_id, tf) VALUES (%s, %s, 1.5)", (word, chunk[0]))
        admin.execute("INSERT INTO chunk_terms(lexeme, chunk_id, tf) VALUES (%s, %s, 1)", ("k" * 200, chunk[0]))
        admin.execute("UPDATE schema_version SET version = 4")
    upgraded, _ = open_index(HashingEmbedder(), "two")
    with psycopg.connect(postgres_url) as db:
        db.execute(f'SET search_path TO "{schema_of("proj")}"')
        collations = db.execute(
            "SELECT DISTINCT collation_name FROM information_schema.columns"
            " WHERE table_schema = %s AND column_name = 'path'",
            (schema_of("proj"),),
        ).fetchall()
        long = db.execute("SELECT lexeme, tf FROM chunk_terms WHERE lexeme LIKE 'kkk%%'").fetchall()
    assert collations == [("C",)]
    assert long == []  # cut by migration 5, then computed again from the chunks' text by migration 6
    assert paths_of(upgraded, "ramen")[0] == "memory/food.md"


@pytest.mark.parametrize("prefix", ["memory/\U0010ffff", "memory/\ud7ff", "\U0010ffff"])
def test_a_path_filter_ending_in_the_last_code_points_finds_nothing_else_and_does_not_fail(
    open_index: Callable[..., Opened], prefix: str
) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    index.index()
    assert paths_of(index, "ramen", path_prefix=prefix) == []


@pytest.mark.parametrize(
    "query",
    ["'; DROP TABLE chunks; --", "ramen & | ! ( ) :* <-> \\", '"unclosed', "%s %(x)s ?", "\x00ramen", "::vector"],
)
def test_a_hostile_query_string_is_harmless(open_index: Callable[..., Opened], query: str) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, NOTES)
    index.index()
    index.search(query.replace("\x00", ""), SearchOptions())
    assert paths_of(index, "ramen")[0] == "memory/food.md"
    assert index.status().chunks == {"memory": 3}


def test_two_servers_index_a_change_once(open_index: Callable[..., Opened]) -> None:
    one_embedder, two_embedder = HashingEmbedder(), HashingEmbedder()
    one, store = open_index(one_embedder, "one")
    two, _ = open_index(two_embedder, "two")
    write_all(store, NOTES)
    one.index()
    embedded = one_embedder.embedded
    assert embedded == 3
    report = two.index()
    assert report.files_indexed == 0 and report.files_unchanged == 3 and two_embedder.embedded == 0
    assert paths_of(two, "ramen")[0] == "memory/food.md"  # what one indexed, two finds


def test_two_servers_indexing_at_once_embed_each_chunk_once(open_index: Callable[..., Opened]) -> None:
    embedders = [HashingEmbedder(), HashingEmbedder()]
    indexes = [open_index(embedders[0], "one"), open_index(embedders[1], "two")]
    write_all(indexes[0][1], {f"memory/n{n}.md": f"# Note {n}\n\nFact number {n} about ducks.\n" for n in range(40)})
    start = threading.Barrier(2)

    def run(index: PgSearchIndex) -> None:
        start.wait(5)
        index.index()

    threads = [threading.Thread(target=run, args=(index,)) for index, _ in indexes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sum(e.embedded for e in embedders) == 40
    assert indexes[1][0].status().chunks == {"memory": 40}


def test_a_rebuild_for_a_new_model_runs_once_across_servers(open_index: Callable[..., Opened]) -> None:
    first, store = open_index(HashingEmbedder("old-model"), "one")
    write_all(store, NOTES)
    first.index()
    gate, reached = threading.Event(), threading.Event()

    class Gated(HashingEmbedder):
        def embed(self, texts, *, kind="document"):  # type: ignore[no-untyped-def]
            if kind == "document":
                reached.set()
                gate.wait(10)
            return super().embed(texts, kind=kind)

    new_one, new_two = Gated("new-model"), Gated("new-model")
    one, _ = open_index(new_one, "one")
    two, _ = open_index(new_two, "two")
    assert one.needs_rebuild and two.needs_rebuild
    running = one.start_background_rebuild()
    assert running is not None and reached.wait(10)
    # one holds the rebuild lock (its first batch waits at the gate): two's attempt sees it and ends at once
    elsewhere = two.start_background_rebuild()
    assert elsewhere is not None
    elsewhere.join(10)
    assert two.rebuilding_elsewhere and "another server" in (two.status().notice or "")
    assert paths_of(two, "ramen", mode="keyword")[0] == "memory/food.md"  # two keeps serving meanwhile
    gate.set()
    running.join(10)
    assert not running.is_alive()
    assert new_two.embedded == 0 and new_one.embedded == 3
    assert not two.needs_rebuild and two.status().model == "new-model"
    assert paths_of(two, "ramen")[0] == "memory/food.md"


def test_the_keyword_statistics_follow_the_chunks(open_index: Callable[..., Opened], postgres_url: str) -> None:
    index, store = open_index(None)
    write_all(store, NOTES)
    index.index()
    store.delete("memory/db.md", caller="alice")
    store.write("memory/food.md", NOTES["memory/food.md"] + "\nMore words about lunch here.\n", caller="alice")
    index.index()
    with psycopg.connect(postgres_url) as db:
        db.execute(f'SET search_path TO "{schema_of("proj")}"')
        kept = db.execute("SELECT chunks, terms FROM keyword_stats").fetchone()
        counted = db.execute("SELECT count(*), sum(terms) FROM chunks").fetchone()
        wrong_lengths = db.execute(
            "SELECT count(*) FROM chunk_terms t JOIN chunks c ON c.id = t.chunk_id WHERE t.chunk_length <> c.terms"
        ).fetchone()
    assert kept is not None and counted is not None
    assert (kept[0], kept[1]) == (counted[0], counted[1])
    assert wrong_lengths == (0,)  # every posting carries its chunk's length


def test_new_chunk_settings_cut_every_file_again_once(open_index: Callable[..., Opened], postgres_url: str) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, {"memory/long.md": "# Long\n\n" + "\n\n".join(f"Paragraph {n} " * 30 for n in range(12))})
    index.index()
    before = index.status().chunks["memory"]
    smaller = EngineSettings(chunker=ChunkerConfig(max_tokens=64, overlap_tokens=8, heading_budget=16))
    other = PgSearchIndex(postgres_url, "proj", HashingEmbedder(), smaller)
    try:
        assert other.needs_rebuild
        thread = other.start_background_rebuild()
        assert thread is not None
        thread.join(30)
        assert not other.needs_rebuild
        assert other.status().chunks["memory"] > before and other.status().pending_vectors == 0
        assert set(paths_of(other, "Paragraph 11")) == {"memory/long.md"}
    finally:
        other.close()


def test_files_left_unindexed_are_indexed_in_the_background_on_open(open_index: Callable[..., Opened]) -> None:
    _first, store = open_index(None, "one")
    write_all(store, NOTES)  # written, never indexed (as after an upgrade from a local search index)
    index, _ = open_index(None, "two")
    assert index.needs_rebuild
    thread = index.start_background_rebuild()
    assert thread is not None
    thread.join(30)
    assert set(index.indexed_files()) == set(NOTES) and not index.needs_rebuild


def test_the_reordering_options_work_on_postgresql_as_on_sqlite(open_index: Callable[..., Opened]) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(
        store,
        {
            "memory/a.md": "# Lunch\n\nramen noodle shop lunch near the office today\n",
            "memory/b.md": "# Lunch\n\nramen noodle shop lunch near the office today again\n",
            "memory/c.md": "# Team\n\nramen for the team offsite, booked with colleagues downtown\n",
        },
    )
    index.index()
    query = "ramen noodle shop lunch office"
    plain = paths_of(index, query, mode="vector")
    assert plain[:2] == ["memory/b.md", "memory/a.md"] or plain[:2] == ["memory/a.md", "memory/b.md"]
    # MMR reads each candidate's vector from its pgvector table: the near-copy of the best hit moves down.
    diverse = paths_of(index, query, mode="vector", mmr_lambda=0.3)
    assert diverse[0] == plain[0] and diverse[1] == "memory/c.md"
    unranked = index.search(query, build_options(rerank=True))
    assert unranked.notice is not None and "reranking is not configured" in unranked.notice
    assert [hit.path for hit in unranked.hits] == paths_of(index, query)


def test_vector_feedback_works_on_postgresql_as_on_sqlite(open_index: Callable[..., Opened]) -> None:
    from tests.server.index.test_feedback import FEEDBACK_NOTES

    index, store = open_index(HashingEmbedder())
    write_all(store, FEEDBACK_NOTES)
    index.index()
    # The note sharing the best hit's words moves up, by the vectors PostgreSQL reads from its pgvector table.
    before = paths_of(index, "ramen shop", feedback_weight=0.0)
    assert before == ["memory/ramen.md", "memory/shop.md", "memory/broth.md"]
    assert paths_of(index, "ramen shop", feedback_weight=0.25)[:2] == ["memory/ramen.md", "memory/broth.md"]


def test_names_every_chunk_holds_are_left_out_of_half_the_query_vector_as_on_sqlite(
    open_index: Callable[..., Opened],
) -> None:
    from tests.server.index.test_shared_names import QUESTION, log_days

    embedder = HashingEmbedder()
    index, store = open_index(embedder)
    write_all(store, log_days())
    index.index()
    assert paths_of(index, QUESTION, limit=3, min_score=0)[0] == "memory/2023-05-17.md"
    assert embedder.queries[-1] == [QUESTION, "When did run a charity race?"]
    paths_of(index, "When did Melanie run a charity race?", limit=3)
    assert embedder.queries[-1] == ["When did Melanie run a charity race?"]  # one chunk of 40 names her
    paths_of(index, QUESTION, mode="keyword")
    assert len(embedder.queries) == 2


def test_words_in_most_chunks_leave_the_keyword_query_of_a_large_index_as_on_sqlite(
    open_index: Callable[..., Opened], monkeypatch: pytest.MonkeyPatch
) -> None:
    from server.index import common_terms

    monkeypatch.setattr(common_terms, "MIN_CHUNKS", 10)  # 'large' from 10 chunks (tests/server/index/test_common_terms)
    monkeypatch.setattr(common_terms, "COUNTS_TTL", 0.0)  # counted at every search
    index, store = open_index(HashingEmbedder())
    for n in range(40):
        extra = " deploy" if n % 3 == 0 else ""
        rare = " zanzibar" if n == 17 else ""
        store.write(f"memory/n{n:02}.md", f"# Note {n}\n\nservice note{n}{extra}{rare}\n", caller="alice")
    index.index()
    assert paths_of(index, "service zanzibar", limit=3, mode="keyword") == ["memory/n17.md"]
    assert len(paths_of(index, "service deploy", limit=20, mode="keyword")) == 14  # all common: the rarest stays
    monkeypatch.setattr(common_terms, "MIN_CHUNKS", 1000)
    assert len(paths_of(index, "service zanzibar", limit=3, mode="keyword")) == 3  # a small index keeps every word


def test_a_search_naming_a_month_finds_that_months_log_first_as_on_sqlite(open_index: Callable[..., Opened]) -> None:
    from tests.server.index.test_periods import CAMPING

    index, store = open_index(HashingEmbedder())
    write_all(store, CAMPING)
    index.index()
    assert paths_of(index, "when did we go camping with the kids", min_score=0)[0] == "memory/2023-06-10.md"
    in_july = paths_of(index, "when did we go camping with the kids in July", min_score=0)
    assert in_july[:2] == ["memory/2023-07-17.md", "memory/2023-06-10.md"]


def test_an_indexing_run_marks_its_pending_count_and_later_counts_look_only_at_chunks_written_since(
    postgres_url: str, open_index: Callable[..., Opened]
) -> None:
    embedder, now = HashingEmbedder(), [0.0]
    index = PgSearchIndex(postgres_url, "proj", ProviderChain.of([embedder], clock=lambda: now[0]), EngineSettings())
    _, store = open_index(None)
    try:
        write_all(store, NOTES)
        index.index()
        space = read_space(index._writer)
        assert space is not None
        last = int(index._writer.execute("SELECT max(id) FROM chunks").fetchall()[0][0])
        assert meta(index._writer, COMPLETE_THROUGH) == f"{space.table} {last}"
        embedder.fail = True  # the model is down: the edit's chunks are written without vectors
        store.write("memory/food.md", "# Lunch\n\nThe team now prefers tacos on Fridays.\n", caller="alice")
        report = index.index(paths=["memory/food.md"])
        assert report.files_seen == 1 and report.chunks_pending == report.chunks_written > 0
        assert index.pending_count() == report.chunks_pending  # counted past the mark, which did not move
        assert meta(index._writer, COMPLETE_THROUGH) == f"{space.table} {last}"
        embedder.fail, now[0] = False, now[0] + 60  # back, and past the breaker's rest
        assert index.index(paths=["memory/food.md"]).chunks_pending == 0 and index.pending_count() == 0
        last = int(index._writer.execute("SELECT max(id) FROM chunks").fetchall()[0][0])
        assert meta(index._writer, COMPLETE_THROUGH) == f"{space.table} {last}"
    finally:
        index.close()


# What versions 2 to 5 stored: words cut by a SQL regular expression, Snowball stems, lexemes cut at 200 characters
# (in postings without their chunk's length, `OLD_POSTINGS`).
_OLD_LEXEME = "left(coalesce((ts_lexize('memory_stem', w))[1], w), 200)"
_OLD_WORDS = "regexp_split_to_table(lower({}), '[^[:alnum:]]+') w"
STORE_THE_OLD_WAY = f"""
{OLD_POSTINGS}
DELETE FROM chunk_terms;
INSERT INTO chunk_terms(lexeme, chunk_id, tf) SELECT lexeme, id, sum(weight) FROM (
    SELECT c.id, {_OLD_LEXEME} AS lexeme, 1.0 AS weight FROM chunks c, {_OLD_WORDS.format("c.text")} WHERE w <> ''
    UNION ALL
    SELECT c.id, {_OLD_LEXEME}, 0.5 FROM chunks c, {_OLD_WORDS.format("c.heading")} WHERE w <> '') x
GROUP BY lexeme, id;
UPDATE chunks c SET terms = (SELECT count(*) FROM {_OLD_WORDS.format("c.text || ' ' || c.heading")} WHERE w <> '');
UPDATE keyword_stats SET chunks = x.n, terms = x.t FROM (SELECT count(*) AS n, sum(terms) AS t FROM chunks) x;
UPDATE schema_version SET version = 5;
"""


def _keyword_state(postgres_url: str) -> tuple[list[tuple[object, ...]], ...]:
    with psycopg.connect(postgres_url) as db:
        db.execute(f'SET search_path TO "{schema_of("proj")}"')
        return (
            db.execute(  # each posting's chunk length as well, when the version has it
                "SELECT lexeme, chunk_id, tf, to_jsonb(t)->'chunk_length' FROM chunk_terms t ORDER BY chunk_id, lexeme"
            ).fetchall(),
            db.execute("SELECT id, terms FROM chunks ORDER BY id").fetchall(),
            db.execute("SELECT chunks, terms FROM keyword_stats").fetchall(),
        )


def test_an_index_stored_with_the_old_words_holds_exactly_what_fresh_indexing_stores_once_migrated(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    index, store = open_index(HashingEmbedder())
    long_word = "z" * 260
    write_all(store, {**NOTES, "memory/cafe.md": f"# Café ÜBER\n\nकिताब x² İstanbul max_file_bytes {long_word}\n"})
    index.index()
    fresh = _keyword_state(postgres_url)
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'SET search_path TO "{schema_of("proj")}", public')
        admin.execute(STORE_THE_OLD_WAY)
    assert _keyword_state(postgres_url) != fresh
    upgraded, _ = open_index(HashingEmbedder(), "two")
    migrated = _keyword_state(postgres_url)
    assert migrated == fresh
    lexemes = {row[0] for row in migrated[0]}
    assert {"cafe", "uber", "x²", "istanbul", "byte"} <= lexemes and "café" not in lexemes
    assert paths_of(upgraded, "cafe", mode="keyword") == ["memory/cafe.md"]


def test_an_index_version_6_made_gets_its_chunks_lengths_in_every_posting_and_ranks_the_same(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    index, store = open_index(HashingEmbedder())
    write_all(store, {**NOTES, "memory/more.md": "# Noodles\n\nNoodle soup, noodle shop, noodles at noon.\n"})
    index.index()
    fresh, ranked = _keyword_state(postgres_url), index.search("noodle shop", build_options(mode="keyword")).hits
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'SET search_path TO "{schema_of("proj")}", public')
        admin.execute(OLD_POSTINGS + "UPDATE schema_version SET version = 6;")
    upgraded, _ = open_index(HashingEmbedder(), "two")
    assert _keyword_state(postgres_url) == fresh
    again = upgraded.search("noodle shop", build_options(mode="keyword")).hits
    assert [(h.path, h.score) for h in again] == [(h.path, h.score) for h in ranked] and len(ranked) == 2


def test_a_model_answering_a_zero_vector_has_nothing_stored_and_its_chunk_waits(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    index, store = open_index(HashingEmbedder())
    store.write("memory/rule.md", "***\n", caller="alice")  # not a word in it: the hashing model's vector is all zeros
    report = index.index()
    assert report.files_indexed == 1 and report.chunks_pending == 1 and report.chunks_embedded == 0
    with psycopg.connect(postgres_url, options=f"-c search_path={schema_of('proj')}") as db:
        assert db.execute("SELECT count(*) FROM embedding_cache").fetchone() == (0,)
