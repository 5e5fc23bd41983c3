"""Merging ranked chunks into places: neighbours of one file become one hit, ten hits cover ten places."""

from __future__ import annotations

from server.index.places import Span, merge_places


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
