"""Sections of a memory file, pure: finding one by heading, its range and hash, replacing it, appending under it,
and how a section replace and an append elsewhere in the same file merge in sync (`server.sync.merge`)."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.errors import InvalidArgumentError
from server.memory.arguments import check_heading
from server.memory.sections import (
    Span,
    append,
    distinct_title,
    locate,
    new_level,
    not_found,
    parse_name,
    plain,
    raw_lines,
    refuse_unclosed_fence,
    replace,
    section_hash,
    spans,
)
from server.sync.merge import merge3

MEMORY = (
    "# Project memory\n"
    "\n"
    "Read me first.\n"
    "\n"
    "## Deploy\n"
    "Blue-green behind HAProxy.\n"
    "\n"
    "### Rollback\n"
    "Switch back.\n"
    "\n"
    "## Decisions\n"
    "- SQLite with WAL.\n"
)


def lines_of(text: str) -> list[str]:
    return plain(raw_lines(text))


def find(text: str, name: str) -> Span | None:
    return locate(lines_of(text), parse_name(name), "MEMORY.md")


def test_a_section_runs_to_the_next_heading_of_its_level_with_subsections_and_without_trailing_blank_lines():
    deploy = find(MEMORY, "Deploy")
    assert deploy is not None
    assert (deploy.name, deploy.level, deploy.start + 1, deploy.end, deploy.own_end) == (
        "Project memory > Deploy", 2, 5, 9, 6,
    )  # fmt: skip
    title = find(MEMORY, "Project memory")
    assert title is not None and (title.start, title.end) == (0, 12)


def test_a_heading_is_matched_by_its_text_or_a_path_exactly_then_ignoring_case():
    assert find(MEMORY, "Project memory > Deploy > Rollback") == find(MEMORY, "Rollback")
    assert find(MEMORY, "deploy > ROLLBACK") == find(MEMORY, "Deploy > Rollback")
    assert find(MEMORY, "## Decisions") == find(MEMORY, "Decisions")
    assert find(MEMORY, "Gotchas") is None
    text = "## Notes\nupper\n\n## notes\nlower\n"
    exact = find(text, "notes")
    assert exact is not None and exact.start == 3  # the exact match wins over a case-insensitive one


def test_an_ambiguous_heading_is_an_error_listing_every_candidate_by_path_and_line():
    text = "# Alpha\n## Decisions\na\n# Beta\n## Decisions\nb\n"
    with pytest.raises(InvalidArgumentError) as ambiguous:
        find(text, "Decisions")
    assert str(ambiguous.value) == (
        "heading 'Decisions' is ambiguous in MEMORY.md: it matches 'Alpha > Decisions' (line 2), "
        "'Beta > Decisions' (line 5); name one by its path, e.g. 'Alpha > Decisions'"
    )
    named = find(text, "Beta > Decisions")
    assert named is not None and named.start == 4


def test_sections_of_one_path_are_told_apart_by_a_line_inside_them_and_the_error_says_so():
    text = "# Log\n## 09:30 — deploy\nfirst\n\n## 09:30 — deploy\nsecond\n"
    lines = lines_of(text)
    with pytest.raises(InvalidArgumentError) as ambiguous:
        locate(lines, parse_name("09:30 — deploy"), "memory/2024-05-01.md")
    assert str(ambiguous.value) == (
        "heading '09:30 — deploy' is ambiguous in memory/2024-05-01.md: it matches 'Log > 09:30 — deploy' (line 2),"
        " 'Log > 09:30 — deploy' (line 5); sections of the same name are told apart by a line inside them:"
        " memory_get reads one with heading and start_line, e.g. start_line=5"
    )
    picked = [locate(lines, parse_name("09:30 — deploy"), "log", line) for line in (1, 2, 4, 5)]
    assert [span.start if span else None for span in picked] == [1, 1, 4, 4]
    with pytest.raises(InvalidArgumentError, match="ambiguous"):  # a line outside both picks neither
        locate(lines, parse_name("09:30 — deploy"), "log", 0)


def test_a_written_heading_that_repeats_a_path_takes_the_first_number_no_section_beside_it_has():
    before = lines_of("# Log\n## 09:30 — deploy\n## 09:30 — deploy (2)\n# Other\n## 09:30 — deploy (3)\n")
    under_log = [*before[:3], "## 09:30 — deploy", *before[3:]]
    assert distinct_title(before, under_log, "09:30 — deploy") == "09:30 — deploy (3)"  # Other's (3) is elsewhere
    assert distinct_title(before, [*before, "## 09:30 — deploy"], "09:30 — deploy") == "09:30 — deploy"  # Other's
    assert distinct_title(before, [*before, "## 09:30 — deploy (3) [tags: a]"], "09:30 — deploy (3)") == (
        "09:30 — deploy (3) (2)"
    )
    assert distinct_title(before, [*before[:3], "## 09:30 — Deploy", *before[3:]], "09:30 — Deploy") == (
        "09:30 — Deploy"
    )  # matched exactly first, a heading differing in case is addressed on its own
    fenced = lines_of("# Log\n```\n## 09:31\n```\n")  # a heading in a code fence is no heading
    assert distinct_title(fenced, [*fenced, "## 09:31"], "09:31") == "09:31"


def test_a_missing_heading_error_lists_the_headings_the_file_has():
    error = not_found(lines_of(MEMORY), ("Gotchas",), "MEMORY.md")
    assert "no heading 'Gotchas' in MEMORY.md; its headings are: 'Project memory', 'Project memory > Deploy'" in str(
        error
    )


def test_headings_in_code_fences_are_not_sections():
    text = "## Real\n```\n## Not a heading\n```\nafter\n"
    assert [span.name for span in spans(lines_of(text))] == ["Real"]


def test_replace_keeps_the_heading_line_and_changes_only_the_section_and_its_subsections():
    deploy = find(MEMORY, "Deploy")
    assert deploy is not None
    edit = replace(MEMORY, deploy, "Rolling deploys now.\n")
    assert edit.text == MEMORY.replace(
        "Blue-green behind HAProxy.\n\n### Rollback\nSwitch back.\n", "Rolling deploys now.\n"
    )
    assert (edit.start_line, edit.end_line, edit.heading) == (5, 6, "Project memory > Deploy")
    assert edit.section_hash == section_hash(lines_of(edit.text), find(edit.text, "Deploy"))  # type: ignore[arg-type]


def test_replace_with_content_starting_with_a_heading_of_its_level_renames_the_section():
    deploy = find(MEMORY, "Deploy")
    assert deploy is not None
    edit = replace(MEMORY, deploy, "## Shipping\nRolling.")
    assert "## Shipping\nRolling.\n\n## Decisions\n" in edit.text and "## Deploy" not in edit.text
    assert edit.heading == "Project memory > Shipping"


def test_the_section_hash_is_of_the_lines_memory_get_returns():
    deploy = find(MEMORY, "Deploy")
    assert deploy is not None

    returned = "## Deploy\nBlue-green behind HAProxy.\n\n### Rollback\nSwitch back."
    assert section_hash(lines_of(MEMORY), deploy) == hashlib.sha256(returned.encode()).hexdigest()


def test_an_append_goes_at_the_end_of_the_sections_own_text_before_its_subsections():
    edit = append(MEMORY, ("Deploy",), "Canary first.", where="MEMORY.md")
    assert "## Deploy\nBlue-green behind HAProxy.\n\nCanary first.\n\n### Rollback\n" in edit.text
    assert (edit.start_line, edit.end_line) == (8, 8)
    prose = append(MEMORY, ("Decisions",), "Postgres later.", where="MEMORY.md")
    assert prose.text == MEMORY + "\nPostgres later.\n"


def test_a_list_item_appended_after_a_list_item_continues_the_list():
    item = append(MEMORY, ("Decisions",), "- Postgres later.", where="MEMORY.md")
    assert item.text == MEMORY + "- Postgres later.\n"
    assert (item.start_line, item.end_line) == (13, 13)


def test_a_timed_entry_goes_one_level_below_the_section_after_its_subsections():
    edit = append(MEMORY, ("Deploy",), "Rolled back once.", where="MEMORY.md", entry="09:30 — incident")
    assert "Switch back.\n\n### 09:30 — incident\n\nRolled back once.\n\n## Decisions\n" in edit.text
    assert edit.heading == "Project memory > Deploy"


def test_a_missing_heading_is_created_one_level_below_its_parent_or_the_files_title():
    gotchas = append(MEMORY, ("Gotchas",), "Flaky CI on Mondays.", where="MEMORY.md")
    assert gotchas.text == MEMORY + "\n## Gotchas\n\nFlaky CI on Mondays.\n"
    assert (gotchas.start_line, gotchas.end_line, gotchas.heading) == (14, 16, "Project memory > Gotchas")
    nested = append(MEMORY, ("Deploy", "Canary"), "Five percent.", where="MEMORY.md")
    assert "Switch back.\n\n### Canary\n\nFive percent.\n\n## Decisions\n" in nested.text
    assert nested.heading == "Project memory > Deploy > Canary"
    chain = append("", ("Ops", "Oncall"), "Alice.", where="MEMORY.md")
    assert chain.text == "## Ops\n\n### Oncall\n\nAlice.\n" and chain.heading == "Ops > Oncall"


def test_the_level_of_a_new_top_section_follows_the_file():
    assert new_level(lines_of("# Title\n\n## A\n")) == 2
    assert new_level(lines_of("# One\n# Two\n")) == 1
    assert new_level(lines_of("### Deep\n#### Deeper\n")) == 3
    assert new_level(lines_of("no headings\n")) == 2


def test_a_new_daily_log_starts_with_its_title_and_the_heading_below_it():
    edit = append("", ("Decisions",), "Use uv.", where="memory/2026-11-25.md", entry="09:30", title="# 2026-11-25")
    assert edit.text == "# 2026-11-25\n\n## Decisions\n\n### 09:30\n\nUse uv.\n"
    assert edit.heading == "2026-11-25 > Decisions"


def test_crlf_files_keep_their_line_ends_and_a_file_without_a_final_newline_keeps_that():
    text = "## A\r\none\r\n\r\n## B\r\ntwo"
    b = find(text, "B")
    assert b is not None
    assert replace(text, b, "three").text == "## A\r\none\r\n\r\n## B\r\nthree"
    assert append(text, ("A",), "more", where="x.md").text == "## A\r\none\r\n\r\nmore\r\n\r\n## B\r\ntwo"


def test_no_heading_can_go_below_level_six():
    with pytest.raises(InvalidArgumentError, match="below a level-6 heading"):
        append("###### Deepest\nx\n", ("Deepest",), "y", where="x.md", entry="09:30")


@pytest.mark.parametrize(
    ("parts", "entry"),
    [(("Decisions",), None), (("Notes", "Decisions"), None), (("Notes",), None), (("Notes",), "09:30")],
)
def test_text_under_a_heading_is_refused_when_it_would_land_in_a_code_fence_that_is_never_closed(parts, entry):
    cut_short = "# Notes\n\nSome text.\n\n```sh\nmake deploy"
    with pytest.raises(InvalidArgumentError, match="code fence opened on line 5 and never closed"):
        append(cut_short, parts, "we pick sqlite", where="x.md", entry=entry)


@pytest.mark.parametrize(
    ("content", "marker"),
    [("Snippet:\n```python\nprint('hi')", "```"), ("~~~\nunclosed", "~~~"), ("````\n```\nstill code\n```", "````")],
)
def test_content_that_leaves_a_code_fence_open_is_refused_naming_the_fence_to_close(content, marker):
    with pytest.raises(InvalidArgumentError, match=f"never closes it.*a line of {marker} after the code"):
        refuse_unclosed_fence(content)


@pytest.mark.parametrize(
    "content", ["```python\nprint('hi')\n```", "~~~\ncode\n~~~\nafter", "```\n~~~\n```", "a ``` b", "plain"]
)
def test_content_that_closes_every_code_fence_it_opens_is_accepted(content):
    refuse_unclosed_fence(content)


def test_text_before_a_code_fence_that_is_never_closed_and_after_a_closed_one_is_still_written():
    before = append("# A\none\n\n# B\n```\nopen", ("A",), "two", where="x.md")
    assert before.text == "# A\none\n\ntwo\n\n# B\n```\nopen"
    closed = append("# A\n```\ncode\n```\n", ("B",), "two", where="x.md")
    assert closed.text == "# A\n```\ncode\n```\n\n## B\n\ntwo\n" and closed.heading == "A > B"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must name a heading"),
        ("A > ", "must name a heading"),
        ("A\nB", "one line"),
        (7, "must be a string"),
        ("x" * 201, "at most 200"),
    ],
)
def test_a_bad_heading_argument_is_refused_saying_why(value, message):
    with pytest.raises(InvalidArgumentError, match=message):
        check_heading(value)


# properties ------------------------------------------------------------------------------------------------

TITLES = st.sampled_from(["Deploy", "Decisions", "Gotchas", "Notes", "Ops", "Setup"])
BODY = st.lists(st.sampled_from(["- item", "text", "", "```", "#not", "more text"]), max_size=4)


@st.composite
def files(draw: st.DrawFn) -> str:
    """A memory file of uniquely named sections at levels 2 and 3 under a `#` title, with bodies and blank lines."""
    titles = draw(st.lists(TITLES, min_size=2, max_size=5, unique=True))
    out = ["# Memory", ""]
    for number, title in enumerate(titles):
        level = 2 if number == 0 else draw(st.sampled_from([2, 3]))
        body = [line for line in draw(BODY) if line != "```"]
        out += ["#" * level + " " + title, *body, *([""] * draw(st.integers(0, 2)))]
    ending = draw(st.sampled_from(["\n", "\r\n"]))
    return ending.join(out) + draw(st.sampled_from([ending, ""]))


@settings(max_examples=300, deadline=None)
@given(files(), st.data())
def test_replacing_one_section_leaves_every_other_line_byte_identical(text: str, data: st.DataObject) -> None:
    lines = lines_of(text)
    span = data.draw(st.sampled_from([s for s in spans(lines) if s.level > 1]))
    content = data.draw(st.sampled_from(["new text", "- a\n- b\n\nc", "#### Sub\nbelow"]))
    edit = replace(text, span, content)
    raw, new = raw_lines(text), raw_lines(edit.text)
    after = len(raw) - span.end
    assert new[: span.start] == raw[: span.start]
    assert new[len(new) - after :] == raw[span.end :] if after else True
    assert plain(new)[span.start] == lines[span.start]  # the heading line is kept


@settings(max_examples=300, deadline=None)
@given(files(), st.data())
def test_a_section_replace_and_an_append_to_another_section_merge_cleanly_in_either_order(
    text: str, data: st.DataObject
) -> None:
    lines = lines_of(text)
    named = [s for s in spans(lines) if s.level > 1]
    replaced = data.draw(st.sampled_from(named))
    # another section, not one inside the replaced one (that one's lines are gone: a real conflict)
    others = [s for s in named if s.start not in range(replaced.start, replaced.end)]
    other = data.draw(st.sampled_from(others)) if others else None
    if other is None:
        return
    ours = replace(text, replaced, "rewritten on one laptop").text
    theirs = append(text, other.path[-1:], "added on another laptop", where="x.md").text
    both = append(ours, other.path[-1:], "added on another laptop", where="x.md").text
    assert merge3(text, ours, theirs) == both
    assert merge3(text, theirs, ours) == both
