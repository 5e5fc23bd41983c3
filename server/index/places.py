"""Hits are places, not fragments: ranked chunks of one file whose line ranges overlap or touch become one hit.

Neighbouring chunks of a file often rank together (a chunk and the overlap carried into the next, two halves of one
section). Shown apart they crowd the list with one place; merged, ten hits cover ten places. Pure: it sees chunk ids
and line ranges in rank order and says which chunks make each place.

A place is made of the chunks' bodies. The first chunk of a section holds the section's heading line too (the model
and the keyword side read it there), but every hit carries its heading path as `heading`, so the lines that only
repeat it are left out of the range an agent is pointed to, and out of the snippet.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from server.index.markdown import HEADING_SEPARATOR, MAX_HEADING_CHARS, heading_title


@dataclass(frozen=True)
class Span:
    chunk_id: int
    path: str
    start_line: int
    end_line: int


@dataclass
class Place:
    path: str
    start_line: int
    end_line: int
    chunk_ids: list[int]  # best first: the first one speaks for the place (score, heading, snippet)

    def touches(self, span: Span) -> bool:
        return span.path == self.path and span.start_line <= self.end_line + 1 and span.end_line >= self.start_line - 1

    def absorb(self, start_line: int, end_line: int, chunk_ids: Iterable[int]) -> None:
        self.start_line = min(self.start_line, start_line)
        self.end_line = max(self.end_line, end_line)
        self.chunk_ids.extend(chunk_ids)


def merge_places(ranked: Iterable[Span], limit: int) -> list[Place]:
    """At most `limit` places, in the rank order of their best chunk. A chunk joins the place it overlaps or
    touches; once `limit` places exist, chunks that would start a new one end the scan (they rank below every
    place shown)."""
    places: list[Place] = []
    for span in ranked:
        joined = [place for place in places if place.touches(span)]
        if not joined:
            if len(places) == limit:
                break
            places.append(Place(span.path, span.start_line, span.end_line, [span.chunk_id]))
            continue
        first, *others = joined
        first.absorb(span.start_line, span.end_line, [span.chunk_id])
        for other in others:  # the chunk bridged two places of one file: they are one place now
            first.absorb(other.start_line, other.end_line, other.chunk_ids)
            places.remove(other)
    return places


def body_of(text: str, heading: str) -> tuple[int, str]:
    """How many leading lines of a chunk's `text` only repeat its `heading` path (heading lines whose title is in
    it, and the blank lines around them), and the text after them. A chunk that is nothing else keeps them all."""
    lines = text.split("\n")
    titles = set(heading.split(HEADING_SEPARATOR))
    skipped = 0
    for line in lines:
        if not line.strip():
            skipped += 1
            continue
        parsed = heading_title(line)
        if parsed is None or parsed[1] not in titles or len(parsed[1]) >= MAX_HEADING_CHARS:
            break  # a title cut to the limit says less than its line
        skipped += 1
    if skipped == len(lines):
        return 0, text
    return skipped, "\n".join(lines[skipped:])
