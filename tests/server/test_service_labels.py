"""memory_write with tags and a category (inline on a daily-log entry, front matter elsewhere), and memory_search
and memory_list filtered by them, through the memory service on a real index."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.index.errors import InvalidArgumentError
from server.memory.service import MemoryService
from tests.fakes.embedder import HashingEmbedder
from tests.server.test_service import ALICE, Clock


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    svc = MemoryService(tmp_path / "data", HashingEmbedder(), clock=Clock(), rescan_interval=0.0)
    yield svc
    svc.close()


def test_a_daily_log_entry_carries_its_labels_on_its_heading(service: MemoryService) -> None:
    out = service.write(ALICE, "Chose PostgreSQL.", topic="database", tags=["DB", "#postgres"], category="Decision")
    service.write(ALICE, "Lunch was soup.")
    assert service.get(ALICE, out.path).content == (
        "# 2024-05-01\n\n## 22:30 — database [tags: db, postgres] [category: decision]\n\nChose PostgreSQL.\n\n"
        "## 22:30\n\nLunch was soup."
    )
    assert (out.start_line, out.end_line) == (3, 5)
    assert service.get(ALICE, out.path, heading="22:30 — database").content.endswith("Chose PostgreSQL.")
    hits = service.search(ALICE, "PostgreSQL soup", tags=["postgres"]).hits
    assert [(h.heading, h.tags, h.category) for h in hits] == [
        ("2024-05-01 > 22:30 — database", ["db", "postgres"], "decision")
    ]


def test_a_write_to_another_file_merges_into_its_front_matter(service: MemoryService) -> None:
    service.write(ALICE, "# Billing\n\nInvoices monthly.", path="memory/billing.md")
    out = service.write(ALICE, "Postgres holds them.", path="memory/billing.md", tags=["database"], category="fact")
    assert (out.start_line, out.end_line) == (9, 9)  # the text written, below the new block
    again = service.write(ALICE, "Also Redis.", path="memory/billing.md", tags=["redis", "database"])
    got = service.get(ALICE, "memory/billing.md")
    assert got.content == (
        "---\ntags: [database, redis]\ncategory: fact\n---\n# Billing\n\nInvoices monthly.\n\nPostgres holds them."
        "\n\nAlso Redis."
    )
    assert (again.start_line, again.end_line) == (11, 11)
    assert got.content.split("\n")[again.start_line - 1] == "Also Redis."


def test_a_replace_keeps_what_it_was_given_with_the_labels_added(service: MemoryService) -> None:
    first = service.write(ALICE, "---\ntags: [old]\n---\nOld.", path="memory/notes.md", tags=["kept"])
    text = "---\ntitle: Notes\n---\nNew."
    out = service.write(ALICE, text, path="memory/notes.md", mode="replace", expected_hash=first.hash, category="fact")
    assert service.get(ALICE, "memory/notes.md").content == "---\ncategory: fact\ntitle: Notes\n---\nNew."
    assert (out.start_line, out.end_line) == (1, 5)


def test_a_section_write_labels_the_file_or_the_daily_entry(service: MemoryService) -> None:
    service.write(ALICE, "# Project\n\n## Decisions\n\nNone yet.", path="MEMORY.md")
    out = service.write(ALICE, "Use Postgres.", path="MEMORY.md", heading="Decisions", tags=["database"])
    content = service.get(ALICE, "MEMORY.md").content
    assert content.startswith("---\ntags: [database]\n---\n# Project\n")
    assert content.split("\n")[out.start_line - 1] == "Use Postgres."
    assert service.get(ALICE, "MEMORY.md", heading="Decisions").section_hash == out.section_hash
    daily = service.write(ALICE, "Deployed.", heading="Ops", tags=["deploy"])
    assert "### 22:30 [tags: deploy]" in service.get(ALICE, daily.path).content


def test_search_and_list_filter_by_any_tag_and_an_exact_category(service: MemoryService) -> None:
    service.write(ALICE, "Chose PostgreSQL for billing.", path="memory/db.md", tags=["database"], category="decision")
    service.write(ALICE, "Billing runs nightly.", path="memory/jobs.md", tags=["cron"], category="fact")
    service.write(ALICE, "Billing is fun.", path="memory/misc.md")
    found = service.search(ALICE, "billing", tags=["database", "cron"]).hits
    assert sorted(h.path for h in found) == ["memory/db.md", "memory/jobs.md"]
    assert [h.path for h in service.search(ALICE, "billing", category="decision").hits] == ["memory/db.md"]
    listed = service.list(ALICE, tags=["cron", "database"])
    assert [(f.path, f.tags, f.categories) for f in listed.files] == [
        ("memory/db.md", ["database"], ["decision"]),
        ("memory/jobs.md", ["cron"], ["fact"]),
    ]
    assert listed.total == 2
    assert [f.path for f in service.list(ALICE, category="fact").files] == ["memory/jobs.md"]
    everything = service.list(ALICE)
    assert [(f.path, f.tags) for f in everything.files][-1] == ("memory/misc.md", [])


def test_a_front_matter_edited_on_disk_retags_the_file(service: MemoryService) -> None:
    service.write(ALICE, "Billing facts.", path="memory/db.md", tags=["database"])
    path = service.data_dir / "indexes" / "proj" / "files" / "memory" / "db.md"
    path.write_text(path.read_text().replace("[database]", "[billing]"))
    assert [f.path for f in service.list(ALICE, tags=["database"]).files] == ["memory/db.md"]  # not looked yet
    assert [h.path for h in service.search(ALICE, "billing facts", tags=["billing"]).hits] == ["memory/db.md"]
    assert service.list(ALICE, tags=["database"]).files == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tags": ["no spaces"]}, r"^tags: 'no spaces' is not a tag"),
        ({"tags": "database"}, r"^tags must be a list"),
        ({"category": "not one word"}, r"^category must be one word"),
    ],
)
def test_bad_labels_are_refused_naming_the_argument_and_nothing_is_written(
    service: MemoryService, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        service.write(ALICE, "text", path="memory/notes.md", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        service.search(ALICE, "text", **kwargs)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=message):
        service.list(ALICE, **kwargs)  # type: ignore[arg-type]
    assert service.get(ALICE, "memory/notes.md").exists is False


def test_a_retry_with_other_labels_is_a_different_write(service: MemoryService) -> None:
    service.write(ALICE, "Note.", path="memory/notes.md", idempotency_key="k1", tags=["a"])
    assert service.write(ALICE, "Note.", path="memory/notes.md", idempotency_key="k1", tags=["A"]).replayed
    with pytest.raises(InvalidArgumentError, match="idempotency_key was already used"):
        service.write(ALICE, "Note.", path="memory/notes.md", idempotency_key="k1", tags=["b"])
