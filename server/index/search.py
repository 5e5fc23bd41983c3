"""Hybrid search: vector KNN and BM25 candidates, completed on both sides, fused, filtered and cited."""

from __future__ import annotations

import datetime as dt
import logging
import posixpath
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import apsw
import numpy as np

from server.index.binary import nearest
from server.index.common_terms import keyword_match
from server.index.embeddings.base import Embedder
from server.index.errors import EmbeddingError, InvalidArgumentError
from server.index.filtered import filtered_similarities, similarities_of
from server.index.fts import query_terms
from server.index.fusion import FusionWeights, Scored, fuse
from server.index.labels import labels_argument
from server.index.places import Place, Span, merge_places
from server.index.queries import (
    CLEAR_KEYWORD_SCORES,
    CREATE_KEYWORD_SCORES,
    FILL_KEYWORD_SCORES,
    Filters,
    hits_sql,
    keyword_best_sql,
    keyword_scores_of_sql,
    spans_sql,
)
from server.index.snippets import make_snippet
from server.index.store import Store
from server.index.vectors import VectorSpace

log = logging.getLogger(__name__)

Mode = Literal["auto", "hybrid", "vector", "keyword"]
MatchedBy = Literal["vector", "keyword", "both"]
SOURCES = ("memory", "sessions")
MAX_LIMIT = 100
MAX_QUERY_CHARS = 2000
CANDIDATE_MULTIPLIER = 4
MIN_CANDIDATES = 40
KEYWORD_WAIT_SECONDS = 120.0  # the keyword side waits this long at most for the vector candidates
# Shared by every index in the process; each thread keeps its own connection per index (see Store).
_KEYWORD_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="keyword-search")


@dataclass(frozen=True)
class SearchOptions:
    limit: int = 8
    min_score: float = 0.0
    filters: Filters = field(default_factory=Filters)
    mode: Mode = "auto"


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


