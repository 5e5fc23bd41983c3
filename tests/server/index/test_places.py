"""Merging ranked chunks into places: neighbours of one file become one hit, ten hits cover ten places."""

from __future__ import annotations

from server.index.chunker import chunk_markdown
from server.index.markdown import MAX_HEADING_CHARS
from server.index.places import Span, body_of, merge_places


def span(chunk_id: int, path: str, start: int, end: int) -> Span:
    return Span(chunk_id, path, start, end)


def ranges(places):
    return [(p.path, p.start_line, p.end_line, p.chunk_ids) for p in places]


def test_overlapping_chunks_of_one_file_become_one_place_led_by_the_best_chunk():
    merged = merge_places([span(7, "a.md", 10, 20), span(3, "a.md", 18, 30)], limit=8)
    assert ranges(merged) == [("a.md", 10, 30, [7, 3])]


def test_touching_ranges_merge_and_a_gap_of_one_line_does_not():
    touching = merge_places([span(1, "a.md", 1, 5), span(2, "a.md", 6, 9)], limit=8)
    assert ranges(touching) == [("a.md", 1, 9, [1, 2])]
    apart = merge_places([span(1, "a.md", 1, 5), span(2, "a.md", 7, 9)], limit=8)
    assert ranges(apart) == [("a.md", 1, 5, [1]), ("a.md", 7, 9, [2])]


def test_chunks_of_different_files_never_merge():
    merged = merge_places([span(1, "a.md", 1, 5), span(2, "b.md", 1, 5)], limit=8)
    assert ranges(merged) == [("a.md", 1, 5, [1]), ("b.md", 1, 5, [2])]


def test_a_chunk_bridging_two_places_joins_them_into_the_higher_ranked_one():
    merged = merge_places(
        [span(1, "a.md", 1, 4), span(2, "b.md", 1, 3), span(3, "a.md", 9, 12), span(4, "a.md", 5, 8)], limit=8
    )
    assert ranges(merged) == [("a.md", 1, 12, [1, 4, 3]), ("b.md", 1, 3, [2])]


def test_at_most_limit_places_and_the_scan_ends_at_the_first_chunk_that_would_start_another():
    ranked = [span(1, "a.md", 1, 4), span(2, "b.md", 1, 4), span(3, "a.md", 5, 6), span(4, "c.md", 1, 4),
              span(5, "a.md", 7, 9)]  # fmt: skip
    assert ranges(merge_places(ranked, limit=2)) == [("a.md", 1, 6, [1, 3]), ("b.md", 1, 4, [2])]


def test_nothing_ranked_gives_no_places():
    assert merge_places([], limit=8) == []


def bodies(text: str, tokenizer) -> list[tuple[int, int, str]]:
    """Each chunk of `text` (cut by the real chunker) as its body's first and last line and its body's text."""
    found = []
    for chunk in chunk_markdown(text, tokenizer):
        skipped, body = body_of(chunk.text, chunk.heading_text)
        found.append((chunk.start_line + skipped, chunk.end_line, body))
    return found


def test_a_body_leaves_out_the_heading_lines_of_its_path_and_the_blank_lines_after_them(tokenizer):
    text = "# Project\n\n## Decisions\n\n### Database\nWe use SQLite.\n\n## People\nDana owns billing.\n"
    assert bodies(text, tokenizer) == [(6, 6, "We use SQLite."), (9, 9, "Dana owns billing.")]


def test_a_daily_logs_first_lines_are_its_entries_not_its_dated_heading(tokenizer):
    text = "# 2026-11-25 - standup with Ann [tags: team]\n\n- Ann ran it.\n- Bo shipped the fix.\n"
    assert bodies(text, tokenizer) == [(3, 4, "- Ann ran it.\n- Bo shipped the fix.")]


def test_a_chunk_without_a_heading_line_or_with_only_headings_keeps_its_whole_range(tokenizer):
    assert bodies("Notes before any heading.\n\n# Later\nBody.\n", tokenizer) == [
        (1, 1, "Notes before any heading."),
        (4, 4, "Body."),
    ]
    assert bodies("# Only\n\n## Headings\n", tokenizer) == [(1, 3, "# Only\n\n## Headings")]


def test_a_heading_the_path_does_not_name_stays_in_the_body():
    # An empty section's heading carried into its sibling's chunk, and a title cut to the limit, say more than
    # the hit's heading does.
    assert body_of("## Empty\n## Next\nText.", "Next") == (0, "## Empty\n## Next\nText.")
    long_title = "x" * (MAX_HEADING_CHARS + 50)
    assert body_of(f"# {long_title}\nText.", long_title[:MAX_HEADING_CHARS]) == (0, f"# {long_title}\nText.")
    assert body_of("Text.\n# Heading\nMore.", "Heading") == (0, "Text.\n# Heading\nMore.")
