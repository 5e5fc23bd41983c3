"""A query naming a month or a year puts the daily logs of that time first (`server.index.periods`), on a real
SQLite index; the ordering is shared by both backends (`search.rank_hits`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.index.engine import MemoryIndex
from server.index.fusion import Scored
from server.index.periods import Period, named_period, period_order
from server.index.search import build_options
from tests.fakes.embedder import HashingEmbedder


@pytest.mark.parametrize(
    ("query", "period"),
    [
        ("What setback did Melanie face in October 2023?", Period(2023, 10)),
        ("When did Melanie go camping in June?", Period(None, 6)),
        ("What dish did Nate make on 9 November, 2022?", Period(2022, 11)),
        ("What did John share on December 1,2023?", Period(2023, 12)),
        ("What did we ship on October 13th 2023?", Period(2023, 10)),
        ("What happened in 2022?", Period(2022, None)),
        ("the notes of 2023-10-13", Period(2023, 10)),
        ("the 2023-10 plan", Period(2023, 10)),
        ("Which release in May?", Period(None, 5)),
        ("the May 5 standup", Period(None, 5)),
        ("May we deploy on a Friday?", None),  # "may" is also a verb
        ("we march forward", None),  # a month counts only with its capital
        ("port 3000 and version 1.2", None),
    ],
)
def test_the_period_a_query_names_is_read_from_its_words(query: str, period: Period | None) -> None:
    assert named_period(query) == period


def test_daily_logs_of_the_period_come_first_and_every_score_stays() -> None:
    scored = [Scored(1, 0.9, 0.9, 0.0), Scored(2, 0.8, 0.8, 0.0), Scored(3, 0.75, 0.7, 0.1), Scored(4, 0.72, 0.7, 0.0)]
    paths = {1: "MEMORY.md", 2: "memory/2023-06-10.md", 3: "memory/2023-07-17-standup.md", 4: "memory/2022-07-01.md"}
    assert [s.chunk_id for s in period_order(scored, paths, Period(2023, 7))] == [3, 1, 2, 4]
    assert [s.chunk_id for s in period_order(scored, paths, Period(None, 7))] == [3, 4, 1, 2]
    assert [s.chunk_id for s in period_order(scored, paths, Period(2022, None))] == [4, 1, 2, 3]
    assert period_order(scored, paths, None) == scored
    assert {s.score for s in period_order(scored, paths, Period(2023, 7))} == {0.9, 0.8, 0.75, 0.72}


CAMPING = {
    "memory/2023-06-10.md": "# Camping\n\nWe went camping by the lake with the kids.\n",
    "memory/2023-07-17.md": "# Weekend\n\nWe went camping by the river with the kids.\n",
    "MEMORY.md": "# Gear\n\nThe tent for camping is in the garage.\n",
}


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[MemoryIndex]:
    for path, text in CAMPING.items():
        (tmp_path / "notes" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "notes" / path).write_text(text, "utf-8")
    opened = MemoryIndex.open(tmp_path / "data", "logs", HashingEmbedder(), create=True)
    opened.index(tmp_path / "notes")
    yield opened
    opened.close()


def test_a_search_naming_a_month_finds_that_months_log_first_with_its_own_score(logs: MemoryIndex) -> None:
    plain = logs.search("when did we go camping with the kids", build_options(min_score=0)).hits
    assert plain[0].path == "memory/2023-06-10.md"
    dated = logs.search("when did we go camping with the kids in July", build_options(min_score=0)).hits
    assert [hit.path for hit in dated][:2] == ["memory/2023-07-17.md", "memory/2023-06-10.md"]
    assert dated[0].score < dated[1].score  # moved up, not rescored