def build_options(
    *,
    limit: int = 8,
    min_score: float = 0.0,
    sources: list[str] | tuple[str, ...] | None = None,
    path_prefix: str | None = None,
    date_from: str | None = None,
    date_to: str | None = None,
    mode: str = "auto",
    tags: list[str] | None = None,
    category: str | None = None,
) -> SearchOptions:
    """Validate user-supplied search arguments into options; every problem is an InvalidArgumentError."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    if isinstance(min_score, bool) or not isinstance(min_score, int | float) or not 0 <= min_score <= 1:
        raise InvalidArgumentError("min_score must be a number from 0 to 1")
    if mode not in ("auto", "hybrid", "vector", "keyword"):
        raise InvalidArgumentError("mode must be auto, hybrid, vector or keyword")
    unknown = set(sources or ()) - set(SOURCES)
    if unknown:
        raise InvalidArgumentError(f"unknown source {sorted(unknown)[0]!r}; sources are {', '.join(SOURCES)}")
    days = [_check_day(d, name) for d, name in ((date_from, "date_from"), (date_to, "date_to"))]
    if days[0] and days[1] and days[0] > days[1]:
        raise InvalidArgumentError("date_from is after date_to")
    labels = labels_argument(tags, category)
    filters = Filters(
        sources=tuple(dict.fromkeys(sources or ())),
        path_prefix=normalise_prefix(path_prefix or ""),
        date_from=days[0],
        date_to=days[1],
        tags=labels.tags,
        category=labels.category,
    )
    return SearchOptions(limit=limit, min_score=float(min_score), filters=filters, mode=mode)  # type: ignore[arg-type]


def _check_day(value: str | None, name: str) -> str | None:
    if value is None or value == "":
        return None
    try:
        return dt.date.fromisoformat(value).isoformat() if len(value) == 10 else _bad_day(name)
    except (TypeError, ValueError):
        return _bad_day(name)


def _bad_day(name: str) -> str:
    raise InvalidArgumentError(f"{name} must be a date written YYYY-MM-DD")


def normalise_prefix(prefix: str) -> str:
    """A relative POSIX path prefix; absolute paths and `..` are refused."""
    if not prefix:
        return ""
    if "\\" in prefix or "\x00" in prefix or prefix.startswith("/"):
        raise InvalidArgumentError("path must be a relative path inside the memory folder")
    trailing = prefix.endswith("/")
    clean = posixpath.normpath(prefix)
    if clean == ".":
        return ""
    if clean == ".." or clean.startswith("../"):
        raise InvalidArgumentError("path must be a relative path inside the memory folder")
    return clean + "/" if trailing else clean


def search(
    store: Store,
    embedder: Embedder | None,
    space: VectorSpace | None,
    query: str,
    options: SearchOptions,
    weights: FusionWeights,
    unavailable: str | None = None,
    *,
    candidate_multiplier: int = CANDIDATE_MULTIPLIER,
) -> SearchResult:
    """Run one search. `space` is the live vector table when it belongs to `embedder`; `unavailable` says why
    vectors are off when they are. Each side brings `limit * candidate_multiplier` candidates (at least
    MIN_CANDIDATES) to the fusion."""
    if not isinstance(query, str) or not query.strip():
        raise InvalidArgumentError("the query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidArgumentError(f"the query is longer than {MAX_QUERY_CHARS} characters")
    started = time.perf_counter()
    db = store.connection()
    candidates = max(options.limit * candidate_multiplier, MIN_CANDIDATES)
    terms = query_terms(query)
    match = keyword_match(store, db, terms) if options.mode != "vector" else None
    notice = unavailable

    # The keyword side runs on its own connection in a pool thread while this one embeds the query and runs the
    # KNN (apsw releases the GIL inside SQLite): search takes the longer of the two, not their sum.
    vector_ids: Future[list[int]] = Future()
    keyword = (
        _KEYWORD_POOL.submit(_keyword_side, store, match, options.filters, candidates, vector_ids) if match else None
    )
    similarities: dict[int, float] = {}
    query_vector = None
    embed_ms = 0.0
    try:
        if options.mode != "keyword" and space is not None and embedder is not None:
            t0 = time.perf_counter()
            try:
                query_vector = embedder.embed([query], kind="query")[0]
            except EmbeddingError as exc:
                notice = f"vector search is unavailable right now ({exc})"
                log.warning("query embedding failed: %s", exc)
            embed_ms = (time.perf_counter() - t0) * 1000
        elif options.mode == "vector" and notice is None:
            notice = "vector search is unavailable"
        if query_vector is not None and space is not None:
            if options.filters.labelled:  # ranked exactly among the chunks that pass (server.index.filtered)
                similarities = filtered_similarities(db, space, query_vector, options.filters, candidates)
            else:  # large indexes: the in-memory sign bits, then exact cosine (server.index.binary)
                similarities = nearest(store, db, space, query_vector, options.filters, candidates)
    finally:
        vector_ids.set_result(list(similarities))  # the keyword side never waits for a search that failed
    # Both sides score every candidate: the keyword side also reads the vector candidates' BM25.
    ranks = keyword.result() if keyword is not None else {}
    found = Retrievers.of(similarities, ranks)  # before completion: who found what, on its own

    if query_vector is not None and match is not None:
        mode = "hybrid"
        _complete_similarities(db, space, query_vector, similarities, ranks)
    elif query_vector is not None:
        mode = "vector"
        if match is None and options.mode != "vector":
            notice = notice or "the query has no searchable words for keyword search"
    else:
        mode = "keyword"
        if match is None:
            notice = notice or "the query has no searchable words"

    scored = [s for s in fuse(similarities, ranks, weights, mode) if s.score >= options.min_score and s.score > 0]
    places = merge_places(_spans(db, scored), options.limit)
    hits = _load_hits(db, places, {s.chunk_id: s for s in scored}, found, terms)
    return SearchResult(hits, mode, notice, embed_ms, (time.perf_counter() - started) * 1000 - embed_ms)


def _keyword_side(
    store: Store, match: str, filters: Filters, limit: int, vector_ids: Future[list[int]]
) -> dict[int, float]:
    """BM25 of the best `limit` keyword matches and of the vector candidates that match, from one scoring pass."""
    db = store.connection()
    db.execute(CREATE_KEYWORD_SCORES)
    try:
        db.execute(FILL_KEYWORD_SCORES, (match,))
        sql, params = keyword_best_sql(filters, limit)
        ranks: dict[int, float] = dict(db.execute(sql, params))
        wanted = [c for c in vector_ids.result(timeout=KEYWORD_WAIT_SECONDS) if c not in ranks]
        if wanted:
            sql, params = keyword_scores_of_sql(wanted)
            ranks.update(db.execute(sql, params))
        return ranks
    finally:
        db.execute(CLEAR_KEYWORD_SCORES)


def _complete_similarities(
    db: apsw.Connection,
    space: VectorSpace | None,
    query_vector: np.ndarray,
    similarities: dict[int, float],
    ranks: dict[int, float],
) -> None:
    """Exact cosine for keyword candidates that the KNN did not return."""
    missing = [c for c in ranks if c not in similarities]
    if missing and space is not None:
        similarities.update(similarities_of(db, space, query_vector, missing))


def _spans(db: apsw.Connection, scored: list[Scored]) -> list[Span]:
    """The file and line range of each scored chunk, in rank order (a chunk deleted meanwhile drops out)."""
    if not scored:
        return []
    sql, params = spans_sql([s.chunk_id for s in scored])
    where = {chunk_id: (path, start, end) for chunk_id, path, start, end in db.execute(sql, params)}
    return [Span(s.chunk_id, *where[s.chunk_id]) for s in scored if s.chunk_id in where]


def _load_hits(
    db: apsw.Connection, places: list[Place], scores: dict[int, Scored], found: Retrievers, terms: list[str]
) -> list[Hit]:
    """One hit per place, spoken for by its best chunk (score, heading, snippet) and spanning all of it."""
    if not places:
        return []
    sql, params = hits_sql([place.chunk_ids[0] for place in places])
    rows = {row[0]: row for row in db.execute(sql, params)}
    hits: list[Hit] = []
    for place in places:
        row = rows.get(place.chunk_ids[0])
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
                snippet=make_snippet(text, terms),
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
