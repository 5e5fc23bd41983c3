"""The sync merge: changes to different lines combine, same-place insertions union, same-line edits conflict."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from server.memory.service import CallerContext, MemoryService
from server.sync.merge import merge3, merge_unrelated
from server.sync.service import SyncService
from syncproto.messages import PushChange
from syncproto.wire import sha256_hex

DAILY = "# 2026-11-23\n\n## 09:00 — a\nfirst\n"
ENTRY_B = "\n## 10:00 — b\nsecond\n"
ENTRY_C = "\n## 10:05 — c\nthird\n"
TEN = "".join(f"line {n}\n" for n in range(1, 11))


def _edit(text: str, line: int, new: str) -> str:
    """`text` with its 1-based `line` replaced by `new` (an empty `new` deletes it)."""
    lines = text.splitlines(keepends=True)
    lines[line - 1] = new
    return "".join(lines)


def test_two_laptops_appending_to_the_same_daily_log_keep_both_entries_server_first() -> None:
    assert merge3(DAILY, DAILY + ENTRY_B, DAILY + ENTRY_C) == DAILY + ENTRY_B + ENTRY_C


def test_two_independently_created_daily_logs_keep_the_title_once_and_both_entries() -> None:
    ours = "# 2026-11-23\n\n## 10:00 — b\nx\n"
    theirs = "# 2026-11-23\n\n## 10:05 — c\ny\n"
    assert merge_unrelated(ours, theirs) == "# 2026-11-23\n\n## 10:00 — b\nx\n## 10:05 — c\ny\n"


def test_unrelated_texts_with_nothing_in_common_are_concatenated_server_first() -> None:
    assert merge_unrelated("a\n", "b\n") == "a\nb\n"


def test_an_unrelated_text_that_extends_the_other_is_taken_whole() -> None:
    assert merge_unrelated("# t\n", "# t\nentry\n") == "# t\nentry\n"
    assert merge_unrelated("# t\nentry\n", "# t\n") == "# t\nentry\n"
    assert merge_unrelated("same\n", "same\n") == "same\n"


def test_a_retried_push_merges_to_the_same_text() -> None:
    assert merge3(DAILY, DAILY + ENTRY_B + ENTRY_C, DAILY + ENTRY_C) == DAILY + ENTRY_B + ENTRY_C
    assert merge3(DAILY, DAILY + ENTRY_B, DAILY + ENTRY_B) == DAILY + ENTRY_B


def test_an_insertion_the_other_side_already_contains_is_taken_once() -> None:
    assert merge3("a\n", "a\nx\ny\nz\n", "a\ny\n") == "a\nx\ny\nz\n"
    assert merge3("a\n", "a\ny\n", "a\nx\ny\nz\n") == "a\nx\ny\nz\n"


def test_containment_counts_whole_lines_only() -> None:
    assert merge3("a\n", "a\nxy\n", "a\ny\n") == "a\nxy\ny\n"


def test_the_same_line_edited_differently_on_both_sides_is_a_conflict() -> None:
    assert merge3(TEN, _edit(TEN, 5, "mine\n"), _edit(TEN, 5, "yours\n")) is None


def test_the_same_line_edited_alike_on_both_sides_is_taken_once() -> None:
    assert merge3(TEN, _edit(TEN, 5, "same\n") + "o\n", _edit(TEN, 5, "same\n")) == _edit(TEN, 5, "same\n") + "o\n"


def test_edits_to_distant_lines_are_both_kept() -> None:
    expected = _edit(_edit(TEN, 2, "two\n"), 10, "ten\n")
    assert merge3(TEN, _edit(TEN, 2, "two\n"), _edit(TEN, 10, "ten\n")) == expected


def test_edits_to_neighbouring_lines_are_both_kept() -> None:
    expected = _edit(_edit(TEN, 4, "four\n"), 5, "five\n")
    assert merge3(TEN, _edit(TEN, 4, "four\n"), _edit(TEN, 5, "five\n")) == expected


def test_a_deletion_against_an_edit_of_the_same_line_is_a_conflict() -> None:
    assert merge3(TEN, _edit(TEN, 5, ""), _edit(TEN, 5, "edited\n")) is None
    assert merge3(TEN, _edit(TEN, 5, "edited\n"), _edit(TEN, 5, "")) is None


def test_a_deletion_on_one_side_and_an_edit_elsewhere_are_both_applied() -> None:
    expected = _edit(_edit(TEN, 8, "eight\n"), 2, "")
    assert merge3(TEN, _edit(TEN, 2, ""), _edit(TEN, 8, "eight\n")) == expected


def test_the_same_line_deleted_on_both_sides_is_deleted_once() -> None:
    assert merge3(TEN, _edit(TEN, 3, ""), _edit(_edit(TEN, 3, ""), 9, "nine\n")) == _edit(
        _edit(TEN, 3, ""), 9, "nine\n"
    )


def test_an_insertion_inside_a_range_the_other_side_replaced_is_a_conflict() -> None:
    ours = "a\nX\nd\n"  # b and c replaced by X
    theirs = "a\nb\nnew\nc\nd\n"
    assert merge3("a\nb\nc\nd\n", ours, theirs) is None


def test_an_insertion_touching_a_replaced_range_is_kept_beside_it() -> None:
    base = "a\nb\nc\n"
    assert merge3(base, "a\nB\nc\n", "a\nb\nafter b\nc\n") == "a\nB\nafter b\nc\n"
    assert merge3(base, "a\nB\nc\n", "a\nbefore b\nb\nc\n") == "a\nbefore b\nB\nc\n"


def test_appending_after_an_unterminated_last_line_is_not_a_conflict() -> None:
    assert merge3("a\nb", "a\nb\nx\n", "a\nb\ny\n") == "a\nb\nx\ny\n"


@pytest.mark.parametrize(
    ("base", "ours", "theirs", "expected"),
    [
        ("a\n", "a\nx", "a\ny", "a\nx\ny"),  # neither side ends with a newline: nor does the result
        ("a\n", "a\nx", "a\ny\n", "a\nx\ny\n"),  # one side does: the result does
        ("a", "a\nx\n", "a\ny", "a\nx\ny\n"),
        ("a\nb\nc", "z\na\nb\nc", "a\nb\nC", "z\na\nb\nC"),
    ],
)
def test_the_result_ends_with_a_newline_when_either_side_does(base: str, ours: str, theirs: str, expected: str) -> None:
    assert merge3(base, ours, theirs) == expected


def test_crlf_texts_merge_and_keep_their_line_endings() -> None:
    base = "# t\r\n\r\nfirst\r\n"
    assert merge3(base, base + "o\r\n", base + "t\r\n") == base + "o\r\nt\r\n"
    assert merge3(base, base.replace("# t", "# T") + "o\r\n", base + "t\r\n") == "# T\r\n\r\nfirst\r\no\r\nt\r\n"
    assert merge3(base, base.replace("first", "1"), base.replace("first", "2")) is None


def test_appending_after_an_unterminated_crlf_line_is_not_a_conflict() -> None:
    assert merge3("a\r\nb", "a\r\nb\r\nx\r\n", "a\r\nb\r\ny\r\n") == "a\r\nb\r\nx\r\ny\r\n"
    assert merge3("a\r\nb", "a\r\nb\r\nx", "a\r\nb\r\ny") == "a\r\nb\r\nx\r\ny"


def test_a_change_of_line_endings_against_an_edit_is_a_conflict() -> None:
    assert merge3("a\nb\n", "a\r\nb\r\n", "a\nB\n") is None


def test_empty_base_with_both_sides_creating_text_is_a_union() -> None:
    assert merge3("", "a\n", "b\n") == "a\nb\n"
    assert merge3("", "a\n", "a\n") == "a\n"
    assert merge3("", "", "b\n") == "b\n"


def test_emptying_a_file_against_an_edit_of_it_is_a_conflict() -> None:
    assert merge3("a\nb\n", "", "a\nB\n") is None


def test_emptying_a_file_unchanged_on_the_other_side_empties_it() -> None:
    assert merge3("a\nb\n", "", "a\nb\n") == ""
    assert merge3("a\nb\n", "a\nb\n", "") == ""


def test_lines_split_on_newline_only_not_on_other_unicode_line_breaks() -> None:
    base = "a\u2028b\nc\n"
    assert merge3(base, "a\u2028B\nc\n", "a\u2028b\nC\n") == "a\u2028B\nC\n"


def test_a_file_of_thousands_of_lines_merges_quickly() -> None:
    base = "".join(f"## entry {n}\n\ntext\n\n" for n in range(2000))
    ours = base.replace("## entry 10\n", "## entry ten\n") + "o\n"
    theirs = base.replace("## entry 1990\n", "## entry 1990!\n") + "t\n"
    expected = base.replace("## entry 10\n", "## entry ten\n").replace("## entry 1990\n", "## entry 1990!\n")
    assert merge3(base, ours, theirs) == expected + "o\nt\n"


def _deploy_log(lines: int) -> str:
    """A daily log whose lines repeat: a heading, a blank, a list item, a blank."""
    entries = [f"## 10:{n % 60:02d} — deploy\n\n- step {n % 7}\n\n" for n in range(lines // 4)]
    return "".join(entries)


def test_a_reformatted_log_of_repeated_lines_merges_with_an_append_in_seconds() -> None:
    base = _deploy_log(2000)  # took 40 s and more, holding the index's lock
    ours = base.replace("- step", "* step")  # a formatter's push
    theirs = base + "## 11:00 — note\n\nnew entry\n"
    started = time.monotonic()
    merged = merge3(base, ours, theirs)
    assert time.monotonic() - started < 5
    assert merged == ours + "## 11:00 — note\n\nnew entry\n"


def test_a_change_too_costly_to_diff_is_a_conflict_within_seconds() -> None:
    base = _deploy_log(20_000)  # 155 kB, well under the size cap; the old diff ran for hours
    started = time.monotonic()
    assert merge3(base, base.replace("- step", "* step"), base + "new entry\n") is None
    assert merge3(base, base + "new entry\n", base.replace("- step", "* step")) is None
    assert time.monotonic() - started < 5


def test_a_push_too_costly_to_merge_returns_promptly_and_keeps_both_texts(hashing_service: MemoryService) -> None:
    sync, alice = SyncService(hashing_service), CallerContext("alice", "SHA256:a", {"team": "rw"}, "team", "rw")
    base, path = _deploy_log(8_000), "memory/2026-11-01.md"  # 62 kB
    reformatted, appended = base.replace("- step", "* step"), base + "new entry\n"
    sync.push(alice, [PushChange(path, None, base)])
    sync.push(alice, [PushChange(path, sha256_hex(base.encode()), reformatted)])
    started = time.monotonic()  # the merge holds the index's lock: every write to the index waited for it
    _, [result] = sync.push(alice, [PushChange(path, sha256_hex(base.encode()), appended)])
    assert time.monotonic() - started < 5
    assert (result.status, result.content) == ("conflict", reformatted)
    assert result.conflict_path is not None
    assert hashing_service.open_index(alice).mirror.read(result.conflict_path).text == appended  # type: ignore[union-attr]


def test_insertions_at_one_place_whose_lines_all_end_alike_merge_in_seconds() -> None:
    ours, theirs = "xa\n" * 120_000, "a\n" + "xa\n" * 40_000  # "a\n" is found inside every line of ours
    started = time.monotonic()
    assert merge3("", ours, theirs) == ours + theirs
    assert time.monotonic() - started < 5


# Properties. Texts mix LF, CRLF and unterminated last lines, from a small alphabet so that lines repeat.
_line = st.sampled_from(["a", "b", "", "## h", "- x"]).flatmap(
    lambda body: st.sampled_from([body + "\n", body + "\r\n"])
)
_text = st.builds(
    lambda lines, tail: "".join(lines) + tail, st.lists(_line, max_size=12), st.sampled_from(["", "z", "a"])
)
_block = st.lists(st.sampled_from(["a\n", "b\n", "\n", "new\n", "- y\n"]), min_size=1, max_size=5).map("".join)


@given(_text, _text, _text)
@settings(max_examples=300)
def test_identity_laws_hold(base: str, ours: str, theirs: str) -> None:
    assert merge3(base, base, theirs) == theirs
    assert merge3(base, ours, base) == ours
    assert merge3(base, ours, ours) == ours


@given(_text, _text, _text)
@example("a", "a\r\n", "b\n")  # unterminated base, sides ending their lines differently
@settings(max_examples=300)
def test_whether_a_merge_is_clean_does_not_depend_on_which_side_is_the_server(base: str, a: str, b: str) -> None:
    assert (merge3(base, a, b) is None) == (merge3(base, b, a) is None)


@given(_text, _block, _block)
@settings(max_examples=300)
def test_independent_appends_on_both_sides_merge_cleanly_and_keep_both_blocks(base: str, x: str, y: str) -> None:
    ending = "\r\n" if base.split("\n")[0].endswith("\r") else "\n"  # a CRLF file gets CRLF appended
    start = base + ending if base and not base.endswith("\n") else base
    merged = merge3(base, start + x, start + y)
    assert merged is not None
    assert merged.startswith(start)
    assert x in merged[len(start) :]
    assert y in merged[len(start) :]
    assert merged in (start + x + y, start + x, start + y)
    assert merge3(base, merged, start + y) == merged  # the push retried after the merge changes nothing


_piece = st.one_of(
    st.tuples(st.just("keep"), st.integers(1, 3)),
    st.tuples(
        st.sampled_from(["ours", "theirs"]),
        st.integers(0, 3),  # base lines the side removes here
        st.lists(st.sampled_from(["p", "q", ""]), max_size=3),  # lines it puts in their place
    ),
)


@given(st.lists(_piece, max_size=12))
@settings(max_examples=300)
def test_edits_on_disjoint_non_adjacent_line_ranges_merge_to_both_applied(pieces: list[tuple]) -> None:
    base: list[str] = []
    ours: list[str] = []
    theirs: list[str] = []
    both: list[str] = []
    previous_was_edit = False
    for piece in pieces:
        if piece[0] == "keep" or previous_was_edit:  # an unchanged base line between any two edits
            kept = [f"base {len(base) + n}\n" for n in range(piece[1] if piece[0] == "keep" else 1)]
            base, ours, theirs, both = base + kept, ours + kept, theirs + kept, both + kept
            previous_was_edit = False
            if piece[0] == "keep":
                continue
        side, removed, added = piece
        if removed == 0 and not added:
            continue
        old = [f"base {len(base) + n}\n" for n in range(removed)]  # base lines are unique, so the diff is exact
        new = [f"{side} {line}\n" for line in added]
        base, both = base + old, both + new
        ours += new if side == "ours" else old
        theirs += new if side == "theirs" else old
        previous_was_edit = True
    assert merge3("".join(base), "".join(ours), "".join(theirs)) == "".join(both)
