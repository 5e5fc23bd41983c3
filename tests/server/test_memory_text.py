"""Pure text rules: line counting that agrees with the chunker, paging under a cap, what an append adds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from server.index.markdown import split_lines
from server.memory.text import (
    MAX_TOPIC_CHARS,
    clean_topic,
    compose_append,
    count_lines,
    count_lines_of_bytes,
    entry_heading,
    file_lines,
    page,
)


def test_a_final_newline_does_not_start_another_line() -> None:
    assert [count_lines(t) for t in ("", "a", "a\n", "a\nb", "a\nb\n", "\n", "a\r\nb\r\n", "a\rb")] == [
        0,
        1,
        1,
        2,
        2,
        1,
        2,
        2,
    ]


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet=st.sampled_from(["a", "é", "\n", "\r", " ", "#"]), max_size=60))
def test_line_numbers_agree_with_the_chunker_and_the_byte_count(text: str) -> None:
    lines = file_lines(text)
    assert lines == split_lines(text)[: len(lines)]
    assert count_lines_of_bytes(text.encode()) == len(lines)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="xy", max_size=12), max_size=30), st.integers(min_value=12, max_value=60))
def test_paging_returns_every_line_once_within_the_cap(lines: list[str], cap: int) -> None:
    text = "\n".join(lines)
    got: list[str] = []
    start: int | None = 1
    while start is not None:
        part = page(text, start, None, cap)
        assert len(part.content) <= cap
        if part.start_line:
            got += part.content.split("\n")
        start = part.next_start_line
    assert got == file_lines(text)


def test_a_line_longer_than_the_cap_is_cut_and_paging_moves_on() -> None:
    part = page("x" * 50 + "\nnext", 1, None, 10)
    assert (part.content, part.end_line, part.truncated, part.next_start_line) == ("x" * 10, 1, True, 2)
    assert page("x" * 50, 1, None, 10).next_start_line is None


def test_a_range_past_the_end_is_empty() -> None:
    part = page("a\nb\n", 5, None, 100)
    assert (part.content, part.start_line, part.end_line, part.total_lines) == ("", 0, 0, 2)


def test_topics_become_one_capped_line() -> None:
    assert clean_topic(None) is None
    assert clean_topic("  \n ") is None
    assert clean_topic(" deploy\n  notes\t") == "deploy notes"
    long = clean_topic("a" * 500)
    assert long is not None and len(long) == MAX_TOPIC_CHARS and long.endswith("…")
    assert entry_heading("09:05", "x") == "## 09:05 — x"
    assert entry_heading("09:05", None) == "## 09:05"


def test_append_to_an_empty_file_with_a_title_and_heading() -> None:
    out = compose_append("", "\n\nbody\n\n\n", title="# 2024-05-01", heading="## 09:05 — x")
    assert out.text == "# 2024-05-01\n\n## 09:05 — x\n\nbody\n"
    assert (out.start_line, out.end_line) == (3, 5)


def test_append_separates_entries_by_exactly_one_blank_line() -> None:
    for existing in ("old", "old\n", "old\n\n"):
        out = compose_append(existing, "new")
        assert out.text == "old\n\nnew\n"
        assert (out.start_line, out.end_line) == (3, 3)
    crlf = compose_append("old\r\n", "new")
    assert crlf.text == "old\r\n\r\nnew\r\n" and crlf.start_line == 3


def test_an_append_ends_every_line_it_adds_the_way_the_file_ends_its_lines() -> None:
    for eol in ("\r\n", "\r"):
        existing = f"# Notes{eol}{eol}line one{eol}"
        out = compose_append(existing, "first\nsecond\r\nthird\n", heading="## 09:05 — x")
        assert out.text == existing + eol.join(["", "## 09:05 — x", "", "first", "second", "third", ""])
        assert (out.start_line, out.end_line) == (5, 9) and count_lines(out.text) == 9
        unterminated = compose_append(f"# Notes{eol}line one", "added")
        assert unterminated.text == f"# Notes{eol}line one{eol}{eol}added{eol}"
    assert compose_append("", "a\r\nb", title="# 2024-05-01").text == "# 2024-05-01\n\na\nb\n"
