"""Names every chunk shares are left out of one of the two texts a query's vector is the mean of
(`server.index.shared_names`), on a real SQLite index; tests/server/postgres/test_search.py checks PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from server.index import shared_names
from server.index.engine import MemoryIndex
from server.index.search import build_options
from server.index.shared_names import capitalised_terms, query_texts, without_names
from tests.fakes.embedder import HashingEmbedder

QUESTION = "When did Caroline run a charity race?"


def never(*_args: object) -> int:
    raise AssertionError("counted although no count was needed")


def test_words_written_with_a_capital_are_names_but_stopwords_are_not() -> None:
    assert capitalised_terms("Did I tell NASA about Caroline's Acme_Corp and caroline?") == ["nasa", "caroline"]
    assert capitalised_terms("when did we ship the fix?") == []


@pytest.mark.parametrize(
    ("query", "names", "expected"),
    [
        (QUESTION, ["caroline"], "When did run a charity race?"),
        ("What is Caroline's job, CAROLINE?", ["caroline"], "What is job, ?"),
        ("Did Jon and Gina meet?", ["jon", "gina"], "Did and meet?"),
        ("Is Jonathan here, Jon?", ["jon"], "Is Jonathan here, ?"),  # a longer word holding the name stays
        ("Where is Acme_Corp based, Acme?", ["acme"], "Where is Acme_Corp based, ?"),  # an identifier is one word
    ],
)
def test_a_name_is_taken_out_in_any_case_with_its_possessive(query: str, names: list[str], expected: str) -> None:
    assert without_names(query, names) == expected


def test_a_query_of_many_capitalised_words_counts_only_the_first_few() -> None:
    query = " ".join(f"Word{n}" for n in range(100))
    assert capitalised_terms(query) == [f"word{n}" for n in range(shared_names.MAX_NAMES)]
    asked: list[str] = []

    def holding(term: str) -> int:
        asked.append(term)
        return 0

    assert query_texts(query, lambda: 100, holding) == [query]
    assert len(asked) == shared_names.MAX_NAMES


def test_a_query_left_with_only_stopwords_keeps_its_names() -> None:
    assert without_names("Who is Caroline?", ["caroline"]) == "Who is Caroline?"
    assert without_names("Caroline?", ["caroline"]) == "Caroline?"


def test_only_names_in_at_least_half_of_the_chunks_are_taken_out() -> None:
    held = {"caroline": 50, "melanie": 49}
    texts = query_texts("Did Caroline call Melanie?", lambda: 100, held.__getitem__)
    assert texts == ["Did Caroline call Melanie?", "Did call Melanie?"]
    assert query_texts("Did Melanie call?", lambda: 100, held.__getitem__) == ["Did Melanie call?"]


def test_a_small_index_or_a_query_without_capitals_is_not_counted_for_names() -> None:
    assert query_texts("when did caroline call?", never, never) == ["when did caroline call?"]
    few = shared_names.MIN_CHUNKS - 1
    assert query_texts(QUESTION, lambda: few, never) == [QUESTION]


def log_days() -> dict[str, str]:
    """40 days of a log where Caroline speaks every day and Melanie on one (day 17)."""
    days = {}
    for day in range(1, 41):
        extra = "\n- **Melanie:** I ran a charity race for mental health." if day == 17 else ""
        days[f"memory/2023-05-{day:02}.md"] = f"# Day {day}\n\n- **Caroline:** note {day}{extra}\n"
    return days


@pytest.fixture
def conversation(tmp_path: Path) -> Iterator[tuple[MemoryIndex, HashingEmbedder]]:
    for path, text in log_days().items():
        (tmp_path / "log" / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "log" / path).write_text(text, "utf-8")
    embedder = HashingEmbedder()
    opened = MemoryIndex.open(tmp_path / "data", "log", embedder, create=True)
    opened.index(tmp_path / "log")
    yield opened, embedder
    opened.close()


def test_a_search_embeds_the_question_with_and_without_the_name_every_chunk_holds(conversation) -> None:
    index, embedder = conversation
    hits = index.search(QUESTION, build_options(limit=3, min_score=0)).hits
    assert embedder.queries[-1] == [QUESTION, "When did run a charity race?"]
    assert hits[0].path == "memory/2023-05-17.md"
    index.search("When did Melanie run a charity race?", build_options(limit=3, min_score=0))
    assert embedder.queries[-1] == ["When did Melanie run a charity race?"]  # one chunk of 40 names her


def test_a_keyword_search_counts_nothing_for_names_and_embeds_nothing(conversation, monkeypatch) -> None:
    index, embedder = conversation
    monkeypatch.setattr(shared_names, "capitalised_terms", never)
    index.search(QUESTION, build_options(mode="keyword"))
    assert embedder.queries == []
