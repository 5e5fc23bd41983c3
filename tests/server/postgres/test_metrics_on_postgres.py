"""The per-index metrics with PostgreSQL (`server.observe.pg_sizes`): every index in the database, counted as
`memory_status` counts it, on any replica, whether that replica opened the index or not."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from channel.keys import PrivateKey
from server.index.engine_settings import EngineSettings
from server.memory.caller import CallerContext
from server.memory.service import MemoryService
from server.observe.metrics_app import service_metrics
from server.postgres.backend import PgBackend
from server.postgres.callers import update_shared_callers
from server.postgres.connection import PgConnection, schema_of
from server.postgres.search_vectors import NEXT, create_space
from tests.fakes.embedder import HashingEmbedder
from tests.server.test_metrics import parse

NOW = dt.datetime(2024, 5, 1, 9, 30, tzinfo=dt.UTC)

Start = Callable[[str, HashingEmbedder], MemoryService]


@pytest.fixture
def servers(postgres_url: str, tmp_path: Path) -> Iterator[Start]:
    """Starts a service on the test's database with its own data folder; all are closed at the end."""
    started: list[MemoryService] = []

    def start(name: str, embedder: HashingEmbedder) -> MemoryService:
        data = tmp_path / name
        backend = PgBackend(postgres_url, data, embedder, EngineSettings(), lambda: NOW)
        service = MemoryService(data, embedder, backend=backend, clock=lambda: NOW)
        started.append(service)
        return service

    yield start
    for service in started:
        service.close()


def caller(index: str) -> CallerContext:
    return CallerContext("alice", "SHA256:alice", {"alice-notes": "rw", "team": "rw"}, index, "rw")


def scrape(service: MemoryService, visible: Callable[[str], bool] = lambda _index: True) -> dict:
    return parse(service_metrics(service).render(visible))


def test_every_replica_reports_each_index_as_its_status_counts_it_with_the_embedding_backlog(servers: Start):
    embedder = HashingEmbedder()
    one, two = servers("one", embedder), servers("two", HashingEmbedder())
    one.write(caller("alice-notes"), "Deploys go out on Tuesdays.\n\nRollbacks need a ticket.")
    one.write(
        caller("alice-notes"), "# Project\n\nUses PostgreSQL.", path="MEMORY.md", mode="replace", expected_hash="absent"
    )
    embedder.fail = True  # the provider is down: new chunks wait for their vectors
    one.write(caller("team"), "Standup at nine.", path="memory/team.md")
    one.write(caller("team"), "Retro on Fridays.", path="memory/retro.md")
    statuses = {index: one.status(caller(index)) for index in ("alice-notes", "team")}

    pages = {"one": scrape(one), "two": scrape(two)}  # two has opened neither index

    for page in pages.values():
        for index, status in statuses.items():
            label = (("index", index),)
            files = {
                dict(labels)["source"]: n for labels, n in page["memory_index_files"].items() if labels[:1] == label
            }
            assert files == status.files
            assert page["memory_index_chunks"][label] == sum(status.chunks.values())
            assert page["memory_index_pending_vectors"][label] == status.pending_vectors
            assert page["memory_mirror_files"][label] == sum(status.files.values()) == 2
            assert page["memory_index_vectors_rebuilding"][label] == 0
            assert page["memory_index_database_bytes"][(*label, ("database", "schema"))] > 0
    assert statuses["alice-notes"].pending_vectors == 0 and statuses["team"].pending_vectors == 2
    only_team = scrape(two, lambda index: index == "team")
    assert set(only_team["memory_index_chunks"]) == {(("index", "team"),)}


def test_a_rebuild_for_another_model_shows_on_every_replica_while_its_table_fills(servers: Start, postgres_url: str):
    one = servers("one", HashingEmbedder())
    one.write(caller("team"), "Standup at nine.", path="memory/team.md")
    db = PgConnection(postgres_url, schema_of("team"))
    try:
        create_space(db, HashingEmbedder(dimensions=32), NEXT)  # as `search_vectors.rebuild` starts, on any replica
    finally:
        db.close()

    assert scrape(servers("two", HashingEmbedder()))["memory_index_vectors_rebuilding"] == {(("index", "team"),): 1}


def test_sqlite_files_left_in_the_data_folder_are_not_reported_as_the_databases_indexes(servers: Start, tmp_path: Path):
    old = MemoryService(tmp_path / "one", HashingEmbedder())  # an index served from SQLite before the migration
    old.write(caller("alice-notes"), "Served from SQLite once.")
    old.close()
    one = servers("one", HashingEmbedder())
    one.write(caller("team"), "Standup at nine.", path="memory/team.md")

    page = scrape(one)

    assert (tmp_path / "one" / "indexes" / "alice-notes" / "index.sqlite3").is_file()
    assert set(page["memory_index_chunks"]) == {(("index", "team"),)}
    assert set(page["memory_index_database_bytes"]) == {(("index", "team"), ("database", "schema"))}


def test_an_index_named_past_57_characters_is_shown_under_its_name_to_the_callers_granted_it_and_the_scraper(
    servers: Start, postgres_url: str, tmp_path: Path
):
    long = "team-" + "design-notes-" * 4 + "archive"  # 64 characters: its schema holds its start and a digest
    one = servers("one", HashingEmbedder())
    one.write(CallerContext("alice", "SHA256:alice", {long: "rw"}, long, "rw"), "Standup at nine.", path="memory/a.md")
    key = PrivateKey.generate().public
    update_shared_callers(
        postgres_url, tmp_path / "callers.toml", lambda config: config.add("alice", [key], {long: "rw"})
    )

    label = (("index", long),)
    assert set(scrape(one, {long}.__contains__)["memory_index_chunks"]) == {label}  # the inner /metrics' filter
    assert set(scrape(one)["memory_index_chunks"]) == {label}
