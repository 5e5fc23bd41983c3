"""The vector side of the PostgreSQL search (`server.postgres.search_vectors.nearest`): the HNSW index by cosine
distance with m=32, ef_construction=256 in use, filters applied as it scans; the same index on the table a model
change builds; and an index an older schema made (pgvector's defaults, or ef_construction 128) rebuilt in place
when a server opens it."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import closing

import numpy as np
import psycopg
import pytest

from server.index.search import build_options
from server.index.vectors import VectorSpace
from server.postgres import search_queries as sq
from server.postgres.connection import PgConnection, schema_of
from server.postgres.migrations import MIGRATIONS, migrate
from server.postgres.search import PgSearchIndex
from server.postgres.search_vectors import MAX_EF_SEARCH, MIN_EF_SEARCH, ef_search, read_space
from tests.fakes.embedder import HashingEmbedder
from tests.postgres_support import OLD_POSTINGS
from tests.server.postgres.conftest import Opened
from tests.server.postgres.test_search import NOTES, paths_of, write_all


def indexed(open_index: Callable[..., Opened], embedder: HashingEmbedder) -> tuple[PgSearchIndex, VectorSpace]:
    """The notes written and indexed with `embedder`: the index and its live vector table."""
    index, store = open_index(embedder)
    write_all(store, NOTES)
    index.index()
    with index._reader() as db:
        space = read_space(db)
    assert space is not None
    return index, space


def indexes_of(url: str, table: str) -> dict[str, str]:
    """Each index of a vector table of index "proj": its definition."""
    with psycopg.connect(url) as db:
        rows = db.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %s AND tablename = %s",
            (schema_of("proj"), table),
        ).fetchall()
    return {str(name): str(definition) for name, definition in rows if not str(name).endswith("_pkey")}


def test_a_path_filtered_search_by_the_index_finds_the_exact_nearest_inside_the_filter(postgres_url: str) -> None:
    rng = np.random.default_rng(4)
    vectors = rng.normal(size=(1200, 24)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    paths = [f"memory/{'a' if n % 3 == 0 else 'b'}/{n}.md" for n in range(len(vectors))]
    query = rng.normal(size=24).astype(np.float32)
    with closing(PgConnection(postgres_url, schema_of("proj"))) as db, db:
        migrate(db, schema_of("proj"))
        for statement in sq.create_vector_table("vectors_1", 24):
            db.execute(statement)
        for n, (vector, path) in enumerate(zip(vectors, paths, strict=True)):
            db.execute(*sq.insert_vector("vectors_1", n, vector.tobytes(), "memory", path, ""))
        db.execute("ANALYZE vectors_1")
        db.execute("SET LOCAL enable_seqscan = off")  # as on a large table: the index, not a scan and a sort
        db.execute(f"SET LOCAL hnsw.ef_search = {MAX_EF_SEARCH}")
        db.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        filters = build_options(path_prefix="memory/a/").filters
        statement, params = sq.vector_sql("vectors_1", filters, 10, sq.vector_literal(query))
        plan = "\n".join(str(row[0]) for row in db.execute("EXPLAIN " + statement, params))
        found = [int(chunk) for chunk, _ in db.execute(statement, params)]
    inside = [n for n, path in enumerate(paths) if path.startswith("memory/a/")]
    exact = sorted(inside, key=lambda n: -float(vectors[n] @ query))[:10]
    assert "Index Scan using vectors_1_hnsw" in plan
    assert found == exact


def test_the_vector_search_uses_the_hnsw_index_with_m_32(open_index: Callable[..., Opened], postgres_url: str) -> None:
    index, space = indexed(open_index, HashingEmbedder())
    with index._reader() as db:
        statement, params = sq.vector_sql(space.table, build_options().filters, 40, sq.vector_literal([1.0] * 64))
        with db:
            db.execute("SET LOCAL enable_seqscan = off")  # three rows: without this any plan is a scan
            plan = "\n".join(str(row[0]) for row in db.execute("EXPLAIN " + statement, params))
    assert f"Index Scan using {space.table}_hnsw" in plan
    [definition] = indexes_of(postgres_url, space.table).values()
    assert "vector_cosine_ops" in definition and "m='32'" in definition and "ef_construction='256'" in definition


def test_a_model_change_builds_the_same_index_on_the_new_table(
    open_index: Callable[..., Opened], postgres_url: str
) -> None:
    indexed(open_index, HashingEmbedder("old-model"))
    second, _ = open_index(HashingEmbedder("new-model", dimensions=32), "two")
    running = second.start_background_rebuild()
    assert running is not None
    running.join(30)
    assert not running.is_alive() and second.status().model == "new-model"
    with second._reader() as db:
        space = read_space(db)
    assert space is not None and space.dimensions == 32
    [definition] = indexes_of(postgres_url, space.table).values()
    assert "vector_cosine_ops" in definition and "m='32'" in definition and "ef_construction='256'" in definition
    assert paths_of(second, "ramen", mode="vector")[0] == "memory/food.md"


@pytest.mark.parametrize(
    ("version", "options"),
    [(2, ""), (3, " WITH (m = 32, ef_construction = 128)")],
    ids=["pgvector-defaults", "ef-construction-128"],
)
def test_an_index_an_older_schema_made_is_built_again_in_place(
    open_index: Callable[..., Opened], postgres_url: str, version: int, options: str
) -> None:
    _, space = indexed(open_index, HashingEmbedder())
    # back to what that schema version made: version 2 pgvector's default HNSW index, version 3 m=32 and 128
    schema = schema_of("proj")
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f'SET search_path TO "{schema}", public')
        admin.execute(f"DROP INDEX {space.table}_hnsw")
        admin.execute(
            f"CREATE INDEX {space.table}_hnsw ON {space.table} USING hnsw (embedding vector_cosine_ops){options}"
        )
        admin.execute(OLD_POSTINGS)  # as versions before 7 kept them
        admin.execute(f"UPDATE schema_version SET version = {version}")
    assert "ef_construction='256'" not in indexes_of(postgres_url, space.table)[f"{space.table}_hnsw"]
    upgraded, _ = open_index(HashingEmbedder(), "two")
    [(name, definition)] = indexes_of(postgres_url, space.table).items()
    assert name == f"{space.table}_hnsw" and "m='32'" in definition and "ef_construction='256'" in definition
    with psycopg.connect(postgres_url) as db:
        assert db.execute(f'SELECT version FROM "{schema}".schema_version').fetchall() == [(len(MIGRATIONS),)]
    assert paths_of(upgraded, "ramen", mode="vector")[0] == "memory/food.md"
    assert paths_of(upgraded, "team", mode="vector", path_prefix="memory/food") == ["memory/food.md"]


def test_the_search_effort_grows_with_the_table_within_pgvectors_bounds() -> None:
    assert ef_search(-1, 40) == ef_search(1_000, 40) == MIN_EF_SEARCH  # a table never counted is searched as small
    assert ef_search(300_000, 40) == 600
    assert ef_search(1_000_000, 40) == ef_search(50_000_000, 40) == MAX_EF_SEARCH == 1000
    assert ef_search(1_000, 300) == 600 and ef_search(1_000, 5_000) == MAX_EF_SEARCH  # then iterative scans
