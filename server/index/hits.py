"""What a search answers, built the same way by every backend: hits (one per place, spoken for by its best chunk),
each retriever's own ranks, and the result. The rows come from each backend's own SQL through `RowsOf`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from server.index.fusion import Scored
from server.index.places import Place, Span, body_of
from server.index.snippets import make_snippet

MatchedBy = Literal["vector", "keyword", "both"]
# Rows by chunk id, each backend in its own dialect: for spans, (id, path, start_line, end_line, heading, text); for
# hits, the columns of `server.index.queries.hits_sql`.
RowsOf = Callable[[list[int]], Iterable[Sequence[Any]]]
# The live vector (normalised float32 bytes) of each chunk id that has one.
VectorsOf = Callable[[list[int]], dict[int, bytes]]


@dataclass(frozen=True)
class Hit:
    path: str
    start_line: int
    end_line: int
    heading: str
    score: float
    snippet: str
    source: str
    citation: str
    vector_score: float
    keyword_score: float
    indexed_at: float
    chunk_id: int
    matched_by: MatchedBy = "vector"
    vector_rank: int | None = None  # 1-based place among the vector candidates, None when KNN did not return it
    keyword_rank: int | None = None  # 1-based place among the keyword matches, None when it matched no query word
    tags: tuple[str, ...] = ()
    category: str | None = None

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "heading": self.heading,
            "score": round(self.score, 4),
            "snippet": self.snippet,
            "source": self.source,
            "citation": self.citation,
            "matched_by": self.matched_by,
            "vector_rank": self.vector_rank,
            "keyword_rank": self.keyword_rank,
            "tags": list(self.tags),
            "category": self.category,
        }


@dataclass(frozen=True)
class Retrievers:
    """Each retriever's own ranking, before either side completes the other's candidates: the vector KNN's
    chunks by similarity, the keyword matches by BM25 (FTS5's bm25() is negative; lower is better)."""

    vector: dict[int, int]  # chunk id -> 1-based rank
    keyword: dict[int, int]

    @classmethod
    def of(cls, similarities: dict[int, float], ranks: dict[int, float]) -> Retrievers:
        by_similarity = sorted(similarities, key=lambda chunk: (-similarities[chunk], chunk))
        by_bm25 = sorted(ranks, key=lambda chunk: (ranks[chunk], chunk))
        return cls(
            {chunk: n for n, chunk in enumerate(by_similarity, start=1)},
            {chunk: n for n, chunk in enumerate(by_bm25, start=1)},
        )

    def matched_by(self, chunk_id: int) -> MatchedBy:
        if chunk_id in self.vector and chunk_id in self.keyword:
            return "both"
        return "keyword" if chunk_id in self.keyword else "vector"


@dataclass(frozen=True)
class SearchResult:
    hits: list[Hit]
    mode: str  # "hybrid", "vector" or "keyword": what actually ran
    notice: str | None  # why the mode is less than hybrid, when it is
    embed_ms: float  # time spent embedding the query
    search_ms: float  # everything else


def join_notices(first: str | None, second: str | None) -> str | None:
    """Two notices as one (either may be None)."""
    return "; ".join(part for part in (first, second) if part) or None


def spans_of(spans: RowsOf, scored: list[Scored]) -> list[Span]:
    """The file and line range of each scored chunk's body (`body_of`), in rank order (a chunk deleted meanwhile
    drops out)."""
    if not scored:
        return []
    where = {
        chunk_id: (path, start + body_of(text, heading)[0], end)
        for chunk_id, path, start, end, heading, text in spans([s.chunk_id for s in scored])
    }
    return [Span(s.chunk_id, *where[s.chunk_id]) for s in scored if s.chunk_id in where]


def load_hits(
    rows: RowsOf, places: list[Place], scores: dict[int, Scored], found: Retrievers, terms: list[str]
) -> list[Hit]:
    """One hit per place, spoken for by its best chunk (score, heading, snippet) and spanning all of it."""
    if not places:
        return []
    by_id = {row[0]: row for row in rows([place.chunk_ids[0] for place in places])}
    hits: list[Hit] = []
    for place in places:
        row = by_id.get(place.chunk_ids[0])
        if row is None:  # deleted between the candidate query and now
            continue
        chunk_id, path, source, _day, _start, _end, heading, text, indexed_at, tags, category = row
        best = scores[chunk_id]
        start, end = place.start_line, place.end_line
        hits.append(
            Hit(
                path=path,
                start_line=start,
                end_line=end,
                heading=heading,
                score=best.score,
                snippet=make_snippet(body_of(text, heading)[1], terms),
                source=source,
                citation=f"{path}#L{start}-L{end}",
                vector_score=best.vector,
                keyword_score=best.keyword,
                indexed_at=indexed_at,
                chunk_id=chunk_id,
                matched_by=found.matched_by(chunk_id),
                vector_rank=found.vector.get(chunk_id),
                keyword_rank=found.keyword.get(chunk_id),
                tags=tuple(tags.split()),
                category=category or None,
            )
        )
    return hits
