"""Keyword search finds the same words on both backends: the PostgreSQL backend cuts, folds and stems text with
FTS5's own tokenizer (`server.index.fts_tokens`), as the SQLite engine's index does."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.memory.service import CallerContext, MemoryService

pytestmark = pytest.mark.usefixtures("backend")  # every test runs on SQLite and on PostgreSQL

ALICE = CallerContext("alice", "SHA256:alice", {"proj": "rw"}, "proj", "rw")
LONG = "q" * 200
NOTES = {
    "memory/cafe.md": "# Lunch\nThe Café on the corner was ÜBER busy.\n",
    "memory/decomposed.md": "# Naive\nA nai\u0308ve plan for the re\u0301sume\u0301.\n",
    "memory/hindi.md": "# किताब\nमेरी किताब मेज़ पर है\n",
    "memory/thai.md": "# ทักทาย\nสวัสดีครับ ทุกคน\n",
    "memory/math.md": "# Math\nThe area grows as x² and halves at ½.\n",
    "memory/city.md": "# Trip\nWe flew to İstanbul in May.\n",
    "memory/setting.md": "# Settings\nRaise max_file_bytes for large logs.\n",
    "memory/bytes.md": "# Bytes\nbytes everywhere, their max unknown\n",
    "memory/long_a.md": f"# A\nkey {LONG}{'a' * 50}\n",
    "memory/long_b.md": f"# B\nkey {LONG}{'b' * 50}\n",
}
EXPECTED = {
    "cafe": {"memory/cafe.md"},
    "café": {"memory/cafe.md"},
    "CAFE\u0301": {"memory/cafe.md"},
    "uber": {"memory/cafe.md"},
    "naïve résumé": {"memory/decomposed.md"},
    "किताब": {"memory/hindi.md"},
    "สวัสดีครับ": {"memory/thai.md"},
    "x²": {"memory/math.md"},
    "½": {"memory/math.md"},
    "İstanbul": {"memory/city.md"},
    "istanbul": {"memory/city.md"},
    "max_file_bytes": {"memory/setting.md"},  # every part of the word, not any one of them
    f"{LONG}{'a' * 50}": {"memory/long_a.md"},  # 250 characters, the first 200 shared with long_b's word
    f"{LONG}{'b' * 50}": {"memory/long_b.md"},
}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[MemoryService]:
    clock = lambda: dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.UTC)  # noqa: E731
    svc = MemoryService(tmp_path / "data", None, clock=clock, rescan_interval=0.0)
    for path, text in NOTES.items():
        svc.write(ALICE, text, path=path, mode="replace", expected_hash="absent")
    yield svc
    svc.close()


@pytest.mark.parametrize("query", list(EXPECTED))
def test_a_keyword_query_finds_the_same_files_on_both_backends(service: MemoryService, query: str) -> None:
    found = {hit.path for hit in service.search(ALICE, query, min_score=0.0).hits}
    assert found == EXPECTED[query]
